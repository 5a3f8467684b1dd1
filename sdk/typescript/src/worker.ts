// createWorker: claims jobs of nqd's worker protocol, runs each job's step
// handler, keeps its lease with heartbeats, and reports its events, its
// result or its failure, retrying every report until the lease ends.

import { randomUUID } from 'node:crypto'
import { backoffDelay, sleep } from './backoff.js'
import { Channel, fallsBack, UpgradeRefusedError, type Hello, type JobCall } from './channel.js'
import { buildContext, type ContextHost, type ReportEvent } from './context.js'
import type { Handler } from './define.js'
import { AuthError, EncodingError, encodeJSON, isPermanent, NqdError } from './errors.js'
import { Http, isTransient } from './http.js'
import { selfHeaders } from './self.js'

/** Where the worker's own messages go; console by default. */
export interface Logger {
  debug(msg: string, meta?: Record<string, unknown>): void
  info(msg: string, meta?: Record<string, unknown>): void
  warn(msg: string, meta?: Record<string, unknown>): void
  error(msg: string, meta?: Record<string, unknown>): void
}

export interface WorkerOptions {
  /** nqd's base URL, e.g. http://127.0.0.1:8080. */
  url: string
  /** An API token of scope write, when nqd has tokens. */
  token?: string | undefined
  /** The queues to take jobs from. */
  queues: string[]
  /**
   * Jobs held at once, from their claim until their outcome is
   * acknowledged; default 4. The worker claims a job only for a free slot,
   * so a claimed job starts at once and is heartbeaten from the start. A job
   * whose handler succeeded keeps its slot while its completion claims the
   * slot's next job (docs/worker-protocol.md, Complete), which then runs in
   * it.
   */
  concurrency?: number | undefined
  /**
   * Jobs of each queue held at once, when the queues differ: every queue of
   * queues gets one, and concurrency defaults to (and must be at least)
   * their sum. Over the worker channel nqd offers a queue's jobs only while
   * it has room (an nqd that cannot makes the worker claim over HTTP); over
   * HTTP each queue is claimed on its own.
   */
  queueConcurrency?: Record<string, number> | undefined
  /**
   * Step handlers keyed by `<flowName>/<step>`, or by step name alone for
   * every flow; the flow-qualified key wins, so one worker serves two
   * flows with a step of the same name.
   */
  handlers: Record<string, Handler>
  logger?: Logger | undefined
  /**
   * The longest wait between two heartbeats of a held job. The interval is
   * a third of the lease nqd grants (from the claim's leaseUntil), shorter
   * when this says so; there is no need to set it.
   */
  heartbeatMs?: number | undefined
  /** How long one claim waits for work; default 10 s. */
  claimWaitMs?: number | undefined
  /**
   * How the worker speaks to nqd: 'channel' (the default) opens the worker
   * channel, one WebSocket over which nqd offers jobs as slots free up, and
   * falls back to 'http' (claims and calls) when nqd or a proxy cannot
   * upgrade; 'http' never tries the channel.
   */
  transport?: Transport | undefined
  /** The worker's name in nqd's worker registry (the channel's hello). */
  name?: string | undefined
}

/** How a worker speaks to nqd (see WorkerOptions.transport). */
export type Transport = 'channel' | 'http'

/** A job as nqd hands it out. */
export interface Job {
  id: string
  queue: string
  flowName: string
  runId: string
  step: string
  input?: unknown
  attempt: number
  lease: string
  leaseUntil: number
}

export interface Worker {
  /**
   * Claims and runs jobs until stop(). Resolves once the worker stopped;
   * rejects with an AuthError when nqd refuses its token (401 or 403), and
   * with an NqdError when it refuses its claim (400: a queue name it does
   * not take, say).
   */
  start(): Promise<void>
  /**
   * Stops claiming, lets running steps finish within graceMs (default 10 s),
   * reports the ones still running as retriable failures, and resolves.
   */
  stop(graceMs?: number): Promise<void>
  /** Handlers running right now: never more than concurrency. */
  readonly active: number
  /**
   * Jobs held right now: those whose handler runs, and those whose handler
   * returned and whose outcome is being reported (at most concurrency more).
   */
  readonly held: number
}

/** How long step.started waits for the step's first report or outcome. */
const startDelayMs = 100

/**
 * How long a completion's claim waits for the slot's next job when none is
 * ready: long enough that a run started right after this one completed (by a
 * caller that waits for each run before it starts the next) is handed to the
 * slot in its start's own write, short enough that an idle slot is free again
 * at once (docs/worker-protocol.md, Complete).
 */
const nextJobWaitMs = 50

/** The part of stop()'s grace period kept for reporting the steps still running, at most. */
const reportReserveMs = 2_000

/** The time limit of every call but the claim, which gets its long-poll on top. */
const callTimeoutMs = 10_000

/** The longest wait between two heartbeats, whatever the lease. */
const maxBeatMs = 10_000

/** Most events in one call: a step that logs in a loop sends them in calls of this size. */
const maxBatch = 100

const consoleLogger: Logger = {
  debug: () => undefined,
  info: (msg, meta) => { console.error(line('info', msg, meta)) },
  warn: (msg, meta) => { console.error(line('warn', msg, meta)) },
  error: (msg, meta) => { console.error(line('error', msg, meta)) },
}

