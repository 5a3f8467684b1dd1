// What v0.5 step files find on ctx besides October 2025's: the runs of a
// flow, cancelling one, and metadata that is not an object.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createWorker, type Handler } from '../src/index.js'
import { memoryLogger, startNqd, waitFor, type Nqd } from './nqd.js'

describe('the v0.5 context', () => {
  let nqd: Nqd
  before(async () => { nqd = await startNqd() })
  after(async () => { await nqd.close() })

  it('lists a flow\'s running runs, leaving this one out, and cancels one', { timeout: 60_000 }, async () => {
    await nqd.putFlow({ name: 'sleeper', entry: 'sleep', steps: { sleep: { queue: 'q-sleeper' } } })
    await nqd.putFlow({ name: 'watcher', entry: 'watch', steps: { watch: { queue: 'q-watcher' } } })
    const handlers: Record<string, Handler> = {
      // Runs until its run is cancelled.
      sleep: (_i, ctx) => new Promise((resolve) => { ctx.signal.addEventListener('abort', () => { resolve('woken') }) }),
      watch: async (input: { target: string }, ctx) => {
        const running = await ctx.flow.getRunningFlows('sleeper')
        const seen = {
          running: running.map(r => [r.id, r.flowName, r.status]),
          targetRunning: await ctx.flow.isRunning('sleeper', input.target),
          ownFlowRunning: await ctx.flow.isRunning(),
          ownRunListed: (await ctx.flow.getRunningFlows(undefined, { excludeRunIds: [] })).map(r => r.id),
        }
        ctx.logger.log('info', 'seen', seen.targetRunning)
        const cancelled = await ctx.flow.cancelFlow('sleeper', input.target)
        return { ...seen, cancelled: cancelled.success }
      },
    }
    const logger = memoryLogger()
    const w = createWorker({ url: nqd.url, queues: ['q-sleeper', 'q-watcher'], handlers, logger })
    const running = w.start()
    try {
      const target = await nqd.start('sleeper')
      await waitFor('the sleeper to run', async () => (await nqd.run(target)).state.status === 'running' && w.active === 1)
      const watcher = await nqd.start('watcher', { target })
      const wr = await nqd.finished(watcher)
      assert.equal(wr.state.status, 'completed', logger.lines.join('\n'))
      assert.deepEqual(wr.events.find(e => e.kind === 'step.completed')?.data?.result, {
        running: [[target, 'sleeper', 'running']],
        targetRunning: true,
        ownFlowRunning: false,
        ownRunListed: [watcher],
        cancelled: true,
      })
      const log = wr.events.find(e => e.kind === 'log')
      assert.equal(log?.data?.value, true, 'metadata that is not an object is kept as value')
      assert.equal((await nqd.finished(target)).state.status, 'cancelled')
    } finally {
      await w.stop(2000)
      await running
    }
  })

  it('hands a step the data of the event its await waited for as ctx.trigger, and a trigger\'s body likewise', { timeout: 60_000 }, async () => {
    await nqd.putFlow({
      name: 'paid',
      entry: 'order',
      steps: {
        order: { queue: 'q-paid', emits: ['ordered'] },
        ship: { queue: 'q-paid', subscribes: ['ordered'], await: { type: 'event', eventKind: 'payment.completed', timeout: 30_000 } },
      },
    })
    await nqd.putFlow({ name: 'approved', entry: 'approve', steps: { approve: { queue: 'q-paid', await: { type: 'trigger', triggerType: 'webhook' } } } })
    const w = createWorker({
      url: nqd.url,
      queues: ['q-paid'],
      logger: memoryLogger(),
      handlers: {
        order: async (_i, ctx) => { await ctx.flow.emit('ordered', { id: 7 }) },
        ship: (_i, ctx) => ({ trigger: ctx.trigger as unknown }),
        approve: (_i, ctx) => ({ trigger: ctx.trigger as unknown }),
      },
    })
    const running = w.start()
    try {
      const paid = await nqd.start('paid')
      await waitFor('the event await', async () => {
        const ans = await nqd.call<{ items: { runId: string }[] }>('GET', '/api/_flows/waits?kind=event&flowName=paid')
        return ans.items.some(i => i.runId === paid)
      })
      await nqd.call('POST', '/api/_events/payment/p-1', { kind: 'payment.completed', data: { amount: 100 } })
      const p = await nqd.finished(paid)
      assert.equal(p.state.status, 'completed')
      assert.deepEqual(p.events.find(e => e.kind === 'step.completed' && e.step === 'ship')?.data?.result, { trigger: { amount: 100 } })

      const approved = await nqd.start('approved')
      const wait = await waitFor('the trigger await', async () => {
        const ans = await nqd.call<{ items: { runId: string, triggerId: string }[] }>('GET', '/api/_flows/waits?kind=trigger&flowName=approved')
        return ans.items.find(i => i.runId === approved)
      })
      await nqd.call('POST', `/api/_flows/triggers/${wait.triggerId}`, { approved: true })
      const a = await nqd.finished(approved)
      assert.deepEqual(a.events.find(e => e.kind === 'step.completed')?.data?.result, { trigger: { approved: true } })
    } finally {
      await w.stop(2000)
      await running
    }
  })
})
