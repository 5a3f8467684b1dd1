// The Nuxt Queue shapes of a step file, in both generations: October 2025's
// `export const config = defineQueueConfig({...})` and `export default
// defineQueueWorker(fn)`, and v0.5's defineFunctionConfig and defineFunction.

import type { StepContext } from './context.js'

/**
 * A step's code: it gets the step's input and its context. The input is
 * `any` by default, as in Nuxt Queue, since the step file says what it is.
 */
/* eslint-disable @typescript-eslint/no-explicit-any */
export type Handler<I = any, R = unknown> = (input: I, ctx: StepContext) => R | Promise<R>

/** A function defineQueueWorker made; the CLI finds it as a file's default export. */
export type QueueWorker<I = any, R = unknown> = Handler<I, R> & { readonly nqdQueueWorker: true }

/* eslint-enable @typescript-eslint/no-explicit-any */

/** Wraps a step handler, as Nuxt Queue's auto-imported defineQueueWorker does. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function defineQueueWorker<I = any, R = unknown>(fn: Handler<I, R>): QueueWorker<I, R> {
  if (typeof fn !== 'function') {
    throw new TypeError('defineQueueWorker takes the step handler, a function (input, ctx) => result')
  }
  const wrapped = ((input: I, ctx: StepContext) => fn(input, ctx)) as QueueWorker<I, R>
  Object.defineProperty(wrapped, 'nqdQueueWorker', { value: true })
  return wrapped
}

/**
 * A function defineFunction made (v0.5). The CLI hands it a subscribed
 * step's input as nqd keeps it, keyed by event, as v0.5 did.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type NuxtFunction<I = any, R = unknown> = Handler<I, R> & { readonly nqdFunction: true }

/** Wraps a step handler, as the v0.5 auto-imported defineFunction does. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function defineFunction<I = any, R = unknown>(fn: Handler<I, R>): NuxtFunction<I, R> {
  if (typeof fn !== 'function') {
    throw new TypeError('defineFunction takes the step handler, a function (input, ctx) => result')
  }
  const wrapped = ((input: I, ctx: StepContext) => fn(input, ctx)) as NuxtFunction<I, R>
  Object.defineProperty(wrapped, 'nqdFunction', { value: true })
  return wrapped
}

/** Reports whether h was made by v0.5's defineFunction. */
export function isNuxtFunction(h: unknown): boolean {
  return typeof h === 'function' && (h as { nqdFunction?: unknown }).nqdFunction === true
}

/** Reports whether v is a handler made by defineQueueWorker (or any function). */
export function isQueueWorker(v: unknown): v is Handler {
  return typeof v === 'function'
}

export type FlowRole = 'entry' | 'step'

/** How a step waits before it runs: nqd registers the await and runs the step once it resolves. */
export interface AwaitConfig {
  type: 'time' | 'event' | 'trigger'
  /** A time await's wait in milliseconds. */
  delay?: number
  /** An event await's event kind. */
  eventKind?: string
  /** An event await's condition in CEL over `event` and `input`. */
  where?: string
  triggerType?: string
  /** Longest wait in milliseconds. */
  timeout?: number
  /** The step that runs when the await times out; without it the run fails. */
  onTimeout?: string
  /** A JSON Schema a trigger's payload must satisfy. */
  schema?: Record<string, unknown>
}

export interface FlowConfig {
  /** The flow or flows this step belongs to. */
  name: string | string[]
  role: FlowRole
  /** The step's name; an entry file may name several, the first being the entry. */
  step: string | string[]
  emits?: string[]
  subscribes?: string | string[]
  /** nqd: wait for a time, an event or a trigger before the step runs. */
  await?: AwaitConfig
  /** nqd: a JSON Schema the run's state must satisfy (on the entry step's file). */
  stateSchema?: Record<string, unknown>
  /** v0.5: wait before the step runs; the resolution reaches the step as ctx.trigger. */
  awaitBefore?: NuxtAwaitConfig
  /** v0.5: wait after the step, before the steps its emits make due run. */
  awaitAfter?: NuxtAwaitConfig
  /** v0.5: triggers that start the flow (on the entry step's file). */
  triggers?: FlowTriggers
  /** v0.5: time limit of one attempt in milliseconds; wins over the queue's timeout. */
  stepTimeout?: number
}

/** A v0.5 await: a webhook call, an event, the next time of a cron schedule, or a delay. */
export interface NuxtAwaitConfig {
  type: 'webhook' | 'event' | 'schedule' | 'time'
  path?: string
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE'
  /** An event await's event name. */
  event?: string
  /** An event await's key matched between the event's data and the step's input. */
  filterKey?: string
  cron?: string
  timezone?: string
  /** A time await's wait in milliseconds. */
  delay?: number
  /** Longest wait in milliseconds. */
  timeout?: number
  timeoutAction?: 'fail' | 'continue' | 'retry'
}

/** A trigger a v0.5 entry step defines in code. */
export interface TriggerDefinition {
  name: string
  type: 'event' | 'webhook' | 'schedule' | 'manual'
  scope?: 'flow' | 'await'
  displayName?: string
  description?: string
  expectedSubscribers?: string[]
  webhook?: { path: string, method?: 'GET' | 'POST' | 'PUT' | 'DELETE', auth?: unknown }
  schedule?: { cron: string, timezone?: string, enabled?: boolean }
  config?: Record<string, unknown>
}

/** The triggers that start a v0.5 flow. */
export interface FlowTriggers {
  define?: TriggerDefinition
  subscribe: string[]
  mode?: 'auto' | 'manual'
}

export interface QueueJobDefaults {
  /** Every try, the first included. */
  attempts?: number
  /** A fixed delay in milliseconds, or a fixed or exponential one. */
  backoff?: number | { type: 'fixed' | 'exponential', delay: number, maxDelay?: number }
  /** Time limit of one attempt in milliseconds. */
  timeout?: number
  delay?: number
  priority?: number
  lifo?: boolean
  removeOnComplete?: boolean | number
  removeOnFail?: boolean | number
  repeat?: { cron?: string, every?: number, limit?: number, tz?: string }
}

export interface QueueConfig {
  /** Without it the queue is named after the file. */
  name?: string
  defaultJobOptions?: QueueJobDefaults
  prefix?: string
}

export interface WorkerConfig {
  concurrency?: number
  lockDurationMs?: number
  maxStalledCount?: number
  drainDelayMs?: number
  autorun?: boolean
}

/** A step file's `config` export. */
export interface QueueWorkerConfig {
  /** The queue; without it the queue is named after the file. */
  queue?: QueueConfig
  flow?: FlowConfig
  worker?: WorkerConfig
  /** nqd: a shorthand for flow.await. */
  await?: AwaitConfig
}

/** Returns cfg as it is, typed: Nuxt Queue's auto-imported defineQueueConfig. */
export function defineQueueConfig<T extends QueueWorkerConfig>(cfg: T): T {
  return cfg
}

/** Returns cfg as it is, typed: v0.5's auto-imported defineFunctionConfig. */
export function defineFunctionConfig<T extends QueueWorkerConfig>(cfg: T): T {
  return cfg
}

/** Returns cfg as it is, typed: v0.5's auto-imported defineTriggerConfig. */
export function defineTriggerConfig<T extends TriggerDefinition>(cfg: T): T {
  return cfg
}
