/**
 * A failure that must not be retried: the step fails at once and so does its
 * run, whatever attempts its retry policy has left.
 */
export class PermanentError extends Error {
  readonly permanent = true

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'PermanentError'
  }
}

/**
 * Reports whether err says "do not retry". Step files loaded from a folder may
 * hold their own copy of this module, so the check is by shape, not by class.
 */
export function isPermanent(err: unknown): boolean {
  if (err instanceof PermanentError) {
    return true
  }
  if (typeof err !== 'object' || err === null) {
    return false
  }
  const e = err as { permanent?: unknown, name?: unknown }
  return e.permanent === true || e.name === 'PermanentError'
}

/** A non-2xx answer from nqd, with its error code and message. */
export class NqdError extends Error {
  readonly status: number
  readonly code: string
  readonly fields: Record<string, string> | undefined
  /** The answer's Retry-After in milliseconds, when it had one. */
  retryAfterMs: number | undefined

  constructor(status: number, code: string, message: string, fields?: Record<string, string>) {
    super(message)
    this.name = 'NqdError'
    this.status = status
    this.code = code
    this.fields = fields
  }
}

/**
 * nqd refused the credentials: no token, an unknown one (401), or one whose
 * scope does not cover the call (403). Retrying cannot help.
 */
export class AuthError extends NqdError {
  constructor(status: number, code: string, message: string) {
    super(status, code, message)
    this.name = 'AuthError'
  }
}

/**
 * A value a step handed the SDK (a state value, a log's metadata, an emit's
 * payload, its result) that cannot be encoded as JSON: a cycle, a BigInt,
 * a toJSON that throws. It is thrown where the value was given, never sent
 * and never retried by the SDK; the step fails with its message, and is
 * retried only as its retry policy says.
 */
export class EncodingError extends Error {
  /** What was given, e.g. `ctx.state.set("order")` or `result`. */
  readonly field: string

  constructor(field: string, cause: unknown) {
    super(`${field}: the value cannot be encoded as JSON: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
    this.name = 'EncodingError'
    this.field = field
  }
}

/** Returns value's JSON text, or throws an EncodingError naming field. */
export function encodeJSON(field: string, value: unknown): string | undefined {
  try {
    return JSON.stringify(value)
  } catch (err) {
    throw new EncodingError(field, err)
  }
}
