// The Nuxt Queue UI's API prefixes served from nqd in the app's origin:
// HTTP through h3's proxy, and each WebSocket bridged to one of nqd's,
// message by message, since Nitro cannot proxy an upgrade.

import { defineEventHandler, getRequestHeader, proxyRequest } from 'h3'
import type { Peer } from 'crossws'
import WebSocket from 'ws'
import { useRuntimeConfig } from '#imports'

interface NqdConfig {
  url: string
  token: string
  prefixes: string[]
}

function config(): NqdConfig & { base: string } {
  const rc = useRuntimeConfig() as unknown as { nqd: NqdConfig, app: { baseURL: string } }
  return { ...rc.nqd, base: rc.app.baseURL.replace(/\/+$/, '') }
}

/** The request's path and query as nqd knows them (without the app's baseURL). */
function nqdPath(url: string, base: string): string {
  return base !== '' && url.startsWith(base + '/') ? url.slice(base.length) : url
}

/** Whether path falls under one of prefixes: the prefix itself, or below it. */
function under(path: string, prefixes: string[]): boolean {
  const p = path.split('?')[0] ?? ''
  return prefixes.some(pre => p === pre || p.startsWith(pre + '/'))
}

function sameOrigin(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host
  } catch {
    return false
  }
}

function authHeaders(token: string): Record<string, string> {
  return token === '' ? {} : { authorization: `Bearer ${token}` }
}

/** Per browser socket: the socket to nqd, and what the browser said before it opened. */
interface Bridge {
  up: WebSocket
  pending: string[]
}

const bridges = new Map<string, Bridge>()

// Codes a client may not send in a close frame: they stand for "no code".
function closeCode(code: number | undefined): number {
  return code === undefined || code === 1005 || code === 1006 || code === 1015 ? 1000 : code
}

const websocket = {
  // The bridge opens nqd's socket with the app's token, so a page of another
  // origin must not open one here: nqd's own origin check, done for it.
  upgrade(request: { headers: Headers }) {
    const origin = request.headers.get('origin')
    if (origin !== null && !sameOrigin(origin, request.headers.get('host') ?? undefined)) {
      return new Response('a page of another origin may not open this socket', { status: 403 })
    }
    return undefined
  },
  open(peer: Peer) {
    const cfg = config()
    const u = new URL(peer.request.url, 'http://localhost')
    const path = nqdPath(u.pathname + u.search, cfg.base)
    const target = cfg.url.replace(/^http/, 'ws').replace(/\/+$/, '') + path
    const up = new WebSocket(target, { headers: authHeaders(cfg.token) })
    const bridge: Bridge = { up, pending: [] }
    bridges.set(peer.id, bridge)
    up.on('open', () => {
      for (const m of bridge.pending) {
        up.send(m)
      }
      bridge.pending = []
    })
    up.on('message', (data, isBinary) => {
      peer.send(isBinary ? data : (data as Buffer).toString('utf8'))
    })
    up.on('close', (code, reason) => {
      bridges.delete(peer.id)
      peer.close(closeCode(code), reason.toString('utf8'))
    })
    up.on('unexpected-response', (_req, res) => {
      // nqd refused the upgrade (origin, token, too many streams): say so in the close.
      bridges.delete(peer.id)
      peer.close(1011, `nqd refused the socket: ${String(res.statusCode)}`)
      up.terminate()
    })
    up.on('error', () => {
      bridges.delete(peer.id)
      peer.close(1011, 'nqd cannot be reached')
    })
  },
  message(peer: Peer, message: { text(): string }) {
    const b = bridges.get(peer.id)
    if (b === undefined) {
      return
    }
    const text = message.text()
    if (b.up.readyState === WebSocket.OPEN) {
      b.up.send(text)
    } else if (b.up.readyState === WebSocket.CONNECTING) {
      b.pending.push(text)
    }
  },
  close(peer: Peer) {
    const b = bridges.get(peer.id)
    bridges.delete(peer.id)
    if (b !== undefined && b.up.readyState !== WebSocket.CLOSED) {
      b.up.close()
    }
  },
  error(peer: Peer) {
    const b = bridges.get(peer.id)
    bridges.delete(peer.id)
    b?.up.terminate()
  },
}

export default defineEventHandler({
  handler(event) {
    const cfg = config()
    const path = nqdPath(event.node.req.originalUrl ?? event.node.req.url ?? '/', cfg.base)
    // The middleware's route is a prefix match: /api/_flowsX is not nqd's.
    if (!under(path, cfg.prefixes)) {
      return
    }
    const target = cfg.url.replace(/\/+$/, '')
    const headers: Record<string, string> = authHeaders(cfg.token)
    // h3 leaves Accept out; an event stream is asked for by it.
    const accept = getRequestHeader(event, 'accept')
    if (accept !== undefined) {
      headers.accept = accept
    }
    // A browser request from the app's own page is same-origin for nqd too:
    // nqd sees its own origin. A foreign origin goes on as it came, and nqd
    // refuses it as it would refuse it directly.
    const origin = getRequestHeader(event, 'origin')
    if (origin !== undefined && sameOrigin(origin, getRequestHeader(event, 'host'))) {
      headers.origin = new URL(target).origin
    }
    return proxyRequest(event, target + path, { headers })
  },
  websocket,
})
