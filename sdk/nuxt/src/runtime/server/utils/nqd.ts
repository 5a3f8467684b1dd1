// useNqd(): the nqd client for server code, configured from runtimeConfig
// (NUXT_NQD_URL, NUXT_NQD_TOKEN). One client per process, kept alive.

import { createClient, type Client, type FlowTypes } from 'nqd-worker/client'
import { useRuntimeConfig } from '#imports'
import type { NqdFlows } from '../../../module.js'

/** The step files' flows when the module found some, else any flow name. */
export type AppFlows = keyof NqdFlows extends never ? FlowTypes : NqdFlows & FlowTypes

// AppFlows is FlowTypes until an app's step files or declarations fill
// NqdFlows, so here the type arguments look redundant; in an app they are not.
/* eslint-disable @typescript-eslint/no-unnecessary-type-arguments */
let cached: { key: string, client: Client<AppFlows> } | undefined

export function useNqd(): Client<AppFlows> {
  const { nqd } = useRuntimeConfig() as unknown as { nqd: { url: string, token: string } }
  const key = `${nqd.url}\n${nqd.token}`
  if (cached?.key !== key) {
    cached?.client.close()
    cached = { key, client: createClient<AppFlows>({ url: nqd.url, token: nqd.token }) }
  }
  return cached.client
}
