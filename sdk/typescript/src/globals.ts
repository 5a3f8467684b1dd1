// The Nuxt auto-imports nqd-worker provides to step files, for their type
// checking: add "nqd-worker/globals" to a tsconfig's "types".

import type {
  defineFunction as DefineFunction, defineFunctionConfig as DefineFunctionConfig, defineQueueConfig as DefineQueueConfig,
  defineQueueWorker as DefineQueueWorker, defineTriggerConfig as DefineTriggerConfig,
} from './define.js'
import type { PermanentError as PermanentErrorClass } from './errors.js'

declare global {
  var defineQueueConfig: typeof DefineQueueConfig
  var defineQueueWorker: typeof DefineQueueWorker
  var PermanentError: typeof PermanentErrorClass
  var defineFunctionConfig: typeof DefineFunctionConfig
  var defineFunction: typeof DefineFunction
  var defineTriggerConfig: typeof DefineTriggerConfig
  var defineAwaitRegisterHook: <T>(fn: T) => T
  var defineAwaitResolveHook: <T>(fn: T) => T
  var defineAwaitTimeoutHook: <T>(fn: T) => T
}

export {}
