// The Nqd-Worker-* headers that name a worker process in nqd's worker
// registry (docs/worker-protocol.md): an id of its own, the program's
// name, the SDK and its version, the host and the concurrency.

import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'
import { hostname } from 'node:os'
import { basename } from 'node:path'
import { fileURLToPath } from 'node:url'

/** s with what a worker id may not hold replaced by '-', cut to n characters. */
function idPart(s: string, n: number): string {
  const out = s.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[-._]+/, '').slice(0, n)
  return out === '' ? 'worker' : out
}

/** This package's version, read from its package.json; 'unknown' if none is found. */
function sdkVersion(): string {
  const require = createRequire(import.meta.url)
  for (const path of ['../package.json', '../../package.json']) {
    try {
      const pkg = require(path) as { name?: unknown, version?: unknown }
      if (pkg.name === 'nqd-worker' && typeof pkg.version === 'string') {
        return pkg.version
      }
    } catch {
      // not there: try the next
    }
  }
  return 'unknown'
}

/** The running script's file name; nqd-worker when it is this package's command. */
function programName(): string {
  const script = process.argv[1] ?? ''
  if (script === '') return 'node'
  return script === fileURLToPath(new URL('./cli.js', import.meta.url)) ? 'nqd-worker' : basename(script)
}

/** The headers every call of a worker with this concurrency carries. */
export function selfHeaders(concurrency: number): Record<string, string> {
  const host = hostname()
  return {
    'nqd-worker-id': `${idPart(host, 60)}-${process.pid}-${randomBytes(4).toString('hex')}`,
    'nqd-worker-name': idPart(programName(), 128),
    'nqd-worker-sdk': 'typescript',
    'nqd-worker-version': sdkVersion(),
    'nqd-worker-host': idPart(host, 128),
    'nqd-worker-concurrency': String(concurrency),
  }
}
