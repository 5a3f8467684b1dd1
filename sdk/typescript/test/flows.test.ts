// Flow definitions built from step file configs, and the loading of a folder.

import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { buildFlows, loadStepFiles, subscribedInput, triggerSpec, type StepSource } from '../src/index.js'
import { pkgDir } from './nqd.js'

/** The mapping's cases every SDK shares: configs in, definitions and triggers out. */
const casesDir = join(pkgDir, '..', 'testdata', 'nuxt-configs')

describe('the shared Nuxt Queue config cases', () => {
  for (const name of ['october-2025', 'v0.5']) {
    it(`maps ${name} as its .out.json says`, () => {
      const input = JSON.parse(readFileSync(join(casesDir, `${name}.in.json`), 'utf8')) as { files: StepSource[] }
      const want = JSON.parse(readFileSync(join(casesDir, `${name}.out.json`), 'utf8')) as unknown
      const built = buildFlows(input.files)
      const flows = [...built.flows].sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
      // Through JSON, as nqd gets it: fields left undefined are absent.
      assert.deepEqual(JSON.parse(JSON.stringify({ flows, triggers: built.triggers })), want)
    })
  }

  it('makes the registrations of the triggers v0.5 files define', () => {
    const input = JSON.parse(readFileSync(join(casesDir, 'v0.5.in.json'), 'utf8')) as { files: StepSource[] }
    const warnings: string[] = []
    const specs = buildFlows(input.files).triggers.map(t => triggerSpec(t, (w) => { warnings.push(w) }))
    assert.deepEqual(specs, [
      { name: 'manual.notification-test', type: 'manual', scope: 'flow', source: 'code', config: {}, subscriptions: [] },
      {
        name: 'manual.order-test', type: 'manual', scope: 'flow', source: 'code', config: {}, subscriptions: ['order-processing-flow'],
        displayName: 'Manual Order Test', description: 'Manually trigger order processing flow for testing',
      },
      { name: 'nightly', type: 'schedule', scope: 'flow', source: 'code', config: { cron: '0 3 * * *', timezone: 'Europe/Berlin' }, subscriptions: ['test-flow'] },
      { name: 'stripe.paid', type: 'webhook', scope: 'flow', source: 'code', config: { path: '/api/webhooks/stripe', method: 'POST' }, subscriptions: ['webhook-approval-flow'] },
    ])
    assert.equal(warnings.filter(w => /manual mode/.test(w)).length, 2, warnings.join('\n'))
  })

  it('says what v0.5 configs nqd cannot take', () => {
    const input = JSON.parse(readFileSync(join(casesDir, 'v0.5.in.json'), 'utf8')) as { files: StepSource[] }
    assert.deepEqual(buildFlows(input.files).warnings, ['test/step-2: awaitBefore: a schedule await has no nqd equivalent; dropped'])
  })
})

describe('buildFlows', () => {
  it('maps the Nuxt Queue config onto an nqd definition', () => {
    const built = buildFlows([
      {
        id: 'example/first_step',
        config: {
          queue: { name: 'example_queue', defaultJobOptions: { attempts: 3, backoff: { type: 'exponential', delay: 1000 }, timeout: 60000 } },
          flow: { name: ['example-flow'], role: 'entry', step: 'first_step', emits: ['first_step.completed'] },
        },
      },
      {
        id: 'example/second_step',
        config: {
          queue: { name: 'example_queue', defaultJobOptions: { attempts: 2, backoff: 500 } },
          flow: { name: 'example-flow', role: 'step', step: 'second_step', subscribes: 'first_step.completed' },
        },
      },
      // No queue name: the queue is named after the file.
      { id: 'nested/dir/third', config: { flow: { name: 'example-flow', role: 'step', step: 'third', subscribes: ['first_step.completed'], await: { type: 'time', delay: 10 } } } },
      // Not part of a flow.
      { id: 'plain', config: { queue: { name: 'plain' } } },
    ])
    assert.deepEqual(built.warnings, [])
    assert.deepEqual(built.flows, [{
      name: 'example-flow',
      entry: 'first_step',
      steps: {
        first_step: {
          queue: 'example_queue',
          workerId: 'example/first_step',
          emits: ['first_step.completed'],
          retryPolicy: { attempts: 3, backoff: { type: 'exponential', delayMs: 1000 } },
          timeout: 60000,
        },
        second_step: {
          queue: 'example_queue',
          workerId: 'example/second_step',
          subscribes: ['first_step.completed'],
          retryPolicy: { attempts: 2, backoff: { type: 'fixed', delayMs: 500 } },
        },
        third: { queue: 'third', workerId: 'nested/dir/third', subscribes: ['first_step.completed'], await: { type: 'time', delay: 10 } },
      },
    }])
  })

  it('warns about what nqd cannot take: an entry that subscribes, a flow without an entry, a step defined twice', () => {
    const built = buildFlows([
      { id: 'inprocess', config: { flow: { name: ['resize-flow'], role: 'entry', step: 'resize', emits: ['resize.completed'], subscribes: ['thumbnail'] } } },
      { id: 'test', config: { queue: { name: 'email' }, flow: { name: ['signup'], role: 'step', step: 'sendEmail', subscribes: ['user.created'] } } },
      { id: 'again', config: { flow: { name: 'resize-flow', role: 'step', step: 'resize' } } },
    ])
    assert.deepEqual(built.flows.map(f => [f.name, f.entry, Object.keys(f.steps)]), [['resize-flow', 'resize', ['resize']], ['signup', '', ['sendEmail']]])
    assert.equal(built.flows[0]?.steps.resize?.subscribes, undefined)
    assert.equal(built.warnings.length, 3, built.warnings.join('\n'))
    assert.match(built.warnings.join('\n'), /entry step resize runs when its flow starts; its subscribes \(thumbnail\) are dropped/)
    assert.match(built.warnings.join('\n'), /flow signup has no step with role 'entry'/)
    assert.match(built.warnings.join('\n'), /already has a step resize/)
  })
})

