// A completion claims the slot's next job (docs/worker-protocol.md,
// Complete): against a real nqd built in the same run, with the test proxy
// in front to count, hold or refuse the worker's calls.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createWorker, type Handler, type Worker } from '../src/index.js'
import { memoryLogger, startNqd, waitFor, type Nqd } from './nqd.js'
import { startProxy, type Verdict } from './proxy.js'

/** Starts a worker through url, over HTTP: these are HTTP's claims; stop() also checks how start() ended. */
function serve(url: string, queue: string, handlers: Record<string, Handler>, concurrency: number): { w: Worker, lines: string[], stop: (graceMs?: number) => Promise<void> } {
  const logger = memoryLogger()
  const w = createWorker({ url, queues: [queue], handlers, logger, claimWaitMs: 1000, concurrency, transport: 'http' })
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

const completePath = /^\/api\/_workers\/jobs\/[^/]+\/[^/]+\/complete$/
const isClaimCall = (seen: string): boolean => seen === 'POST /api/_workers/claim'
const claimOf = (body: string): unknown => (JSON.parse(body) as { claim?: unknown }).claim

/** Checks that each run completed its one step once, on its first attempt, and failed nothing. */
async function allCompletedOnce(nqd: Nqd, ids: string[]): Promise<void> {
  for (const id of ids) {
    const run = await nqd.finished(id)
    assert.equal(run.state.status, 'completed', id)
    assert.deepEqual(run.events.filter(e => e.kind.startsWith('step.')).map(e => [e.kind, e.attempt]), [['step.started', 1], ['step.completed', 1]], id)
  }
}

describe('a completion claims the slot\'s next job', () => {
  let nqd: Nqd
  before(async () => { nqd = await startNqd() })
  after(async () => { await nqd.close() })

  it('a closed loop of runs: after the first job the worker makes no claim call of its own, and every run completes', async () => {
    await nqd.putFlow({ name: 'loop', entry: 'work', steps: { work: { queue: 'q-loop' } } })
    const runs = 10
    let started = 0
    const ids: string[] = []
    const claims: unknown[] = []
    const startOne = async (): Promise<void> => {
      const n = started++
      ids.push(await nqd.start('loop', { n }))
    }
    // Each run starts as the last one's completion reaches nqd, before nqd
    // reads it: the completion's claim finds its job ready.
    const proxy = await startProxy(nqd.url, async (path, _nth, body): Promise<Verdict> => {
      if (completePath.test(path)) {
        claims.push(claimOf(body))
        if (started < runs) {
          await startOne()
        }
      }
      return 'pass'
    })
    const inputs: number[] = []
    const wk = serve(proxy.url, 'q-loop', { work: (input: { n: number }) => { inputs.push(input.n); return input.n } }, 1)
    try {
      await startOne()
      await waitFor('every run started', () => ids.length === runs)
      await allCompletedOnce(nqd, ids)
    } finally {
      await wk.stop()
      await proxy.close()
    }
    assert.deepEqual(inputs, Array.from({ length: runs }, (_, i) => i))
    assert.equal(claims.length, runs, proxy.seen.join('\n'))
    for (const c of claims) {
      assert.deepEqual(c, { queues: ['q-loop'], max: 1, waitMs: 50 })
    }
    const first = proxy.seen.findIndex(s => completePath.test(s.slice('POST '.length)))
    const last = proxy.seen.findLastIndex(s => completePath.test(s.slice('POST '.length)))
    assert.ok(first >= 0 && last > first)
    assert.deepEqual(proxy.seen.slice(first, last + 1).filter(isClaimCall), [], 'claim calls between the first completion and the last')
    assert.ok(proxy.seen.slice(0, first).some(isClaimCall), 'the first job came with a claim call')
  })

  it('never runs more handlers than concurrency, nor leaks a slot, while claims and completions both bring jobs', { timeout: 60_000 }, async () => {
    await nqd.putFlow({ name: 'slots', entry: 'work', steps: { work: { queue: 'q-slots' } } })
    const concurrency = 3
    const runs = 30
    let started = 0
    const ids: string[] = []
    const startOne = async (): Promise<void> => {
      started++
      ids.push(await nqd.start('slots'))
    }
    // Half the runs wait from the start; the rest start as completions
    // reach nqd, so that the worker's own claims, waiting for free slots,
    // and the completions' claims compete for them.
    const proxy = await startProxy(nqd.url, async (path): Promise<Verdict> => {
      if (completePath.test(path) && started < runs) {
        await startOne()
      }
      return 'pass'
    })
    let running = 0
    const over: string[] = []
    let barrier: { arrived: number, open: () => void, opened: Promise<void> } | undefined
    const wk = serve(proxy.url, 'q-slots', {
      work: async () => {
        running++
        const active = wk.w.active
        const held = wk.w.held
        if (running > concurrency || active > concurrency || held > 2 * concurrency) {
          over.push(`running ${running}, active ${active}, held ${held}`)
        }
        if (barrier !== undefined) {
          // Every slot must be free to take one of these runs at once.
          if (++barrier.arrived === concurrency) {
            barrier.open()
          }
          await barrier.opened
        } else {
          // Some work, of a few lengths, so that jobs end in varied orders.
          await new Promise(r => setTimeout(r, (running % 3 + 1) * 5))
        }
        running--
      },
    }, concurrency)
    try {
      for (let i = 0; i < runs / 2; i++) {
        await startOne()
      }
      await waitFor('every run started', () => ids.length === runs)
      await allCompletedOnce(nqd, ids)
      assert.deepEqual(over, [])
      // No slot leaked: as many runs as slots run at once, each waiting
      // for the others (which also shows every slot in use).
      await waitFor('the worker to hold nothing', () => wk.w.held === 0 && wk.w.active === 0)
      let open!: () => void
      barrier = { arrived: 0, open: () => { open() }, opened: new Promise<void>((r) => { open = r }) }
      const more = await Promise.all(Array.from({ length: concurrency }, () => nqd.start('slots')))
      await allCompletedOnce(nqd, more)
      assert.deepEqual(over, [])
    } finally {
      await wk.stop()
      await proxy.close()
    }
  })

  it('a job a completion brings while the worker stops is run within the grace period', async () => {
    await nqd.putFlow({ name: 'stopping', entry: 'work', steps: { work: { queue: 'q-stopping' } } })
    let release!: () => void
    const released = new Promise<void>((r) => { release = r })
    const completions: unknown[] = []
    // The first completion is held until the worker is stopping.
    const proxy = await startProxy(nqd.url, async (path, _nth, body): Promise<Verdict> => {
      if (completePath.test(path)) {
        completions.push(claimOf(body))
        if (completions.length === 1) {
          await released
        }
      }
      return 'pass'
    })
    const ran: string[] = []
    const wk = serve(proxy.url, 'q-stopping', { work: (_i, ctx) => { ran.push(ctx.flowId) } }, 1)
    const ids = [await nqd.start('stopping'), await nqd.start('stopping')]
    let stopped = false
    try {
      await waitFor('the first completion', () => completions.length === 1)
      const stopping = wk.stop(20_000).then(() => { stopped = true })
      // stop() has begun: the completion's answer brings the second job.
      release()
      await stopping
      assert.deepEqual([...ran].sort(), [...ids].sort())
      await allCompletedOnce(nqd, ids)
      // The first completion asked for the next job; the one after stop() did not.
      assert.deepEqual(completions, [{ queues: ['q-stopping'], max: 1, waitMs: 50 }, undefined])
    } finally {
      if (!stopped) {
        await wk.stop()
      }
      await proxy.close()
    }
  })
  it('a job a completion brings once the grace period is over is not left to its lease: stop() waits for its outcome', async () => {
    await nqd.putFlow({ name: 'late', entry: 'work', steps: { work: { queue: 'q-late', retryPolicy: { attempts: 2, backoff: { type: 'fixed', delayMs: 50 } } } } })
    let release!: () => void
    const released = new Promise<void>((r) => { release = r })
    let completions = 0
    // The first completion is held until the worker is past its grace period.
    const proxy = await startProxy(nqd.url, async (path): Promise<Verdict> => {
      if (completePath.test(path) && ++completions === 1) {
        await released
      }
      return 'pass'
    })
    const wk = serve(proxy.url, 'q-late', { work: () => 'done' }, 1)
    const ids = [await nqd.start('late'), await nqd.start('late')]
    let again: ReturnType<typeof serve> | undefined
    try {
      await waitFor('the first completion', () => completions === 1)
      // The steps' part of the grace period ends (the step is done, its
      // completion held); the completion's answer comes in the part kept
      // for reports.
      const stopping = wk.stop(6000)
      await waitFor('the grace period over', () => wk.lines.some(l => l.startsWith('info grace period over')))
      release()
      await stopping
      // Each job's outcome was stored before stop() resolved: none is left
      // to its lease.
      for (const id of ids) {
        const run = await nqd.run(id)
        const outcome = run.events.find(e => e.kind === 'step.completed' || e.kind === 'step.failed')
        assert.ok(outcome !== undefined, `run ${id}: ${run.events.map(e => e.kind).join(' ')}\n${wk.lines.join('\n')}\n${proxy.seen.join('\n')}`)
        if (outcome.kind === 'step.failed') {
          assert.equal(outcome.data?.willRetry, true)
        }
      }
      again = serve(nqd.url, 'q-late', { work: () => 'done' }, 1)
      for (const id of ids) {
        assert.equal((await nqd.finished(id)).state.status, 'completed')
      }
    } finally {
      await again?.stop()
      await proxy.close()
    }
  })
})
