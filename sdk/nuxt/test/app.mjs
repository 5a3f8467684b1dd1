// Helpers of the module's tests: a real nqd, a fresh Nuxt 4 app made in a
// temporary folder with nuxt from the npm registry and this module and the
// SDK as packed by npm, and processes stopped when a test ends.
//
// Installing nuxt takes minutes, so its packages are kept in a cache folder
// (nuxt-<version> in NQD_NUXT_CACHE, else in nqd-nuxt-cache in the system's
// temporary folder) and reused; the apps are made in fresh folders below it,
// so that they find those packages.

import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
export const moduleDir = resolve(here, '..')
export const sdkDir = resolve(moduleDir, '..', 'typescript')
export const root = resolve(moduleDir, '..', '..')
export const nqdBin = process.env.NQD_BIN ?? join(root, 'bin', 'nqd')

/**
 * The packages an app is made with, from the npm registry: Nuxt 4, or the
 * version NQD_NUXT_VERSION names (a 3.x to check Nuxt 3).
 */
const registryDeps = { nuxt: process.env.NQD_NUXT_VERSION ?? '4.2.2' }

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer()
    s.unref()
    s.on('error', rej)
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address()
      s.close(() => { res(addr.port) })
    })
  })
}

/** Waits until cond gives a truthy value, or throws after timeoutMs. */
export async function waitFor(what, cond, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      const v = await cond()
      if (v) {
        return v
      }
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last === undefined ? '' : `: ${last instanceof Error ? last.message : String(last)}`}`)
    }
    await new Promise(r => setTimeout(r, 100))
  }
}

/** A child process whose output is kept for failure messages. */
export function startProcess(cmd, args, opts) {
  // A group of its own, so that stop reaches what it starts (nuxi dev forks).
  const p = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  let out = ''
  p.stdout.on('data', (b) => { out += b.toString() })
  p.stderr.on('data', (b) => { out += b.toString() })
  return {
    proc: p,
    output: () => out,
    async stop(signal = 'SIGTERM') {
      if (p.exitCode !== null || p.signalCode !== null) {
        return
      }
      const exited = new Promise(r => p.once('exit', r))
      process.kill(-p.pid, signal)
      await exited
    },
  }
}

/** Runs nqd on a free port with a temporary data directory. */
export async function startNqd() {
  const port = await freePort()
  const dataDir = mkdtempSync(join(tmpdir(), 'nqd-nuxt-data-'))
  const url = `http://127.0.0.1:${port}`
  let p
  const launch = async () => {
    p = startProcess(nqdBin, [], {
      env: { PATH: process.env.PATH ?? '', NQ_ADDR: `127.0.0.1:${port}`, NQ_DATA_DIR: dataDir, NQ_LOG_LEVEL: 'warn' },
    })
    await waitFor('nqd /healthz', async () => {
      if (p.proc.exitCode !== null) {
        throw new Error(`nqd exited: ${p.output()}`)
      }
      return (await fetch(url + '/healthz')).ok
    })
  }
  await launch()
  return {
    url,
    async call(method, path, body) {
      const res = await fetch(url + path, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
      const text = await res.text()
      if (!res.ok) {
        throw new Error(`${method} ${path}: ${res.status} ${text}`)
      }
      return text === '' ? undefined : JSON.parse(text)
    },
    /** Stops nqd and starts it again on the same port and data. */
    async restart() {
      await p.stop('SIGKILL')
      await launch()
    },
    async close() {
      await p.stop()
      rmSync(dataDir, { recursive: true, force: true })
    },
    output: () => p.output(),
  }
}

/**
 * npm's environment without the npm_config_* settings of the npm that runs
 * the tests (this package's legacy-peer-deps, say): the app's packages are
 * installed as an app's are.
 */
function npmEnv() {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_')))
}

function npm(args, cwd) {
  return execFileSync('npm', args, { cwd, env: npmEnv(), encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
}

/**
 * The cache folder with nuxt from the registry, and the SDK and the module
 * packed as npm would publish them (both built already). nuxt is installed
 * once and kept; the packs are installed anew on every run.
 */
export function depsDir() {
  const dir = join(process.env.NQD_NUXT_CACHE ?? join(tmpdir(), 'nqd-nuxt-cache'), `nuxt-${registryDeps.nuxt}`)
  const packs = join(dir, 'packs')
  mkdirSync(packs, { recursive: true })
  const deps = { ...registryDeps }
  for (const [name, pkgDir] of [['nqd-worker', sdkDir], ['nqd-nuxt', moduleDir]]) {
    const out = JSON.parse(npm(['pack', '--ignore-scripts', '--json', '--pack-destination', packs], pkgDir))
    // A fixed name, so that the lockfile names the same file on every run.
    renameSync(join(packs, out[0].filename), join(packs, `${name}.tgz`))
    deps[name] = `file:packs/${name}.tgz`
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ private: true, name: 'nqd-nuxt-test-deps', type: 'module', dependencies: deps }, null, 2) + '\n')
  if (!existsSync(join(dir, 'node_modules', 'nuxt'))) {
    console.error(`installing ${Object.entries(registryDeps).map(([k, v]) => `${k}@${v}`).join(' ')} into ${dir} (once; reused by later runs)`)
  }
  // The packs change from run to run under the same name: npm takes them
  // anew only when neither the lockfile nor node_modules has them.
  const lock = join(dir, 'package-lock.json')
  if (existsSync(lock)) {
    const l = JSON.parse(readFileSync(lock, 'utf8'))
    for (const name of ['nqd-worker', 'nqd-nuxt']) {
      delete l.packages?.[`node_modules/${name}`]
      rmSync(join(dir, 'node_modules', name), { recursive: true, force: true })
    }
    writeFileSync(lock, JSON.stringify(l, null, 2) + '\n')
  }
  npm(['install', '--no-audit', '--no-fund', '--loglevel=error'], dir)
  return dir
}

/** Writes a fresh app with files (path to text) in a new folder under dir/apps. */
export function makeApp(dir, files) {
  const apps = join(dir, 'apps')
  mkdirSync(apps, { recursive: true })
  const app = mkdtempSync(join(apps, 'app-'))
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(app, path)), { recursive: true })
    writeFileSync(join(app, path), text)
  }
  return app
}

/** The nuxi command of the cached nuxt. */
export function nuxi(dir) {
  return join(dir, 'node_modules', '.bin', 'nuxi')
}

/** An app's environment: nothing of the caller's NUXT_ or NQD_ settings but those given. */
export function appEnv(extra) {
  const env = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('NUXT_') && !k.startsWith('NQD_') && !k.startsWith('NQ_')) {
      env[k] = v
    }
  }
  return { ...env, NUXT_TELEMETRY_DISABLED: '1', CI: '1', ...extra }
}
