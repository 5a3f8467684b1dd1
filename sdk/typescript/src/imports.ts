// The Nuxt auto-imports a step file may use, as one module: the loader
// provides them as globals (a file without an import line) and as the
// module `#imports` (a file that imports them, as Nuxt apps may).

import { defineFunction, defineFunctionConfig, defineQueueConfig, defineQueueWorker, defineTriggerConfig } from './define.js'
import { PermanentError } from './errors.js'

/**
 * The hooks of a v0.5 step file (onAwaitRegister, onAwaitTimeout) are kept
 * as they are; nqd registers and times out awaits itself and does not run them.
 */
function defineHook<T>(fn: T): T {
  return fn
}

export const defineAwaitRegisterHook = defineHook
export const defineAwaitResolveHook = defineHook
export const defineAwaitTimeoutHook = defineHook

export { defineFunction, defineFunctionConfig, defineQueueConfig, defineQueueWorker, defineTriggerConfig, PermanentError }