function line(level: string, msg: string, meta?: Record<string, unknown>): string {
  return `nqd-worker ${level}: ${msg}${meta === undefined ? '' : ' ' + JSON.stringify(meta)}`
}

interface ClaimAnswer {
  jobs: Job[]
}

/** The answer to complete or fail: jobs only when a completion claimed. */
interface FinishAnswer {
  jobs?: Job[]
}

/** Whether err is nqd refusing an outcome for what it carries: the step then fails with the reason. */
function refusedOutcome(err: unknown): err is NqdError {
  return err instanceof NqdError && [400, 413, 422].includes(err.status)
}

interface BeatAnswer {
  leaseUntil?: string
  canceled?: boolean
}

/** A report was not delivered before the job's lease ended. */
class LeaseEndedError extends Error {
  constructor(what: string, cause: unknown) {
    super(`${what} not delivered before the lease ended: ${errorText(cause)}`, { cause })
    this.name = 'LeaseEndedError'
  }
}

/**
 * Checks queueConcurrency against queues: every queue gets a whole number
 * of jobs from 1 to 1000, and no other queue is named.
 */
function checkQueueConcurrency(queues: string[], caps: Record<string, number> | undefined): Record<string, number> | undefined {
  if (caps === undefined) {
    return undefined
  }
  for (const q of queues) {
    const n = caps[q]
    if (n === undefined || !Number.isInteger(n) || n < 1 || n > 1000) {
      throw new TypeError(`createWorker: queueConcurrency must give queue ${JSON.stringify(q)} a whole number of jobs from 1 to 1000`)
    }
  }
  for (const q of Object.keys(caps)) {
    if (!queues.includes(q)) {
      throw new TypeError(`createWorker: queueConcurrency names ${JSON.stringify(q)}, which is not one of queues`)
    }
  }
  return { ...caps }
}

/** Whether err is an nqd that predates queueConcurrency refusing the channel's hello for it. */
function takesNoQueueConcurrency(err: unknown): boolean {
  return err instanceof NqdError && err.status === 400 && err.fields?.queueConcurrency === 'unknown field'
}

function errorText(err: unknown): string {
  if (err instanceof Error) {
    return err.message
  }
  return String(err)
}

/** Creates a worker; start() runs it. */
export function createWorker(opts: WorkerOptions): Worker {
  return new WorkerImpl(opts)
}

class WorkerImpl implements Worker {
  readonly http: Http
  readonly log: Logger
  private readonly queues: string[]
  private readonly concurrency: number
  private readonly queueConcurrency: Record<string, number> | undefined
  private readonly handlers: Record<string, Handler>
  readonly heartbeatMs: number | undefined
  private readonly claimWaitMs: number
  private readonly token: string | undefined
  private readonly name: string | undefined
  /**
   * The worker process in nqd's registry (its id, name, version and host),
   * as every HTTP call and the channel's hello name it: the same across the
   * channel's reconnects.
   */
  private readonly self: Record<string, string>
  /** 'channel' until nqd or a proxy could not upgrade, then 'http' for good. */
  private transport: Transport
  /** The channel while it is open and welcomed: job calls go over it, else over HTTP. */
  private conn: Channel | undefined
  private readonly running = new Set<JobRun>()
  /** The slots claims on their way reserved, and their promises. */
  private reserved = 0
  private readonly claiming = new Set<Promise<void>>()
  private failures = 0
  /**
   * Jobs whose handler returned and whose completion claims the slot's next
   * job: each keeps its slot until that answer came.
   */
  private readonly completing = new Set<JobRun>()
  /**
   * Aborted when stop()'s grace period is over: reports still on their way
   * are given up, and their jobs left to their leases.
   */
  readonly giveUp = new AbortController()
  /** Set once the steps' part of stop()'s grace period is over: a job brought then is handed back at once. */
  private pastGrace = false
  /** The reports of jobs handed back as they came, which stop() waits for. */
  private readonly handingBack = new Set<Promise<void>>()
  /** Set when nqd refused the worker's claims for good: start() rejects with it. */
  private fatal: NqdError | undefined
  private runningHandlers = 0
  private stopping = false
  private readonly stopClaims = new AbortController()
  /** The claim loops waiting for a free slot, woken by slotFreed. */
  private readonly waiting = new Set<() => void>()
  private loop: Promise<void> | undefined

