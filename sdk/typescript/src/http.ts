import { AuthError, NqdError } from './errors.js'

/** How the SDK reaches nqd. */
export interface HttpOptions {
  /** nqd's base URL, e.g. http://127.0.0.1:8080. */
  url: string
  /** An API token of scope `write` (or `admin` to store flow definitions). */
  token?: string | undefined
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

  constructor(opts: HttpOptions) {
    if (!/^https?:\/\//.test(opts.url)) {
      throw new TypeError(`nqd url must start with http:// or https://, got ${JSON.stringify(opts.url)}`)
    }
    this.base = opts.url.replace(/\/+$/, '')
    this.token = opts.token === '' ? undefined : opts.token
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
    const headers: Record<string, string> = { accept: 'application/json', ...opts.headers }
    if (this.token !== undefined) {
      headers.authorization = `Bearer ${this.token}`
    }
    let payload: string | undefined
    if (body !== undefined) {
      headers['content-type'] = opts.contentType ?? 'application/json'
      payload = typeof body === 'string' && opts.contentType !== undefined ? body : JSON.stringify(body)
    }
    const signals: AbortSignal[] = []
    if (opts.signal !== undefined) {
      signals.push(opts.signal)
    }
    if (opts.timeoutMs !== undefined) {
      signals.push(AbortSignal.timeout(opts.timeoutMs))
    }
    const res = await fetch(this.base + path, {
      method,
      headers,
      body: payload,
      signal: signals.length === 0 ? undefined : AbortSignal.any(signals),
    })
    const text = await res.text()
    if (!res.ok) {
      throw answerError(res.status, method, path, text)
    }
    if (text === '') {
      return undefined as T
    }
    return JSON.parse(text) as T
  }
}

interface ErrorBody {
  error?: { code?: string, message?: string, fields?: Record<string, string> }
}

function answerError(status: number, method: string, path: string, text: string): NqdError {
  let code = 'http_' + String(status)
  let message = text.trim().slice(0, 500)
  let fields: Record<string, string> | undefined
  try {
    const body = JSON.parse(text) as ErrorBody
    if (body.error !== undefined) {
      code = body.error.code ?? code
      message = body.error.message ?? message
      fields = body.error.fields
    }
  } catch {
    // not JSON: keep the text
  }
  const what = `${method} ${path}: nqd answered ${status} ${code}: ${message}`
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
 * a time-out, a 5xx, a 408 or a 429. Any other answer is final.
 */
export function isTransient(err: unknown): boolean {
  if (err instanceof NqdError) {
    return err.status >= 500 || err.status === 408 || err.status === 429
  }
  return true
}
