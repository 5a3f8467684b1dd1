// The nqd-worker command on the example folder: it stores the flows and
// their runs complete.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { pkgDir, startNqd, waitFor, type Nqd } from './nqd.js'

describe('nqd-worker <dir>', () => {
  let nqd: Nqd
  const admin = 'c'.repeat(40)
  before(async () => {
    nqd = await startNqd({ env: { NQ_TOKENS: `ops:admin:${admin}` }, adminToken: admin })
  })
  after(async () => { await nqd.close() })

  it('runs the example step files until their runs complete, and stops on SIGTERM', { timeout: 60_000 }, async () => {
    const cli = spawn(process.execPath, [join(pkgDir, 'dist', 'cli.js'), join(pkgDir, 'examples'), '--url', nqd.url], {
      env: { ...process.env, NQD_TOKEN: admin },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    cli.stdout.on('data', (b: Buffer) => { out += b.toString() })
    cli.stderr.on('data', (b: Buffer) => { out += b.toString() })
    const exited = new Promise<number | null>(r => cli.once('exit', code => { r(code) }))
    try {
      await waitFor('the CLI to serve its queues', () => out.includes('serving queues'), 30_000)
      assert.match(out, /stored flow ml-training: train/)
      assert.match(out, /stored flow orders: /)

      const training = await nqd.start('ml-training', { epochs: 5, targetAccuracy: 0.85 })
      const order = await nqd.start('orders', { orderId: 'o-1', items: [{ sku: 'a', qty: 2 }, { sku: 'b', qty: 1 }], total: 30 })
      const empty = await nqd.start('orders', { orderId: 'o-2', items: [], total: 0 })

      const t = await nqd.finished(training)
      assert.equal(t.state.status, 'completed', out)
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
      assert.equal(o.state.status, 'completed', out)
      assert.deepEqual(o.state.state, { order: { id: 'o-1', total: 30, status: 'shipped' } })
      assert.deepEqual(Object.keys(o.state.steps).sort(), ['approve', 'charge_payment', 'check_stock', 'receive_order', 'ship'])
    } finally {
      cli.kill('SIGTERM')
    }
    assert.equal(await exited, 0, out)
  })
})