  constructor(opts: WorkerOptions) {
    if (opts.queues.length === 0) {
      throw new TypeError('createWorker: give at least one queue')
    }
    this.queueConcurrency = checkQueueConcurrency(opts.queues, opts.queueConcurrency)
    const sum = Object.values(this.queueConcurrency ?? {}).reduce((a, b) => a + b, 0)
    this.concurrency = Math.max(1, Math.floor(opts.concurrency ?? (sum > 0 ? sum : 4)))
    if (this.concurrency < sum) {
      throw new TypeError(`createWorker: concurrency ${String(this.concurrency)} is less than queueConcurrency's sum ${String(sum)}`)
    }
    this.self = selfHeaders(this.concurrency)
    this.http = new Http({ url: opts.url, token: opts.token, headers: this.self })
    this.log = opts.logger ?? consoleLogger
    this.queues = opts.queues
    this.handlers = opts.handlers
    this.heartbeatMs = opts.heartbeatMs
    this.claimWaitMs = Math.min(opts.claimWaitMs ?? 10_000, 30_000)
    this.token = opts.token
    this.name = opts.name
    // Checked for callers in JavaScript, whose option the type does not hold.
    if (!['channel', 'http', undefined].includes(opts.transport)) {
      throw new TypeError(`createWorker: transport must be 'channel' or 'http', got ${JSON.stringify(opts.transport)}`)
    }
    this.transport = opts.transport ?? 'channel'
  }

  get active(): number {
    return this.runningHandlers
  }

  get held(): number {
    return this.running.size
  }

  /**
   * A handler returned. With keepSlot its completion claims the slot's next
   * job, and the slot stays taken until passSlot; otherwise the slot takes
   * another job at once.
   */
  handlerDone(run: JobRun, keepSlot: boolean): void {
    this.runningHandlers--
    if (keepSlot) {
      this.completing.add(run)
      return
    }
    this.slotFreed()
  }

  /**
   * Whether a completion may claim the slot's next job now: over HTTP, or
   * over a channel whose welcome said nextInAck (the job then comes in the
   * completion's ack rather than in an offer), and not while the worker
   * stops. Over another channel nqd offers it instead.
   */
  claimsNext(): boolean {
    // With queueConcurrency each queue's claim keeps its own count.
    if (this.stopping || this.queueConcurrency !== undefined) {
      return false
    }
    return this.transport === 'http' || (this.conn?.live === true && this.conn.nextInAck)
  }

  /** Wakes the claim loops waiting for a free slot. */
  slotFreed(): void {
    for (const wake of this.waiting) {
      wake()
    }
    this.waiting.clear()
  }

  /** The claim a completion carries. */
  nextClaim(): { queues: string[], max: number, waitMs: number } {
    return { queues: this.queues, max: 1, waitMs: nextJobWaitMs }
  }

  /**
   * A completion that claimed was answered (or gave up): the slot it kept
   * runs the job the answer brought, at once and as a claimed job runs, or
   * else is free again. A job that comes while the worker stops is run all
   * the same, as the Go SDK does: within the grace period it runs; once
   * that is over it is failed as retriable at once, as the running ones
   * are, so that nqd hands it out again. stop() waits for both.
   */
  passSlot(run: JobRun, jobs: Job[]): void {
    this.completing.delete(run)
    // The job is no longer held: the one the answer brings takes its place.
    this.running.delete(run)
    if (jobs.length > 1) {
      // nqd never answers more than asked for; a job beyond the slot is
      // left to its lease rather than run without one.
      this.log.error('nqd answered more jobs than asked for', { asked: 1, got: jobs.length })
    }
    const job = jobs[0]
    if (job !== undefined) {
      const next = this.runJob(job)
      // A job a channel's ack brought takes the slot there, as an offered one.
      next.slotChannel = run.nextFrom
      if (this.pastGrace) {
        const p = next.abandon()
        this.handingBack.add(p)
        void p.finally(() => this.handingBack.delete(p))
      }
    }
    this.slotFreed()
  }

  start(): Promise<void> {
    this.loop ??= this.transport === 'http' ? this.claimLoop() : this.channelLoop()
    return this.loop
  }

  /**
   * One job call, over the channel while it is open, else over HTTP; the
   * answer and the errors are the same either way. An outcome sent over the
   * channel frees its slot there (next: true) unless the worker stops or the
   * slot was freed already.
   */
  async call<T>(run: JobRun, job: Job, call: JobCall, body: Record<string, unknown>, opts: { key?: string, signal?: AbortSignal } = {}): Promise<T> {
    const ch = this.conn
    if (ch?.live !== true) {
      if (this.transport !== 'http' && body.claim !== undefined) {
        // A channel's worker claims nothing over HTTP: the slot's job would
        // count on no channel.
        body = { ...body }
        delete body.claim
      }
      const path = `/api/_workers/jobs/${encodeURIComponent(job.queue)}/${encodeURIComponent(job.id)}/${call}`
      const headers = opts.key === undefined ? undefined : { 'idempotency-key': opts.key }
      return this.http.post<T>(path, body, { timeoutMs: callTimeoutMs, headers, signal: opts.signal })
    }
    const frame = { ...body }
    // A completion's claim goes over the channel as nextInAck.
    const claims = frame.claim !== undefined
    delete frame.claim
    if (opts.key !== undefined) {
      frame.idempotencyKey = opts.key
    }
    const outcome = call === 'complete' || call === 'fail'
    const next = outcome && !this.stopping && !run.slotFreed && run.slotChannel === ch
    if (outcome) {
      frame.next = next
    }
    if (call === 'complete' && claims && next && ch.nextInAck) {
      frame.nextInAck = true
      run.nextFrom = ch
    }
    // Only an ack frees the slot there: after an error the job's end
    // gives the slot back with a slots frame.
    const ans = await ch.request<T>(call, job, frame, callTimeoutMs, opts.signal, () => { run.slotFreed ||= next })
    return ans
  }

