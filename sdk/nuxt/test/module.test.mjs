// The module in a fresh Nuxt 4 app against a real nqd: a server route that
// starts a flow with useNqd() and answers its result, the UI's API and its
// three WebSockets through the app's origin, and, in development, a step
// file edited on disk running its new code on the next run.

import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import WebSocket from 'ws'
import { appEnv, depsDir, freePort, makeApp, moduleDir, nuxi, sdkDir, startNqd, startProcess, waitFor } from './app.mjs'

const stepFile = (factor) => `// A v0.5 step file: the define functions are Nuxt Queue auto-imports.
export const config = defineFunctionConfig({
  queue: { name: 'double' },
  flow: { name: 'double', role: 'entry', step: 'double' },
})

export default defineFunction(async (input) => ({ n: input.n * ${factor} }))
`

const appFiles = {
  'package.json': JSON.stringify({ private: true, name: 'nqd-nuxt-test-app', type: 'module' }) + '\n',
  'nuxt.config.ts': `export default defineNuxtConfig({
  modules: ['nqd-nuxt'],
  compatibilityDate: '2025-07-15',
  devtools: { enabled: false },
})
`,
  'app/app.vue': '<template><div>nqd test app</div></template>\n',
  'server/api/double.get.ts': `export default defineEventHandler(async (event) => {
  const n = Number(getQuery(event).n)
  return await useNqd().run('double', { n }, { timeoutMs: 20_000 })
})
`,
  'server/api/hello.get.ts': "export default defineEventHandler(() => ({ app: 'own route' }))\n",
  'server/functions/double/double.ts': stepFile(2),
  // What the types of useNqd() allow, checked with tsc and never run.
  'server/utils/typed.ts': `export async function typedUses(): Promise<number> {
  const nqd = useNqd()
  // @ts-expect-error: no flow of the app has this name
  await nqd.start('tripple', {})
  // @ts-expect-error: the input of double has n
  await nqd.start('double', { m: 1 })
  const r = await nqd.run('double', { n: 1 })
  return r.n
}
`,
  'server/nqd-flows.d.ts': `declare module 'nqd-nuxt' {
  interface NqdFlows { double: { input: { n: number }, result: { n: number } } }
}
export {}
`,
}

/** A WebSocket client that keeps what it receives and waits for a message. */
function openSocket(url) {
  const ws = new WebSocket(url)
  const got = []
  const waiters = new Set()
  ws.on('message', (data) => {
    got.push(JSON.parse(data.toString()))
    for (const w of waiters) {
      w()
    }
  })
  const closed = new Promise(r => ws.once('close', (code) => { r(code) }))
  return {
    ws,
    got,
    closed,
    opened: new Promise((res, rej) => {
      ws.once('open', res)
      ws.once('error', rej)
    }),
    send: (m) => { ws.send(JSON.stringify(m)) },
    /** The first message received from index from on that matches pred. */
    next(pred, from = 0, timeoutMs = 20_000) {
      return waitFor(`a message ${pred.toString()}; got ${JSON.stringify(got).slice(0, 800)}`, () => got.slice(from).find(pred), timeoutMs)
    },
    close() {
      ws.close()
      return closed
    },
  }
}

