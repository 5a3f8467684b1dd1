// Runs a folder of Nuxt Queue step files against nqd: builds and stores the
// flow definitions their configs describe, then serves every step's queue.

import { isNuxtFunction, type Handler } from './define.js'
import { buildFlows, queueOf, type FlowDefinition } from './flows.js'
import { AuthError } from './errors.js'
import { Http } from './http.js'
import { loadStepFiles } from './loader.js'
import { registerTriggers } from './triggers.js'
import { createWorker, type Logger, type Transport, type Worker } from './worker.js'

export interface FolderOptions {
  /** Folders (searched with their nested folders) or single step files. */
  paths: string[]
  url: string
  token?: string | undefined
  /** Jobs run at once per queue, unless a file's config.worker.concurrency says more. Default 4. */
  concurrency?: number | undefined
  logger?: Logger | undefined
  /** Serve only these queues; default every queue the files name. */
  queues?: string[] | undefined
  /**
   * Store the flow definitions the files describe before serving
   * (`PUT /api/_flows/<name>`, scope admin). Off by default, so that a
   * write token serves steps.
   */
  storeFlows?: boolean | undefined
  /** The worker channel (the default, falling back to HTTP) or HTTP only: see WorkerOptions.transport. */
  transport?: Transport | undefined
}

export interface FolderWorker {
  /** The definitions the files describe; with storeFlows, those nqd accepted. */
  flows: FlowDefinition[]
  /** Flows nqd refused, with its reason. */
  refused: { name: string, reason: string }[]
  /** The queues served. */
  queues: string[]
  /** Runs until stop(); rejects with an AuthError when nqd refuses the token. */
  start(): Promise<void>
  stop(graceMs?: number): Promise<void>
}

/** The most queues one worker channel serves, and the most jobs it holds (its hello's limits). */
const maxQueues = 32
const maxConcurrency = 1000

/**
 * Loads the step files, stores their flows in nqd when asked, and prepares
 * one worker for their queues, each queue with its own concurrency: one
 * worker channel for the process (for up to 32 queues and 1000 jobs).
 */
