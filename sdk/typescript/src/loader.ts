// Loads a folder of Nuxt Queue step files (TypeScript or JavaScript, nested
// folders too) the way Nuxt does, with jiti, after providing Nuxt Queue's
// auto-imports as globals.

import { readdir } from 'node:fs/promises'
import { join, relative, resolve, sep } from 'node:path'
import { createJiti } from 'jiti'
import { defineQueueConfig, defineQueueWorker, type Handler, type QueueWorkerConfig } from './define.js'
import { PermanentError } from './errors.js'
import type { StepSource } from './flows.js'

/** A loaded step file. */
export interface StepFile extends StepSource {
  file: string
  handler: Handler | undefined
}

const stepFile = /\.(?:ts|mts|cts|js|mjs|cjs)$/

/** Provides defineQueueConfig, defineQueueWorker and PermanentError as globals, as Nuxt's auto-imports do. */
export function installGlobals(): void {
  const g = globalThis as Record<string, unknown>
  g.defineQueueConfig = defineQueueConfig
  g.defineQueueWorker = defineQueueWorker
  g.PermanentError = PermanentError
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

/** Loads every step file under dir: its `config` export and its default export, the handler. */
export async function loadStepFiles(dir: string): Promise<{ files: StepFile[], skipped: string[] }> {
  const root = resolve(dir)
  installGlobals()
  const jiti = createJiti(import.meta.url, { interopDefault: true, moduleCache: false, fsCache: false })
  const files: StepFile[] = []
  const skipped: string[] = []
  const found = await findStepFiles(root)
  for (const rel of found.python) {
    skipped.push(`${rel}: a Python step file; run it with nqd's Python SDK`)
  }
  for (const abs of found.files) {
    const id = relative(root, abs).split(sep).join('/').replace(/\.[^.]+$/, '')
    const mod = await jiti.import<{ config?: QueueWorkerConfig, default?: unknown }>(abs)
    const handler = typeof mod.default === 'function' ? mod.default as Handler : undefined
    if (handler === undefined) {
      skipped.push(`${id}: no default export (defineQueueWorker(...)); not a step`)
    }
    files.push({ id, file: abs, config: mod.config, handler })
  }
  return { files, skipped }
}
