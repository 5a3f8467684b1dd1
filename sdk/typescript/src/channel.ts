// The worker channel (docs/worker-protocol.md, The worker channel): one
// WebSocket to nqd that carries the worker's hello, the jobs nqd offers it,
// and its reports as requests answered like the HTTP calls.

import WebSocket from 'ws'
import { errorOf, type ErrorBody } from './http.js'
import { AuthError, NqdError } from './errors.js'
import type { Job } from './worker.js'

/** What a worker tells nqd when its channel opens. */
export interface Hello {
  workerId: string
  name?: string | undefined
  sdk: string
  version: string
  host: string
  queues: string[]
  concurrency: number
  slots: number
  /** Each queue's concurrency, and the jobs of each the worker holds (docs/worker-protocol.md, Queues of different concurrency). */
  queueConcurrency?: Record<string, number> | undefined
  held?: Record<string, number> | undefined
}

/** nqd's answer to the hello. */
export interface Welcome {
  leaseMs: number
  heartbeatMs: number
  maxFrameBytes: number
  maxInFlight: number
  /** A completion with next may take the slot's next job in its ack (nextInAck). */
  nextInAck: boolean
}

/** The job calls a channel carries, named as their frames are. */
export type JobCall = 'heartbeat' | 'events' | 'complete' | 'fail'

/**
 * nqd answered the upgrade with something other than 101 (and other than
 * 401 or 403, which are AuthErrors): a status the worker falls back to HTTP
 * on (404, or a proxy's 400, 426, 502), or one it retries (429, a 5xx but
 * 502).
 */
export class UpgradeRefusedError extends NqdError {
  constructor(err: NqdError) {
    super(err.status, err.code, err.message, err.fields)
    this.name = 'UpgradeRefusedError'
    this.retryAfterMs = err.retryAfterMs
  }
}

/** Whether a refused upgrade means nqd or a proxy cannot carry the channel, so the worker speaks HTTP. */
export function fallsBack(err: unknown): boolean {
  return err instanceof UpgradeRefusedError && err.status !== 429 && (err.status < 500 || err.status === 502)
}

/** What a channel tells its worker. */
export interface ChannelHandlers {
  /** nqd leased these jobs to the worker over ch. */
  offer(jobs: Job[], ch: Channel): void
  /** A frame nqd sent about no request: a rule the worker broke, say. */
  problem(err: NqdError): void
}

interface Pending {
  resolve: (body: unknown) => void
  reject: (err: Error) => void
  timer: NodeJS.Timeout
  what: string
}

interface Frame {
  type?: unknown
  ref?: unknown
  body?: unknown
  status?: unknown
  error?: ErrorBody['error']
  retryAfterMs?: unknown
  jobs?: unknown
}

/** How long the upgrade and the hello's answer may take. */
const openTimeoutMs = 10_000

/**
 * The largest frame nqd may send: an offer holds at most one job per free
 * slot, each with an input of at most nqd's body limit; beyond this the
 * channel closes (1009) and the worker reconnects.
 */
const maxIncomingBytes = 128 << 20

/** The channel's address under nqd's base URL. */
function channelURL(base: string): string {
  return base.replace(/^http/, 'ws').replace(/\/+$/, '') + '/api/_workers/channel'
}

export class Channel {
  /**
   * Resolves with nqd's welcome once the hello was answered. Rejects with an
   * UpgradeRefusedError when nqd answers the upgrade with an HTTP status,
   * with an NqdError when it refuses the hello, and with a plain Error when
   * it cannot be reached; the channel is closed then.
   */
  readonly ready: Promise<Welcome>
  /** Resolves once the channel is closed; true when nqd said it restarts. */
  readonly closed: Promise<boolean>
  private readonly ws: WebSocket
  private readonly pending = new Map<string, Pending>()
  private seq = 0
  private restart = false
  /**
   * Set by the welcome: a completion with next may ask for the slot's next
   * job in its ack (nextInAck), which an nqd without it would refuse.
   */
  nextInAck = false

