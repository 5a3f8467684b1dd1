// Builds nqd flow definitions from the `config` exports of Nuxt Queue step
// files: flow.name, role, step, emits, subscribes, the queue and its job
// defaults (attempts, backoff, timeout), and nqd's await.

import type { AwaitConfig, QueueWorkerConfig } from './define.js'

/** A step of an nqd flow definition (`PUT /api/_flows/<name>`). */
export interface StepDefinition {
  queue: string
  workerId?: string
  subscribes?: string[]
  emits?: string[]
  retryPolicy?: {
    attempts: number
    backoff: { type: 'fixed' | 'exponential', delayMs: number, maxDelayMs?: number }
  }
  await?: AwaitConfig
  timeout?: number
}

/** An nqd flow definition. */
export interface FlowDefinition {
  name: string
  entry: string
  steps: Record<string, StepDefinition>
  stateSchema?: Record<string, unknown>
}

/** One step file: its id (path without extension), its config, its handler. */
export interface StepSource {
  id: string
  config: QueueWorkerConfig | undefined
}

/** What building the definitions learned about each step file. */
export interface BuiltFlows {
  flows: FlowDefinition[]
  /** Problems that leave a flow unusable or drop part of a config. */
  warnings: string[]
  /** The queue of each step, keyed by `<flowName>/<step>`. */
  queues: Map<string, string>
}

function list(v: string | string[] | undefined): string[] {
  if (v === undefined) {
    return []
  }
  return (Array.isArray(v) ? v : [v]).filter(s => typeof s === 'string' && s !== '')
}

/** The queue a step file's jobs go to: config.queue.name, else the file's base name. */
export function queueOf(src: StepSource): string {
  const name = src.config?.queue?.name
  if (typeof name === 'string' && name !== '') {
    return name
  }
  return src.id.split('/').pop() ?? src.id
}

function retryPolicy(cfg: QueueWorkerConfig): StepDefinition['retryPolicy'] {
  const o = cfg.queue?.defaultJobOptions
  if (o?.attempts === undefined || o.attempts <= 1) {
    return undefined
  }
  const b = o.backoff
  if (b === undefined) {
    return { attempts: o.attempts, backoff: { type: 'fixed', delayMs: 0 } }
  }
  if (typeof b === 'number') {
    return { attempts: o.attempts, backoff: { type: 'fixed', delayMs: b } }
  }
  const backoff: { type: 'fixed' | 'exponential', delayMs: number, maxDelayMs?: number } = {
    type: b.type === 'exponential' ? 'exponential' : 'fixed',
    delayMs: b.delay,
  }
  if (b.maxDelay !== undefined) {
    backoff.maxDelayMs = b.maxDelay
  }
  return { attempts: o.attempts, backoff }
}

/**
 * Builds one definition per flow name the files mention. The entry file's
 * first step is the entry; a flow without one, or a definition nqd would
 * refuse for another reason, is still returned (nqd says why when it is
 * stored), with a warning.
 */
export function buildFlows(sources: StepSource[]): BuiltFlows {
  const byName = new Map<string, FlowDefinition>()
  const warnings: string[] = []
  const queues = new Map<string, string>()
  for (const src of sources) {
    const f = src.config?.flow
    if (src.config === undefined || f === undefined) {
      continue
    }
    const names = list(f.name)
    const steps = list(f.step)
    if (names.length === 0 || steps.length === 0) {
      warnings.push(`${src.id}: config.flow needs a name and a step; skipped`)
      continue
    }
    const queue = queueOf(src)
    const policy = retryPolicy(src.config)
    const wait = f.await ?? src.config.await
    const timeout = src.config.queue?.defaultJobOptions?.timeout
    for (const flowName of names) {
      let def = byName.get(flowName)
      if (def === undefined) {
        def = { name: flowName, entry: '', steps: {} }
        byName.set(flowName, def)
      }
      steps.forEach((step, i) => {
        if (def.steps[step] !== undefined) {
          warnings.push(`${src.id}: flow ${flowName} already has a step ${step}; this one is ignored`)
          return
        }
        const isEntry = f.role === 'entry' && i === 0
        const s: StepDefinition = { queue, workerId: src.id }
        const subscribes = list(f.subscribes)
        if (isEntry) {
          if (def.entry !== '') {
            warnings.push(`${src.id}: flow ${flowName} already has the entry ${def.entry}; ${step} is a plain step`)
          } else {
            def.entry = step
            if (subscribes.length > 0) {
              warnings.push(`${src.id}: the entry step ${step} runs when its flow starts; its subscribes (${subscribes.join(', ')}) are dropped`)
            }
          }
        }
        if (def.entry !== step && subscribes.length > 0) {
          s.subscribes = subscribes
        }
        if (f.emits !== undefined && f.emits.length > 0) {
          s.emits = [...f.emits]
        }
        if (policy !== undefined) {
          s.retryPolicy = policy
        }
        if (wait !== undefined) {
          s.await = wait
        }
        if (timeout !== undefined && timeout > 0) {
          s.timeout = timeout
        }
        def.steps[step] = s
        queues.set(`${flowName}/${step}`, queue)
      })
      if (f.stateSchema !== undefined) {
        def.stateSchema = f.stateSchema
      }
    }
  }
  for (const def of byName.values()) {
    if (def.entry === '') {
      warnings.push(`flow ${def.name} has no step with role 'entry'; nqd cannot start it`)
    }
  }
  return { flows: [...byName.values()], warnings, queues }
}
