// Builds the nqd server from this repository into .test-bin/nqd, so that the
// tests run against the nqd of the same checkout.
import { execFileSync } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const pkg = resolve(here, '..')
const root = resolve(pkg, '..', '..')
const out = join(pkg, '.test-bin', 'nqd')
mkdirSync(dirname(out), { recursive: true })
const go = process.env.GO ?? 'go'
console.error(`building nqd: ${go} build -o ${out} ./cmd/server`)
execFileSync(go, ['build', '-o', out, './cmd/server'], { cwd: root, stdio: 'inherit' })
