#!/usr/bin/env node
// nqd-worker <path>... [options]: runs Nuxt Queue step files against nqd.

import { parseArgs } from 'node:util'
import { AuthError } from './errors.js'
import { loadFolder } from './folder.js'
import type { Logger } from './worker.js'

const usage = `usage: nqd-worker <path>... [--url <nqd>] [--token <token>] [--queue <name>]...
                  [--concurrency <n>] [--grace <ms>] [--store-flows] [--log-level <level>]
                  [--transport channel|http]

Loads the Nuxt Queue step files under each <path> (a folder, searched with its
nested folders, or one file; TypeScript or JavaScript, both generations of
step files) and runs their handlers against nqd until SIGINT or SIGTERM.

  --url, -u          nqd's address (default $NQD_URL, else http://127.0.0.1:8080)
  --token, -t        an API token: scope write serves steps; --store-flows needs admin
                     (default $NQD_TOKEN)
  --queue, -q        serve only this queue (repeatable; default every queue the files name)
  --concurrency, -c  jobs held and run at once per queue (default $NQD_CONCURRENCY, else 4)
  --grace            milliseconds stop takes at most on a signal: running steps finish
                     within it, the rest are reported as retriable (default 10000)
  --store-flows      store the flow definitions the files describe (PUT /api/_flows/<name>,
                     scope admin) and register the triggers they define before serving
  --log-level        debug, info, warn or error (default $NQD_LOG_LEVEL, else info)
  --transport        channel (one WebSocket, falling back to HTTP when nqd cannot upgrade)
                     or http (default $NQD_TRANSPORT, else channel)`

const levels = ['debug', 'info', 'warn', 'error'] as const
type Level = typeof levels[number]

function stderrLogger(min: Level): Logger {
  const at = (level: Level) => (msg: string, meta?: Record<string, unknown>): void => {
    if (levels.indexOf(level) >= levels.indexOf(min)) {
      console.error(`nqd-worker${level === 'info' ? '' : ' ' + level}: ${msg}${meta === undefined ? '' : ' ' + JSON.stringify(meta)}`)
    }
  }
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}

async function main(): Promise<number> {
  let args
  try {
    args = parseArgs({
      allowPositionals: true,
      options: {
        url: { type: 'string', short: 'u' },
        token: { type: 'string', short: 't' },
        queue: { type: 'string', short: 'q', multiple: true },
        concurrency: { type: 'string', short: 'c' },
        grace: { type: 'string' },
        'store-flows': { type: 'boolean' },
        'log-level': { type: 'string' },
        transport: { type: 'string' },
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
  if (positionals.length === 0) {
    console.error(usage)
    return 2
  }
  const url = values.url ?? process.env.NQD_URL ?? 'http://127.0.0.1:8080'
  const token = values.token ?? process.env.NQD_TOKEN
  const concurrency = Number(values.concurrency ?? process.env.NQD_CONCURRENCY ?? '4')
  const grace = Number(values.grace ?? '10000')
  const level = (values['log-level'] ?? process.env.NQD_LOG_LEVEL ?? 'info').toLowerCase()
  if (!Number.isInteger(concurrency) || concurrency < 1 || !Number.isFinite(grace) || grace < 0) {
    console.error('nqd-worker: --concurrency must be a whole number of at least 1, --grace a number of milliseconds')
    return 2
  }
  const transport = values.transport ?? process.env.NQD_TRANSPORT ?? 'channel'
  if (transport !== 'channel' && transport !== 'http') {
    console.error('nqd-worker: --transport must be channel or http')
    return 2
  }
  if (!(levels as readonly string[]).includes(level)) {
    console.error(`nqd-worker: --log-level must be one of ${levels.join(', ')}`)
    return 2
  }
  const logger = stderrLogger(level as Level)
  const folder = await loadFolder({
    paths: positionals, url, token, concurrency, logger,
    queues: values.queue, storeFlows: values['store-flows'] === true, transport,
  })
  if (folder.queues.length === 0) {
    console.error(`nqd-worker: no step files with a flow config to serve under ${positionals.join(', ')}`)
    return 1
  }
  logger.info(`serving queues ${folder.queues.join(', ')} from ${url}`)
  let stopping = false
  const onSignal = (): void => {
    if (stopping) {
      process.exit(130)
    }
    stopping = true
    logger.info(`stopping within ${String(grace)} ms (a second signal exits at once)`)
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
