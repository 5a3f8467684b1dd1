// The Nuxt auto-imports nqd-worker provides to step files, for their type
// checking: add "nqd-worker/globals" to a tsconfig's "types".

import type { defineQueueConfig as DefineQueueConfig, defineQueueWorker as DefineQueueWorker } from './define.js'
import type { PermanentError as PermanentErrorClass } from './errors.js'

declare global {
  var defineQueueConfig: typeof DefineQueueConfig
  var defineQueueWorker: typeof DefineQueueWorker
  var PermanentError: typeof PermanentErrorClass
}

export {}
