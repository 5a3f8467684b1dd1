// nqd-nuxt: one module line puts a Nuxt app on nqd. It serves the Nuxt
// Queue UI's API and sockets from nqd in the app's origin, runs the app's
// step files against nqd in development, and gives app code useNqd() and
// useNqdRun().

import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { addImports, addServerHandler, addServerImports, addTemplate, addTypeTemplate, createResolver, defineNuxtModule, useLogger } from '@nuxt/kit'
import { devWorker, stepDirs } from './dev.js'
import { flowNames } from './flows.js'

/**
 * The flows app code starts by name. The module fills it with the names the
 * step files define; declare a flow's input and result in a .d.ts of your
 * app to type its runs:
 *
 *     declare module 'nqd-nuxt' {
 *       interface NqdFlows { 'send-invoice': { input: { orderId: string }, result: { invoiceId: string } } }
 *     }
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface NqdFlows {}

/**
 * The names of the flows the step files define, which the module declares
 * (`.nuxt/types/nqd-flows.d.ts`); a name declared here and not in NqdFlows
 * takes and gives unknown.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface NqdFlowNames {}

/** The API prefixes of nqd that the Nuxt Queue UIs call. */
export const uiPrefixes = ['/api/_flows', '/api/_events', '/api/_queues', '/api/_triggers', '/api/_scheduler', '/api/_webhook', '/api/_auth']

export interface ModuleOptions {
  /** nqd's base URL; NUXT_NQD_URL at run time. Default http://127.0.0.1:8080. */
  url: string
  /** An API token for nqd, kept on the server; NUXT_NQD_TOKEN at run time. */
  token: string
  /**
   * Serve the Nuxt Queue UI's API prefixes (uiPrefixes) from nqd in the
   * app's origin, WebSockets included; false leaves them to the app. A list
   * replaces the prefixes.
   */
  proxy: boolean | string[]
  /**
   * In development, run the step files under server/functions and
   * server/queues against nqd with nqd-worker, restarted when one changes.
   */
  devWorker: boolean
  /** With devWorker: store the flows the step files describe (needs an admin token when nqd has tokens). */
  storeFlows: boolean
}

declare module '@nuxt/schema' {
  interface RuntimeConfig {
    nqd: { url: string, token: string, prefixes: string[] }
  }
}

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }

export default defineNuxtModule<ModuleOptions>({
  meta: {
    name: 'nqd-nuxt',
    version: pkg.version,
    configKey: 'nqd',
    compatibility: { nuxt: '>=3.13.0' },
  },
  defaults: {
    url: 'http://127.0.0.1:8080',
    token: '',
    proxy: true,
    devWorker: true,
    storeFlows: true,
  },
  async setup(options, nuxt) {
    const log = useLogger('nqd')
    const resolver = createResolver(import.meta.url)
    const resolve = (path: string): string => resolver.resolve(path)
    const prefixes = options.proxy === true ? uiPrefixes : options.proxy === false ? [] : options.proxy

    // Settings read on the server at run time, so NUXT_NQD_URL and
    // NUXT_NQD_TOKEN override them there; the token never reaches the page.
    const rc = nuxt.options.runtimeConfig as { nqd?: Partial<{ url: string, token: string, prefixes: string[] }> }
    rc.nqd = { url: rc.nqd?.url ?? options.url, token: rc.nqd?.token ?? options.token, prefixes }

    if (prefixes.length > 0) {
      // WebSocket upgrades cannot be proxied by routeRules: Nitro hands
      // them to the crossws hooks of the handler whose route matches.
      const nitro = nuxt.options.nitro as { experimental?: Record<string, unknown> }
      nitro.experimental = { ...nitro.experimental, websocket: true }
      // A middleware per prefix runs before any route of the app or of the
      // Nuxt Queue module, and is what an upgrade to its prefix resolves to.
      for (const route of prefixes) {
        addServerHandler({ route, middleware: true, handler: resolve('./runtime/server/proxy') })
      }
    }

    addServerImports([{ name: 'useNqd', from: resolve('./runtime/server/utils/nqd') }])
    addImports([{ name: 'useNqdRun', from: resolve('./runtime/app/composables/useNqdRun') }])

    const dirs = stepDirs(nuxt.options.serverDir)
    const names = await flowNames(dirs).catch((err: unknown) => {
      log.warn(`nqd: could not read the flows of the step files: ${err instanceof Error ? err.message : String(err)}`)
      return []
    })
    const flowsType = (): string => [
      '// The flows the step files define, by name (nqd-nuxt).',
      "declare module 'nqd-nuxt' {",
      '  interface NqdFlowNames {',
      ...names.map(n => `    ${JSON.stringify(n)}: true`),
      '  }',
      '}',
      'export {}',
      '',
    ].join('\n')
    addTypeTemplate({ filename: 'types/nqd-flows.d.ts', getContents: flowsType }, { nuxt: true, nitro: true })

    if (nuxt.options.modules.some(m => m === 'nvent' || (Array.isArray(m) && m[0] === 'nvent'))) {
      replaceAnalyzedFlows(nuxt, options.url)
    } else {
      // Without the Nuxt Queue module, nqd-worker provides the step files'
      // auto-imports (defineFunction, defineQueueWorker, …): their types too.
      addTypeTemplate({
        filename: 'types/nqd-step-globals.d.ts',
        getContents: () => "// The auto-imports of step files, as nqd-worker provides them (nqd-nuxt).\nimport 'nqd-worker/globals'\nexport {}\n",
      }, { nitro: true })
    }

    if (nuxt.options.dev && options.devWorker && !nuxt.options._prepare) {
      const existing = dirs.filter(d => existsSync(d))
      if (existing.length === 0) {
        log.info(`nqd: no step files under ${join(nuxt.options.serverDir, 'functions')} or ${join(nuxt.options.serverDir, 'queues')}; no worker started`)
        return
      }
      const w = devWorker({
        dirs: existing,
        url: process.env.NUXT_NQD_URL ?? rc.nqd.url ?? options.url,
        token: process.env.NUXT_NQD_TOKEN ?? rc.nqd.token ?? options.token,
        storeFlows: options.storeFlows,
        log,
      })
      nuxt.hook('ready', () => { w.start() })
      nuxt.hook('close', () => w.stop())
    }
  },
})

/**
 * The v0.5 UI draws a flow's diagram from a module generated at build time
 * from the app's step files; with nqd running them, nqd's stored flows are
 * the truth. Replaced only when nqd answers at build time.
 */
function replaceAnalyzedFlows(nuxt: { hook: (name: 'modules:done', fn: () => void) => void }, fallbackUrl: string): void {
  nuxt.hook('modules:done', () => {
    const url = process.env.NUXT_NQD_URL ?? fallbackUrl
    const token = process.env.NUXT_NQD_TOKEN
    addTemplate({
      filename: 'analyzed-flows.mjs',
      write: true,
      async getContents() {
        let flows: unknown = []
        try {
          const res = await fetch(`${url}/api/_flows`, { headers: token === undefined || token === '' ? {} : { authorization: `Bearer ${token}` } })
          if (res.ok) {
            flows = await res.json()
          }
        } catch {
          // nqd is not up while building: the UI lists no diagrams until the next build.
        }
        return [
          `export const analyzedFlows = ${JSON.stringify(flows)}`,
          'export function useAnalyzedFlows() { return analyzedFlows }',
          'export default useAnalyzedFlows',
          '',
        ].join('\n')
      },
    })
  })
}
