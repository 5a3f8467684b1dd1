// The step context a handler gets: the Nuxt Queue ctx, backed by the run's
// events in nqd.

import { EncodingError, encodeJSON } from './errors.js'
import type { Http } from './http.js'

export type LogLevel = 'debug' | 'info' | 'warn' | 'error'

/**
 * A step's logger: every line is a `log` event in the run's stream,
 * `{level, msg, ...meta}`; metadata that is not an object is kept as
 * `{value: meta}`. Metadata that cannot be encoded as JSON throws an
 * EncodingError here, and fails the step.
 */
export interface StepLogger {
  log(level: LogLevel, msg: string, meta?: unknown): void
  debug(msg: string, meta?: unknown): void
  info(msg: string, meta?: unknown): void
  warn(msg: string, meta?: unknown): void
  error(msg: string, meta?: unknown): void
}

/**
 * The run's key-value state, kept as `state.*` events in the run's stream. A
 * write resolves once nqd stored it, so a read after it sees it. A value
 * that cannot be encoded as JSON throws an EncodingError at the call (not
 * through the promise), and fails the step.
 */
export interface StepState {
  get<T = unknown>(key: string): Promise<T | null>
  set(key: string, value: unknown, opts?: { ttl?: number }): Promise<void>
  delete(key: string): Promise<void>
  has(key: string): Promise<boolean>
  getAll<T extends Record<string, unknown> = Record<string, unknown>>(): Promise<T>
  setBatch(values: Record<string, unknown>): Promise<void>
}

/** Starts a run of a flow; nqd's answer. */
export interface StartedRun {
  id: string
  queue: string
  step: string
  flowId: string
}

/** A running run of a flow, as v0.5's getRunningFlows listed it. */
export interface RunningFlow {
  id: string
  flowName: string
  status: string
  startedAt?: string
  stepCount: number
  completedSteps: number
}

/** nqd's answer to a cancel. */
export interface CancelledRun {
  success: boolean
  runId: string
  flowName: string
  previousStatus?: string
}

export interface StepFlow {
  /** Emits event with payload: steps subscribed to it run once all their subscriptions were emitted. */
  emit(event: string, payload?: unknown): Promise<void>
  /** Nuxt Queue's first name for emit. */
  handleTrigger(event: string, payload?: unknown): Promise<unknown[]>
  /** Starts a run of another flow with input. */
  startFlow(flowName: string, input?: unknown): Promise<StartedRun>
  /** Cancels a run of a flow. */
  cancelFlow(flowName: string, runId: string): Promise<CancelledRun>
  /** Cancels this run. */
  cancel(): Promise<CancelledRun>
  /**
   * The running runs of flowName (this flow by default); without options,
   * this run is left out, as v0.5 did.
   */
  getRunningFlows(flowName?: string, options?: { excludeRunIds?: string[] }): Promise<RunningFlow[]>
  /** Whether runId, or any run of flowName (this run left out by default), is running. */
  isRunning(flowName?: string, runId?: string, options?: { excludeRunIds?: string[] }): Promise<boolean>
}

/** How the await a step declared resolved, from the input's `_resume`. */
export interface Resume {
  awaitType: string
  triggerId?: string
  payload?: unknown
  event?: unknown
  resumeAt?: string
  timedOut?: boolean
  step?: string
}

/** What a handler gets besides its input. */
export interface StepContext {
  jobId: string
  queue: string
  /** The run's id. */
  flowId: string
  flowName: string
  stepName: string
  /** This attempt's id: `<runId>__<step>__attempt-<n>`. */
  stepId: string
  /** This try's number, 1 for the first. */
  attempt: number
  /** Aborted when the run was cancelled, the lease was lost or the worker stops. */
  signal: AbortSignal
  /** The resolution of the step's await, when it declared one. */
  resume: Resume | undefined
  /**
   * What resolved the step's await, as v0.5 handed it: a webhook's or a
   * trigger's body, an event await's event data; undefined without an await.
   * Typed as v0.5 typed it, so that its step files check unchanged.
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trigger: any
  logger: StepLogger
  state: StepState
  flow: StepFlow
  /** Appends a raw progress event, or emits `{kind, data}` as a flow event. */
  emit(evt: { kind?: string, type?: string, data?: unknown } | string, payload?: unknown): Promise<void>
  /** Reports the step's progress (a number, e.g. 0 to 100, or an object). */
  progress(value: unknown): Promise<void>
}

/** What the context needs from the job that runs it. */
export interface ContextHost {
  http: Http
  runId: string
  /** Appends events for the job and resolves once nqd stored them. */
  report(events: ReportEvent[]): Promise<void>
  /** Appends events without waiting; a failure is logged, not thrown. */
  reportLater(events: ReportEvent[]): void
  /**
   * Emits: while step.started waits for company, the emits wait with it
   * (and resolve at once); otherwise as report.
   */
  reportEmits(events: ReportEvent[]): Promise<void>
  /** A value the step gave cannot be encoded: the step fails with err, whatever it does with the throw. */
  encodingFailed(err: EncodingError): void
}

export interface ReportEvent {
  kind: string
  data?: unknown
}

const progressKinds = new Set(['step.started', 'log', 'emit', 'step.progress'])

function isProgressKind(kind: string): boolean {
  return progressKinds.has(kind) || kind.startsWith('log.') || kind.startsWith('state.')
}

interface StateAnswer {
  state?: { state?: Record<string, unknown> }
}

