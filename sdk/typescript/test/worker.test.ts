// The scenario list every nqd SDK runs, against a real nqd built in the same
// run (scripts/build-nqd.mjs).

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import http from 'node:http'
import { after, before, describe, it } from 'node:test'
import { AuthError, createWorker, NqdError, PermanentError, type Handler, type StepContext, type Transport, type Worker } from '../src/index.js'
import { kinds, memoryLogger, startNqd, startRedis, waitFor, type Nqd } from './nqd.js'
import { startProxy } from './proxy.js'

/** Starts a worker, returning it and a stop that also checks how start() ended. */
function serve(transport: Transport, nqd: Nqd, queues: string[], handlers: Record<string, Handler>, extra: { concurrency?: number, queueConcurrency?: Record<string, number>, token?: string, heartbeatMs?: number } = {}): { w: Worker, lines: string[], stop: () => Promise<void> } {
  const logger = memoryLogger()
  const w = createWorker({ url: nqd.url, queues, handlers, logger, claimWaitMs: 1000, transport, ...extra })
  const running = w.start()
  return {
    w,
    lines: logger.lines,
    async stop() {
      await w.stop(2000)
      await running
    },
  }
}

const fixed = (attempts: number, delayMs = 50): Record<string, unknown> => ({ attempts, backoff: { type: 'fixed', delayMs } })

// The scenarios run over both transports; those with a proxy that loses or
// refuses HTTP answers run over HTTP, the transport the proxy speaks.
for (const transport of ['channel', 'http'] as const) {
  scenarios(transport)
}