  /**
   * Keeps the worker channel open until stop(): nqd offers jobs over it,
   * and a channel that drops is opened again with backoff (at once after
   * nqd said it restarts). Falls back to claiming over HTTP for good when
   * nqd or a proxy cannot upgrade.
   */
  private async channelLoop(): Promise<void> {
    let failures = 0
    while (!this.isStopping()) {
      const ch: Channel = new Channel(this.http.base, this.token, () => this.hello(ch), {
        offer: (jobs, from) => { this.offered(jobs, from) },
        problem: (err) => { this.log.error(`nqd refused a frame of the channel: ${err.message}`) },
      })
      let restart = false
      let retryAfter = 0
      try {
        await ch.ready
      } catch (err) {
        if (fallsBack(err) || takesNoQueueConcurrency(err)) {
          this.log.info(`nqd cannot open the worker channel: claiming over HTTP (${errorText(err)})`)
          this.transport = 'http'
          return this.claimLoop()
        }
        if (this.isStopping()) {
          break
        }
        // A token refused, or a hello refused, stays refused.
        if (err instanceof NqdError && !(err instanceof UpgradeRefusedError)) {
          this.log.error(`nqd refused the worker's channel; stopping: ${err.message}`)
          this.fatal = err
          this.stopping = true
          this.stopClaims.abort()
          break
        }
        retryAfter = err instanceof NqdError ? err.retryAfterMs ?? 0 : 0
        const wait = Math.max(backoffDelay(failures++, 100, 5_000), retryAfter)
        this.log.warn(`the worker channel did not open, trying again in ${Math.round(wait)} ms: ${errorText(err)}`)
        await sleep(wait, this.stopClaims.signal)
        continue
      }
      failures = 0
      this.conn = ch
      if (this.isStopping()) {
        await ch.close()
        this.conn = undefined
        break
      }
      this.log.debug('worker channel open')
      restart = await ch.closed
      this.conn = undefined
      if (this.isStopping()) {
        break
      }
      const wait = restart ? 0 : backoffDelay(failures++, 100, 5_000)
      this.log.warn(`the worker channel closed${restart ? ' (nqd restarts)' : ''}, opening it again in ${Math.round(wait)} ms`)
      await sleep(wait, this.stopClaims.signal)
    }
    if (this.fatal !== undefined) {
      throw this.fatal
    }
  }

  /**
   * The channel's hello, asked for as it is sent: the jobs held now count
   * against ch's slots, so each frees its slot there when it ends.
   */
  private hello(ch: Channel): Hello {
    for (const run of this.running) {
      run.slotChannel = ch
      run.slotFreed = false
    }
    return {
      workerId: this.self['nqd-worker-id'] ?? '', name: this.name ?? this.self['nqd-worker-name'], sdk: 'typescript',
      version: this.self['nqd-worker-version'] ?? 'unknown', host: this.self['nqd-worker-host'] ?? '',
      queues: this.queues, concurrency: this.concurrency,
      slots: this.stopping ? 0 : Math.max(0, this.concurrency - this.running.size),
      ...(this.queueConcurrency === undefined ? {} : { queueConcurrency: this.queueConcurrency, held: this.heldByQueue() }),
    }
  }

  /** The jobs held now of each queue of queueConcurrency. */
  private heldByQueue(): Record<string, number> {
    const held: Record<string, number> = {}
    for (const run of this.running) {
      held[run.queue] = (held[run.queue] ?? 0) + 1
    }
    return held
  }

  /**
   * nqd offered jobs over ch: each runs at once in the slot it took there.
   * One that comes once stop()'s grace period is over is handed back at
   * once, as a completion's next job is over HTTP.
   */
  private offered(jobs: Job[], ch: Channel): void {
    for (const job of jobs) {
      const run = this.runJob(job)
      run.slotChannel = ch
      if (this.pastGrace) {
        const p = run.abandon()
        this.handingBack.add(p)
        void p.finally(() => this.handingBack.delete(p))
      }
    }
  }

