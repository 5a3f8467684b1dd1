// The names of the flows the app's step files define, for the types of
// useNqd(): read by the loader nqd-worker runs them with, in a process of
// its own, so that the step files' globals and imports stay out of Nuxt's.

import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'

const script = `
const { buildFlows, installGlobals, loadStepFiles } = await import(process.argv[1])
installGlobals()
const { files } = await loadStepFiles(process.argv.slice(2))
process.stdout.write(JSON.stringify([...new Set(buildFlows(files).flows.map(f => f.name))].sort()))
`

export async function flowNames(dirs: string[]): Promise<string[]> {
  const existing = dirs.filter(d => existsSync(d))
  if (existing.length === 0) {
    return []
  }
  const sdk = import.meta.resolve('nqd-worker')
  const out = await new Promise<string>((resolve, reject) => {
    execFile(process.execPath, ['--input-type=module', '-e', script, sdk, ...existing], { timeout: 30_000, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err !== null) {
        reject(new Error(`${err.message}${stderr === '' ? '' : `: ${stderr.trim().slice(0, 500)}`}`))
      } else {
        resolve(stdout)
      }
    })
  })
  const names = JSON.parse(out) as unknown
  return Array.isArray(names) ? names.filter((n): n is string => typeof n === 'string') : []
}
