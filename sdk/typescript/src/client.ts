// createClient: what application code needs of nqd's HTTP API — start a
// flow, wait for its result, read its state, follow its events — with
// retries that never start a run twice.

import { randomUUID } from 'node:crypto'
import { createParser } from 'eventsource-parser'
import { backoffDelay, sleep } from './backoff.js'
import { NqdError } from './errors.js'
import { Http, isTransient } from './http.js'

/** What a flow takes and gives. */
export interface FlowType { input?: unknown, result?: unknown }

/**
 * Any flow name, each taking and giving unknown: a client's flows when it is
 * told none. An interface of named flows instead (`{ 'send-invoice': {
 * input: …, result: … } }`) makes any other name a type error.
 */
export type FlowTypes = Record<string, FlowType>

/** The flows F names; an interface satisfies it without an index signature. */
export type FlowMap<F> = Record<keyof F, FlowType>

type FlowName<F extends FlowMap<F>> = Extract<keyof F, string>
type InputOf<F extends FlowMap<F>, N extends string> = N extends keyof F ? F[N]['input'] : unknown
type ResultOf<F extends FlowMap<F>, N extends string> = N extends keyof F ? F[N]['result'] : unknown

export interface ClientOptions {
  /** nqd's base URL, e.g. http://127.0.0.1:8080. */
  url: string
  /** An API token: scope read for state and events, write to start runs. */
  token?: string | undefined
  /** How often a failed call is sent again when it may succeed then; default 5. */
  retries?: number | undefined
  /** The first wait between tries; doubled each time up to retryMaxMs. Default 200 ms. */
  retryBaseMs?: number | undefined
  /** The longest wait between tries, unless nqd's Retry-After says longer; default 10 s. */
  retryMaxMs?: number | undefined
  /** Time limit of one request in milliseconds; default 30 s. */
  requestTimeoutMs?: number | undefined
}

export interface CallOptions {
  signal?: AbortSignal | undefined
}

export interface StartOptions extends CallOptions {
  /**
   * Starts of the same flow with the same key start one run: a repeat
   * answers the first start's run. Without one, the client makes a key for
   * this call, so that its own retries cannot start a second run.
   */
  idempotencyKey?: string | undefined
}

export interface WaitOptions extends CallOptions {
  /** Give up after this long with a WaitTimeoutError; default: wait as long as it takes. */
  timeoutMs?: number | undefined
}

export interface EventsOptions extends CallOptions {
  /** Start strictly after this event id instead of at the stream's beginning. */
  after?: string | undefined
}

/** A run that start() began. */
export interface StartedRun<N extends string = string> {
  flow: N
  runId: string
  /** The entry step and its job. */
  step: string
  queue: string
  jobId: string
}

export type RunStatus = 'running' | 'awaiting' | 'completed' | 'failed' | 'cancelled'

export interface RunStep {
  status: string
  attempt: number
  maxAttempts?: number
  startedAt?: string
  completedAt?: string
  duration?: number
  error?: string
  result?: unknown
  awaitType?: string
  nextRetryAt?: string
}

/** A run's state as nqd folds it from the run's events. */
export interface RunState<I = unknown, R = unknown> {
  status: RunStatus
  name?: string
  runId?: string
  input?: I
  /** The run's result: see result(). */
  result?: R
  error?: string
  reason?: string
  startedAt?: string
  completedAt?: string
  duration?: number
  steps: Record<string, RunStep>
  awaits: Record<string, unknown>
  state: Record<string, unknown>
  logs: Array<{ id: string, ts: string, step?: string, level: string, msg: string, data?: unknown }>
  emits: Array<{ id: string, ts: string, step?: string, event: string, payload?: unknown }>
  lastEventId?: string
  eventCount: number
}

/** One stored event of a run. */
export interface RunEvent {
  id: string
  ts: string
  kind: string
  type: string
  subject: string
  flow?: string
  runId?: string
  flowName?: string
  step?: string
  attempt?: number
  data?: unknown
  meta?: Record<string, unknown>
}

/**
 * What a run's stream carries: its events, in order; a reset when the
 * position asked for is no longer kept (the state there stands in for the
 * events missed); a note that the backfill was cut to its newest events.
 */
export type StreamItem =
  | { type: 'event', event: RunEvent }
  | { type: 'reset', position: string, state?: RunState }
  | { type: 'truncated', limit: number }