  /**
   * Resolves within graceMs whatever nqd does: steps get the grace period
   * but its last part (a fifth of it, reportReserveMs at most), which
   * is kept for reporting those still running as retriable failures; what
   * is still on its way when it ends is given up, and its job left to its
   * lease (so nothing is lost, only delayed).
   */
  async stop(graceMs = 10_000): Promise<void> {
    this.stopping = true
    this.stopClaims.abort()
    // nqd offers nothing more; outcomes from now on free no slot.
    this.conn?.tell({ type: 'pause' })
    this.slotFreed()
    const deadline = Date.now() + graceMs
    const stepsUntil = deadline - Math.min(reportReserveMs, graceMs / 5)
    // Ended with the wait: a timer left behind would keep the process up
    // for the rest of graceMs after its steps were done.
    const timers = new AbortController()
    const giveUp = setTimeout(() => { this.giveUp.abort(new Error('the worker stopped before it could report')) }, graceMs)
    try {
      while (this.running.size > 0 && Date.now() < stepsUntil) {
        await Promise.race([
          Promise.allSettled([...this.running].map(r => r.done)),
          sleep(stepsUntil - Date.now(), timers.signal),
        ])
      }
      this.pastGrace = true
      if (this.running.size > 0) {
        this.log.info(`grace period over: reporting ${String(this.running.size)} held jobs`)
      }
      await Promise.allSettled([...this.running].map(r => r.abandon()))
      // Completions that claim keep their slots until answered; wait for
      // them, so that a job one brings is handed back rather than left to
      // its lease. No completion claims now.
      await Promise.allSettled([...this.completing].map(r => r.done))
      await Promise.allSettled([...this.handingBack])
      await this.conn?.close(1000)
      await this.loop?.catch(() => undefined)
      // A courtesy to nqd's worker registry, which otherwise shows the
      // worker lost once it has been silent long enough. Over the channel
      // its close (1000, above) says it.
      const left = deadline - Date.now()
      if (left > 0 && this.transport === 'http') {
        await this.http.post('/api/_workers/goodbye', {}, { timeoutMs: Math.min(2000, left) }).catch(() => undefined)
      }
    } finally {
      timers.abort()
      clearTimeout(giveUp)
      this.http.close()
    }
  }

  /**
   * Claims jobs for free slots until stop(): of every queue at once, or
   * with queueConcurrency of each queue on its own, for that queue's free
   * slots. A slot is free once its job's outcome is acknowledged.
   */
  private async claimLoop(): Promise<void> {
    const caps = this.queueConcurrency
    const groups = caps === undefined ? [this.queues] : this.queues.map(q => [q])
    await Promise.all(groups.map(qs => this.claimQueues(qs, caps?.[qs[0] ?? ''])))
    await Promise.allSettled([...this.claiming])
    if (this.fatal !== undefined) {
      throw this.fatal
    }
  }

  /** Claims jobs of queues, at most cap held at once, one claim on its way at a time. */
  private async claimQueues(queues: string[], cap: number | undefined): Promise<void> {
    let claiming = false
    let reserved = 0
    while (!this.isStopping()) {
      let free = this.concurrency - this.running.size - this.reserved
      if (cap !== undefined) {
        free = Math.min(free, cap - this.heldOf(queues[0]) - reserved)
      }
      if (free <= 0 || claiming) {
        await new Promise<void>((resolve) => { this.waiting.add(resolve) })
        continue
      }
      const n = Math.min(free, 100)
      claiming = true
      reserved += n
      this.reserved += n
      void this.claimOnce(queues, n).finally(() => {
        claiming = false
        reserved -= n
        this.reserved -= n
        this.slotFreed()
      })
    }
  }

  /** The jobs of queue held now. */
  private heldOf(queue: string | undefined): number {
    let n = 0
    for (const run of this.running) {
      if (run.queue === queue) {
        n++
      }
    }
    return n
  }

  /** One claim for n slots; on an error it waits out its backoff holding them. */
  private claimOnce(queues: string[], n: number): Promise<void> {
    const p = this.claimSlots(queues, n)
    this.claiming.add(p)
    void p.finally(() => this.claiming.delete(p))
    return p
  }

  private async claimSlots(queues: string[], n: number): Promise<void> {
    let jobs: Job[]
    try {
      const ans = await this.http.post<ClaimAnswer>('/api/_workers/claim',
        { queues, max: n, waitMs: this.claimWaitMs },
        { signal: this.stopClaims.signal, timeoutMs: this.claimWaitMs + callTimeoutMs })
      jobs = ans.jobs
      this.failures = 0
    } catch (err) {
      if (this.isStopping()) {
        return
      }
      // A token refused (401, 403) or queues refused (400) stay refused.
      if (err instanceof AuthError || (err instanceof NqdError && err.status === 400)) {
        this.log.error(`nqd refused the worker's claim; stopping: ${err.message}`)
        this.fatal = err
        this.stopping = true
        this.stopClaims.abort()
        this.slotFreed()
        return
      }
      const wait = backoffDelay(this.failures++, 250, 15_000)
      this.log.warn(`claim failed, trying again in ${Math.round(wait)} ms: ${errorText(err)}`)
      await sleep(wait, this.stopClaims.signal)
      return
    }
    for (const job of jobs) {
      this.runJob(job)
    }
  }

  /** Runs a job in a slot taken for it, whether a claim or a completion brought it. */
  private runJob(job: Job): JobRun {
    this.runningHandlers++
    const run = new JobRun(this, job, this.handlerFor(job))
    this.running.add(run)
    void run.done.finally(() => {
      this.running.delete(run)
      // Its outcome did not free its slot on the channel the slot counts
      // on (it went over HTTP, say, or was given up): say so there.
      if (!run.slotFreed && !this.stopping) {
        run.slotChannel?.tell(this.queueConcurrency === undefined ? { type: 'slots', add: 1 } : { type: 'slots', add: 1, queue: job.queue })
      }
      this.slotFreed()
    })
    return run
  }

  /** Read through a method: stop() sets it while the loop awaits. */
  private isStopping(): boolean {
    return this.stopping
  }

  private handlerFor(job: Job): Handler | undefined {
    return this.handlers[`${job.flowName}/${job.step}`] ?? this.handlers[job.step]
  }
}

