// Registers the triggers v0.5 entry steps define in code (flow.triggers)
// in nqd's trigger registry (POST /api/_triggers), and subscribes their
// flows, so that a fire starts them.

import type { FlowTrigger } from './flows.js'
import type { Http } from './http.js'
import type { Logger } from './worker.js'

/** A trigger as POST /api/_triggers takes it. */
export interface TriggerSpec {
  name: string
  type: string
  /** `flow`: a fire starts each subscribed flow; `run`: it resolves a run's await. */
  scope: 'flow' | 'run'
  displayName?: string
  description?: string
  status?: 'active' | 'inactive'
  source: string
  config: Record<string, unknown>
  /** Flows subscribed in auto mode. */
  subscriptions: string[]
}

/** The registry's refusals come in a 200 as `{error, statusCode}`, as the v0.5 UI reads them. */
interface Answer {
  error?: string
  statusCode?: number
}

interface Registered extends Answer {
  subscribedFlows?: string[]
}

/**
 * The registration of a trigger the files define; undefined for one they
 * only subscribe to. What nqd's registry does not take is said with warn.
 */
export function triggerSpec(t: FlowTrigger, warn: (w: string) => void): TriggerSpec | undefined {
  const d = t.definition
  if (d === undefined) {
    return undefined
  }
  const spec: TriggerSpec = {
    name: d.name,
    type: d.type,
    scope: d.scope === 'await' ? 'run' : 'flow',
    source: 'code',
    config: {},
    subscriptions: autoFlows(t, warn),
  }
  if (d.displayName !== undefined) {
    spec.displayName = d.displayName
  }
  if (d.description !== undefined) {
    spec.description = d.description
  }
  switch (d.type) {
    case 'webhook':
      if (d.webhook?.path !== undefined) {
        spec.config.path = d.webhook.path
      }
      if (d.webhook?.method !== undefined) {
        spec.config.method = d.webhook.method
      }
      if (d.webhook?.auth !== undefined) {
        // nqd checks a webhook's secret itself (requireAuth and a secret it
        // generates or is given), not the original's auth object.
        warn(`trigger ${d.name}: webhook.auth is not taken; set the webhook's credentials in nqd's trigger registry`)
      }
      break
    case 'schedule':
      if (d.schedule !== undefined) {
        spec.config.cron = d.schedule.cron
        if (d.schedule.timezone !== undefined) {
          spec.config.timezone = d.schedule.timezone
        }
        if (d.schedule.enabled === false) {
          spec.status = 'inactive'
        }
      }
      break
    case 'event': {
      const event = d.config?.event
      if (typeof event === 'string') {
        spec.config.event = event
      }
      if (d.config?.filter !== undefined) {
        spec.config.filter = d.config.filter
      }
      break
    }
    default:
      break
  }
  return spec
}

function autoFlows(t: FlowTrigger, warn: (w: string) => void): string[] {
  const flows: string[] = []
  for (const s of t.subscriptions) {
    if (s.mode === 'manual') {
      warn(`trigger ${t.name}: flow ${s.flow} subscribes in manual mode, which nqd's trigger registry does not have; it is not subscribed`)
      continue
    }
    if (!flows.includes(s.flow)) {
      flows.push(s.flow)
    }
  }
  return flows
}

/**
 * Registers each trigger the files define, or subscribes the files' flows
 * to one already registered (keeping its other subscriptions); returns the
 * names of those registered or updated. A refusal is logged and the rest
 * goes on: the flows run without their triggers.
 */
export async function registerTriggers(http: Http, triggers: FlowTrigger[], log: Logger): Promise<string[]> {
  const done: string[] = []
  const warn = (w: string): void => { log.warn(w) }
  for (const t of triggers) {
    const path = `/api/_triggers/${encodeURIComponent(t.name)}`
    try {
      const spec = triggerSpec(t, warn)
      if (spec !== undefined) {
        const ans = await http.post<Answer>('/api/_triggers', spec, { timeoutMs: 10_000 })
        if (ans.error === undefined) {
          log.info(`registered trigger ${t.name} (${spec.type}) for ${spec.subscriptions.join(', ') || 'no flow'}`)
          done.push(t.name)
          continue
        }
        if (ans.statusCode !== 409) {
          log.error(`trigger ${t.name} not registered: ${String(ans.statusCode)} ${ans.error}`)
          continue
        }
      }
      // Registered already (by an earlier start, or elsewhere): the files'
      // flows are added to its subscriptions.
      const have = await http.get<Registered>(path, { timeoutMs: 10_000 })
      const flows = autoFlows(t, () => undefined)
      const all = [...new Set([...(have.subscribedFlows ?? []), ...flows])]
      const body: Record<string, unknown> = { subscriptions: all }
      if (spec !== undefined) {
        Object.assign(body, { config: spec.config }, spec.displayName === undefined ? {} : { displayName: spec.displayName },
          spec.description === undefined ? {} : { description: spec.description })
      }
      const ans = await http.request<Answer>('PATCH', path, body, { timeoutMs: 10_000 })
      if (ans.error !== undefined) {
        log.error(`trigger ${t.name} not updated: ${String(ans.statusCode)} ${ans.error}`)
        continue
      }
      log.info(`trigger ${t.name}: subscribed ${all.join(', ')}`)
      done.push(t.name)
    } catch (err) {
      log.error(`trigger ${t.name} not registered: ${err instanceof Error ? err.message : String(err)}`)
    }
  }
  return done
}