function scenarios(transport: Transport): void {
  describe(`scenarios, over ${transport}`, () => {
    let nqd: Nqd
    before(async () => { nqd = await startNqd() })
    after(async () => { await nqd.close() })

    it('claims a job and completes it with the handler result', async () => {
      await nqd.putFlow({ name: 'one', entry: 'double', steps: { double: { queue: 'q-one' } } })
      const seen: Partial<StepContext>[] = []
      const wk = serve(transport, nqd, ['q-one'], {
        double: (input: { n: number }, ctx) => {
          seen.push({ jobId: ctx.jobId, queue: ctx.queue, flowId: ctx.flowId, flowName: ctx.flowName, stepName: ctx.stepName, attempt: ctx.attempt })
          return { n: input.n * 2 }
        },
      })
      try {
        const runId = await nqd.start('one', { n: 21 })
        const run = await nqd.finished(runId)
        assert.equal(run.state.status, 'completed')
        const done = run.events.find(e => e.kind === 'step.completed')
        assert.deepEqual(done?.data?.result, { n: 42 })
        assert.deepEqual(kinds(run.events), ['flow.started', 'step.started', 'step.completed', 'flow.completed'])
        assert.deepEqual(seen, [{ jobId: `${runId}:double`, queue: 'q-one', flowId: runId, flowName: 'one', stepName: 'double', attempt: 1 }])
      } finally {
        await wk.stop()
      }
    })

    it('holds at most each queue\'s concurrency of its jobs (queueConcurrency), within a larger concurrency', { timeout: 60_000 }, async () => {
      await nqd.putFlow({ name: 'capped-a', entry: 'sa', steps: { sa: { queue: 'q-cap-a' } } })
      await nqd.putFlow({ name: 'capped-b', entry: 'sb', steps: { sb: { queue: 'q-cap-b' } } })
      const caps: Record<string, number> = { 'q-cap-a': 1, 'q-cap-b': 2 }
      const now: Record<string, number> = { 'q-cap-a': 0, 'q-cap-b': 0 }
      const most: Record<string, number> = { 'q-cap-a': 0, 'q-cap-b': 0 }
      // Every step waits until both queues ran as many jobs as they may at once.
      let full!: () => void
      const bothFull = new Promise<void>((resolve) => { full = resolve })
      const step: Handler = async (_input, ctx) => {
        now[ctx.queue] = (now[ctx.queue] ?? 0) + 1
        most[ctx.queue] = Math.max(most[ctx.queue] ?? 0, now[ctx.queue] ?? 0)
        if (now['q-cap-a'] === caps['q-cap-a'] && now['q-cap-b'] === caps['q-cap-b']) {
          full()
        }
        await bothFull
        now[ctx.queue] = (now[ctx.queue] ?? 0) - 1
        return { ok: true }
      }
      const runs: string[] = []
      for (let i = 0; i < 3; i++) {
        runs.push(await nqd.start('capped-a', {}), await nqd.start('capped-b', {}))
      }
      const wk = serve(transport, nqd, ['q-cap-a', 'q-cap-b'], { sa: step, sb: step }, { concurrency: 6, queueConcurrency: caps })
      try {
        for (const run of runs) {
          assert.equal((await nqd.finished(run)).state.status, 'completed')
        }
        assert.deepEqual(most, caps)
      } finally {
        await wk.stop()
      }
    })

    it('names itself to the worker registry', async () => {
      const wk = serve(transport, nqd, ['q-listed-a', 'q-listed-b'], {}, { concurrency: 3 })
      try {
        interface Listed { sdk: string, version: string, host: string, transport: string, status: string, queues: string[], concurrency: number }
        const w = await waitFor('the worker listed', async () => {
          const ans = await nqd.call<{ workers: Listed[] }>('GET', '/api/_workers?queue=q-listed-a')
          return ans.workers.find(l => l.transport === transport)
        })
        assert.equal(w.sdk, 'typescript')
        assert.match(w.version, /^\d+\.\d+\.\d+/)
        assert.deepEqual([w.transport, w.status, w.concurrency, w.queues], [transport, 'active', 3, ['q-listed-a', 'q-listed-b']])
        assert.notEqual(w.host, '')
      } finally {
        await wk.stop()
      }
      // It said goodbye (over the channel, by closing it): nqd shows it left.
      await waitFor('the worker left', async () => {
        const left = await nqd.call<{ workers: { status: string, reason: string }[] }>('GET', '/api/_workers?queue=q-listed-a')
        return JSON.stringify(left.workers.map(l => [l.status, l.reason])) === '[["left","closed"]]'
      })
    })

    it('retries a thrown error, then succeeds', async () => {
      await nqd.putFlow({ name: 'retry', entry: 'flaky', steps: { flaky: { queue: 'q-retry', retryPolicy: fixed(3) } } })
      const attempts: number[] = []
      const wk = serve(transport, nqd, ['q-retry'], {
        flaky: (_input, ctx) => {
          attempts.push(ctx.attempt)
          if (ctx.attempt === 1) {
            throw new Error('the database blinked')
          }
          return 'ok'
        },
      })
      try {
        const run = await nqd.finished(await nqd.start('retry'))
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(attempts, [1, 2])
        const failed = run.events.find(e => e.kind === 'step.failed')
        assert.equal(failed?.data?.error, 'the database blinked')
        assert.equal(failed?.data?.willRetry, true)
        assert.equal(run.events.find(e => e.kind === 'step.completed')?.attempt, 2)
      } finally {
        await wk.stop()
      }
    })

    it('fails the run at once on a PermanentError', async () => {
      await nqd.putFlow({ name: 'perm', entry: 'bad', steps: { bad: { queue: 'q-perm', retryPolicy: fixed(5) } } })
      let calls = 0
      const wk = serve(transport, nqd, ['q-perm'], {
        bad: () => {
          calls++
          throw new PermanentError('the input is wrong')
        },
      })
      try {
        const run = await nqd.finished(await nqd.start('perm'))
        assert.equal(run.state.status, 'failed')
        assert.equal(calls, 1)
        const failed = run.events.filter(e => e.kind === 'step.failed')
        assert.equal(failed.length, 1)
        assert.equal(failed[0]?.data?.willRetry, false)
        assert.ok(kinds(run.events).includes('flow.failed'))
      } finally {
        await wk.stop()
      }
    })

    it('runs a fan-in step once, with the emits of two steps as its input', async () => {
      await nqd.putFlow({
        name: 'fanin',
        entry: 'start',
        steps: {
          start: { queue: 'q-fan', emits: ['go'] },
          left: { queue: 'q-fan', subscribes: ['go'], emits: ['left.done'] },
          right: { queue: 'q-fan', subscribes: ['go'], emits: ['right.done'] },
          join: { queue: 'q-fan', subscribes: ['left.done', 'right.done'] },
        },
      })
      const joins: unknown[] = []
      const wk = serve(transport, nqd, ['q-fan'], {
        start: async (input: { x: number }, ctx) => { await ctx.flow.emit('go', { x: input.x }) },
        left: async (input: { go: { x: number } }, ctx) => { await ctx.flow.emit('left.done', { l: input.go.x + 1 }) },
        // The era A name of emit.
        right: async (input: { go: { x: number } }, ctx) => { await ctx.flow.handleTrigger('right.done', { r: input.go.x + 2 }) },
        join: (input: unknown) => { joins.push(input) },
      }, { concurrency: 3 })
      try {
        const run = await nqd.finished(await nqd.start('fanin', { x: 10 }))
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(joins, [{ 'left.done': { l: 11 }, 'right.done': { r: 12 } }])
        assert.equal(run.events.filter(e => e.kind === 'step.started' && e.step === 'join').length, 1)
      } finally {
        await wk.stop()
      }
    })

    it('writes state that later reads, in the same step and the next, see', async () => {
      await nqd.putFlow({
        name: 'state',
        entry: 'write',
        steps: { write: { queue: 'q-state', emits: ['written'] }, read: { queue: 'q-state', subscribes: ['written'] } },
      })
      const inStep: unknown[] = []
      let nextStep: unknown
      const wk = serve(transport, nqd, ['q-state'], {
        write: async (_input, ctx) => {
          assert.equal(await ctx.state.get('status'), null)
          await ctx.state.set('status', 'processing')
          inStep.push(await ctx.state.get('status'))
          await ctx.state.setBatch({ progress: 0.5, tmp: 'x' })
          inStep.push(await ctx.state.has('tmp'))
          await ctx.state.delete('tmp')
          inStep.push(await ctx.state.has('tmp'))
          ctx.logger.info('halfway', { progress: 0.5 })
          await ctx.progress(50)
          await ctx.flow.emit('written')
        },
        read: async (_input, ctx) => {
          nextStep = await ctx.state.getAll()
          await ctx.state.set('status', 'done')
        },
      })
      try {
        const run = await nqd.finished(await nqd.start('state'))
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(inStep, ['processing', true, false])
        assert.deepEqual(nextStep, { status: 'processing', progress: 0.5 })
        assert.deepEqual(run.state.state, { status: 'done', progress: 0.5 })
        const log = run.state.logs.find(l => l.msg === 'halfway')
        assert.equal(log?.level, 'info')
        assert.ok(run.events.some(e => e.kind === 'step.progress' && e.data?.progress === 50))
      } finally {
        await wk.stop()
      }
    })

    it('runs an approval step once its trigger is fired, with the payload in ctx.resume', async () => {
      await nqd.putFlow({
        name: 'approval',
        entry: 'prepare',
        steps: {
          prepare: { queue: 'q-appr', emits: ['prepared'] },
          approve: {
            queue: 'q-appr',
            subscribes: ['prepared'],
            await: { type: 'trigger', triggerType: 'user', timeout: 600000, schema: { type: 'object', properties: { approved: { type: 'boolean' } } } },
          },
        },
      })
      const resumes: unknown[] = []
      const wk = serve(transport, nqd, ['q-appr'], {
        prepare: async (_input, ctx) => { await ctx.flow.emit('prepared', { doc: 7 }) },
        approve: (input: { prepared: { doc: number } }, ctx) => {
          resumes.push({ doc: input.prepared.doc, payload: ctx.resume?.payload, type: ctx.resume?.awaitType })
        },
      })
      try {
        const runId = await nqd.start('approval')
        const wait = await waitFor('the trigger await', async () => {
          const ans = await nqd.call<{ items: { runId: string, triggerId: string }[] }>('GET', '/api/_flows/waits?kind=trigger&flowName=approval')
          return ans.items.find(i => i.runId === runId)
        })
        assert.deepEqual(resumes, [], 'the step must not run before its trigger')
        await nqd.call('POST', `/api/_flows/triggers/${wait.triggerId}`, { approved: true })
        const run = await nqd.finished(runId)
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(resumes, [{ doc: 7, payload: { approved: true }, type: 'trigger' }])
      } finally {
        await wk.stop()
      }
    })

    it('stop() lets a step finish within the grace period, else reports it retriable for another worker', async () => {
      await nqd.putFlow({ name: 'grace', entry: 'long', steps: { long: { queue: 'q-grace', retryPolicy: fixed(2) } } })
      let started!: () => void
      const isStarted = new Promise<void>((r) => { started = r })
      const first = createWorker({
        url: nqd.url, queues: ['q-grace'], transport, logger: memoryLogger(), claimWaitMs: 500,
        handlers: { long: async (_i, ctx) => { started(); await new Promise(r => setTimeout(r, 5000)); return ctx.attempt } },
      })
      const firstRunning = first.start()
      const runId = await nqd.start('grace')
      await isStarted
      const t0 = Date.now()
      await first.stop(300)
      await firstRunning
      assert.ok(Date.now() - t0 < 3000, 'stop() waits for the grace period, not for the step')
      const failed = await waitFor('step.failed', async () => (await nqd.run(runId)).events.find(e => e.kind === 'step.failed'))
      assert.equal(failed.data?.willRetry, true)
      const wk = serve(transport, nqd, ['q-grace'], { long: (_i, ctx) => ctx.attempt })
      try {
        const run = await nqd.finished(runId)
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(run.events.find(e => e.kind === 'step.completed')?.data?.result, 2)
      } finally {
        await wk.stop()
      }
    })
    it('a process whose worker stopped exits once its steps are done, not when the grace period would end', { timeout: 60_000 }, async () => {
      await nqd.putFlow({ name: 'exit', entry: 'step', steps: { step: { queue: 'q-exit' } } })
      // The step runs until the test writes a line; SIGTERM stops the worker
      // with a grace period longer than the test's deadline.
      const child = spawn(process.execPath, ['--input-type=module', '-e', `
        const { createWorker } = await import(${JSON.stringify(new URL('../src/index.js', import.meta.url).href)})
        const w = createWorker({ url: ${JSON.stringify(nqd.url)}, transport: ${JSON.stringify(transport)}, queues: ['q-exit'], claimWaitMs: 1000, handlers: {
          step: async () => {
            process.stdout.write('running\\n')
            await new Promise(r => process.stdin.once('data', r))
            process.stdin.pause()
          },
        } })
        process.on('SIGTERM', () => { void w.stop(120000) })
        await w.start()
      `], { stdio: ['pipe', 'pipe', 'inherit'] })
      let out = ''
      child.stdout.on('data', (b: Buffer) => { out += b.toString() })
      try {
        const runId = await nqd.start('exit')
        await waitFor('the step to run', () => out.includes('running'))
        child.kill('SIGTERM')
        child.stdin.end('go\n')
        await waitFor('the process to exit', () => child.exitCode !== null)
        assert.equal(child.exitCode, 0)
        const run = await nqd.finished(runId)
        assert.equal(run.state.status, 'completed')
      } finally {
        child.kill('SIGKILL')
      }
    })

    it('aborts ctx.signal when the run is cancelled, and reports nothing more', async () => {
      await nqd.putFlow({ name: 'cancel', entry: 'wait', steps: { wait: { queue: 'q-cancel' } } })
      let started!: () => void
      const isStarted = new Promise<void>((r) => { started = r })
      let aborted!: (why: unknown) => void
      const wasAborted = new Promise<unknown>((r) => { aborted = r })
      const wk = serve(transport, nqd, ['q-cancel'], {
        wait: async (_i, ctx) => {
          ctx.signal.addEventListener('abort', () => { aborted(ctx.signal.reason) })
          started()
          await wasAborted
          return 'too late'
        },
      }, { heartbeatMs: 100 })
      try {
        const runId = await nqd.start('cancel')
        await isStarted
        await nqd.call('POST', `/api/_flows/cancel/runs/${runId}/cancel`)
        const why = await wasAborted
        assert.ok(why instanceof Error)
        await waitFor('the worker to let the job go', () => wk.w.held === 0)
        const run = await nqd.run(runId)
        assert.ok(!kinds(run.events).includes('step.completed'), kinds(run.events).join(' '))
        assert.ok(!kinds(run.events).includes('step.failed'), kinds(run.events).join(' '))
      } finally {
        await wk.stop()
      }
    })
  })

  describe(`leases, over ${transport}`, () => {
    let nqd: Nqd
    // Short leases, so that a job held without heartbeats is lost in the test's time.
    before(async () => { nqd = await startNqd({ env: { NQ_JOB_LEASE: '1500ms' } }) })
    after(async () => { await nqd.close() })

    it('a busy worker never claims more jobs than free slots: concurrency 1, steps longer than the lease, more runs than slots', { timeout: 60_000 }, async () => {
      await nqd.putFlow({ name: 'busy', entry: 'slow', steps: { slow: { queue: 'q-busy' } } })
      // Record every claim the SDK sends, its own or a completion's, and how
      // many jobs it held then. A job a completion claims runs once the
      // completed one's handler returned, in the slot that one kept.
      const claims: { max: number, active: number, held: number, completing: boolean }[] = []
      const realRequest = http.request
      let w: Worker | undefined
      const spy = (...args: unknown[]): http.ClientRequest => {
        const req = (realRequest as (...a: unknown[]) => http.ClientRequest)(...args)
        const target = args[0]
        const path = typeof target === 'string' || target instanceof URL ? String(target) : ((target as http.RequestOptions).path ?? '')
        if (path.endsWith('/api/_workers/claim') || path.endsWith('/complete')) {
          const end = req.end.bind(req) as (chunk: Buffer) => http.ClientRequest
          req.end = ((chunk: Buffer) => {
            const body = JSON.parse(chunk.toString()) as { max?: number, claim?: { max: number } }
            const completing = body.claim !== undefined
            const max = completing ? body.claim?.max : body.max
            if (max !== undefined) {
              claims.push({ max, active: w?.active ?? 0, held: w?.held ?? 0, completing })
            }
            return end(chunk)
          }) as typeof req.end
        }
        return req
      }
      http.request = spy
      let running = 0
      let most = 0
      try {
        const wk = serve(transport, nqd, ['q-busy'], {
          slow: async () => {
            running++
            most = Math.max(most, running)
            await new Promise(r => setTimeout(r, 1800))
            running--
          },
        }, { concurrency: 1 })
        w = wk.w
        try {
          const ids = await Promise.all([1, 2, 3].map(() => nqd.start('busy')))
          for (const id of ids) {
            const run = await nqd.finished(id, 30_000)
            assert.equal(run.state.status, 'completed')
            assert.deepEqual(run.events.filter(e => e.kind === 'step.started').map(e => e.attempt), [1])
          }
        } finally {
          await wk.stop()
        }
      } finally {
        http.request = realRequest
      }
      assert.equal(most, 1)
      if (transport === 'channel') {
        // nqd offers the jobs: the worker claims none.
        assert.deepEqual(claims, [])
        return
      }
      assert.ok(claims.length >= 3, `claims: ${JSON.stringify(claims)}`)
      for (const c of claims) {
        assert.ok(c.max >= 1 && c.max + c.active <= 1, `a claim asked for ${c.max} jobs while running ${c.active}`)
        // A worker holds at most concurrency jobs: a claim of its own asks
        // only for slots no held job takes; a completion's claim is for the
        // slot of the job it completes.
        assert.ok(c.completing ? c.held <= 1 : c.max + c.held <= 1, `a claim asked for ${c.max} jobs while holding ${c.held}`)
      }
      assert.ok(claims.some(c => c.completing), `no completion claimed: ${JSON.stringify(claims)}`)
    })

    it('finds handlers by flow and step: one worker serves two flows with a step of the same name', async () => {
      for (const name of ['flow-a', 'flow-b', 'flow-c']) {
        await nqd.putFlow({ name, entry: 'work', steps: { work: { queue: 'q-same-step' } } })
      }
      const wk = serve(transport, nqd, ['q-same-step'], {
        'flow-a/work': () => 'a',
        'flow-b/work': () => 'b',
        work: (_i, ctx) => `any:${ctx.flowName}`,
      })
      try {
        const results: unknown[] = []
        for (const name of ['flow-a', 'flow-b', 'flow-c']) {
          const run = await nqd.finished(await nqd.start(name))
          results.push(run.events.find(e => e.kind === 'step.completed')?.data?.result)
        }
        assert.deepEqual(results, ['a', 'b', 'any:flow-c'])
      } finally {
        await wk.stop()
      }
    })


    it('a step longer than the lease keeps it with heartbeats', { timeout: 90_000 }, async () => {
      await nqd.putFlow({ name: 'long', entry: 'slow', steps: { slow: { queue: 'q-long', retryPolicy: fixed(2) } } })
      const attempts: number[] = []
      const wk = serve(transport, nqd, ['q-long'], {
        slow: async (_i, ctx) => {
          attempts.push(ctx.attempt)
          await new Promise(r => setTimeout(r, 4_000))
          return 'slow'
        },
      })
      try {
        const run = await nqd.finished(await nqd.start('long'), 30_000)
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(attempts, [1], 'the job was never redelivered')
        assert.deepEqual(run.events.filter(e => e.kind.startsWith('step.')).map(e => [e.kind, e.attempt]), [['step.started', 1], ['step.completed', 1]])
      } finally {
        await wk.stop()
      }
    })

    it('a lease that expires is redelivered as the next attempt and completed', { timeout: 90_000 }, async () => {
      await nqd.putFlow({ name: 'lease', entry: 'work', steps: { work: { queue: 'q-lease', retryPolicy: fixed(2) } } })
      const runId = await nqd.start('lease')
      // A worker that claims the job and dies: no heartbeat, no report.
      const claimed = await nqd.call<{ jobs: { id: string, attempt: number, lease: string, leaseUntil: number }[] }>('POST', '/api/_workers/claim', { queues: ['q-lease'], max: 1, waitMs: 5000 })
      assert.equal(claimed.jobs.length, 1)
      assert.equal(claimed.jobs[0]?.attempt, 1)
      const attempts: number[] = []
      const wk = serve(transport, nqd, ['q-lease'], { work: (_i, ctx) => { attempts.push(ctx.attempt); return 'done' } })
      try {
        const run = await nqd.finished(runId, 30_000)
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(attempts, [2])
        assert.ok(Date.now() >= (claimed.jobs[0]?.leaseUntil ?? 0), 'redelivered only after the lease ended')
        // The dead worker's late report is refused.
        await assert.rejects(
          nqd.call('POST', `/api/_workers/jobs/q-lease/${runId}:work/complete`, { lease: claimed.jobs[0]?.lease }),
          /409/,
        )
      } finally {
        await wk.stop()
      }
    })
  })

  describe(`tokens, over ${transport}`, () => {
    const admin = 'a'.repeat(40)
    const write = 'w'.repeat(40)
    const read = 'r'.repeat(40)
    let nqd: Nqd
    before(async () => {
      nqd = await startNqd({ env: { NQ_TOKENS: `ops:admin:${admin},worker:write:${write},ui:read:${read}` }, adminToken: admin })
      await nqd.putFlow({ name: 'secured', entry: 'only', steps: { only: { queue: 'q-tok' } } })
    })
    after(async () => { await nqd.close() })

    for (const [name, token, status] of [['no token', undefined, 401], ['an unknown token', 'x'.repeat(40), 401], ['a read token', read, 403]] as const) {
      it(`start() rejects with an AuthError (${status}) given ${name}`, async () => {
        const logger = memoryLogger()
        const w = createWorker({ url: nqd.url, transport, token, queues: ['q-tok'], handlers: {}, logger })
        await assert.rejects(w.start(), (err: unknown) => {
          assert.ok(err instanceof AuthError)
          assert.equal(err.status, status)
          assert.match(err.message, /token/)
          return true
        })
        assert.ok(logger.lines.some(l => l.startsWith('error ')), 'the refusal is logged')
      })
    }

    it('start() rejects with an NqdError (400) for a queue name nqd does not take', async () => {
      const w = createWorker({ url: nqd.url, transport, token: write, queues: ['no spaces allowed'], handlers: {}, logger: memoryLogger() })
      await assert.rejects(w.start(), (err: unknown) => err instanceof NqdError && err.status === 400)
    })

    it('runs steps with a write token', async () => {
      const wk = serve(transport, nqd, ['q-tok'], { only: () => 'secret work' }, { token: write })
      try {
        const run = await nqd.finished(await nqd.start('secured'))
        assert.equal(run.state.status, 'completed')
      } finally {
        await wk.stop()
      }
    })
  })

  describe(`nqd restarted mid-step, over ${transport}`, () => {
    let nqd: Nqd
    before(async () => { nqd = await startNqd() })
    after(async () => { await nqd.close() })

    it('loses nothing: the step reports after the restart and the run completes', { timeout: 60_000 }, async () => {
      await nqd.putFlow({
        name: 'restart',
        entry: 'first',
        steps: { first: { queue: 'q-rs', emits: ['first.done'] }, second: { queue: 'q-rs', subscribes: ['first.done'] } },
      })
      let inStep!: () => void
      const stepRunning = new Promise<void>((r) => { inStep = r })
      let release!: () => void
      const released = new Promise<void>((r) => { release = r })
      const calls: string[] = []
      const wk = serve(transport, nqd, ['q-rs'], {
        first: async (_i, ctx) => {
          calls.push(`first:${ctx.attempt}`)
          await ctx.state.set('before', 1)
          inStep()
          await released
          // nqd was down and is back: these reports retry until they land.
          ctx.logger.info('after the restart')
          await ctx.state.set('after', 2)
          await ctx.flow.emit('first.done', { ok: true })
          return 'first'
        },
        second: (input: unknown, ctx) => { calls.push(`second:${ctx.attempt}`); return input },
      }, { heartbeatMs: 500 })
      try {
        const runId = await nqd.start('restart')
        await stepRunning
        await nqd.kill()
        // Steps report while nqd is down; they must not give up.
        release()
        await waitFor('a report failing while nqd is down', () => wk.lines.some(l => /^debug events failed, trying again/.test(l)))
        await nqd.restart()
        const run = await nqd.finished(runId, 40_000)
        assert.equal(run.state.status, 'completed', nqd.output())
        assert.deepEqual(calls, ['first:1', 'second:1'])
        assert.deepEqual(run.state.state, { before: 1, after: 2 })
        assert.ok(run.state.logs.some(l => l.msg === 'after the restart'))
        // Each step completes once, on its first attempt. Their order is not
        // fixed: \`second\` may run and complete while \`first\` is still returning.
        const completed = run.events.filter(e => e.kind === 'step.completed').map(e => [e.step, e.attempt])
        completed.sort((a, b) => String(a[0]).localeCompare(String(b[0])))
        assert.deepEqual(completed, [['first', 1], ['second', 1]])
      } finally {
        await wk.stop()
      }
    })
  })

  describe(`a lease that expires, with two nqd instances sharing a Redis, over ${transport}`, () => {
    let redis: Awaited<ReturnType<typeof startRedis>>
    let a: Nqd | undefined
    let b: Nqd | undefined
    before(async () => {
      redis = await startRedis()
      if (redis === undefined) {
        return
      }
      const env = { NQ_REDIS_URL: redis.url, NQ_JOB_LEASE: '1500ms', NQ_PREFIX: 'tslease' }
      a = await startNqd({ env })
      b = await startNqd({ env })
    })
    after(async () => {
      await a?.close()
      await b?.close()
      await redis?.close()
    })

    it('is redelivered through the other instance and completed', { timeout: 60_000 }, async (t) => {
      if (a === undefined || b === undefined) {
        if (process.env.NQD_REQUIRE_REDIS === '1') {
          assert.fail('redis-server is not on the PATH and NQD_REQUIRE_REDIS=1')
        }
        t.skip('redis-server is not on the PATH')
        return
      }
      await a.putFlow({ name: 'lease-redis', entry: 'work', steps: { work: { queue: 'q-lease-redis', retryPolicy: fixed(2) } } })
      const runId = await a.start('lease-redis')
      const claimed = await a.call<{ jobs: { lease: string }[] }>('POST', '/api/_workers/claim', { queues: ['q-lease-redis'], max: 1, waitMs: 5000 })
      assert.equal(claimed.jobs.length, 1)
      const attempts: number[] = []
      const wk = serve(transport, b, ['q-lease-redis'], { work: (_i, ctx) => { attempts.push(ctx.attempt); return 'done' } })
      try {
        const run = await b.finished(runId, 30_000)
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(attempts, [2])
        await assert.rejects(
          a.call('POST', `/api/_workers/jobs/q-lease-redis/${runId}:work/complete`, { lease: claimed.jobs[0]?.lease }),
          /409/,
        )
      } finally {
        await wk.stop()
      }
    })
  })
}