describe('nqd-nuxt in a fresh Nuxt 4 app', { timeout: 600_000 }, () => {
  let nqd
  let deps
  const cleanup = []

  before(async () => {
    deps = depsDir()
    nqd = await startNqd()
    // A flow no worker serves: its runs stay until they are cancelled.
    await nqd.call('PUT', '/api/_flows/idle', { name: 'idle', entry: 'wait', steps: { wait: { queue: 'nobody' } } })
  })
  after(async () => {
    for (const f of cleanup.reverse()) {
      await f()
    }
    await nqd?.close()
  })

  describe('built for production, with nqd-worker beside it', () => {
    let app
    let base
    // Stopped before the development test, whose worker serves the same queue.
    const stops = []
    after(async () => {
      for (const f of stops.reverse()) {
        await f()
      }
    })

    before(async () => {
      app = makeApp(deps, appFiles)
      cleanup.push(() => { rmSync(app, { recursive: true, force: true }) })
      const build = startProcess(nuxi(deps), ['build'], { cwd: app, env: appEnv({}) })
      const code = await new Promise(r => build.proc.once('exit', r))
      assert.equal(code, 0, `nuxi build failed:\n${build.output()}`)
      // The worker command the docs give for production.
      const worker = startProcess(process.execPath, [join(sdkDir, 'dist', 'cli.js'), 'server/functions', '--store-flows', '--url', nqd.url], { cwd: app, env: appEnv({}) })
      stops.push(() => worker.stop())
      const port = await freePort()
      base = `http://127.0.0.1:${port}`
      const server = startProcess(process.execPath, ['.output/server/index.mjs'], { cwd: app, env: appEnv({ HOST: '127.0.0.1', PORT: String(port), NUXT_NQD_URL: nqd.url }) })
      stops.push(() => server.stop())
      await waitFor('the app up', async () => (await fetch(base + '/api/hello')).ok)
      await waitFor('the step file worker serving', async () => (await nqd.call('GET', '/api/_flows')).some(f => f.id === 'double' || f.name === 'double'))
    })

    it('types useNqd() by the flows of the step files, and the step files by their auto-imports', async () => {
      const types = readFileSync(join(app, '.nuxt', 'types', 'nqd-flows.d.ts'), 'utf8')
      assert.match(types, /interface NqdFlowNames \{\s*"double": true\s*\}/)
      // The server's types as Nuxt writes them: the step file, and typed.ts's expected errors.
      // Not spawnSync: a blocked test process would miss the app closing its idle connections.
      const tsc = await new Promise((res) => {
        execFile(join(moduleDir, 'node_modules', '.bin', 'tsc'), ['-p', '.nuxt/tsconfig.server.json', '--noEmit'], { cwd: app }, (err, stdout, stderr) => { res({ err, out: stdout + stderr }) })
      })
      assert.equal(tsc.err, null, tsc.out)
    })

    it('runs a flow from a server route with useNqd() and answers its result', async () => {
      const res = await fetch(base + '/api/double?n=21')
      assert.equal(res.status, 200, await res.clone().text())
      assert.deepEqual(await res.json(), { n: 42 })
    })

    it("serves nqd's API in the app's origin and leaves the app's own routes alone", async () => {
      const flows = await (await fetch(base + '/api/_flows')).json()
      assert.ok(flows.some(f => f.id === 'double'), JSON.stringify(flows))
      assert.deepEqual(await (await fetch(base + '/api/hello')).json(), { app: 'own route' })
      // Not under a prefix: Nuxt answers, not nqd (whose errors are {error:{code}}).
      for (const path of ['/api/_nuxt_icon/mdi.json', '/api/_flowsX']) {
        const body = await (await fetch(base + path)).text()
        assert.doesNotMatch(body, /"error":\{"code"/, `${path} reached nqd: ${body}`)
      }
      // A run's event stream, as useNqdRun reads it.
      const run = await (await fetch(base + '/api/_flows/double/start', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"n":1}' })).json()
      const ctl = new AbortController()
      const res = await fetch(`${base}/api/_events/flow/${run.flowId}/stream`, { headers: { accept: 'text/event-stream' }, signal: ctl.signal })
      assert.equal(res.headers.get('content-type')?.split(';')[0], 'text/event-stream')
      let text = ''
      for await (const chunk of res.body) {
        text += Buffer.from(chunk).toString()
        if (text.includes('"event":"flow.completed"')) {
          break
        }
      }
      ctl.abort()
      assert.match(text, /"event":"flow.started"/)
    })

    it("gives a page a run's live state with useNqdRun, through the app", async () => {
      // The composable as a page runs it: EventSource and fetch on the app's origin.
      const { EventSource } = await import('eventsource')
      const { effectScope, ref } = await import('vue')
      globalThis.window = globalThis
      globalThis.EventSource = EventSource
      const { useNqdRun } = await import('../dist/runtime/app/composables/useNqdRun.js')
      const scope = effectScope()
      try {
        const run = await nqd.call('POST', '/api/_flows/idle/start', {})
        const followed = scope.run(() => useNqdRun(ref(run.flowId), { baseURL: base }))
        await waitFor('the running state', () => followed.state.value?.status === 'running')
        assert.equal(followed.ended.value, false)
        await nqd.call('POST', `/api/_flows/idle/runs/${run.flowId}/cancel`)
        await waitFor(`the cancelled state, got ${JSON.stringify(followed.kinds.value)}`, () => followed.state.value?.status === 'cancelled' && followed.ended.value)
        assert.ok(followed.kinds.value.includes('flow.cancelled'), JSON.stringify(followed.kinds.value))
        assert.equal(followed.error.value, null)
      } finally {
        scope.stop()
        delete globalThis.window
        delete globalThis.EventSource
      }
    })

    it('bridges the run socket: history, then live, then again after nqd restarts', async () => {
      const run = await nqd.call('POST', '/api/_flows/idle/start', {})
      const wsURL = base.replace('http', 'ws')
      let s = openSocket(wsURL + '/api/_flows/ws')
      await s.opened
      await s.next(m => m.type === 'connected')
      s.send({ type: 'subscribe', flowName: 'idle', runId: run.flowId })
      const history = await s.next(m => m.type === 'history')
      assert.equal(history.events[0]?.record?.type, 'flow.started')
      await s.next(m => m.type === 'subscribed')
      const mark = s.got.length
      await nqd.call('POST', `/api/_flows/idle/runs/${run.flowId}/cancel`)
      const live = await s.next(m => m.type === 'event', mark)
      assert.equal(live.event.record.type, 'flow.canceled')

      // nqd goes away: the bridge closes the browser's socket, which
      // opens a new one and subscribes again.
      await nqd.restart()
      await s.closed
      s = openSocket(wsURL + '/api/_flows/ws')
      await s.opened
      await s.next(m => m.type === 'connected')
      s.send({ type: 'subscribe', flowName: 'idle', runId: run.flowId })
      const again = await s.next(m => m.type === 'history')
      assert.deepEqual(again.events.map(e => e.record.type), ['flow.started', 'flow.canceled'])
      await s.close()
    })

    it('bridges the triggers and queues sockets', async () => {
      const wsURL = base.replace('http', 'ws')
      const t = openSocket(wsURL + '/api/_triggers/ws')
      await t.opened
      await t.next(m => m.type === 'connected')
      t.send({ type: 'ping' })
      await t.next(m => m.type === 'pong')
      await t.close()

      const q = openSocket(wsURL + '/api/_queues/ws')
      await q.opened
      await q.next(m => m.type === 'connected')
      q.send({ type: 'subscribe', queueName: 'double' })
      await q.next(m => m.type === 'subscribed' && m.queueName === 'double')
      const mark = q.got.length
      assert.deepEqual(await (await fetch(base + '/api/double?n=2')).json(), { n: 4 })
      await q.next(m => m.type === 'counts' && m.counts.completed >= 1, mark)
      await q.close()
    })

    it("refuses a socket a page of another origin opens with the app's token", async () => {
      const ws = new WebSocket(base.replace('http', 'ws') + '/api/_flows/ws', { headers: { origin: 'http://evil.example' } })
      const status = await new Promise((res) => {
        ws.once('unexpected-response', (_req, r) => { res(r.statusCode) })
        ws.once('open', () => { res('open') })
        ws.once('error', () => { res('error') })
      })
      ws.terminate()
      assert.equal(status, 403)
    })
  })

  describe('in development', () => {
    it('runs the step files and runs a step file edited on disk with its new code', async () => {
      const app = makeApp(deps, appFiles)
      cleanup.push(() => { rmSync(app, { recursive: true, force: true }) })
      const port = await freePort()
      const base = `http://127.0.0.1:${port}`
      const dev = startProcess(nuxi(deps), ['dev', '--host', '127.0.0.1', '--port', String(port)], { cwd: app, env: appEnv({ NUXT_NQD_URL: nqd.url }) })
      cleanup.push(() => dev.stop())
      const result = async (n) => {
        const res = await fetch(`${base}/api/double?n=${n}`)
        return res.ok ? res.json() : undefined
      }
      try {
        await waitFor('the first run through the dev server', async () => (await result(21))?.n === 42, 180_000)
        const file = join(app, 'server/functions/double/double.ts')
        writeFileSync(file, readFileSync(file, 'utf8').replace('input.n * 2', 'input.n * 3'))
        // The worker restarts on the change; runs before it may still double.
        await waitFor('a run of the edited step file', async () => (await result(21))?.n === 63, 60_000)
      } catch (err) {
        throw new Error(`${err.message}\nnuxi dev said:\n${dev.output().slice(-4000)}`)
      }
    })
  })
})
