// What the runtime files use of Nuxt's and Nitro's virtual #imports, for
// type checking here; in an app, Nuxt provides the module itself.
export declare function useRuntimeConfig(): Record<string, unknown>
