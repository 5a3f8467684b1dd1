// Loads Nuxt Queue step files (TypeScript or JavaScript, nested folders
// too) the way Nuxt does, with jiti, after providing the Nuxt auto-imports of
// both generations (defineQueueConfig/defineQueueWorker of October 2025,
// defineFunctionConfig/defineFunction of v0.5) as globals and as `#imports`.

import { readdir, stat } from 'node:fs/promises'
import { basename, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createJiti } from 'jiti'
import type { Handler, QueueWorkerConfig } from './define.js'
import * as autoImports from './imports.js'
import type { StepSource } from './flows.js'

/** A loaded step file. */
export interface StepFile extends StepSource {
  file: string
  handler: Handler | undefined
}

const stepFile = /\.(?:ts|mts|cts|js|mjs|cjs)$/

/** Provides the Nuxt auto-imports of step files as globals, as Nuxt does. */
export function installGlobals(): void {
  Object.assign(globalThis, autoImports)
}

/**
 * Lists the step files under dir, sorted; type declarations, node_modules and
 * hidden folders are skipped. Python step files are listed apart.
 */
export async function findStepFiles(dir: string): Promise<{ files: string[], python: string[] }> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true })
  const files: string[] = []
  const python: string[] = []
  for (const e of entries) {
    const parent = (e as { parentPath?: string, path?: string }).parentPath ?? (e as { path?: string }).path ?? dir
    const abs = join(parent, e.name)
    const rel = relative(dir, abs)
    if (!e.isFile() || rel.split(sep).some(part => part === 'node_modules' || part.startsWith('.'))) {
      continue
    }
    if (e.name.endsWith('.py')) {
      python.push(rel)
    } else if (stepFile.test(e.name) && !/\.d\.[mc]?ts$/.test(e.name)) {
      files.push(abs)
    }
  }
  return { files: files.sort(), python: python.sort() }
}

/**
 * Loads every step file under paths (folders, searched with their nested
 * folders, or single files): its `config` export and its default export,
 * the handler. A file's id is its path from the folder without its
 * extension (its base name for a single file).
 */
export async function loadStepFiles(paths: string | string[]): Promise<{ files: StepFile[], skipped: string[] }> {
  installGlobals()
  const jiti = createJiti(import.meta.url, {
    interopDefault: true, moduleCache: false, fsCache: false,
    alias: { '#imports': fileURLToPath(new URL('./imports.js', import.meta.url)) },
  })
  const files: StepFile[] = []
  const skipped: string[] = []
  for (const path of [paths].flat()) {
    const root = resolve(path)
    let found: { files: string[], python: string[] }
    let base = root
    if ((await stat(root)).isDirectory()) {
      found = await findStepFiles(root)
    } else {
      base = resolve(root, '..')
      found = root.endsWith('.py') ? { files: [], python: [basename(root)] } : { files: [root], python: [] }
    }
    for (const rel of found.python) {
      skipped.push(`${rel}: a Python step file; run it with nqd's Python SDK`)
    }
    for (const abs of found.files) {
      const id = relative(base, abs).split(sep).join('/').replace(/\.[^.]+$/, '')
      let mod: { config?: QueueWorkerConfig, default?: unknown }
      try {
        mod = await jiti.import<{ config?: QueueWorkerConfig, default?: unknown }>(abs)
      } catch (err) {
        // Say which file: a Nuxt server file that is no step (an API route,
        // say) fails on auto-imports nqd-worker does not provide.
        throw new Error(`${abs}: ${err instanceof Error ? err.message : String(err)} (is it a step file?)`, { cause: err })
      }
      const handler = typeof mod.default === 'function' ? mod.default as Handler : undefined
      if (handler === undefined) {
        skipped.push(`${id}: no default export (defineFunction(...) or defineQueueWorker(...)); not a step`)
      }
      files.push({ id, file: abs, config: mod.config, handler })
    }
  }
  return { files, skipped }
}