/** One claimed job: its heartbeats, its reports and its outcome. */
class JobRun implements ContextHost {
  readonly http: Http
  readonly runId: string
  readonly done: Promise<void>
  private readonly w: WorkerImpl
  private readonly job: Job
  private leaseUntil: number
  /** The worker channel whose count of free slots this job's slot is in, if any. */
  slotChannel: Channel | undefined
  /** Set once an outcome sent over slotChannel freed the slot there. */
  slotFreed = false
  /** The channel whose ack may bring the slot's next job (nextInAck). */
  nextFrom: Channel | undefined
  private readonly abort = new AbortController()
  /** Set once the outcome was reported or given up: nothing more is sent. */
  private settled = false
  /** The outcome's report once on its way, which abandon() waits for. */
  private outcome: Promise<unknown> | undefined
  private lost = false
  private buf: ReportEvent[] = []
  private waiters: { resolve: () => void, reject: (e: unknown) => void }[] = []
  private flushing: Promise<void> | undefined
  /**
   * Set when nqd refused the events call that carried step.started (for an
   * event beside it): nothing of it was stored, so step.started goes with the
   * outcome.
   */
  private startedRefused = false
  private seq = 0
  private beat: NodeJS.Timeout | undefined
  private beatEvery = maxBeatMs
  /** Set while a heartbeat after a failed one is pending. */
  private beatAgain: NodeJS.Timeout | undefined
  /** Set once the outcome is acknowledged or given up: heartbeats end. */
  private beatsOver = false
  /** The first value the step gave that cannot be encoded: the step fails with it. */
  private unencodable: EncodingError | undefined
  /**
   * Pending while step.started waits (at most startDelayMs) for the step's
   * first report or its outcome to travel with.
   */
  private startTimer: NodeJS.Timeout | undefined

  /** The queue the job came from. */
  get queue(): string {
    return this.job.queue
  }

  constructor(w: WorkerImpl, job: Job, handler: Handler | undefined) {
    this.w = w
    this.http = w.http
    this.job = job
    this.runId = job.runId
    this.leaseUntil = typeof job.leaseUntil === 'number' ? job.leaseUntil : Date.now() + 30_000
    this.done = this.run(handler)
  }

  private async run(handler: Handler | undefined): Promise<void> {
    // A third of the lease nqd granted (at most maxBeatMs): two heartbeats
    // may fail before it ends.
    const leaseMs = Math.max(300, this.leaseUntil - Date.now())
    const every = Math.max(100, Math.min(this.w.heartbeatMs ?? maxBeatMs, leaseMs / 3))
    this.beatEvery = every
    this.beat = setInterval(() => { void this.heartbeat() }, every)
    this.beat.unref()
    // Set when the handler succeeded while completions claim: the slot is
    // kept for the job the completion brings, and passed on below.
    let keepSlot = false
    let next: Job[] = []
    try {
      // step.started goes with the step's first report, or with its
      // outcome when it ends quickly; alone after startDelayMs otherwise.
      this.buf.push({ kind: 'step.started' })
      this.startTimer = setTimeout(() => {
        this.startTimer = undefined
        this.kick()
      }, startDelayMs)
      let result: unknown
      let failure: unknown
      let failed = false
      try {
        if (handler === undefined) {
          throw Object.assign(new Error(`no handler for step "${this.job.step}" in this worker`), { permanent: true })
        }
        const ctx = buildContext(this, this.job, this.abort.signal)
        result = await handler(this.job.input, ctx)
        encodeJSON('result', result)
      } catch (err) {
        failed = true
        failure = err
      } finally {
        // A value that could not be encoded fails the step, even when the
        // handler caught the throw and went on.
        if (this.unencodable !== undefined) {
          failed = true
          failure = this.unencodable
        }
        keepSlot = !failed && this.w.claimsNext()
        this.w.handlerDone(this, keepSlot)
        clearTimeout(this.startTimer)
        this.startTimer = undefined
      }
      if (this.settled) {
        return
      }
      if (this.lost) {
        this.w.log.info('job dropped: the run ended or the lease moved on', this.meta())
        return
      }
      // Events the step appended go before its outcome: those on their way
      // are awaited, the rest travel with it.
      try {
        await this.settleReports(failed)
      } catch (err) {
        if (!failed) {
          failed = true
          failure = err
        }
      }
      if (this.gone()) {
        return
      }
      if (!failed) {
        const body: Record<string, unknown> = { lease: this.job.lease }
        if (result !== undefined) {
          body.result = result
        }
        // Read again: the worker may be stopping by now.
        if (keepSlot && this.w.claimsNext()) {
          body.claim = this.w.nextClaim()
        }
        const { err, jobs } = await this.finish('complete', body)
        next = jobs
        if (!refusedOutcome(err)) {
          return
        }
        // nqd refused the result (too large, say): the step fails with the
        // reason rather than leave the job to its lease.
        this.settled = false
        failed = true
        failure = Object.assign(new Error(`complete refused: ${err.message}`), { permanent: true })
        // The completion's events are back in the buffer: its emits go
        // first, as a failure takes none.
        await this.settleReports(true).catch(() => undefined)
      }
      const retriable = !isPermanent(failure)
      this.w.log.warn(`step failed${retriable ? '' : ' (permanent)'}: ${errorText(failure)}`, this.meta())
      await this.finish('fail', { lease: this.job.lease, error: errorText(failure).slice(0, 4000) || 'error', retriable })
    } finally {
      this.endBeats()
      if (keepSlot) {
        this.w.passSlot(this, next)
      }
    }
  }

