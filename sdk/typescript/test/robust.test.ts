// No stuck jobs: values that cannot be encoded fail their step at once, an
// outcome outlives a run of 5xx answers longer than the lease, a short lease
// with default settings never runs a step twice, and stop() keeps to its
// grace period whatever nqd answers.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createWorker, EncodingError, type Handler, type Transport, type Worker } from '../src/index.js'
import { kinds, memoryLogger, startNqd, type Nqd } from './nqd.js'
import { startProxy } from './proxy.js'

/**
 * Starts a worker with the SDK's defaults; stop() also checks how start()
 * ended. The tests whose proxy refuses HTTP reports speak HTTP.
 */
function serve(url: string, queue: string, handlers: Record<string, Handler>, transport: Transport = 'channel'): { w: Worker, lines: string[], stop: (graceMs?: number) => Promise<void> } {
  const logger = memoryLogger()
  const w = createWorker({ url, queues: [queue], handlers, logger, transport })
  const running = w.start()
  return {
    w,
    lines: logger.lines,
    async stop(graceMs = 2000) {
      await w.stop(graceMs)
      await running
    },
  }
}

describe('a value that cannot be encoded as JSON', () => {
  let nqd: Nqd
  before(async () => { nqd = await startNqd() })
  after(async () => { await nqd.close() })

  const selfRef = (): Record<string, unknown> => {
    const o: Record<string, unknown> = { a: 1 }
    o.self = o
    return o
  }
  const cases: [string, string, Handler, RegExp][] = [
    ['a state value', 'state', async (_i, ctx) => { await ctx.state.set('k', selfRef()) }, /ctx\.state\.set\("k"\): the value cannot be encoded as JSON/],
    ['a log\'s metadata', 'log', (_i, ctx) => { ctx.logger.log('info', 'x', selfRef()) }, /ctx\.logger\.log\("info", "x"\) meta: the value cannot be encoded as JSON/],
    ['an emit\'s payload', 'emit', async (_i, ctx) => { await ctx.flow.emit('worked', { n: 10n }) }, /ctx\.flow\.emit\("worked"\) payload: the value cannot be encoded as JSON/],
    ['a result', 'result', () => ({ n: 10n }), /^result: the value cannot be encoded as JSON/],
    ['a state value whose throw the step catches', 'caught', async (_i, ctx) => {
      try {
        await ctx.state.set('k', selfRef())
      } catch {
        // the step goes on, but fails all the same
      }
      return 'ok'
    }, /ctx\.state\.set\("k"\): the value cannot be encoded as JSON/],
  ]
  for (const [name, flow, handler, message] of cases) {
    it(`${name} fails the step at once with a message naming it, retried as its policy says`, async () => {
      await nqd.putFlow({
        name: `bad-${flow}`,
        entry: 'work',
        steps: {
          work: { queue: `q-bad-${flow}`, emits: ['worked'], retryPolicy: { attempts: 2, backoff: { type: 'fixed', delayMs: 50 } } },
          next: { queue: `q-bad-${flow}`, subscribes: ['worked'] },
        },
      })
      let calls = 0
      const wk = serve(nqd.url, `q-bad-${flow}`, { work: (i, ctx) => { calls++; return handler(i, ctx) }, next: () => 'n' })
      const t0 = Date.now()
      try {
        const run = await nqd.finished(await nqd.start(`bad-${flow}`))
        assert.equal(run.state.status, 'failed', kinds(run.events).join(' '))
        const failures = run.events.filter(e => e.kind === 'step.failed')
        assert.deepEqual(failures.map(f => [f.attempt, f.data?.willRetry]), [[1, true], [2, false]])
        for (const f of failures) {
          assert.match(String(f.data?.error), message)
        }
        assert.equal(calls, 2)
        assert.ok(!kinds(run.events).includes('emit'), 'nothing of the value was sent')
      } finally {
        await wk.stop()
      }
      assert.ok(Date.now() - t0 < 15_000, 'the step failed at once, not after its lease')
    })
  }

  it('is an EncodingError thrown where the value is given', async () => {
    await nqd.putFlow({ name: 'bad-throw', entry: 'work', steps: { work: { queue: 'q-bad-throw' } } })
    let thrown: unknown
    const wk = serve(nqd.url, 'q-bad-throw', {
      work: (_i, ctx) => {
        try {
          void ctx.state.set('k', 1n)
        } catch (err) {
          thrown = err
        }
      },
    })
    try {
      await nqd.finished(await nqd.start('bad-throw'))
    } finally {
      await wk.stop()
    }
    assert.ok(thrown instanceof EncodingError)
    assert.equal(thrown.field, 'ctx.state.set("k")')
  })
})

