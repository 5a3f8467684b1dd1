// Starts the nqd built by scripts/build-nqd.mjs on a free port and a
// temporary data directory, and reads runs back for the tests.

import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Logger } from '../src/index.js'

const here = dirname(fileURLToPath(import.meta.url))
/** The package's folder (tests run from build-test/test). */
export const pkgDir = resolve(here, '..', '..')
export const nqdBin = process.env.NQD_BIN ?? join(pkgDir, '.test-bin', 'nqd')

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer()
    s.unref()
    s.on('error', rej)
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address()
      s.close(() => {
        if (addr === null || typeof addr === 'string') {
          rej(new Error('no port'))
        } else {
          res(addr.port)
        }
      })
    })
  })
}

/** Waits until cond returns a truthy value, polling, or throws after timeoutMs. */
export async function waitFor<T>(what: string, cond: () => Promise<T | undefined | false | null> | T | undefined | false | null, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const v = await cond()
      if (v !== undefined && v !== false && v !== null) {
        return v
      }
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last === undefined ? '' : `: ${last instanceof Error ? last.message : JSON.stringify(last)}`}`)
    }
    await new Promise(r => setTimeout(r, 50))
  }
}

export interface RunEvent {
  id: string
  kind: string
  step?: string
  attempt?: number
  data?: Record<string, unknown>
}

export interface RunState {
  status: string
  steps: Record<string, { status: string, attempt: number }>
  state: Record<string, unknown>
  logs: { level: string, msg: string, step?: string }[]
}

export interface Nqd {
  url: string
  port: number
  dataDir: string
  /** Runs a request with the admin token when there is one. */
  call<T>(method: string, path: string, body?: unknown, token?: string): Promise<T>
  putFlow(def: { name: string } & Record<string, unknown>): Promise<void>
  start(flow: string, input?: unknown): Promise<string>
  run(runId: string): Promise<{ state: RunState, events: RunEvent[] }>
  /** Waits until the run completed, failed or was cancelled; returns it. */
  finished(runId: string, timeoutMs?: number): Promise<{ state: RunState, events: RunEvent[] }>
  /** Kills nqd at once (SIGKILL). */
  kill(): Promise<void>
  /** Starts nqd again on the same port and data directory. */
  restart(): Promise<void>
  /** Stops nqd and removes its data. */
  close(): Promise<void>
  /** nqd's output so far, for failure messages. */
  output(): string
}

export interface NqdOptions {
  env?: Record<string, string>
  /** A token sent by call() and the helpers. */
  adminToken?: string
}

export async function startNqd(opts: NqdOptions = {}): Promise<Nqd> {
  const port = await freePort()
  const dataDir = mkdtempSync(join(tmpdir(), 'nqd-ts-'))
  const url = `http://127.0.0.1:${port}`
  let proc: ChildProcess | undefined
  let out = ''
  const launch = async (): Promise<void> => {
    const p = spawn(nqdBin, [], {
      env: {
        PATH: process.env.PATH ?? '',
        NQ_ADDR: `127.0.0.1:${port}`,
        NQ_DATA_DIR: dataDir,
        NQ_LOG_LEVEL: 'warn',
        NQ_LOG_FORMAT: 'json',
        ...opts.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    proc = p
    p.stdout.on('data', (b: Buffer) => { out += b.toString() })
    p.stderr.on('data', (b: Buffer) => { out += b.toString() })
    await waitFor('nqd /healthz', async () => {
      if (p.exitCode !== null) {
        throw new Error(`nqd exited with ${String(p.exitCode)}: ${out}`)
      }
      const res = await fetch(url + '/healthz').catch(() => undefined)
      return res?.ok
    }, 20_000)
  }
  const stopProc = async (signal: NodeJS.Signals): Promise<void> => {
    const p = proc
    if (p === undefined || p.exitCode !== null || p.signalCode !== null) {
      return
    }
    const exited = new Promise(r => p.once('exit', r))
    p.kill(signal)
    await exited
  }
  await launch()
  const call = async <T>(method: string, path: string, body?: unknown, token = opts.adminToken): Promise<T> => {
    const headers: Record<string, string> = {}
    if (body !== undefined) {
      headers['content-type'] = 'application/json'
    }
    if (token !== undefined) {
      headers.authorization = `Bearer ${token}`
    }
    const res = await fetch(url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    if (!res.ok) {
      throw new Error(`${method} ${path}: ${res.status} ${text}`)
    }
    return (text === '' ? undefined : JSON.parse(text)) as T
  }
  const run = (runId: string): Promise<{ state: RunState, events: RunEvent[] }> =>
    call(`GET`, `/api/_events/flow/${encodeURIComponent(runId)}?limit=10000`)
  return {
    url,
    port,
    dataDir,
    call,
    async putFlow(def) {
      await call('PUT', `/api/_flows/${def.name}`, def)
    },
    async start(flow, input = {}) {
      const ans = await call<{ flowId: string }>('POST', `/api/_flows/${flow}/start`, input)
      return ans.flowId
    },
    run,
    finished(runId, timeoutMs = 20_000) {
      return waitFor(`run ${runId} to finish`, async () => {
        const r = await run(runId)
        return ['completed', 'failed', 'canceled', 'cancelled'].includes(r.state.status) ? r : undefined
      }, timeoutMs)
    },
    kill: () => stopProc('SIGKILL'),
    restart: launch,
    async close() {
      await stopProc('SIGTERM')
      rmSync(dataDir, { recursive: true, force: true })
    },
    output: () => out,
  }
}

/** A logger that keeps what it is told, for assertions and failure messages. */
export function memoryLogger(): Logger & { lines: string[] } {
  const lines: string[] = []
  const add = (level: string) => (msg: string, meta?: Record<string, unknown>): void => {
    lines.push(`${level} ${msg}${meta === undefined ? '' : ' ' + JSON.stringify(meta)}`)
  }
  return { lines, debug: add('debug'), info: add('info'), warn: add('warn'), error: add('error') }
}

/** The kinds of a run's events, in order. */
export function kinds(events: RunEvent[], step?: string): string[] {
  return events.filter(e => step === undefined || e.step === step).map(e => e.kind)
}

/** A throwaway redis-server on a free port, or undefined when there is none to start. */
export async function startRedis(): Promise<{ url: string, close: () => Promise<void> } | undefined> {
  const port = await freePort()
  const p = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  const failed = await new Promise<boolean>((res) => {
    p.once('error', () => { res(true) })
    p.once('spawn', () => { res(false) })
  })
  if (failed) {
    return undefined
  }
  await waitFor('redis-server', () => new Promise<boolean>((res) => {
    const c = connect(port, '127.0.0.1', () => { c.end(); res(true) })
    c.on('error', () => { res(false) })
  }), 10_000)
  return {
    url: `redis://127.0.0.1:${port}/0`,
    close: async () => {
      const exited = new Promise(r => p.once('exit', r))
      p.kill('SIGTERM')
      await exited
    },
  }
}
