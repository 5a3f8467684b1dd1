// nqd-worker --store-flows registers the triggers v0.5 entry steps define
// in code in nqd's trigger registry, and a fire starts their flows.

import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { runCli } from './cli.js'
import { pkgDir, startNqd, waitFor, type Nqd } from './nqd.js'

describe('triggers defined in step files', () => {
  let nqd: Nqd
  let registry = false
  before(async () => {
    nqd = await startNqd({ env: { NQ_ALLOW_OPEN_WEBHOOKS: 'true' } })
    registry = (await fetch(nqd.url + '/api/_triggers')).status !== 404
  })
  after(async () => { await nqd.close() })

  it('are registered with their flows subscribed, kept on a second start, and a fire starts the flow', { timeout: 90_000 }, async (t) => {
    if (!registry) {
      t.skip('this nqd has no trigger registry routes')
      return
    }
    const dir = join(pkgDir, 'examples', 'functions', 'approvals')
    for (const round of [1, 2]) {
      const cli = runCli([dir, '--url', nqd.url, '--store-flows'], undefined)
      try {
        await waitFor('the CLI to serve its queues', () => cli.out().includes('serving queues'), 30_000)
        assert.match(cli.out(), round === 1
          ? /registered trigger manual\.webhook-approval \(manual\) for webhook-approval/
          : /trigger manual\.webhook-approval: subscribed webhook-approval/)
        const got = await nqd.call<{ type: string, scope: string, displayName: string, subscribedFlows: string[] }>('GET', '/api/_triggers/manual.webhook-approval')
        assert.deepEqual([got.type, got.scope, got.displayName, got.subscribedFlows], ['manual', 'flow', 'Request an approval', ['webhook-approval']])
        if (round === 2) {
          const fired = await nqd.call<{ runs: Record<string, string> }>('POST', '/api/_triggers/manual.webhook-approval/fire', { requestedBy: 'bob', amount: 5 })
          const runId = fired.runs['webhook-approval']
          assert.ok(runId !== undefined, JSON.stringify(fired))
          const wait = await waitFor('the webhook await', async () => {
            const ans = await nqd.call<{ items: { runId: string, triggerId: string }[] }>('GET', '/api/_flows/waits?kind=trigger&flowName=webhook-approval')
            return ans.items.find(i => i.runId === runId)
          })
          await nqd.call('POST', `/api/_flows/triggers/${wait.triggerId}`, { approved: true, comment: 'ok' })
          const run = await nqd.finished(runId)
          assert.equal(run.state.status, 'completed', cli.out())
          assert.deepEqual(run.state.state, { approval: { by: 'bob', amount: 5, comment: 'ok' } })
        }
      } finally {
        cli.proc.kill('SIGTERM')
      }
      assert.equal(await cli.exited, 0, cli.out())
    }
  })

  it('a webhook trigger defined in a step file starts its flow when its webhook is called', { timeout: 60_000 }, async (t) => {
    if (!registry) {
      t.skip('this nqd has no trigger registry routes')
      return
    }
    const cli = runCli([join(pkgDir, 'test', 'fixtures', 'webhook-trigger'), '--url', nqd.url, '--store-flows'], undefined)
    try {
      await waitFor('the CLI to serve its queues', () => cli.out().includes('serving queues'), 30_000)
      assert.match(cli.out(), /registered trigger shop\.paid \(webhook\) for hooked/)
      const res = await fetch(nqd.url + '/api/_webhook/trigger/shop.paid', {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ order: 9 }),
      })
      const fired = await res.json() as { runs?: Record<string, string> }
      assert.equal(res.status, 200, JSON.stringify(fired))
      const runId = fired.runs?.hooked
      assert.ok(runId !== undefined, JSON.stringify(fired))
      const run = await nqd.finished(runId)
      assert.equal(run.state.status, 'completed', cli.out())
      assert.deepEqual(run.state.state, { paid: { order: 9 } })
    } finally {
      cli.proc.kill('SIGTERM')
    }
    assert.equal(await cli.exited, 0, cli.out())
  })
})
