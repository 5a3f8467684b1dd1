#!/usr/bin/env node
// nqd-worker <dir> --url <nqd> [--token <t>] [--concurrency <n>]: runs a
// folder of Nuxt Queue step files against nqd.

import { parseArgs } from 'node:util'
import { AuthError } from './errors.js'
import { loadFolder } from './folder.js'

const usage = `usage: nqd-worker <dir> [--url <nqd>] [--token <token>] [--concurrency <n>]

Loads the Nuxt Queue step files under <dir> (TypeScript or JavaScript, nested
folders too), stores the flows their defineQueueConfig describe in nqd, and runs
their handlers until SIGINT or SIGTERM.

  --url          nqd's address (default $NQD_URL, else http://127.0.0.1:8080)
  --token        an API token of scope admin, or write if the flows are stored already
                 (default $NQD_TOKEN)
  --concurrency  jobs run at once per queue (default $NQD_CONCURRENCY, else 4)
  --grace        milliseconds running steps get to finish on a signal (default 10000)`

async function main(): Promise<number> {
  let args
  try {
    args = parseArgs({
      allowPositionals: true,
      options: {
        url: { type: 'string' },
        token: { type: 'string' },
        concurrency: { type: 'string' },
        grace: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    })
  } catch (err) {
    console.error(`nqd-worker: ${err instanceof Error ? err.message : String(err)}\n\n${usage}`)
    return 2
  }
  const { values, positionals } = args
  if (values.help === true) {
    console.log(usage)
    return 0
  }
  const dir = positionals[0]
  if (dir === undefined || positionals.length > 1) {
    console.error(usage)
    return 2
  }
  const url = values.url ?? process.env.NQD_URL ?? 'http://127.0.0.1:8080'
  const token = values.token ?? process.env.NQD_TOKEN
  const concurrency = Number(values.concurrency ?? process.env.NQD_CONCURRENCY ?? '4')
  const grace = Number(values.grace ?? '10000')
  if (!Number.isInteger(concurrency) || concurrency < 1 || !Number.isFinite(grace) || grace < 0) {
    console.error('nqd-worker: --concurrency must be a whole number of at least 1, --grace a number of milliseconds')
    return 2
  }
  const folder = await loadFolder({ dir, url, token, concurrency })
  if (folder.queues.length === 0) {
    console.error(`nqd-worker: no step files with a flow config under ${dir}`)
    return 1
  }
  console.error(`nqd-worker: serving queues ${folder.queues.join(', ')} from ${url}`)
  let stopping = false
  const onSignal = (): void => {
    if (stopping) {
      process.exit(130)
    }
    stopping = true
    console.error('nqd-worker: stopping; running steps get up to ' + String(grace) + ' ms (a second signal exits at once)')
    void folder.stop(grace)
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  await folder.start()
  return 0
}

main().then((code) => {
  process.exitCode = code
}, (err: unknown) => {
  if (err instanceof AuthError) {
    console.error(`nqd-worker: ${err.message}`)
  } else {
    console.error('nqd-worker:', err)
  }
  process.exitCode = 1
})
