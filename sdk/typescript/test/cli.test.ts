// The nqd-worker command on the example folder: it stores the flows when
// asked (admin token), serves them with a write token, and the runs complete.

import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { runCli } from './cli.js'
import { pkgDir, startNqd, waitFor, type Nqd } from './nqd.js'

describe('nqd-worker <path>...', () => {
  let nqd: Nqd
  const admin = 'c'.repeat(40)
  const writer = 'w'.repeat(40)
  before(async () => {
    nqd = await startNqd({ env: { NQ_TOKENS: `ops:admin:${admin},app:write:${writer}` }, adminToken: admin })
  })
  after(async () => { await nqd.close() })

  it('with --store-flows and an admin token, stores the example flows, runs them to the end, and stops on SIGTERM', { timeout: 60_000 }, async () => {
    const cli = runCli([join(pkgDir, 'examples'), '--url', nqd.url, '--store-flows'], admin)
    try {
      await waitFor('the CLI to serve its queues', () => cli.out().includes('serving queues'), 30_000)
      // One worker for the process, every queue with its own concurrency, on one channel.
      const queues = /serving queues (.*) from /.exec(cli.out())?.[1]?.split(', ') ?? []
      assert.ok(queues.length > 1, cli.out())
      const listed = await waitFor('the worker listed', async () => {
        const ans = await nqd.call<{ workers: { sdk: string, transport: string, queues: string[] }[] }>('GET', '/api/_workers?status=active')
        return ans.workers.length > 0 ? ans.workers : undefined
      })
      assert.deepEqual(listed.map(w => [w.sdk, w.transport, [...w.queues].sort()]), [['typescript', 'channel', [...queues].sort()]])
      assert.match(cli.out(), /stored flow ml-training: train/)
      assert.match(cli.out(), /stored flow orders: /)

      const training = await nqd.start('ml-training', { epochs: 5, targetAccuracy: 0.85 })
      const order = await nqd.start('orders', { orderId: 'o-1', items: [{ sku: 'a', qty: 2 }, { sku: 'b', qty: 1 }], total: 30 })
      const empty = await nqd.start('orders', { orderId: 'o-2', items: [], total: 0 })

      const t = await nqd.finished(training)
      assert.equal(t.state.status, 'completed', cli.out())
      // 0.6 + 0.1 * epoch reaches 0.85 at epoch 3: the step stops there.
      assert.deepEqual({ ...t.state.state, startTime: undefined }, {
        status: 'complete', epoch: 3, totalEpochs: 5, accuracy: 0.9, loss: 0.25, startTime: undefined,
      })
      assert.ok(t.state.logs.some(l => l.msg === 'Target accuracy reached'))

      const e = await nqd.finished(empty)
      assert.equal(e.state.status, 'failed')
      assert.equal(e.events.filter(ev => ev.kind === 'step.started').length, 1, 'a PermanentError is not retried')

      const wait = await waitFor('the approval trigger', async () => {
        const ans = await nqd.call<{ items: { runId: string, triggerId: string }[] }>('GET', '/api/_flows/waits?kind=trigger&flowName=orders')
        return ans.items.find(i => i.runId === order)
      })
      await nqd.call('POST', `/api/_flows/triggers/${wait.triggerId}`, { approved: true, by: 'ops' })
      const o = await nqd.finished(order)
      assert.equal(o.state.status, 'completed', cli.out())
      assert.deepEqual(o.state.state, { order: { id: 'o-1', total: 30, status: 'shipped' } })
      assert.deepEqual(Object.keys(o.state.steps).sort(), ['approve', 'charge_payment', 'check_stock', 'receive_order', 'ship'])
    } finally {
      cli.proc.kill('SIGTERM')
    }
    assert.equal(await cli.exited, 0, cli.out())
  })

  it('runs v0.5 step files beside October 2025 ones: a webhook await continued by its call, an awaitAfter delay', { timeout: 60_000 }, async () => {
    const cli = runCli([join(pkgDir, 'examples'), '--url', nqd.url, '--store-flows'], admin)
    try {
      await waitFor('the CLI to serve its queues', () => cli.out().includes('serving queues'), 30_000)
      assert.match(cli.out(), /stored flow webhook-approval: process-approval, request-approval/)
      assert.match(cli.out(), /stored flow notification: /)

      const approval = await nqd.start('webhook-approval', { requestedBy: 'ada', amount: 42 })
      const note = await nqd.start('notification', { recipient: 'grace' })
      const wait = await waitFor('the webhook await', async () => {
        const ans = await nqd.call<{ items: { runId: string, triggerId: string, step: string }[] }>('GET', '/api/_flows/waits?kind=trigger&flowName=webhook-approval')
        return ans.items.find(i => i.runId === approval)
      })
      await nqd.call('POST', `/api/_flows/triggers/${wait.triggerId}`, { approved: true, comment: 'fine' })
      const a = await nqd.finished(approval)
      assert.equal(a.state.status, 'completed', cli.out())
      // The webhook's body reached the step as ctx.trigger, its input keyed by event as v0.5 had it.
      assert.deepEqual(a.state.state, { approval: { by: 'ada', amount: 42, comment: 'fine' } })

      const n = await nqd.finished(note)
      assert.equal(n.state.status, 'completed', cli.out())
      assert.deepEqual(n.state.state, { followedUp: { recipient: 'grace', after: 'time' } })
    } finally {
      cli.proc.kill('SIGTERM')
    }
    assert.equal(await cli.exited, 0, cli.out())
  })

  it('a step file whose log metadata refers to itself fails its run with a message naming the log, and the command stops', { timeout: 60_000 }, async () => {
    const cli = runCli([join(pkgDir, 'test', 'fixtures', 'unencodable'), '--url', nqd.url, '--store-flows', '--grace', '2000'], admin)
    try {
      await waitFor('the CLI to serve its queues', () => cli.out().includes('serving queues'), 30_000)
      const run = await nqd.finished(await nqd.start('unencodable'))
      assert.equal(run.state.status, 'failed', cli.out())
      const failed = run.events.find(e => e.kind === 'step.failed')
      assert.match(String(failed?.data?.error), /ctx\.logger\.log\("info", "x"\) meta: the value cannot be encoded as JSON/)
    } finally {
      cli.proc.kill('SIGTERM')
    }
    assert.equal(await cli.exited, 0, cli.out())
  })

  it('with a write token and no --store-flows, serves the stored flows without storing them', { timeout: 60_000 }, async () => {
    const cli = runCli([join(pkgDir, 'examples', 'ml-training'), '-u', nqd.url, '-q', 'ml', '--grace', '2000'], writer)
    try {
      await waitFor('the CLI to serve its queues', () => cli.out().includes('serving queues'), 30_000)
      assert.doesNotMatch(cli.out(), /stored flow|not stored|403/)
      const run = await nqd.start('ml-training', { epochs: 2, targetAccuracy: 0.99 })
      const r = await nqd.finished(run)
      assert.equal(r.state.status, 'completed', cli.out())
    } finally {
      cli.proc.kill('SIGTERM')
    }
    assert.equal(await cli.exited, 0, cli.out())
  })

  it('with --store-flows and a write token, stops with an error that names the admin scope', { timeout: 30_000 }, async () => {
    const cli = runCli([join(pkgDir, 'examples'), '--url', nqd.url, '--store-flows'], writer)
    assert.equal(await cli.exited, 1, cli.out())
    assert.match(cli.out(), /403.*admin/s)
  })
})