  /**
   * Opens the channel; hello is asked for the hello once the upgrade is
   * done, so that the slots it gives are those free as it is sent.
   */
  constructor(base: string, token: string | undefined, hello: () => Hello, handlers: ChannelHandlers) {
    const headers: Record<string, string> = {}
    if (token !== undefined && token !== '') {
      headers.authorization = `Bearer ${token}`
    }
    const ws = new WebSocket(channelURL(base), {
      headers,
      perMessageDeflate: false,
      handshakeTimeout: openTimeoutMs,
      maxPayload: maxIncomingBytes,
    })
    this.ws = ws
    this.closed = new Promise((resolve) => {
      ws.on('close', () => {
        for (const [ref, p] of this.pending) {
          clearTimeout(p.timer)
          this.pending.delete(ref)
          p.reject(new Error(`${p.what}: the channel closed before nqd answered`))
        }
        resolve(this.restart)
      })
    })
    this.ready = new Promise((resolve, reject) => {
      let settled = false
      const fail = (err: Error): void => {
        if (!settled) {
          settled = true
          clearTimeout(timer)
          reject(err)
          ws.terminate()
        }
      }
      const timer = setTimeout(() => { fail(new Error(`the channel's hello had no answer within ${String(openTimeoutMs)} ms`)) }, openTimeoutMs)
      // An error after the welcome is followed by close, which ends the channel.
      ws.on('error', fail)
      ws.on('close', () => { fail(new Error('the channel closed before its welcome')) })
      ws.on('unexpected-response', (req, res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => { if (chunks.length < 64) chunks.push(c) })
        res.on('error', fail)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let body: ErrorBody | null = null
          try {
            body = JSON.parse(text) as ErrorBody | null
          } catch {
            // a proxy's page, not nqd's error: keep the text
          }
          const err = errorOf(res.statusCode ?? 0, 'GET /api/_workers/channel', body?.error ?? {}, text.trim().slice(0, 200))
          const secs = Number(res.headers['retry-after'])
          if (res.headers['retry-after'] !== undefined && Number.isFinite(secs) && secs >= 0) {
            err.retryAfterMs = secs * 1000
          }
          // A token refused stays refused, whatever the transport.
          fail(err instanceof AuthError ? err : new UpgradeRefusedError(err))
          req.destroy()
        })
      })
      ws.on('open', () => { ws.send(JSON.stringify({ type: 'hello', ...hello() })) })
      ws.on('message', (data: WebSocket.RawData, binary: boolean) => {
        if (binary) {
          return
        }
        if (settled) {
          this.onFrame(rawText(data), handlers)
          return
        }
        let f: Frame & Partial<Welcome>
        try {
          f = JSON.parse(rawText(data)) as Frame & Partial<Welcome>
        } catch {
          fail(new Error(`the channel's first frame is not JSON: ${rawText(data).slice(0, 100)}`))
          return
        }
        if (f.type === 'error') {
          fail(frameError(f, 'hello'))
          return
        }
        if (f.type !== 'welcome' || typeof f.leaseMs !== 'number') {
          fail(new Error(`the channel's first frame is ${JSON.stringify(f.type)}, not a welcome`))
          return
        }
        settled = true
        clearTimeout(timer)
        this.nextInAck = f.nextInAck === true
        resolve({
          leaseMs: f.leaseMs, heartbeatMs: f.heartbeatMs ?? f.leaseMs / 3,
          maxFrameBytes: f.maxFrameBytes ?? 0, maxInFlight: f.maxInFlight ?? 0,
          nextInAck: this.nextInAck,
        })
      })
    })
  }

  /** Whether the channel takes frames. */
  get live(): boolean {
    return this.ws.readyState === WebSocket.OPEN
  }

  /**
   * Sends a job call and resolves with the body the HTTP call would
   * answer; rejects with the NqdError it would answer, or with a plain
   * Error (to be retried, like a network error) when no answer came in
   * timeoutMs or the channel closed first. onAck runs as the ack is read,
   * before any later frame (the offer of the slot an outcome freed, say).
   */
  request<T>(call: JobCall, job: Pick<Job, 'queue' | 'id'>, body: Record<string, unknown>, timeoutMs: number, signal?: AbortSignal, onAck?: () => void): Promise<T> {
    const ref = String(++this.seq)
    const what = `${call} ${job.id}`
    return new Promise<T>((resolve, reject) => {
      if (!this.live) {
        reject(new Error(`${what}: the channel is closed`))
        return
      }
      if (signal?.aborted === true) {
        reject(abortReason(signal))
        return
      }
      // Whichever of the answer, the time limit and the signal comes first.
      const onAbort = (): void => {
        this.forget(ref)
        reject(abortReason(signal))
      }
      const timer = setTimeout(() => {
        this.forget(ref)
        reject(new Error(`${what}: no answer within ${String(timeoutMs)} ms`))
      }, timeoutMs)
      signal?.addEventListener('abort', onAbort, { once: true })
      this.pending.set(ref, {
        resolve: (v) => { signal?.removeEventListener('abort', onAbort); onAck?.(); resolve(v as T) },
        reject: (e) => { signal?.removeEventListener('abort', onAbort); reject(e) },
        timer, what,
      })
      this.ws.send(JSON.stringify({ type: call, ref, queue: job.queue, jobId: job.id, ...body }))
    })
  }

  /** Drops a request whose answer is no longer waited for. */
  private forget(ref: string): void {
    const p = this.pending.get(ref)
    if (p !== undefined) {
      clearTimeout(p.timer)
      this.pending.delete(ref)
    }
  }

  /** Sends a frame that has no answer (slots, pause); nothing when the channel is closed. */
  tell(frame: Record<string, unknown>): void {
    if (this.live) {
      this.ws.send(JSON.stringify(frame))
    }
  }

  /** Closes the channel with code (1000: the worker is done), and waits until it is closed. */
  async close(code = 1000): Promise<void> {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) {
      this.ws.close(code)
    }
    // A peer that never answers the close is cut off rather than waited for.
    const cut = setTimeout(() => { this.ws.terminate() }, 2_000)
    await this.closed
    clearTimeout(cut)
  }

  private onFrame(text: string, handlers: ChannelHandlers): void {
    let f: Frame
    try {
      f = JSON.parse(text) as Frame
    } catch {
      handlers.problem(new NqdError(0, 'bad_frame', `nqd sent a frame that is not JSON: ${text.slice(0, 100)}`))
      return
    }
    switch (f.type) {
      case 'ack':
      case 'error': {
        const p = typeof f.ref === 'string' ? this.pending.get(f.ref) : undefined
        if (p === undefined) {
          if (f.type === 'error' && f.ref === undefined) {
            handlers.problem(frameError(f, 'channel'))
          }
          return
        }
        this.pending.delete(f.ref as string)
        clearTimeout(p.timer)
        if (f.type === 'ack') {
          p.resolve(f.body)
        } else {
          p.reject(frameError(f, p.what))
        }
        return
      }
      case 'offer':
        if (Array.isArray(f.jobs) && f.jobs.length > 0) {
          handlers.offer(f.jobs as Job[], this)
        }
        return
      case 'server-restart':
        this.restart = true
        return
      default:
        // A frame of a later nqd: nothing this worker needs.
    }
  }
}

function rawText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) {
    return Buffer.concat(data).toString('utf8')
  }
  return Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.from(new Uint8Array(data)).toString('utf8')
}

function abortReason(signal: AbortSignal | undefined): Error {
  return signal?.reason instanceof Error ? signal.reason : new Error('aborted')
}

function frameError(f: Frame, what: string): NqdError {
  const status = typeof f.status === 'number' ? f.status : 0
  const err = errorOf(status, what, f.error ?? {})
  if (typeof f.retryAfterMs === 'number') {
    err.retryAfterMs = f.retryAfterMs
  }
  return err
}
