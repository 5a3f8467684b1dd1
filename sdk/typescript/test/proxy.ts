// A proxy between a worker and nqd that can lose an answer after passing a
// request on, answer for nqd without passing it on, or hold a request until
// the test lets it go. Upgrades (the worker channel) are passed on as they
// are, or answered by the proxy, and the test can cut the channels.

import http from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'

/**
 * What the proxy does with one request: pass it, pass it and lose the
 * answer, or answer itself (with body, else an error of its own).
 */
export type Verdict = 'pass' | 'lose-answer' | { status: number, retryAfter?: string, body?: unknown }

export interface Proxy {
  url: string
  /** Requests seen, as `<method> <path>`. */
  seen: string[]
  /** Cuts every upgraded connection (the worker channels) passed on so far. */
  cutUpgrades(): void
  close(): Promise<void>
}

/** decide sees each request's path, how many times it came, and its body; it may take its time. */
export async function startProxy(target: string, decide: (path: string, nth: number, body: string) => Verdict | Promise<Verdict>): Promise<Proxy> {
  const counts = new Map<string, number>()
  const seen: string[] = []
  const forward = (req: http.IncomingMessage, res: http.ServerResponse, path: string, body: Buffer, verdict: Verdict): void => {
    if (typeof verdict === 'object') {
      const headers: Record<string, string> = { 'content-type': 'application/json' }
      if (verdict.retryAfter !== undefined) {
        headers['retry-after'] = verdict.retryAfter
      }
      res.writeHead(verdict.status, headers)
      res.end(JSON.stringify(verdict.body ?? { error: { code: 'proxy', message: 'answered by the test proxy' } }))
      return
    }
    const up = http.request(target + path, { method: req.method, headers: req.headers }, (upRes) => {
      const chunks: Buffer[] = []
      upRes.on('data', (c: Buffer) => { chunks.push(c) })
      upRes.on('end', () => {
        if (verdict === 'lose-answer') {
          res.writeHead(502, { 'content-type': 'application/json' })
          res.end('{"error":{"code":"proxy","message":"answer lost"}}')
          return
        }
        res.writeHead(upRes.statusCode ?? 502, upRes.headers)
        res.end(Buffer.concat(chunks))
      })
    })
    up.on('error', () => {
      if (!res.headersSent) {
        res.writeHead(502)
      }
      res.end()
    })
    // A client that goes away takes its request to nqd with it, as it
    // would without the proxy (a long-polling claim, say).
    res.on('close', () => {
      if (!res.writableEnded) {
        up.destroy()
      }
    })
    up.end(body)
  }
  const server = http.createServer((req, res) => {
    const path = req.url ?? '/'
    const nth = (counts.get(path) ?? 0) + 1
    counts.set(path, nth)
    seen.push(`${req.method ?? ''} ${path}`)
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => { chunks.push(c) })
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      Promise.resolve(decide(path, nth, body.toString())).then((verdict) => {
        forward(req, res, path, body, verdict)
      }, (err: unknown) => {
        res.writeHead(500, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ error: { code: 'proxy', message: `the test proxy failed: ${String(err)}` } }))
      })
    })
  })
  const tunnels = new Set<Socket>()
  const upstream = new URL(target)
  server.on('upgrade', (req: http.IncomingMessage, client: Socket, head: Buffer) => {
    const path = req.url ?? '/'
    const nth = (counts.get(path) ?? 0) + 1
    counts.set(path, nth)
    seen.push(`${req.method ?? ''} ${path}`)
    client.on('error', () => undefined)
    void Promise.resolve(decide(path, nth, '')).then((verdict) => {
      if (typeof verdict === 'object') {
        const body = JSON.stringify(verdict.body ?? { error: { code: 'proxy', message: 'answered by the test proxy' } })
        const retry = verdict.retryAfter === undefined ? '' : `Retry-After: ${verdict.retryAfter}\r\n`
        client.end(`HTTP/1.1 ${String(verdict.status)} Refused\r\nContent-Type: application/json\r\n${retry}Content-Length: ${String(Buffer.byteLength(body))}\r\nConnection: close\r\n\r\n${body}`)
        return
      }
      const up = connect(Number(upstream.port), upstream.hostname, () => {
        const lines = [`${req.method ?? 'GET'} ${path} HTTP/1.1`]
        for (let i = 0; i < req.rawHeaders.length; i += 2) {
          lines.push(`${req.rawHeaders[i] ?? ''}: ${req.rawHeaders[i + 1] ?? ''}`)
        }
        up.write(lines.join('\r\n') + '\r\n\r\n')
        up.write(head)
        up.pipe(client)
        client.pipe(up)
      })
      tunnels.add(client)
      tunnels.add(up)
      const end = (): void => {
        tunnels.delete(client)
        tunnels.delete(up)
        client.destroy()
        up.destroy()
      }
      up.on('error', end)
      up.on('close', end)
      client.on('close', end)
    })
  })
  await new Promise<void>((r) => { server.listen(0, '127.0.0.1', r) })
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    cutUpgrades() {
      for (const sock of tunnels) {
        sock.destroy()
      }
    },
    close: () => new Promise((r) => {
      for (const sock of tunnels) {
        sock.destroy()
      }
      server.closeAllConnections()
      server.close(() => { r() })
    }),
  }
}