  /**
   * Reports the outcome once, unless another path already did, with the
   * events not sent yet; returns the error that kept it from nqd, if any,
   * and the jobs a completion's claim brought. Heartbeats go on meanwhile.
   */
  private finish(call: 'complete' | 'fail', body: Record<string, unknown>): Promise<{ err: unknown, jobs: Job[] }> {
    if (this.settled) {
      return Promise.resolve({ err: undefined, jobs: [] })
    }
    this.settled = true
    const p = this.sendOutcome(call, body)
    this.outcome = p
    return p
  }

  private async sendOutcome(call: 'complete' | 'fail', body: Record<string, unknown>): Promise<{ err: unknown, jobs: Job[] }> {
    this.restoreStarted()
    const events = this.buf.slice(0, maxBatch)
    const waiters = this.waiters
    this.buf = []
    this.waiters = []
    if (events.length > 0) {
      body.events = events
    }
    try {
      const ans = await this.deliver<FinishAnswer>(call, body)
      this.startedRefused = false
      for (const w of waiters) {
        w.resolve()
      }
      return { err: undefined, jobs: ans?.jobs ?? [] }
    } catch (err) {
      if (call === 'complete' && refusedOutcome(err)) {
        // nqd refused the completion itself (its result, say): the step
        // fails next, and the events the completion carried go first.
        this.buf = [...events, ...this.buf]
        this.waiters = [...waiters, ...this.waiters]
      } else {
        for (const w of waiters) {
          w.reject(err)
        }
      }
      if (err instanceof NqdError && err.status === 409) {
        this.w.log.info(`${call} refused: the job is no longer this worker's`, this.meta())
      } else {
        this.w.log.error(`${call} not reported: ${errorText(err)}`, this.meta())
      }
      return { err, jobs: [] }
    }
  }

  /**
   * Waits for the reports on their way; what is left in the buffer then
   * travels with the outcome, unless it holds more than an outcome takes,
   * or emits that it does not take: a failure takes none.
   */
  private async settleReports(failed: boolean): Promise<void> {
    if (this.flushing !== undefined) {
      await this.flush()
    }
    this.restoreStarted()
    const emits = this.buf.some(e => e.kind === 'emit')
    if (this.buf.length > maxBatch || (emits && failed)) {
      await this.flush()
    }
  }

  /** Starts sending the buffer, unless step.started is still waiting for company. */
  private kick(): void {
    if (this.startTimer === undefined && this.buf.length > 0) {
      this.flushing ??= this.flushLoop()
    }
  }

  /**
   * Called by stop() once the grace period is over: the step is reported as
   * a retriable failure so that nqd hands it out again.
   */
  async abandon(): Promise<void> {
    if (!this.settled && !this.lost) {
      this.abort.abort(new Error('the worker is stopping'))
      clearTimeout(this.startTimer)
      this.startTimer = undefined
      await this.settleReports(true).catch(() => undefined)
      // Nothing, if the step returned meanwhile and run() reports it.
      await this.finish('fail', { lease: this.job.lease, error: 'the worker stopped before the step finished', retriable: true })
      this.endBeats()
    }
    // The outcome on its way, this one's or run()'s, is waited for:
    // stop() closes the connections next.
    await this.outcome
  }

  /** Whether nothing more may be reported: read through a method, as heartbeats change it while run() awaits. */
  private gone(): boolean {
    return this.lost || this.settled
  }

  private meta(): Record<string, unknown> {
    return { runId: this.job.runId, flowName: this.job.flowName, step: this.job.step, attempt: this.job.attempt }
  }

  /** The outcome is acknowledged or given up: the job is no longer held. */
  private endBeats(): void {
    this.beatsOver = true
    clearInterval(this.beat)
    clearTimeout(this.beatAgain)
  }

  /** Read through a method: endBeats() sets it while a heartbeat awaits. */
  private beatsEnded(): boolean {
    return this.beatsOver
  }

  /**
   * Extends the lease, from the claim until the outcome is acknowledged:
   * an outcome retried through a run of 5xx answers keeps its lease.
   */
  private async heartbeat(): Promise<void> {
    if (this.beatsOver || this.lost) {
      return
    }
    try {
      const beat = await this.w.call<BeatAnswer>(this, this.job, 'heartbeat', { lease: this.job.lease })
      if (this.beatsEnded()) {
        return
      }
      if (beat.canceled === true) {
        this.loseLease('the run was cancelled or ended')
        return
      }
      if (beat.leaseUntil !== undefined) {
        const t = Date.parse(beat.leaseUntil)
        if (!Number.isNaN(t)) {
          this.leaseUntil = t
        }
      }
    } catch (err) {
      if (this.beatsEnded()) {
        return
      }
      if (err instanceof NqdError && err.status === 409) {
        this.loseLease('another worker holds the job now')
        return
      }
      this.w.log.debug(`heartbeat failed: ${errorText(err)}`, this.meta())
      // Once more a third of the way to the next tick, so that one failed
      // heartbeat does not cost a third of the lease.
      this.beatAgain ??= setTimeout(() => {
        this.beatAgain = undefined
        void this.heartbeat()
      }, this.beatEvery / 3)
      this.beatAgain.unref()
    }
  }