describe('answers lost or refused on the way', () => {
  let nqd: Nqd
  before(async () => {
    nqd = await startNqd()
    for (const name of ['lossy', 'busy-nqd', 'quick-emit', 'bad-emit', 'big-result']) {
      await nqd.putFlow({
        name,
        entry: 'work',
        steps: { work: { queue: `q-${name}`, emits: ['worked'] }, next: { queue: `q-${name}`, subscribes: ['worked'] } },
      })
    }
  })
  after(async () => { await nqd.close() })

  const report = /\/api\/_workers\/jobs\/[^/]+\/[^/]+\/(events|complete|fail)$/

  it('every report\'s first answer lost: each event is stored once per step', async () => {
    const proxy = await startProxy(nqd.url, (path, nth) => report.test(path) && nth === 1 ? 'lose-answer' : 'pass')
    const wk = serve('http', { ...nqd, url: proxy.url }, ['q-lossy'], {
      work: async (_i, ctx) => {
        await ctx.state.set('k', 1)
        ctx.logger.info('working')
        await ctx.flow.emit('worked', { n: 1 })
        return 'w'
      },
      next: () => 'n',
    })
    try {
      const run = await nqd.finished(await nqd.start('lossy'))
      assert.equal(run.state.status, 'completed')
      const count = (kind: string, step: string): number => run.events.filter(e => e.kind === kind && e.step === step).length
      for (const [kind, step] of [['step.started', 'work'], ['state.set', 'work'], ['log', 'work'], ['emit', 'work'], ['step.completed', 'work'], ['step.started', 'next'], ['step.completed', 'next']]) {
        assert.equal(count(kind ?? '', step ?? ''), 1, `${kind ?? ''} of ${step ?? ''}: ${kinds(run.events).join(' ')}`)
      }
    } finally {
      await wk.stop()
      await proxy.close()
    }
    // stop() waited for the jobs' reports: each complete went twice.
    assert.equal(proxy.seen.filter(p => p.endsWith('/complete')).length, 4, proxy.seen.join('\n'))
  })

  it('an emit made as the step begins goes with its completion', async () => {
    let apart = 0
    let withCompletion = 0
    const proxy = await startProxy(nqd.url, (path, _nth, body) => {
      if (body.includes('"kind":"emit"')) {
        if (path.endsWith('/events')) {
          apart++
        } else if (path.endsWith('/complete')) {
          withCompletion++
        }
      }
      return 'pass'
    })
    const inputs: unknown[] = []
    const wk = serve('http', { ...nqd, url: proxy.url }, ['q-quick-emit'], {
      work: async (_i, ctx) => {
        await ctx.flow.emit('worked', { n: 2 })
        return 'w'
      },
      next: (input) => { inputs.push(input) },
    })
    const runs = 3
    try {
      for (let i = 0; i < runs; i++) {
        const run = await nqd.finished(await nqd.start('quick-emit'))
        assert.equal(run.state.status, 'completed')
        assert.deepEqual(kinds(run.events), ['flow.started', 'step.started', 'emit', 'step.completed', 'step.started', 'step.completed', 'flow.completed'])
      }
    } finally {
      await wk.stop()
      await proxy.close()
    }
    assert.ok(inputs.every(i => JSON.stringify(i).includes('"n":2')), JSON.stringify(inputs))
    // A step held up past step.started's wait sends its emit at once: each
    // emit goes one way, and a machine that stalls every step is unlikely.
    assert.equal(apart + withCompletion, runs)
    assert.ok(withCompletion >= 1, `${String(apart)} emits sent apart, ${String(withCompletion)} with completions`)
  })

  it('an emit nqd refuses for itself fails its step, and later emits still go with completions', async () => {
    let withCompletion = 0
    const proxy = await startProxy(nqd.url, (path, _nth, body) => {
      if (path.endsWith('/complete') && body.includes('"kind":"emit"')) {
        withCompletion++
      }
      return 'pass'
    })
    const wk = serve('http', { ...nqd, url: proxy.url }, ['q-bad-emit'], {
      work: async (input, ctx) => {
        await ctx.flow.emit((input as { name: string }).name, null)
        return 'w'
      },
      next: () => 'n',
    }, { concurrency: 1 })
    try {
      const bad = await nqd.finished(await nqd.start('bad-emit', { name: '' }))
      assert.equal(bad.state.status, 'failed', kinds(bad.events).join(' '))
      // The call nqd refused carried step.started too: it is stored all the same.
      const started = kinds(bad.events).indexOf('step.started')
      assert.ok(started >= 0 && started < kinds(bad.events).indexOf('step.failed'), kinds(bad.events).join(' '))
      withCompletion = 0
      for (let i = 0; i < 3; i++) {
        const run = await nqd.finished(await nqd.start('bad-emit', { name: 'worked' }))
        assert.equal(run.state.status, 'completed')
      }
    } finally {
      await wk.stop()
      await proxy.close()
    }
    assert.ok(withCompletion >= 1, 'later emits went with their completions')
  })

  for (const transport of ['channel', 'http'] as const) {
    it(`a completion nqd refuses (its result too large) fails the step, storing what it carried first, over ${transport}`, async () => {
      const wk = serve(transport, nqd, ['q-big-result'], {
        work: async (_i, ctx) => {
          ctx.logger.info('last words')
          await ctx.flow.emit('worked', {})
          return 'x'.repeat(300_000)
        },
        next: () => 'n',
      })
      try {
        const run = await nqd.finished(await nqd.start('big-result'))
        assert.equal(run.state.status, 'failed')
        // The step the emit made ready may run before the failure lands:
        // only the failing step's events are counted.
        const got = kinds(run.events.filter(e => e.step === 'work'))
        for (const kind of ['step.started', 'log', 'emit', 'step.failed']) {
          assert.equal(got.filter(k => k === kind).length, 1, `${kind}: ${kinds(run.events).join(' ')}`)
        }
        assert.ok(got.indexOf('emit') < got.indexOf('step.failed'), got.join(' '))
      } finally {
        await wk.stop()
      }
    })
  }

  it('a 429 with Retry-After and a 503 are waited out, storing nothing twice', async () => {
    const proxy = await startProxy(nqd.url, (path, nth) => {
      if (nth === 1 && path.endsWith('/events')) {
        return { status: 429, retryAfter: '1' }
      }
      if (nth === 1 && path.endsWith('/complete')) {
        return { status: 503 }
      }
      return 'pass'
    })
    const wk = serve('http', { ...nqd, url: proxy.url }, ['q-busy-nqd'], {
      work: async (_i, ctx) => {
        ctx.logger.info('once')
        // A report that waits for nqd goes at once, through the events call.
        await ctx.progress(50)
        await ctx.flow.emit('worked', {})
      },
      next: () => undefined,
    })
    try {
      const t0 = Date.now()
      const runId = await nqd.start('busy-nqd')
      const run = await nqd.finished(runId)
      assert.equal(run.state.status, 'completed')
      assert.ok(Date.now() - t0 >= 1000, 'the Retry-After was honoured')
      assert.equal(run.state.logs.filter(l => l.msg === 'once').length, 1)
      assert.equal(run.events.filter(e => e.kind === 'step.completed').length, 2)
      assert.ok(!kinds(run.events).includes('step.failed'))
    } finally {
      await wk.stop()
      await proxy.close()
    }
  })
})
