/**
 * The wait before retry number n (0-based): exponential from baseMs, capped at
 * maxMs, with "equal jitter" (half fixed, half random) so that many workers
 * that lost nqd at the same moment do not all come back at the same moment.
 */
export function backoffDelay(n: number, baseMs: number, maxMs: number): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(n, 30))
  return ceiling / 2 + Math.random() * (ceiling / 2)
}

/** Resolves after ms, or at once (without an error) when signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted === true) {
      resolve()
      return
    }
    const done = (): void => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}