/** The run failed; state holds its steps and their errors. */
export class RunFailedError extends Error {
  readonly runId: string
  readonly state: RunState

  constructor(runId: string, state: RunState) {
    super(`run ${runId} failed${state.error === undefined || state.error === '' ? '' : `: ${state.error}`}`)
    this.name = 'RunFailedError'
    this.runId = runId
    this.state = state
  }
}

/** The run was cancelled before it completed. */
export class RunCancelledError extends Error {
  readonly runId: string
  readonly state: RunState

  constructor(runId: string, state: RunState) {
    super(`run ${runId} was cancelled${state.reason === undefined || state.reason === '' ? '' : `: ${state.reason}`}`)
    this.name = 'RunCancelledError'
    this.runId = runId
    this.state = state
  }
}

/** wait() gave up; the run goes on. */
export class WaitTimeoutError extends Error {
  readonly runId: string
  readonly timeoutMs: number

  constructor(runId: string, timeoutMs: number) {
    super(`run ${runId} did not end within ${timeoutMs} ms`)
    this.name = 'WaitTimeoutError'
    this.runId = runId
    this.timeoutMs = timeoutMs
  }
}

export interface Client<F extends FlowMap<F> = FlowTypes> {
  /** Starts a run of flow with input; retried starts with one key start one run. */
  start<N extends FlowName<F>>(flow: N, input?: InputOf<F, N>, opts?: StartOptions): Promise<StartedRun<N>>
  /** Waits until the run ends: its result, or a RunFailedError, RunCancelledError or WaitTimeoutError. */
  wait<N extends FlowName<F>>(run: StartedRun<N>, opts?: WaitOptions): Promise<ResultOf<F, N>>
  wait<R = unknown>(runId: string, opts?: WaitOptions): Promise<R>
  /** start and wait in one call. */
  run<N extends FlowName<F>>(flow: N, input?: InputOf<F, N>, opts?: StartOptions & WaitOptions): Promise<ResultOf<F, N>>
  /** The run's state now. */
  state<N extends FlowName<F>>(run: StartedRun<N>, opts?: CallOptions): Promise<RunState<InputOf<F, N>, ResultOf<F, N>>>
  state<I = unknown, R = unknown>(runId: string, opts?: CallOptions): Promise<RunState<I, R>>
  /**
   * The run's events, oldest first, then live as they are appended; the
   * stream is resumed after the last event seen when the connection drops.
   * It ends only when the loop breaks or opts.signal aborts.
   */
  events(run: string | StartedRun, opts?: EventsOptions): AsyncIterableIterator<StreamItem>
  /** Cancels the run; nothing more of it is dispatched. */
  cancel(run: StartedRun | { flow: string, runId: string }, opts?: CallOptions): Promise<{ previousStatus?: string }>
  /** Closes idle connections. */
  close(): void
}

const endKinds = new Set(['flow.completed', 'flow.failed', 'flow.cancelled', 'flow.canceled', 'flow.cancel'])

/**
 * The result a run ended with: the result its flow.completed carried, else
 * that of the step that completed last (the step whose completion ended the
 * run).
 */
export function result<R = unknown>(state: RunState<unknown, R>): R | undefined {
  if (state.result !== undefined) {
    return state.result
  }
  let last: RunStep | undefined
  for (const s of Object.values(state.steps)) {
    if (s.status === 'completed' && (last === undefined || (s.completedAt ?? '') >= (last.completedAt ?? ''))) {
      last = s
    }
  }
  return last?.result as R | undefined
}

function runIdOf(run: string | { runId: string }): string {
  return typeof run === 'string' ? run : run.runId
}

/** Creates a client of nqd's API for application code. */
export function createClient<F extends FlowMap<F> = FlowTypes>(opts: ClientOptions): Client<F> {
  return new NqdClient<F>(opts)
}

class NqdClient<F extends FlowMap<F>> implements Client<F> {
  private readonly http: Http
  private readonly retries: number
  private readonly baseMs: number
  private readonly maxMs: number
  private readonly timeoutMs: number

  constructor(private readonly opts: ClientOptions) {
    this.http = new Http(opts)
    this.retries = opts.retries ?? 5
    this.baseMs = opts.retryBaseMs ?? 200
    this.maxMs = opts.retryMaxMs ?? 10_000
    this.timeoutMs = opts.requestTimeoutMs ?? 30_000
  }

