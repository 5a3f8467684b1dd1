// A worker that serves step `noop` and returns at once, for measuring how
// many steps per second nqd and this SDK carry. Build first (npm run build).
//
//   NQD_URL          nqd's address (default http://127.0.0.1:8080)
//   NQD_QUEUE        the queue (default bench-ts)
//   NQD_CONCURRENCY  jobs held at once (default 32)
//   NQD_TOKEN        an API token of scope write, when nqd has tokens
//   NQD_TRANSPORT    channel (the default) or http
import { existsSync } from 'node:fs'

if (!existsSync(new URL('../dist/index.js', import.meta.url))) {
  console.error('noop-worker: build the SDK first: (cd sdk/typescript && npm ci && npm run build)')
  process.exit(1)
}
const { createWorker } = await import('../dist/index.js')

const concurrency = Number(process.env.NQD_CONCURRENCY ?? '32')
const worker = createWorker({
  url: process.env.NQD_URL ?? 'http://127.0.0.1:8080',
  token: process.env.NQD_TOKEN,
  queues: [process.env.NQD_QUEUE ?? 'bench-ts'],
  concurrency,
  handlers: { noop: () => undefined },
  transport: process.env.NQD_TRANSPORT || undefined,
})
const stop = () => { void worker.stop(5000) }
process.on('SIGINT', stop)
process.on('SIGTERM', stop)
await worker.start()