export async function loadFolder(opts: FolderOptions): Promise<FolderWorker> {
  const line = (prefix: string, m: string, meta?: Record<string, unknown>): void => {
    console.error(`${prefix}${m}${meta === undefined ? '' : ' ' + JSON.stringify(meta)}`)
  }
  const log: Logger = opts.logger ?? {
    debug: () => undefined,
    info: (m, meta) => { line('nqd-worker: ', m, meta) },
    warn: (m, meta) => { line('nqd-worker warn: ', m, meta) },
    error: (m, meta) => { line('nqd-worker error: ', m, meta) },
  }
  const { files, skipped } = await loadStepFiles(opts.paths)
  for (const s of skipped) {
    log.warn(s)
  }
  const built = buildFlows(files)
  for (const w of built.warnings) {
    log.warn(w)
  }
  const refused: { name: string, reason: string }[] = []
  let flows = built.flows.filter((def) => {
    if (def.entry === '') {
      refused.push({ name: def.name, reason: 'no entry step' })
    }
    return def.entry !== ''
  })
  if (opts.storeFlows === true) {
    const http = new Http({ url: opts.url, token: opts.token })
    try {
      flows = await storeFlows(http, flows, refused, log)
      // A trigger subscribes only flows nqd took.
      const names = new Set(flows.map(f => f.name))
      const triggers = built.triggers.map(t => ({ ...t, subscriptions: t.subscriptions.filter(s => names.has(s.flow)) }))
      await registerTriggers(http, triggers, log)
    } finally {
      http.close()
    }
  } else if (built.triggers.length > 0) {
    log.info(`the step files name triggers (${built.triggers.map(t => t.name).join(', ')}); --store-flows registers them`)
  }
  // The handlers of the steps on each queue, and the queue's concurrency.
  const byQueue = new Map<string, { handlers: Record<string, Handler>, concurrency: number }>()
  for (const f of files) {
    if (f.handler === undefined || f.config?.flow === undefined) {
      continue
    }
    const queue = queueOf(f)
    if (opts.queues !== undefined && opts.queues.length > 0 && !opts.queues.includes(queue)) {
      continue
    }
    let q = byQueue.get(queue)
    if (q === undefined) {
      q = { handlers: {}, concurrency: opts.concurrency ?? 4 }
      byQueue.set(queue, q)
    }
    q.concurrency = Math.max(q.concurrency, f.config.worker?.concurrency ?? 0)
    const steps = [f.config.flow.step].flat()
    const names = [f.config.flow.name].flat()
    for (const step of steps) {
      for (const name of names) {
        const subs = flows.find(d => d.name === name)?.steps[step]?.subscribes ?? []
        const h = f.handler
        // v0.5 read a subscribed step's input keyed by event, as nqd keeps it.
        q.handlers[`${name}/${step}`] = subs.length === 1 && subs[0] !== undefined && !isNuxtFunction(h)
          ? withSubscribedInput(h, subs[0])
          : h
      }
    }
  }
  // One worker, and so one channel, for as many queues as nqd takes on
  // one: at most maxQueues, with at most maxConcurrency jobs together.
  const parts: [string, { handlers: Record<string, Handler>, concurrency: number }][][] = []
  let sum = 0
  for (const entry of byQueue) {
    const last = parts.at(-1)
    if (last === undefined || last.length === maxQueues || sum + entry[1].concurrency > maxConcurrency) {
      parts.push([entry])
      sum = entry[1].concurrency
    } else {
      last.push(entry)
      sum += entry[1].concurrency
    }
  }
  const workers: Worker[] = []
  for (const part of parts) {
    workers.push(createWorker({
      url: opts.url,
      token: opts.token,
      queues: part.map(([queue]) => queue),
      queueConcurrency: Object.fromEntries(part.map(([queue, q]) => [queue, q.concurrency])),
      handlers: Object.assign({}, ...part.map(([, q]) => q.handlers)) as Record<string, Handler>,
      logger: log,
      transport: opts.transport,
      name: 'nqd-worker',
    }))
  }
  return {
    flows,
    refused,
    queues: [...byQueue.keys()],
    async start() {
      await Promise.all(workers.map(w => w.start()))
    },
    async stop(graceMs) {
      await Promise.all(workers.map(w => w.stop(graceMs)))
    },
  }
}

/**
 * Stores each definition; returns those nqd accepted and adds the others to
 * refused with nqd's reason. A refused token (401, 403) stops the command.
 */
async function storeFlows(http: Http, defs: FlowDefinition[], refused: { name: string, reason: string }[], log: Logger): Promise<FlowDefinition[]> {
  const stored: FlowDefinition[] = []
  for (const def of defs) {
    try {
      await http.put(`/api/_flows/${encodeURIComponent(def.name)}`, def, { timeoutMs: 10_000 })
      stored.push(def)
      log.info(`stored flow ${def.name}: ${Object.keys(def.steps).join(', ')}`)
    } catch (err) {
      if (err instanceof AuthError) {
        throw err
      }
      const reason = err instanceof Error ? err.message : String(err)
      refused.push({ name: def.name, reason })
      log.error(`flow ${def.name} not stored: ${reason}`)
    }
  }
  return stored
}

/**
 * Nuxt Queue handed a step subscribed to one event that event's payload
 * itself, beside the event's name and the run (`{name, ...payload, flowId,
 * flowName}`), where nqd hands `{"<event>": payload}`. The folder runs step
 * files as they were written, so it gives them the shape they read. A payload
 * that is not an object stays whole under `payload`; `_resume` is kept.
 */
export function subscribedInput(input: unknown, event: string, run: { flowId: string, flowName: string }): unknown {
  if (typeof input !== 'object' || input === null || Array.isArray(input) || !(event in input)) {
    return input
  }
  const { [event]: payload, ...rest } = input as Record<string, unknown>
  const fields = typeof payload === 'object' && payload !== null && !Array.isArray(payload) ? payload : { payload }
  return { name: event, ...fields, ...rest, flowId: run.flowId, flowName: run.flowName }
}

function withSubscribedInput(h: Handler, event: string): Handler {
  return (input, ctx) => h(subscribedInput(input, event, ctx), ctx)
}
