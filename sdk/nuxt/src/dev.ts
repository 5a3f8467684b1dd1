// The development worker: nqd-worker running the app's step files, started
// anew whenever one of them changes, so the next run runs the new code.

import { spawn, type ChildProcess } from 'node:child_process'
import { watch, type FSWatcher } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The folders step files live in: server/functions (v0.5) and server/queues (v0.4). */
export function stepDirs(serverDir: string): string[] {
  return [join(serverDir, 'functions'), join(serverDir, 'queues')]
}

export interface DevWorkerOptions {
  dirs: string[]
  url: string
  token: string
  storeFlows: boolean
  log: { info(msg: string): void, warn(msg: string): void }
  /** How long after the last change the worker restarts; default 150 ms. */
  settleMs?: number
}

export interface DevWorker {
  start(): void
  stop(): Promise<void>
}

/** The nqd-worker command of the installed nqd-worker package. */
export function workerCommand(): string {
  return join(dirname(fileURLToPath(import.meta.resolve('nqd-worker'))), 'cli.js')
}

export function devWorker(opts: DevWorkerOptions): DevWorker {
  let child: ChildProcess | undefined
  let exited: Promise<void> = Promise.resolve()
  let watchers: FSWatcher[] = []
  let timer: NodeJS.Timeout | undefined
  let stopped = false
  // Restarts one after the other, never two workers at once.
  let queue: Promise<void> = Promise.resolve()

  const launch = (): void => {
    const args = [workerCommand(), ...opts.dirs, '--url', opts.url, '--grace', '2000']
    if (opts.storeFlows) {
      args.push('--store-flows')
    }
    // The token goes by environment, never on a command line others can read.
    const env = { ...process.env, NQD_TOKEN: opts.token }
    const p = spawn(process.execPath, args, { env, stdio: ['ignore', 'inherit', 'inherit'] })
    child = p
    // Nuxt's dev process may end without its close hook (a signal to nuxi):
    // the worker must not outlive it.
    const orphaned = (): void => { p.kill('SIGTERM') }
    process.once('exit', orphaned)
    p.once('exit', () => { process.removeListener('exit', orphaned) })
    exited = new Promise((resolve) => {
      p.once('exit', (code, signal) => {
        if (child === p && !stopped && signal === null) {
          opts.log.warn(`nqd: the step file worker exited with ${String(code)}; it starts again when a step file changes`)
        }
        resolve()
      })
      p.once('error', (err) => {
        opts.log.warn(`nqd: the step file worker did not start: ${err.message}`)
        resolve()
      })
    })
  }

  const halt = async (): Promise<void> => {
    const p = child
    child = undefined
    if (p !== undefined && p.exitCode === null && p.signalCode === null) {
      p.kill('SIGTERM')
    }
    await exited
  }

  const restart = (): void => {
    queue = queue.then(async () => {
      if (stopped) {
        return
      }
      await halt()
      opts.log.info('nqd: a step file changed; the worker starts again')
      launch()
    })
  }

  return {
    start() {
      launch()
      watchers = opts.dirs.map(dir => watch(dir, { recursive: true }, () => {
        clearTimeout(timer)
        timer = setTimeout(restart, opts.settleMs ?? 150)
      }))
    },
    async stop() {
      stopped = true
      clearTimeout(timer)
      for (const w of watchers) {
        w.close()
      }
      await queue
      await halt()
    },
  }
}
