// useNqdRun(runId): a run's live state in a page, from the run's event
// stream through the app's own origin (the module serves nqd's API there).

import { getCurrentScope, onScopeDispose, ref, shallowRef, toValue, watch, type MaybeRefOrGetter, type Ref, type ShallowRef } from 'vue'

export interface NqdRunState<I = unknown, R = unknown> {
  status: 'running' | 'awaiting' | 'completed' | 'failed' | 'cancelled'
  name?: string
  runId?: string
  input?: I
  result?: R
  error?: string
  reason?: string
  steps: Record<string, { status: string, attempt: number, error?: string, result?: unknown }>
  state: Record<string, unknown>
  logs: Array<{ id: string, ts: string, step?: string, level: string, msg: string, data?: unknown }>
  lastEventId?: string
  eventCount: number
}

export interface NqdRun<I, R> {
  /** The run's state, folded by nqd; null until it is read. */
  state: ShallowRef<NqdRunState<I, R> | null>
  /** The kinds of the run's events as they arrive, newest last. */
  kinds: Ref<string[]>
  /** Why the state cannot be followed, when it cannot. */
  error: Ref<string | null>
  /** Whether the run has ended (completed, failed or cancelled). */
  ended: Ref<boolean>
}

const endStatuses = new Set(['completed', 'failed', 'cancelled'])

/**
 * Follows runId's run: reads its state, then listens to its stream and
 * reads the state again after each burst of events, until the run ends.
 * The browser's EventSource resumes the stream after the last event seen.
 * On the server it does nothing: the state is filled in the browser.
 */
export function useNqdRun<I = unknown, R = unknown>(runId: MaybeRefOrGetter<string | null | undefined>, opts: { baseURL?: string } = {}): NqdRun<I, R> {
  const state = shallowRef<NqdRunState<I, R> | null>(null)
  const kinds = ref<string[]>([])
  const error = ref<string | null>(null)
  const ended = ref(false)
  if (typeof window === 'undefined') {
    return { state, kinds, error, ended }
  }
  const base = (opts.baseURL ?? '').replace(/\/+$/, '')
  let source: EventSource | undefined
  let reading: Promise<void> | undefined
  let again = false

  const stateURL = (id: string): string => `${base}/api/_events/flow/${encodeURIComponent(id)}/state`
  /** Reads the state; true when the run has ended. */
  const read = async (id: string): Promise<boolean> => {
    const res = await fetch(stateURL(id), { headers: { accept: 'application/json' } })
    if (!res.ok) {
      throw new Error(`reading run ${id}: ${String(res.status)} ${res.statusText}`)
    }
    const body = await res.json() as { state: NqdRunState<I, R> }
    state.value = body.state
    ended.value = endStatuses.has(body.state.status)
    if (ended.value) {
      source?.close()
    }
    return ended.value
  }
  // Reads coalesce: at most one in flight and one after it.
  const refresh = (id: string): void => {
    if (reading !== undefined) {
      again = true
      return
    }
    reading = read(id).then(() => undefined, (err: unknown) => { error.value = err instanceof Error ? err.message : String(err) }).finally(() => {
      reading = undefined
      if (again) {
        again = false
        refresh(id)
      }
    })
  }

  const follow = async (id: string | null | undefined): Promise<void> => {
    source?.close()
    source = undefined
    state.value = null
    kinds.value = []
    error.value = null
    ended.value = false
    if (id === null || id === undefined || id === '') {
      return
    }
    let done: boolean
    try {
      done = await read(id)
    } catch (err) {
      error.value = err instanceof Error ? err.message : String(err)
      return
    }
    if (done || toValue(runId) !== id) {
      return
    }
    // Read through a cast: TypeScript keeps the null set above across the await.
    const from = (state.value as NqdRunState<I, R> | null)?.lastEventId
    const url = `${base}/api/_events/flow/${encodeURIComponent(id)}/stream${from === undefined || from === '' ? '' : `?fromId=${encodeURIComponent(from)}`}`
    const es = new EventSource(url)
    source = es
    es.onmessage = (m: MessageEvent<string>) => {
      try {
        const body = JSON.parse(m.data) as { event?: string }
        if (body.event !== undefined) {
          kinds.value = [...kinds.value, body.event]
        }
      } catch {
        // not an event message
      }
      refresh(id)
    }
    es.addEventListener('reset', () => { refresh(id) })
  }

  watch(() => toValue(runId), (id) => { void follow(id) }, { immediate: true })
  if (getCurrentScope() !== undefined) {
    onScopeDispose(() => { source?.close() })
  }
  return { state, kinds, error, ended }
}