  private loseLease(why: string): void {
    if (this.lost) {
      return
    }
    this.lost = true
    this.w.log.info(`stopping the step: ${why}`, this.meta())
    this.abort.abort(new Error(why))
  }

  report(events: ReportEvent[]): Promise<void> {
    clearTimeout(this.startTimer)
    this.startTimer = undefined
    return new Promise((resolve, reject) => {
      this.buf.push(...events)
      this.waiters.push({ resolve, reject })
      this.flushing ??= this.flushLoop()
    })
  }

  encodingFailed(err: EncodingError): void {
    this.unencodable ??= err
  }

  reportEmits(events: ReportEvent[]): Promise<void> {
    if (this.startTimer === undefined) {
      return this.report(events)
    }
    // step.started still waits for company: the emits wait with it, and go
    // with the step's first report or its outcome, which nqd refuses as a
    // whole should it refuse them.
    this.reportLater(events)
    return Promise.resolve()
  }

  reportLater(events: ReportEvent[]): void {
    new Promise<void>((resolve, reject) => {
      this.buf.push(...events)
      this.waiters.push({ resolve, reject })
      this.kick()
    }).catch((err: unknown) => {
      this.w.log.warn(`events not reported: ${errorText(err)}`, this.meta())
    })
  }

  /** The Idempotency-Key of the job's next events call, kept for all its retries. */
  private nextKey(): string {
    return `${this.job.lease}-${String(this.seq++)}-${randomUUID().slice(0, 8)}`
  }

  /** Puts step.started back at the head of the buffer when nqd refused the call that carried it. */
  private restoreStarted(): void {
    if (this.startedRefused && !this.buf.some(e => e.kind === 'step.started')) {
      this.buf.unshift({ kind: 'step.started' })
    }
  }

  /** Resolves once every event reported so far was sent; rejects if some were not. */
  private flush(): Promise<void> {
    if (this.buf.length === 0 && this.flushing === undefined) {
      return Promise.resolve()
    }
    return this.report([])
  }

  /** Sends buffered events in order, as few requests as it can. */
  private async flushLoop(): Promise<void> {
    // Yield first, so that the caller has stored this promise before the
    // loop can end and clear it.
    await Promise.resolve()
    while (this.buf.length > 0 || this.waiters.length > 0) {
      this.restoreStarted()
      const events = this.buf
      const waiters = this.waiters
      this.buf = []
      this.waiters = []
      let chunk: ReportEvent[] = []
      try {
        if (this.lost) {
          throw new Error('the job is no longer held by this worker')
        }
        for (let i = 0; i < events.length; i += maxBatch) {
          chunk = events.slice(i, i + maxBatch)
          await this.deliver('events', { lease: this.job.lease, events: chunk }, this.nextKey())
          this.startedRefused &&= !chunk.some(e => e.kind === 'step.started')
        }
        for (const w of waiters) {
          w.resolve()
        }
      } catch (err) {
        // A refused call stored nothing: its step.started is not lost.
        if (refusedOutcome(err) && chunk.some(e => e.kind === 'step.started')) {
          this.startedRefused = true
        }
        for (const w of waiters) {
          w.reject(err)
        }
      }
    }
    this.flushing = undefined
  }

  /**
   * Sends one report, again and again with backoff and jitter while it fails
   * in a way that may pass, until the lease ends (heartbeats extend it) or
   * stop()'s grace period does. A 409 means the lease is
   * gone (the run ended or another worker holds the job).
   */
  private async deliver<T = unknown>(call: 'events' | 'complete' | 'fail', body: Record<string, unknown>, key?: string): Promise<T | undefined> {
    for (let n = 0; ; n++) {
      try {
        return await this.w.call<T>(this, this.job, call, body, { key, signal: this.w.giveUp.signal })
      } catch (err) {
        if (this.w.giveUp.signal.aborted) {
          throw err
        }
        if (err instanceof NqdError && err.status === 409) {
          this.loseLease(`nqd refused ${call}: ${err.message}`)
          throw err
        }
        if (!isTransient(err)) {
          throw err
        }
        // Heartbeats go on meanwhile and keep the lease: the report is
        // given up only once the lease has ended.
        const left = this.leaseUntil - Date.now()
        if (left <= 0) {
          throw new LeaseEndedError(call, err)
        }
        const retryAfter = err instanceof NqdError ? err.retryAfterMs ?? 0 : 0
        const wait = Math.min(Math.max(backoffDelay(n, 100, 5_000), retryAfter), Math.max(50, left))
        this.w.log.debug(`${call} failed, trying again in ${Math.round(wait)} ms: ${errorText(err)}`, this.meta())
        await sleep(wait, this.w.giveUp.signal)
      }
    }
  }
}
