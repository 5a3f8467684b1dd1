// The client for application code against a real nqd: start, wait, state,
// events, and its retries.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createClient, createWorker, NqdError, RunCancelledError, RunFailedError, WaitTimeoutError, type Client, type RunEvent, type Worker } from '../src/index.js'
import { memoryLogger, startNqd, waitFor, type Nqd } from './nqd.js'
import { startProxy } from './proxy.js'

// Named flows, as an app declares them: no other name type-checks.
interface Flows {
  double: { input: { n: number }, result: { n: number } }
  lost: { input: { y: number } }
}

/** Never called: what tsc must refuse, checked when the tests compile. */
export function typeChecks(c: Client<Flows>): void {
  // @ts-expect-error: not a flow of Flows
  void c.start('tripple', { n: 1 })
  // @ts-expect-error: the input of double has n
  void c.start('double', { m: 1 })
  void c.run('double', { n: 1 }).then((r) => { const n: number = r.n; return n })
}

const quick = { retryBaseMs: 10, retryMaxMs: 100 }

describe('createClient', () => {
  let nqd: Nqd
  let worker: Worker
  let running: Promise<void>

  before(async () => {
    nqd = await startNqd()
    await nqd.putFlow({ name: 'double', entry: 'double', steps: { double: { queue: 'c-double' } } })
    await nqd.putFlow({
      name: 'two', entry: 'first', steps: {
        first: { queue: 'c-two', emits: ['first.done'] },
        second: { queue: 'c-two', subscribes: ['first.done'] },
      },
    })
    await nqd.putFlow({ name: 'broken', entry: 'boom', steps: { boom: { queue: 'c-broken', retryPolicy: { attempts: 1 } } } })
    // Nothing serves this flow's queue: its runs stay queued.
    await nqd.putFlow({ name: 'idle', entry: 'wait', steps: { wait: { queue: 'c-nobody' } } })
    worker = startWorker(nqd)
    running = worker.start()
  })
  after(async () => {
    await worker.stop(2000)
    await running
    await nqd.close()
  })

  it('starts a run and waits for its result', async () => {
    const c = createClient<Flows>({ url: nqd.url, ...quick })
    try {
      const run = await c.start('double', { n: 21 })
      assert.equal(run.flow, 'double')
      const res = await c.wait(run, { timeoutMs: 20_000 })
      assert.deepEqual(res, { n: 42 })
      const st = await c.state(run)
      assert.equal(st.status, 'completed')
      assert.deepEqual(st.input, { n: 21 })
      assert.deepEqual(await c.run('double', { n: 5 }, { timeoutMs: 20_000 }), { n: 10 })
    } finally {
      c.close()
    }
  })

  it('gives the result of the step that ended the run', async () => {
    const c = createClient({ url: nqd.url, ...quick })
    try {
      assert.deepEqual(await c.run('two', { word: 'hi' }, { timeoutMs: 20_000 }), 'second')
    } finally {
      c.close()
    }
  })

  it('throws a RunFailedError for a failed run and a RunCancelledError for a cancelled one', async () => {
    const c = createClient({ url: nqd.url, ...quick })
    try {
      await assert.rejects(c.run('broken', {}, { timeoutMs: 20_000 }), (err: unknown) => {
        assert.ok(err instanceof RunFailedError, String(err))
        assert.equal(err.state.steps.boom?.error, 'no luck')
        return true
      })
      const run = await c.start('idle')
      const waiting = c.wait(run, { timeoutMs: 20_000 })
      await c.cancel(run)
      await assert.rejects(waiting, RunCancelledError)
    } finally {
      c.close()
    }
  })

  it('gives up waiting after timeoutMs, leaving the run', async () => {
    const c = createClient({ url: nqd.url, ...quick })
    try {
      const run = await c.start('idle')
      await assert.rejects(c.wait(run, { timeoutMs: 300 }), (err: unknown) => {
        assert.ok(err instanceof WaitTimeoutError, String(err))
        assert.equal(err.runId, run.runId)
        return true
      })
      assert.equal((await c.state(run)).status, 'running')
      await c.cancel(run)
    } finally {
      c.close()
    }
  })

  it('starts one run for one idempotency key', async () => {
    const c = createClient({ url: nqd.url, ...quick })
    try {
      const a = await c.start('idle', { x: 1 }, { idempotencyKey: 'order-7' })
      const b = await c.start('idle', { x: 1 }, { idempotencyKey: 'order-7' })
      assert.equal(a.runId, b.runId)
      await c.cancel(a)
    } finally {
      c.close()
    }
  })

  it('retries a start whose answer was lost without starting a second run', async () => {
    await nqd.putFlow({ name: 'lost', entry: 'wait', steps: { wait: { queue: 'c-nobody' } } })
    const proxy = await startProxy(nqd.url, (path, nth) => path.endsWith('/start') && nth === 1 ? 'lose-answer' : 'pass')
    const c = createClient({ url: proxy.url, ...quick })
    try {
      const run = await c.start('lost', { y: 2 })
      assert.deepEqual(proxy.seen.filter(s => s.endsWith('/start')), ['POST /api/_flows/lost/start', 'POST /api/_flows/lost/start'])
      const page = await nqd.call<{ total: number, items?: unknown[] }>('GET', '/api/_flows/lost/runs')
      assert.equal(page.total, 1, JSON.stringify(page))
      await c.cancel(run)
    } finally {
      c.close()
      await proxy.close()
    }
  })

  it('waits as long as Retry-After says before sending again', async () => {
    const times: number[] = []
    const proxy = await startProxy(nqd.url, (path, nth) => {
      if (!path.endsWith('/state')) {
        return 'pass'
      }
      times.push(Date.now())
      return nth === 1 ? { status: 429, retryAfter: '1', body: { error: { code: 'rate_limited', message: 'slow down' } } } : 'pass'
    })
    const c = createClient({ url: proxy.url, ...quick })
    try {
      const run = await c.start('double', { n: 1 })
      await c.state(run)
      assert.equal(times.length, 2)
      // A lower bound the client sets itself, never a race.
      assert.ok((times[1] ?? 0) - (times[0] ?? 0) >= 1000, `sent again after ${(times[1] ?? 0) - (times[0] ?? 0)} ms`)
    } finally {
      c.close()
      await proxy.close()
    }
  })

  it('does not retry an answer that cannot change', async () => {
    const proxy = await startProxy(nqd.url, () => 'pass')
    const c = createClient({ url: proxy.url, ...quick })
    try {
      await assert.rejects(c.start('no-such-flow'), (err: unknown) => err instanceof NqdError && err.status === 404)
      assert.equal(proxy.seen.length, 1)
    } finally {
      c.close()
      await proxy.close()
    }
  })

  it('streams a run backfill then live, and resumes after the last event when nqd comes back', async () => {
    const c = createClient({ url: nqd.url, ...quick, retries: 50 })
    const ctl = new AbortController()
    const seen: RunEvent[] = []
    try {
      const run = await c.start('idle', { z: 3 })
      await waitFor('the queued step', async () => (await c.state(run)).steps.wait !== undefined || (await c.state(run)).eventCount >= 1)
      const following = (async () => {
        for await (const item of c.events(run, { signal: ctl.signal })) {
          if (item.type === 'event') {
            seen.push(item.event)
            if (item.event.kind === 'flow.cancelled') {
              return
            }
          }
        }
      })()
      await waitFor('the backfill', () => seen.length >= 1)
      const backfilled = seen.length
      await nqd.kill()
      await nqd.restart()
      await c.cancel(run)
      await following
      assert.ok(seen.length > backfilled)
      assert.equal(seen[0]?.kind, 'flow.started')
      assert.equal(seen.at(-1)?.kind, 'flow.cancelled')
      const ids = seen.map(e => e.id)
      assert.equal(new Set(ids).size, ids.length, `an event came twice: ${ids.join(' ')}`)
      const all = (await nqd.run(run.runId)).events.map(e => e.id)
      assert.deepEqual(ids, all, 'the stream missed an event')
    } finally {
      ctl.abort()
      c.close()
    }
  })
})

function startWorker(nqd: Nqd): Worker {
  return createWorker({
    url: nqd.url,
    queues: ['c-double', 'c-two', 'c-broken'],
    logger: memoryLogger(),
    claimWaitMs: 1000,
    handlers: {
      double: (input: { n: number }) => ({ n: input.n * 2 }),
      first: async (input: { word: string }, ctx) => {
        await ctx.flow.emit('first.done', { word: input.word })
        return 'first'
      },
      second: () => 'second',
      boom: () => { throw new Error('no luck') },
    },
  })
}
