// Builds nqd flow definitions from the `config` exports of Nuxt Queue step
// files of both generations: flow.name, role, step, emits, subscribes, the
// queue and its job defaults (attempts, backoff, timeout), nqd's await, and
// v0.5's awaitBefore, awaitAfter, stepTimeout and triggers. The fixtures in
// sdk/testdata/nuxt-configs hold the mapping, for every SDK that has one.

import type { AwaitConfig, NuxtAwaitConfig, QueueWorkerConfig, TriggerDefinition } from './define.js'

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

/**
 * A trigger a v0.5 entry step defines or subscribes to, with the flows that
 * subscribe to it: what the trigger registry is to hold.
 */
export interface FlowTrigger {
  name: string
  /** Absent for a trigger the files subscribe to but do not define. */
  definition?: TriggerDefinition
  subscriptions: { flow: string, mode: 'auto' | 'manual' }[]
}

/** What building the definitions learned about each step file. */
export interface BuiltFlows {
  flows: FlowDefinition[]
  /** The triggers of v0.5 entry steps, sorted by name. */
  triggers: FlowTrigger[]
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
 * Maps a v0.5 await onto nqd's: a webhook is a trigger await (its body
 * reaches the step as ctx.trigger), an event an event await, a time a time
 * await. A schedule (the next time of a cron expression) has no nqd await
 * and is dropped with a warning; so are the parts nqd does not take.
 */
function nqdAwait(where: string, a: NuxtAwaitConfig, warn: (w: string) => void): AwaitConfig | undefined {
  let out: AwaitConfig
  switch (a.type) {
    case 'time':
      out = { type: 'time', delay: a.delay ?? 0 }
      break
    case 'webhook':
      out = { type: 'trigger', triggerType: 'webhook' }
      break
    case 'event':
      if (a.event === undefined || a.event === '') {
        warn(`${where}: an event await needs its event; dropped`)
        return undefined
      }
      out = { type: 'event', eventKind: a.event }
      if (a.filterKey !== undefined) {
        warn(`${where}: the event await's filterKey is not taken; the first ${a.event} event resumes the step`)
      }
      break
    default:
      warn(`${where}: a ${a.type} await has no nqd equivalent; dropped`)
      return undefined
  }
  if (a.type !== 'time' && a.timeout !== undefined && a.timeout > 0) {
    out.timeout = a.timeout
  }
  if (a.timeoutAction !== undefined && a.timeoutAction !== 'fail') {
    warn(`${where}: timeoutAction ${a.timeoutAction} is not taken; a timeout fails the step`)
  }
  return out
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
  const warn = (w: string): void => { warnings.push(w) }
  const queues = new Map<string, string>()
  const triggers = new Map<string, FlowTrigger>()
  /** Steps whose v0.5 awaitAfter holds back the steps their emits make due. */
  const after: { flow: string, step: string, src: string, wait: AwaitConfig }[] = []
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
    let wait = f.await ?? src.config.await
    if (f.awaitBefore !== undefined) {
      const before = nqdAwait(`${src.id}: awaitBefore`, f.awaitBefore, warn)
      if (wait !== undefined && before !== undefined) {
        warn(`${src.id}: both await and awaitBefore; await is taken`)
      }
      wait ??= before
    }
    const waitAfter = f.awaitAfter === undefined ? undefined : nqdAwait(`${src.id}: awaitAfter`, f.awaitAfter, warn)
    const timeout = f.stepTimeout ?? src.config.queue?.defaultJobOptions?.timeout
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
        if (waitAfter !== undefined) {
          after.push({ flow: flowName, step, src: src.id, wait: waitAfter })
        }
        if (f.triggers !== undefined && def.entry === step) {
          addTriggers(triggers, flowName, f.triggers)
        } else if (f.triggers !== undefined) {
          warn(`${src.id}: triggers start a flow; only its entry step may name them`)
        }
      })
      if (f.stateSchema !== undefined) {
        def.stateSchema = f.stateSchema
      }
    }
  }
  // nqd awaits before a step: an awaitAfter holds back each step that
  // subscribes to what the awaiting step emits.
  for (const a of after) {
    const def = byName.get(a.flow)
    const emits = def?.steps[a.step]?.emits ?? []
    const held = Object.entries(def?.steps ?? {}).filter(([, s]) => s.subscribes?.some(e => emits.includes(e)) === true)
    if (held.length === 0) {
      warn(`${a.src}: awaitAfter holds back no step (none subscribes to what ${a.step} emits); dropped`)
    }
    for (const [name, s] of held) {
      if (s.await !== undefined) {
        warn(`${a.src}: ${name} has an await of its own; ${a.step}'s awaitAfter is not added to it`)
        continue
      }
      s.await = { ...a.wait }
    }
  }
  for (const def of byName.values()) {
    if (def.entry === '') {
      warnings.push(`flow ${def.name} has no step with role 'entry'; nqd cannot start it`)
    }
  }
  const sortedTriggers = [...triggers.values()].sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
  return { flows: [...byName.values()], triggers: sortedTriggers, warnings, queues }
}

function addTriggers(into: Map<string, FlowTrigger>, flow: string, t: NonNullable<NonNullable<QueueWorkerConfig['flow']>['triggers']>): void {
  const get = (name: string): FlowTrigger => {
    let tr = into.get(name)
    if (tr === undefined) {
      tr = { name, subscriptions: [] }
      into.set(name, tr)
    }
    return tr
  }
  if (t.define !== undefined && typeof t.define.name === 'string' && t.define.name !== '') {
    get(t.define.name).definition = t.define
  }
  for (const name of list(t.subscribe)) {
    get(name).subscriptions.push({ flow, mode: t.mode ?? 'auto' })
  }
}