describe('loadStepFiles', () => {
  it('loads the example folder: both generations, TypeScript and JavaScript, nested folders, the auto-imports as globals and as #imports', async () => {
    const { files, skipped } = await loadStepFiles(join(pkgDir, 'examples'))
    assert.deepEqual(skipped, [])
    assert.deepEqual(files.map(f => f.id), [
      'functions/approvals/process-approval', 'functions/approvals/request-approval',
      'functions/notifications/follow-up', 'functions/notifications/send-notification',
      'ml-training/train', 'orders/approve', 'orders/charge_payment', 'orders/check_stock', 'orders/receive_order', 'orders/ship',
    ])
    for (const f of files) {
      assert.equal(typeof f.handler, 'function', f.id)
      assert.notEqual(f.config?.flow, undefined, f.id)
    }
    const built = buildFlows(files)
    assert.deepEqual(built.warnings, [])
    const orders = built.flows.find(f => f.name === 'orders')
    assert.equal(orders?.entry, 'receive_order')
    assert.deepEqual(orders?.steps.approve?.subscribes, ['stock.checked', 'payment.charged'])
    assert.equal(orders?.steps.approve?.await?.type, 'trigger')
    assert.equal(orders?.steps.charge_payment?.queue, 'payments')
    const approval = built.flows.find(f => f.name === 'webhook-approval')
    assert.deepEqual(approval?.steps['process-approval']?.await, { type: 'trigger', triggerType: 'webhook', timeout: 86_400_000 })
    assert.deepEqual(built.flows.find(f => f.name === 'notification')?.steps['follow-up']?.await, { type: 'time', delay: 300 })
  })

  it('names the file that cannot be loaded', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nqd-steps-'))
    try {
      writeFileSync(join(dir, 'route.ts'), 'export default defineEventHandler(() => "hi")\n')
      await assert.rejects(loadStepFiles(dir), /route\.ts: defineEventHandler is not defined \(is it a step file\?\)/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('loads one file given alone, named by its base name', async () => {
    const { files } = await loadStepFiles(join(pkgDir, 'examples', 'functions', 'notifications', 'follow-up.ts'))
    assert.deepEqual(files.map(f => [f.id, f.config?.flow?.step]), [['follow-up', 'follow-up']])
  })
})

describe('subscribedInput', () => {
  const run = { flowId: 'run-1', flowName: 'example-flow' }
  it('hands a step subscribed to one event its payload, as Nuxt Queue did', () => {
    assert.deepEqual(
      subscribedInput({ 'first_step.completed': { to: 'a@b.c' }, _resume: { awaitType: 'time' } }, 'first_step.completed', run),
      { name: 'first_step.completed', to: 'a@b.c', _resume: { awaitType: 'time' }, flowId: 'run-1', flowName: 'example-flow' },
    )
  })
  it('keeps a payload that is not an object whole', () => {
    assert.deepEqual(subscribedInput({ done: 3 }, 'done', run), { name: 'done', payload: 3, flowId: 'run-1', flowName: 'example-flow' })
  })
  it('leaves an input without the event alone', () => {
    assert.deepEqual(subscribedInput({ other: 1 }, 'done', run), { other: 1 })
    assert.equal(subscribedInput(null, 'done', run), null)
  })
})
