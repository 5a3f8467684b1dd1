// The worker channel: jobs offered over one WebSocket, the fallback to HTTP
// when nqd or a proxy cannot upgrade, a channel dropped with jobs in flight,
// and a worker process killed mid-step, against a real nqd.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { createWorker, type Handler, type Transport } from '../src/index.js'
import { kinds, memoryLogger, startNqd, waitFor, type Nqd } from './nqd.js'
import { startProxy, type Verdict } from './proxy.js'

const channelPath = '/api/_workers/channel'

function serve(url: string, queues: string[], handlers: Record<string, Handler>, transport: Transport = 'channel'): { lines: string[], stop: () => Promise<void> } {
  const logger = memoryLogger()
  const w = createWorker({ url, queues, handlers, logger, transport, claimWaitMs: 1000 })
  const running = w.start()
  return {
    lines: logger.lines,
    async stop() {
      await w.stop(2000)
      await running
    },
  }
}

/** The offer frames nqd has sent on its worker channels, from its metrics. */
async function offers(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const line = text.split('\n').find(l => l.startsWith('nqd_worker_channel_frames_total{') && l.includes('direction="out"') && l.includes('type="offer"'))
  return line === undefined ? 0 : Number(line.split(' ').pop())
}

describe('the worker channel', () => {
  let nqd: Nqd
  before(async () => { nqd = await startNqd({ env: { NQ_JOB_LEASE: '3s' } }) })
  after(async () => { await nqd.close() })

  it('carries the jobs: nqd offers them and the worker claims nothing', async () => {
    await nqd.putFlow({ name: 'ch-one', entry: 'work', steps: { work: { queue: 'q-ch-one' } } })
    const proxy = await startProxy(nqd.url, () => 'pass')
    const wk = serve(proxy.url, ['q-ch-one'], {
      work: (input: { n: number }, ctx) => { ctx.logger.info('working', { n: input.n }); return input.n * 2 },
    })
    try {
      for (const n of [1, 2, 3]) {
        const run = await nqd.finished(await nqd.start('ch-one', { n }))
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(kinds(run.events), ['flow.started', 'step.started', 'log', 'step.completed', 'flow.completed'])
        assert.equal(run.events.find(e => e.kind === 'step.completed')?.data?.result, n * 2)
      }
      assert.deepEqual(proxy.seen, [`GET ${channelPath}`], 'every call went over the one channel')
    } finally {
      await wk.stop()
      await proxy.close()
    }
  })

  for (const status of [404, 426, 502]) {
    it(`falls back to HTTP when the upgrade is answered ${status}`, async () => {
      await nqd.putFlow({ name: `ch-fallback-${status}`, entry: 'work', steps: { work: { queue: `q-ch-fb-${status}` } } })
      const proxy = await startProxy(nqd.url, (path): Verdict => path === channelPath ? { status } : 'pass')
      const wk = serve(proxy.url, [`q-ch-fb-${status}`], { work: () => 'over http' })
      try {
        const run = await nqd.finished(await nqd.start(`ch-fallback-${status}`))
        assert.equal(run.state.status, 'completed')
        assert.ok(proxy.seen.includes('POST /api/_workers/claim'), proxy.seen.join('\n'))
        assert.equal(proxy.seen.filter(s => s === `GET ${channelPath}`).length, 1, 'the channel is tried once')
        assert.ok(wk.lines.some(l => l.includes('claiming over HTTP')), wk.lines.join('\n'))
      } finally {
        await wk.stop()
        await proxy.close()
      }
    })
  }

  it("takes the slot's next job in the completion's ack: one offer for five runs waiting", async () => {
    await nqd.putFlow({ name: 'ch-ack', entry: 'work', steps: { work: { queue: 'q-ch-ack' } } })
    const runs: string[] = []
    for (let n = 0; n < 5; n++) {
      runs.push(await nqd.start('ch-ack', { n }))
    }
    const before = await offers(nqd.url)
    const logger = memoryLogger()
    const w = createWorker({ url: nqd.url, queues: ['q-ch-ack'], handlers: { work: () => 'ok' }, logger, concurrency: 1 })
    const running = w.start()
    try {
      for (const id of runs) {
        assert.equal((await nqd.finished(id)).state.status, 'completed')
      }
      assert.equal(await offers(nqd.url) - before, 1, 'the first job offered, the others in the acks')
    } finally {
      await w.stop(2000)
      await running
    }
  })

  it('retries an upgrade answered 503 and opens the channel once nqd takes it', async () => {
    await nqd.putFlow({ name: 'ch-busy', entry: 'work', steps: { work: { queue: 'q-ch-busy' } } })
    const proxy = await startProxy(nqd.url, (path, nth): Verdict => path === channelPath && nth <= 2 ? { status: 503, retryAfter: '0' } : 'pass')
    const wk = serve(proxy.url, ['q-ch-busy'], { work: () => 'ok' })
    try {
      const run = await nqd.finished(await nqd.start('ch-busy'))
      assert.equal(run.state.status, 'completed')
      assert.equal(proxy.seen.filter(s => s === `GET ${channelPath}`).length, 3)
      assert.ok(!proxy.seen.includes('POST /api/_workers/claim'), proxy.seen.join('\n'))
    } finally {
      await wk.stop()
      await proxy.close()
    }
  })

  it('a channel dropped with jobs in flight: they report over HTTP until it is back, each step once, on attempt 1', { timeout: 60_000 }, async () => {
    await nqd.putFlow({
      name: 'ch-drop', entry: 'first',
      steps: { first: { queue: 'q-ch-drop', emits: ['first.done'] }, second: { queue: 'q-ch-drop', subscribes: ['first.done'] } },
    })
    // Upgrades after the first are refused until the test lets them through.
    let refuse = true
    const proxy = await startProxy(nqd.url, (path, nth): Verdict => path === channelPath && nth > 1 && refuse ? { status: 503, retryAfter: '0' } : 'pass')
    const running: Array<() => void> = []
    const attempts: string[] = []
    const wk = serve(proxy.url, ['q-ch-drop'], {
      first: async (_i, ctx) => {
        attempts.push(`${ctx.flowId}:first:${ctx.attempt}`)
        await new Promise<void>((r) => { running.push(r) })
        ctx.logger.info('after the drop')
        await ctx.state.set('k', ctx.flowId)
        await ctx.flow.emit('first.done', { ok: true })
        return 'first'
      },
      second: (_i, ctx) => { attempts.push(`${ctx.flowId}:second:${ctx.attempt}`); return 'second' },
    })
    try {
      const ids = await Promise.all([nqd.start('ch-drop'), nqd.start('ch-drop')])
      await waitFor('both steps running', () => running.length === 2)
      proxy.cutUpgrades()
      await waitFor('a refused reconnect', () => proxy.seen.filter(s => s === `GET ${channelPath}`).length >= 2)
      // Longer than the lease: heartbeats went over HTTP meanwhile.
      await new Promise(r => setTimeout(r, 3500))
      for (const release of running.splice(0)) {
        release()
      }
      await waitFor('a completion over HTTP', () => proxy.seen.some(s => /^POST .*\/complete$/.test(s)))
      refuse = false
      for (const id of ids) {
        const run = await nqd.finished(id, 30_000)
        assert.equal(run.state.status, 'completed', nqd.output())
        const steps = run.events.filter(e => e.kind.startsWith('step.')).map(e => `${e.kind}:${e.step ?? ''}:${String(e.attempt)}`).sort()
        assert.deepEqual(steps, ['step.completed:first:1', 'step.completed:second:1', 'step.started:first:1', 'step.started:second:1'])
        assert.deepEqual(run.state.state, { k: id })
        assert.equal(run.state.logs.filter(l => l.msg === 'after the drop').length, 1)
      }
      assert.deepEqual(attempts.filter(a => a.endsWith(':1')).length, 4)
      assert.equal(attempts.length, 4, attempts.join(' '))
      assert.ok(proxy.seen.some(s => /^POST .*\/heartbeat$/.test(s)), 'heartbeats went over HTTP while there was no channel')
      assert.ok(!proxy.seen.includes('POST /api/_workers/claim'), 'a worker with a channel to come back to claims nothing')
    } finally {
      for (const release of running) {
        release()
      }
      await wk.stop()
      await proxy.close()
    }
  })
})

