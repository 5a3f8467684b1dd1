// Runs the nqd-worker command built in dist/, for the tests.

import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import { pkgDir } from './nqd.js'

export interface Cli {
  proc: ChildProcess
  out: () => string
  exited: Promise<number | null>
}

/** Starts the command with args and token; its output is kept for assertions. */
export function runCli(args: string[], token: string | undefined, env: Record<string, string> = {}): Cli {
  const proc = spawn(process.execPath, [join(pkgDir, 'dist', 'cli.js'), ...args], {
    env: { ...process.env, NQD_TOKEN: token ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  proc.stdout?.on('data', (b: Buffer) => { out += b.toString() })
  proc.stderr?.on('data', (b: Buffer) => { out += b.toString() })
  const exited = new Promise<number | null>(r => proc.once('exit', code => { r(code) }))
  return { proc, out: () => out, exited }
}