  close(): void {
    this.http.close()
  }

  async start<N extends FlowName<F>>(flow: N, input?: InputOf<F, N>, opts: StartOptions = {}): Promise<StartedRun<N>> {
    const key = opts.idempotencyKey ?? randomUUID()
    const ans = await this.call<{ id: string, queue: string, step: string, flowId: string }>('POST', `/api/_flows/${encodeURIComponent(flow)}/start`, input ?? {}, opts.signal, { 'idempotency-key': key })
    return { flow, runId: ans.flowId, step: ans.step, queue: ans.queue, jobId: ans.id }
  }

  async state<I, R>(run: string | StartedRun, opts: CallOptions = {}): Promise<RunState<I, R>> {
    const ans = await this.call<{ state: RunState<I, R> }>('GET', `/api/_events/flow/${encodeURIComponent(runIdOf(run))}/state`, undefined, opts.signal)
    return ans.state
  }

  async run<N extends FlowName<F>>(flow: N, input?: InputOf<F, N>, opts: StartOptions & WaitOptions = {}): Promise<ResultOf<F, N>> {
    const started = await this.start(flow, input, opts)
    return this.wait(started, opts)
  }

  async wait<R>(run: string | StartedRun, opts: WaitOptions = {}): Promise<R> {
    const runId = runIdOf(run)
    const ctl = new AbortController()
    const onAbort = (): void => { ctl.abort(opts.signal?.reason) }
    opts.signal?.addEventListener('abort', onAbort, { once: true })
    const timer = opts.timeoutMs === undefined
      ? undefined
      : setTimeout(() => { ctl.abort(new WaitTimeoutError(runId, opts.timeoutMs ?? 0)) }, opts.timeoutMs)
    try {
      let st = await this.state<unknown, R>(runId, { signal: ctl.signal })
      if (!isEnded(st)) {
        // Follow the stream from the state's position: an end that comes
        // after the read is the stream's next events, never missed.
        for await (const item of this.events(runId, { signal: ctl.signal, after: st.lastEventId })) {
          const ended = item.type === 'event'
            ? endKinds.has(item.event.kind)
            : item.type === 'reset' && item.state !== undefined && isEnded(item.state)
          if (ended) {
            break
          }
        }
        st = await this.state<unknown, R>(runId, { signal: ctl.signal })
      }
      return settle(runId, st)
    } catch (err) {
      // Whatever the time limit cut short, the caller learns it was the time limit.
      throw ctl.signal.reason instanceof WaitTimeoutError ? ctl.signal.reason : err
    } finally {
      clearTimeout(timer)
      opts.signal?.removeEventListener('abort', onAbort)
    }
  }

  async cancel(run: StartedRun | { flow: string, runId: string }, opts: CallOptions = {}): Promise<{ previousStatus?: string }> {
    return this.call('POST', `/api/_flows/${encodeURIComponent(run.flow)}/runs/${encodeURIComponent(run.runId)}/cancel`, undefined, opts.signal)
  }