describe('a worker process killed mid-step', () => {
  let nqd: Nqd
  before(async () => { nqd = await startNqd({ env: { NQ_JOB_LEASE: '1500ms' } }) })
  after(async () => { await nqd.close() })

  for (const transport of ['channel', 'http'] as const) {
    it(`its job is delivered again once the lease ends, and completed by another worker, over ${transport}`, { timeout: 60_000 }, async () => {
      const flow = `killed-${transport}`
      await nqd.putFlow({ name: flow, entry: 'work', steps: { work: { queue: `q-${flow}`, retryPolicy: { attempts: 2 } } } })
      const child = spawn(process.execPath, ['--input-type=module', '-e', `
        const { createWorker } = await import(${JSON.stringify(new URL('../src/index.js', import.meta.url).href)})
        const w = createWorker({ url: ${JSON.stringify(nqd.url)}, transport: ${JSON.stringify(transport)}, queues: [${JSON.stringify(`q-${flow}`)}], handlers: {
          work: async (_i, ctx) => {
            await ctx.state.set('before', ctx.attempt)
            process.stdout.write('running\\n')
            await new Promise(() => undefined)
          },
        } })
        await w.start()
      `], { stdio: ['ignore', 'pipe', 'inherit'] })
      let out = ''
      child.stdout.on('data', (b: Buffer) => { out += b.toString() })
      const attempts: number[] = []
      let wk: ReturnType<typeof serve> | undefined
      try {
        const runId = await nqd.start(flow)
        await waitFor('the step to run', () => out.includes('running'))
        const exited = new Promise(r => child.once('exit', r))
        child.kill('SIGKILL')
        await exited
        wk = serve(nqd.url, [`q-${flow}`], { work: (_i, ctx) => { attempts.push(ctx.attempt); return 'done' } }, transport)
        const run = await nqd.finished(runId, 30_000)
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(attempts, [2])
        assert.deepEqual(run.state.state, { before: 1 })
        assert.deepEqual(run.events.filter(e => e.kind === 'step.completed').map(e => e.attempt), [2])
      } finally {
        child.kill('SIGKILL')
        await wk?.stop()
      }
    })
  }
})
