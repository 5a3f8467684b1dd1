// useNqd(): the nqd client for server code, configured from runtimeConfig
// (NUXT_NQD_URL, NUXT_NQD_TOKEN). One client per process, kept alive.

import { createClient, type Client, type FlowType, type FlowTypes } from 'nqd-worker/client'
import { useRuntimeConfig } from '#imports'
import type { NqdFlowNames, NqdFlows } from '../../../module.js'

// Both interfaces are empty here and filled in an app, which the lint cannot see.
// eslint-disable-next-line @typescript-eslint/no-redundant-type-constituents, @typescript-eslint/no-duplicate-type-constituents
type Names = keyof NqdFlowNames | keyof NqdFlows

/**
 * The flows of the step files and those the app declares, by name; any
 * name when there are none.
 */
export type AppFlows = [Names] extends [never] ? FlowTypes : { [K in Names]: K extends keyof NqdFlows ? NqdFlows[K] & FlowType : FlowType }

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