  async *events(run: string | StartedRun, opts: EventsOptions = {}): AsyncIterableIterator<StreamItem> {
    const url = `${this.http.base}/api/_events/flow/${encodeURIComponent(runIdOf(run))}/stream`
    let last = opts.after
    let failures = 0
    const signal = opts.signal
    while (!aborted(signal)) {
      const headers: Record<string, string> = { accept: 'text/event-stream' }
      if (this.opts.token !== undefined && this.opts.token !== '') {
        headers.authorization = `Bearer ${this.opts.token}`
      }
      if (last !== undefined && last !== '') {
        headers['last-event-id'] = last
      }
      let res: Response
      try {
        res = await fetch(url, { headers, signal: signal ?? null })
      } catch (err) {
        if (aborted(signal)) {
          throw abortReason(signal)
        }
        if (failures >= this.retries) {
          throw err
        }
        await sleep(backoffDelay(failures++, this.baseMs, this.maxMs), signal)
        continue
      }
      if (!res.ok || res.body === null) {
        const err = await answerError(res, `GET ${url}`)
        if (!isTransient(err) || failures >= this.retries) {
          throw err
        }
        await sleep(Math.max(err.retryAfterMs ?? 0, backoffDelay(failures++, this.baseMs, this.maxMs)), signal)
        continue
      }
      const items: StreamItem[] = []
      const parser = createParser({
        onEvent: (msg) => {
          if (msg.id !== undefined) {
            last = msg.id
          }
          const item = streamItem(msg.event, msg.data)
          if (item !== undefined) {
            items.push(item)
          }
        },
      })
      const decoder = new TextDecoder()
      try {
        for await (const chunk of res.body) {
          parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }))
          if (items.length > 0) {
            failures = 0
          }
          while (items.length > 0) {
            yield items.shift() as StreamItem
          }
        }
      } catch (err) {
        if (aborted(signal)) {
          throw abortReason(signal)
        }
        // A dropped connection: resume after the last event seen.
        if (failures >= this.retries) {
          throw err
        }
      } finally {
        await res.body.cancel().catch(() => undefined)
      }
      if (!aborted(signal)) {
        await sleep(backoffDelay(failures++, this.baseMs, this.maxMs), signal)
      }
    }
    throw abortReason(signal)
  }

  /**
   * One API call, sent again while it may succeed then: after a network
   * error, a 5xx, 408 or 429 (no sooner than Retry-After says), and after a
   * 409 for an Idempotency-Key still being served.
   */
  private async call<T>(method: string, path: string, body: unknown, signal: AbortSignal | undefined, headers?: Record<string, string>): Promise<T> {
    for (let n = 0; ; n++) {
      try {
        return await this.http.request<T>(method, path, body, { signal, headers, timeoutMs: this.timeoutMs })
      } catch (err) {
        if (aborted(signal)) {
          throw abortReason(signal)
        }
        const inFlight = err instanceof NqdError && err.code === 'idempotency_key_in_flight'
        // Without a key, a retried POST could act twice.
        const safe = method === 'GET' || headers?.['idempotency-key'] !== undefined
        if (n >= this.retries || !safe || !(isTransient(err) || inFlight)) {
          throw err
        }
        const after = err instanceof NqdError ? err.retryAfterMs ?? 0 : 0
        await sleep(Math.max(after, backoffDelay(n, this.baseMs, this.maxMs)), signal)
      }
    }
  }
}

function isEnded(st: RunState): boolean {
  return st.status === 'completed' || st.status === 'failed' || st.status === 'cancelled'
}

function settle<R>(runId: string, st: RunState<unknown, R>): R {
  switch (st.status) {
    case 'failed':
      throw new RunFailedError(runId, st)
    case 'cancelled':
      throw new RunCancelledError(runId, st)
    default:
      return result(st) as R
  }
}

function streamItem(event: string | undefined, data: string): StreamItem | undefined {
  let body: { record?: RunEvent, position?: string, state?: RunState, limit?: number }
  try {
    body = JSON.parse(data) as typeof body
  } catch {
    return undefined
  }
  switch (event) {
    case undefined:
    case 'message':
      return body.record === undefined ? undefined : { type: 'event', event: body.record }
    case 'reset':
      return body.state === undefined
        ? { type: 'reset', position: body.position ?? '' }
        : { type: 'reset', position: body.position ?? '', state: body.state }
    case 'truncated':
      return { type: 'truncated', limit: body.limit ?? 0 }
    default:
      return undefined
  }
}

async function answerError(res: Response, what: string): Promise<NqdError> {
  const text = await res.text().catch(() => '')
  let code = `http_${res.status}`
  let message = text.trim().slice(0, 500)
  try {
    const body = JSON.parse(text) as { error?: { code?: string, message?: string } }
    code = body.error?.code ?? code
    message = body.error?.message ?? message
  } catch {
    // not JSON: keep the text
  }
  const err = new NqdError(res.status, code, `${what}: nqd answered ${res.status} ${code}: ${message}`)
  const secs = Number(res.headers.get('retry-after') ?? '')
  if (res.headers.has('retry-after') && Number.isFinite(secs) && secs >= 0) {
    err.retryAfterMs = secs * 1000
  }
  return err
}

function abortReason(signal: AbortSignal | undefined): Error {
  return signal?.reason instanceof Error ? signal.reason : new Error('aborted')
}

/** Read through a call, so that TypeScript does not narrow it across awaits. */
function aborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true
}
