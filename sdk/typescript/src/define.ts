// The Nuxt Queue shapes of a step file: `export const config =
// defineQueueConfig({...})` and `export default defineQueueWorker(fn)`.

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
  name: string
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
