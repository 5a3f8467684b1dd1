export { createWorker } from './worker.js'
export type { Job, Logger, Transport, Worker, WorkerOptions } from './worker.js'
export { defineFunction, defineFunctionConfig, defineQueueConfig, defineQueueWorker, defineTriggerConfig } from './define.js'
export type {
  AwaitConfig, FlowConfig, FlowRole, FlowTriggers, Handler, NuxtAwaitConfig, NuxtFunction, QueueConfig, QueueJobDefaults,
  QueueWorker, QueueWorkerConfig, TriggerDefinition, WorkerConfig,
} from './define.js'
export type { CancelledRun, LogLevel, Resume, RunningFlow, StartedRun, StepContext, StepFlow, StepLogger, StepState } from './context.js'
export { AuthError, EncodingError, NqdError, PermanentError, isPermanent } from './errors.js'
export { buildFlows } from './flows.js'
export type { BuiltFlows, FlowDefinition, FlowTrigger, StepDefinition, StepSource } from './flows.js'
export { loadFolder, subscribedInput } from './folder.js'
export type { FolderOptions, FolderWorker } from './folder.js'
export { loadStepFiles, installGlobals } from './loader.js'
export { registerTriggers, triggerSpec } from './triggers.js'
export type { TriggerSpec } from './triggers.js'
export { createClient, result, RunCancelledError, RunFailedError, WaitTimeoutError } from './client.js'
export type {
  CallOptions, Client, ClientOptions, EventsOptions, FlowMap, FlowType, FlowTypes, RunEvent, RunState, RunStatus, RunStep, StartOptions,
  StartedRun as StartedClientRun, StreamItem, WaitOptions,
} from './client.js'