export function buildContext(
  host: ContextHost,
  job: { id: string, queue: string, runId: string, flowName: string, step: string, attempt: number, input?: unknown },
  signal: AbortSignal,
): StepContext {
  // Every value is encoded where the step hands it over, so that one that
  // cannot be fails the step there, rather than a report later on.
  const check = (field: string, value: unknown): void => {
    try {
      encodeJSON(field, value)
    } catch (err) {
      host.encodingFailed(err as EncodingError)
      throw err
    }
  }
  const log = (level: LogLevel, msg: string, meta?: unknown): void => {
    const fields = meta === undefined || meta === null
      ? {}
      : typeof meta === 'object' && !Array.isArray(meta) ? meta : { value: meta }
    // A step file in plain JavaScript may log a message that is no string.
    const given: unknown = msg
    const text = String(given)
    const data = { ...fields, level, msg: text }
    check(`ctx.logger.log(${JSON.stringify(level)}, ${JSON.stringify(text.slice(0, 40))}) meta`, data)
    host.reportLater([{ kind: 'log', data }])
  }
  const getAll = async <T extends Record<string, unknown>>(): Promise<T> => {
    const ans = await host.http.get<StateAnswer>(`/api/_events/flow/${encodeURIComponent(host.runId)}/state`, { signal, timeoutMs: 15000 })
    return (ans.state?.state ?? {}) as T
  }
  const emit = (event: string, payload?: unknown): Promise<void> => {
    check(`ctx.flow.emit(${JSON.stringify(event)}) payload`, payload)
    return host.reportEmits([{ kind: 'emit', data: { event, payload: payload ?? null } }])
  }
  const state: StepState = {
    async get<T>(key: string): Promise<T | null> {
      const all = await getAll()
      return key in all ? (all[key] as T) : null
    },
    set: (key, value) => {
      check(`ctx.state.set(${JSON.stringify(key)})`, value)
      return host.report([{ kind: 'state.set', data: { key, value } }])
    },
    delete: key => host.report([{ kind: 'state.delete', data: { key } }]),
    async has(key) {
      return key in await getAll()
    },
    getAll,
    setBatch: (values) => {
      const operations = Object.entries(values).map(([key, value]) => {
        check(`ctx.state.setBatch: ${JSON.stringify(key)}`, value)
        return { type: 'set', key, value }
      })
      return host.report([{ kind: 'state.batch', data: { operations } }])
    },
  }
  const cancelFlow = (flowName: string, runId: string): Promise<CancelledRun> =>
    host.http.post<CancelledRun>(`/api/_flows/${encodeURIComponent(flowName)}/runs/${encodeURIComponent(runId)}/cancel`, undefined, { signal, timeoutMs: 15000 })
  const running = async (flowName: string, exclude: string[]): Promise<RunningFlow[]> => {
    const out: RunningFlow[] = []
    // Bounded: a flow with more running runs than this is busy enough to say so.
    for (let offset = 0; offset < 10_000; offset += 100) {
      const page = await host.http.get<{ items?: RunningFlow[], hasMore?: boolean }>(
        `/api/_flows/${encodeURIComponent(flowName)}/runs?status=running&limit=100&offset=${String(offset)}`, { signal, timeoutMs: 15000 })
      out.push(...(page.items ?? []).filter(r => !exclude.includes(r.id)))
      if (page.hasMore !== true) {
        break
      }
    }
    return out
  }
  const resume = readResume(job.input)
  return {
    jobId: job.id,
    queue: job.queue,
    flowId: job.runId,
    flowName: job.flowName,
    stepName: job.step,
    stepId: `${job.runId}__${job.step}__attempt-${job.attempt}`,
    attempt: job.attempt,
    signal,
    resume,
    trigger: triggerOf(resume),
    logger: {
      log,
      debug: (msg, meta) => { log('debug', msg, meta) },
      info: (msg, meta) => { log('info', msg, meta) },
      warn: (msg, meta) => { log('warn', msg, meta) },
      error: (msg, meta) => { log('error', msg, meta) },
    },
    state,
    flow: {
      emit,
      async handleTrigger(event, payload) {
        await emit(event, payload)
        return []
      },
      startFlow: (flowName, input) =>
        host.http.post<StartedRun>(`/api/_flows/${encodeURIComponent(flowName)}/start`, input ?? {}, { signal, timeoutMs: 15000 }),
      cancelFlow,
      cancel: () => cancelFlow(job.flowName, job.runId),
      getRunningFlows: (flowName, options) => running(flowName ?? job.flowName, options?.excludeRunIds ?? [job.runId]),
      async isRunning(flowName, runId, options) {
        const runs = await running(flowName ?? job.flowName, runId === undefined ? options?.excludeRunIds ?? [job.runId] : [])
        return runId === undefined ? runs.length > 0 : runs.some(r => r.id === runId)
      },
    },
    emit(evt, payload) {
      if (typeof evt === 'string') {
        return emit(evt, payload)
      }
      const kind = evt.kind ?? evt.type
      if (kind === undefined || kind === '') {
        return Promise.reject(new TypeError('ctx.emit: the event needs a kind'))
      }
      if (isProgressKind(kind)) {
        check(`ctx.emit(${JSON.stringify(kind)}) data`, evt.data)
        return host.report([{ kind, data: evt.data }])
      }
      return emit(kind, evt.data)
    },
    progress: (value) => {
      check('ctx.progress', value)
      return host.report([{ kind: 'step.progress', data: { progress: value } }])
    },
  }
}

function readResume(input: unknown): Resume | undefined {
  if (typeof input !== 'object' || input === null || !('_resume' in input)) {
    return undefined
  }
  const r = input._resume
  return typeof r === 'object' && r !== null ? r as Resume : undefined
}

/** What resolved an await, in the shape v0.5 gave it to a step as ctx.trigger. */
function triggerOf(r: Resume | undefined): unknown {
  if (r === undefined) {
    return undefined
  }
  if (r.awaitType === 'event') {
    const e = r.event
    return typeof e === 'object' && e !== null && 'data' in e ? e.data : e
  }
  return r.payload ?? r
}