describe('a short lease', () => {
  let nqd: Nqd
  before(async () => { nqd = await startNqd({ env: { NQ_JOB_LEASE: '2s' } }) })
  after(async () => { await nqd.close() })

  it('an outcome sent through 5xx answers for longer than the lease is not lost: heartbeats go on', { timeout: 60_000 }, async () => {
    await nqd.putFlow({ name: 'stormy', entry: 'work', steps: { work: { queue: 'q-stormy' } } })
    let firstComplete: number | undefined
    let refused = 0
    let beatsMeanwhile = 0
    // Every completion is answered 503 for 5 s (2.5 leases) from the first.
    const proxy = await startProxy(nqd.url, (path) => {
      if (path.endsWith('/complete')) {
        firstComplete ??= Date.now()
        if (Date.now() - firstComplete < 5_000) {
          refused++
          return { status: 503 }
        }
      }
      if (path.endsWith('/heartbeat') && firstComplete !== undefined) {
        beatsMeanwhile++
      }
      return 'pass'
    })
    let calls = 0
    const wk = serve(proxy.url, 'q-stormy', { work: () => { calls++; return 'done' } }, 'http')
    try {
      const run = await nqd.finished(await nqd.start('stormy'), 30_000)
      assert.equal(run.state.status, 'completed', `${kinds(run.events).join(' ')}\n${wk.lines.join('\n')}`)
      assert.deepEqual(run.events.filter(e => e.kind.startsWith('step.')).map(e => [e.kind, e.attempt]), [['step.started', 1], ['step.completed', 1]])
      assert.equal(calls, 1)
      assert.ok(refused >= 2, `completions refused: ${String(refused)}`)
      assert.ok(beatsMeanwhile >= 2, `heartbeats while the outcome was refused: ${String(beatsMeanwhile)}`)
    } finally {
      await wk.stop()
      await proxy.close()
    }
  })

  it('stop() returns within its grace period while nqd answers every report 5xx', { timeout: 30_000 }, async () => {
    await nqd.putFlow({ name: 'refusing', entry: 'work', steps: { work: { queue: 'q-refusing' } } })
    let started!: () => void
    const isStarted = new Promise<void>((r) => { started = r })
    const proxy = await startProxy(nqd.url, path => /\/(events|complete|fail)$/.test(path) ? { status: 503 } : 'pass')
    const wk = serve(proxy.url, 'q-refusing', { work: async () => { started(); await new Promise(r => setTimeout(r, 1500)); return 'late' } }, 'http')
    try {
      await nqd.start('refusing')
      await isStarted
      const t0 = Date.now()
      await wk.stop(1000)
      const took = Date.now() - t0
      assert.ok(took < 2500, `stop(1000) took ${String(took)} ms`)
    } finally {
      await proxy.close()
    }
  })
})

describe('a lease of 3 s with default settings and a second worker waiting on the queue', () => {
  let nqd: Nqd
  before(async () => { nqd = await startNqd({ env: { NQ_JOB_LEASE: '3s' } }) })
  after(async () => { await nqd.close() })

  it('runs an 8 s step once, kept by heartbeats a third of the lease apart', { timeout: 60_000 }, async () => {
    await nqd.putFlow({ name: 'long', entry: 'work', steps: { work: { queue: 'q-long', retryPolicy: { attempts: 3, backoff: { type: 'fixed', delayMs: 0 } } } } })
    const ran: string[] = []
    const handler: Handler = async (_i, ctx) => {
      ran.push(`${ctx.flowId}#${String(ctx.attempt)}`)
      await new Promise(r => setTimeout(r, 8_000))
      return 'done'
    }
    const first = serve(nqd.url, 'q-long', { work: handler })
    const second = serve(nqd.url, 'q-long', { work: handler })
    try {
      const run = await nqd.finished(await nqd.start('long'), 40_000)
      assert.equal(run.state.status, 'completed', kinds(run.events).join(' '))
      assert.equal(ran.length, 1, ran.join(' '))
      assert.deepEqual(run.events.filter(e => e.kind.startsWith('step.')).map(e => [e.kind, e.attempt]), [['step.started', 1], ['step.completed', 1]])
    } finally {
      await Promise.all([first.stop(), second.stop()])
    }
  })
})
