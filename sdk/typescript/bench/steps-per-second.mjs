// Measures no-op steps per second: starts nqd (the binary in NQD_BIN, else
// .test-bin/nqd from `npm test`) on the embedded store, stores a one-step
// flow on queue bench-ts, starts RUNS runs, then starts bench/noop-worker.mjs
// and times how long it takes to complete them all.
//
//   RUNS=3000 NQD_CONCURRENCY=32 node bench/steps-per-second.mjs
//
// BENCH_WORKER, a command, runs another worker instead (given the same
// NQD_* environment), e.g. another SDK's no-op worker, for comparison.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const bin = process.env.NQD_BIN ?? join(pkg, '.test-bin', 'nqd')
const runs = Number(process.env.RUNS ?? '3000')
const concurrency = process.env.NQD_CONCURRENCY ?? '32'

const port = await new Promise((res) => {
  const s = createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)) })
})
const url = `http://127.0.0.1:${port}`
const data = mkdtempSync(join(tmpdir(), 'nqd-bench-'))
const nqd = spawn(bin, [], {
  env: { PATH: process.env.PATH, NQ_ADDR: `127.0.0.1:${port}`, NQ_DATA_DIR: data, NQ_LOG_LEVEL: 'error', NQ_RATE_PER_ADDR: '0', NQ_RATE_PER_TOKEN: '0' },
  stdio: 'inherit',
})
let worker
try {
  const deadline = Date.now() + 20000
  while (!(await fetch(url + '/healthz').then(r => r.ok, () => false))) {
    if (Date.now() > deadline) throw new Error('nqd did not start')
    await new Promise(r => setTimeout(r, 50))
  }
  const json = { 'content-type': 'application/json' }
  await fetch(url + '/api/_flows/bench-ts', { method: 'PUT', headers: json, body: JSON.stringify({ entry: 'noop', steps: { noop: { queue: 'bench-ts' } } }) })
  let next = 0
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next < runs) {
      next++
      const res = await fetch(url + '/api/_flows/bench-ts/start', { method: 'POST', headers: json, body: '{}' })
      if (!res.ok) throw new Error(`start: ${res.status} ${await res.text()}`)
    }
  }))
  const completed = async () => (await (await fetch(url + '/api/_flows/bench-ts/runs?status=completed&limit=1')).json()).total
  const t0 = performance.now()
  const cmd = process.env.BENCH_WORKER?.split(' ') ?? [process.execPath, join(pkg, 'bench', 'noop-worker.mjs')]
  worker = spawn(cmd[0], cmd.slice(1), {
    env: { ...process.env, NQD_URL: url, NQD_QUEUE: 'bench-ts', NQD_CONCURRENCY: concurrency },
    stdio: 'inherit',
  })
  const limit = Date.now() + 300000
  while ((await completed()) < runs) {
    if (Date.now() > limit) throw new Error('runs did not complete within 5 minutes')
    await new Promise(r => setTimeout(r, 20))
  }
  const secs = (performance.now() - t0) / 1000
  console.log(`${runs} no-op steps in ${secs.toFixed(2)} s: ${Math.round(runs / secs)} steps/s (concurrency ${concurrency}, one worker process, embedded store${process.env.BENCH_WORKER ? ', worker: ' + process.env.BENCH_WORKER : ''})`)
} finally {
  worker?.kill('SIGTERM')
  nqd.kill('SIGTERM')
  await new Promise(r => nqd.once('exit', r))
  rmSync(data, { recursive: true, force: true })
}
