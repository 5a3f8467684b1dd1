import http from 'node:http'
import https from 'node:https'
import { AuthError, EncodingError, encodeJSON, NqdError } from './errors.js'

/** How the SDK reaches nqd. */
export interface HttpOptions {
  /** nqd's base URL, e.g. http://127.0.0.1:8080. */
  url: string
  /** An API token of scope `write` (or `admin` to store flow definitions). */
  token?: string | undefined
  /** Headers every request carries, such as a worker's Nqd-Worker-*. */
  headers?: Record<string, string> | undefined
}

export interface RequestOptions {
  signal?: AbortSignal | undefined
  /** Time limit of this request in milliseconds. */
  timeoutMs?: number | undefined
  headers?: Record<string, string> | undefined
  /** Sent as is with this content type instead of as JSON. */
  contentType?: string | undefined
}

/** A small JSON client for nqd's HTTP API. */
export class Http {
  readonly base: string
  private readonly token: string | undefined
  private readonly headers: Record<string, string>
  private readonly client: typeof http | typeof https
  private readonly agent: http.Agent
  /** The parts of the base URL every request shares, parsed once. */
  private readonly target: { protocol: string, hostname: string, port: string, auth: string | undefined, path: string }

  constructor(opts: HttpOptions) {
    if (!/^https?:\/\//.test(opts.url)) {
      throw new TypeError(`nqd url must start with http:// or https://, got ${JSON.stringify(opts.url)}`)
    }
    this.base = opts.url.replace(/\/+$/, '')
    this.token = opts.token === '' ? undefined : opts.token
    this.headers = opts.headers ?? {}
    const tls = this.base.startsWith('https:')
    this.client = tls ? https : http
    this.agent = tls ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true })
    const u = new URL(this.base)
    this.target = {
      protocol: u.protocol,
      // node:http wants an IPv6 host without its brackets.
      hostname: u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname,
      port: u.port,
      auth: u.username === '' && u.password === '' ? undefined : `${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`,
      path: u.pathname.replace(/\/+$/, ''),
    }
  }

  /** Closes idle kept-alive connections. */
  close(): void {
    this.agent.destroy()
  }

  get<T>(path: string, opts: RequestOptions = {}): Promise<T> {
    return this.request<T>('GET', path, undefined, opts)
  }

  post<T>(path: string, body: unknown, opts: RequestOptions = {}): Promise<T> {
    return this.request<T>('POST', path, body, opts)
  }

  put<T>(path: string, body: unknown, opts: RequestOptions = {}): Promise<T> {
    return this.request<T>('PUT', path, body, opts)
  }

  async request<T>(method: string, path: string, body: unknown, opts: RequestOptions = {}): Promise<T> {
    const headers: Record<string, string> = { accept: 'application/json', ...this.headers, ...opts.headers }
    if (this.token !== undefined) {
      headers.authorization = `Bearer ${this.token}`
    }
    let payload: Buffer | undefined
    if (body !== undefined) {
      headers['content-type'] = opts.contentType ?? 'application/json'
      payload = Buffer.from(typeof body === 'string' && opts.contentType !== undefined ? body : encodeJSON(`${method} ${path}`, body) ?? 'null')
      headers['content-length'] = String(payload.length)
    }
    const { status, text, retryAfter } = await this.send(method, path, headers, payload, opts)
    if (status < 200 || status > 299) {
      const err = answerError(status, method, path, text)
      const secs = Number(retryAfter)
      if (retryAfter !== undefined && Number.isFinite(secs) && secs >= 0) {
        err.retryAfterMs = secs * 1000
      }
      throw err
    }
    if (text === '') {
      return undefined as T
    }
    return JSON.parse(text) as T
  }

  /**
   * One request over a kept-alive connection. node:http rather than fetch:
   * a worker sends a few small requests per step, and this is the cheaper
   * path for them.
   */
  private send(method: string, path: string, headers: Record<string, string>, payload: Buffer | undefined, opts: RequestOptions): Promise<{ status: number, text: string, retryAfter: string | undefined }> {
    return new Promise((resolve, reject) => {
      const signal = opts.signal
      if (signal?.aborted === true) {
        reject(abortError(signal))
        return
      }
      const t = this.target
      const req = this.client.request({ protocol: t.protocol, hostname: t.hostname, port: t.port, auth: t.auth, path: t.path + path, method, headers, agent: this.agent })
      let timer: NodeJS.Timeout | undefined
      const onAbort = (): void => {
        req.destroy(signal === undefined ? new Error('aborted') : abortError(signal))
      }
      const cleanup = (): void => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
      }
      if (opts.timeoutMs !== undefined) {
        const ms = opts.timeoutMs
        timer = setTimeout(() => { req.destroy(new Error(`${method} ${path}: no answer within ${ms} ms`)) }, ms)
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      req.on('error', (err) => {
        cleanup()
        reject(err)
      })
      req.on('response', (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => { chunks.push(c) })
        res.on('error', (err) => {
          cleanup()
          reject(err)
        })
        res.on('end', () => {
          cleanup()
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8'), retryAfter: res.headers['retry-after'] })
        })
      })
      req.end(payload)
    })
  }
}

function abortError(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('aborted')
}

export interface ErrorBody {
  error?: { code?: string, message?: string, fields?: Record<string, string> }
}

export function answerError(status: number, method: string, path: string, text: string): NqdError {
  let body: ErrorBody | null = null
  try {
    body = JSON.parse(text) as ErrorBody | null
  } catch {
    // not JSON: keep the text
  }
  return errorOf(status, `${method} ${path}`, body?.error ?? {}, text.trim().slice(0, 500))
}

/**
 * The error for an answer of status with nqd's error fields, over HTTP or
 * the worker channel alike; call names what was called.
 */
export function errorOf(status: number, call: string, e: NonNullable<ErrorBody['error']>, text = ''): NqdError {
  const code = e.code ?? 'http_' + String(status)
  const message = e.message ?? text
  const fields = e.fields
  const what = `${call}: nqd answered ${status} ${code}: ${message}`
  if (status === 401) {
    return new AuthError(status, code, `${what} (give a token with --token or NQD_TOKEN)`)
  }
  if (status === 403) {
    return new AuthError(status, code, `${what} (the token's scope is too weak: workers need write, storing flows needs admin)`)
  }
  const detail = fields === undefined
    ? ''
    : ' (' + Object.entries(fields).map(([k, v]) => `${k}: ${v}`).join('; ') + ')'
  return new NqdError(status, code, what + detail, fields)
}

/**
 * Reports whether a failed call may succeed if sent again: a network error,
 * a time-out, a 5xx, a 408 or a 429. Any other answer is final, and so is a
 * body that cannot be encoded.
 */
export function isTransient(err: unknown): boolean {
  if (err instanceof NqdError) {
    return err.status >= 500 || err.status === 408 || err.status === 429
  }
  return !(err instanceof EncodingError)
}
