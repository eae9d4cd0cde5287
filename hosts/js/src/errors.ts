// Every error the package throws on purpose. One base class, `TurnstileError`, with a stable
// string `code`; argument mistakes are the language's own `TypeError` / `RangeError` with a
// message naming the parameter (see `validate.ts`).
import { retryAfterMs } from './free.js';
import type { AdmissionErrorCode, Diagnostic, InputError, InputErrorCode, InputKind, Reason, ResumeErrorCode, SubmitErrorCode } from './types.js';

/** A refused call: it changed nothing. `code` is stable; subclasses narrow it. */
export class TurnstileError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(`${code}: ${message}`);
    this.name = new.target.name;
    this.code = code;
  }
}

/** The config did not resolve (`code` `'invalid-config'`). `diagnostics` has every problem,
 * each with its `rendered` text; `message` is every rendering joined. */
export class ConfigError extends TurnstileError {
  declare readonly code: 'invalid-config';
  readonly diagnostics: Diagnostic[];
  constructor(diagnostics: Diagnostic[]) {
    super('invalid-config', `${diagnostics.length} problem(s)`);
    this.message = diagnostics.map((d) => d.rendered).join('\n');
    this.diagnostics = diagnostics;
  }
}

/** `Scheduler.submit` refused the batch. */
export class SubmitError extends TurnstileError {
  declare readonly code: SubmitErrorCode;
}

/** `Scheduler.resume` refused the state as a whole. */
export class ResumeError extends TurnstileError {
  declare readonly code: ResumeErrorCode;
}

/** An admission controller refused a call. */
export class AdmissionError extends TurnstileError {
  declare readonly code: AdmissionErrorCode;
}

/** The admission controller shut down: a waiting `acquire` is rejected with this, and so is any
 * later `acquire` or `begin` (code `'shutdown'`). */
export class ShutdownError extends AdmissionError {
  declare readonly code: 'shutdown';
  constructor(message = 'the admission controller is shut down') {
    super('shutdown', message);
  }
}

/** A `step` input the driver sent was refused: the batch it belonged to fails with this.
 * `input` is the list, `index` the position there, `target` the entry (the batch, for
 * `cancel`) it named. */
export class RefusedInputError extends TurnstileError {
  declare readonly code: InputErrorCode;
  readonly input: InputKind;
  readonly index: number;
  readonly target: bigint;
  constructor(error: InputError, target: bigint) {
    super(error.code, `${error.input} ${target}: ${error.message}`);
    this.input = error.input;
    this.index = error.index;
    this.target = target;
  }
}

/** The component trapped (a bug in Turnstile, never a host mistake): the instance it ran on is
 * gone, and every later use of it, or of a policy, scheduler or controller made from it, throws
 * this. Load a new `Turnstile` to go on. `cause` is the original `WebAssembly.RuntimeError`. */
export class InstanceBrokenError extends TurnstileError {
  declare readonly code: 'instance-broken';
  constructor(cause: unknown) {
    super('instance-broken', `the component instance trapped and cannot be used again (${cause instanceof Error ? cause.message : String(cause)}); load a new Turnstile`);
    (this as { cause?: unknown }).cause = cause;
  }
}

/** Thrown (or rejected with) by an execution that hit a rate limit (a 429): the driver reports
 * it as `retry`, so the entry's key pauses for `retryAfterMs` (a pause only extends), the entry
 * keeps its place in line and runs again (`execute` is called again for it); past its key's
 * `retries` it is settled `rate-limited`. `RateLimitedError.fromHeader(response.headers.get(
 * 'retry-after'))` reads a `Retry-After` header (seconds or an HTTP date). */
export class RateLimitedError extends TurnstileError {
  declare readonly code: 'rate-limited';
  readonly retryAfterMs: number;
  constructor(retryAfterMs: number, message = `rate limited; retry after ${retryAfterMs} ms`) {
    if (typeof retryAfterMs !== 'number' || !(retryAfterMs >= 0) || !Number.isFinite(retryAfterMs)) {
      throw new RangeError(`retryAfterMs must be a finite number of milliseconds >= 0, got ${String(retryAfterMs)}`);
    }
    super('rate-limited', message);
    this.retryAfterMs = Math.ceil(retryAfterMs);
  }

  /** From a `Retry-After` header value, read by the component (its `retry-after`, at
   * `Date.now()`; the same reading in every host): whole delay-seconds or an HTTP date (a date
   * in the past is 0). `fallbackMs` when it is absent, empty or malformed (a fraction such as
   * `3.5`, a sign such as `-5`, a unit, a second value). Needs the component loaded in this
   * process (any `Turnstile.load()`); throws a `TypeError` before that. A wait of more than 5
   * minutes is not waited for: the scheduler settles the entry `rate-limited` at once. */
  static fromHeader(value: string | null | undefined, fallbackMs = 1000): RateLimitedError {
    if (value !== null && value !== undefined && typeof value !== 'string') throw new TypeError(`value must be a string, null or undefined, got ${typeof value}`);
    const wait = retryAfterMs(value ?? '', 'RateLimitedError.fromHeader');
    return new RateLimitedError(wait ?? fallbackMs);
  }
}

/** A disposed scheduler, controller or driver was used (code `'disposed'`). */
export class DisposedError extends TurnstileError {
  declare readonly code: 'disposed';
  constructor(what: string) {
    super('disposed', `${what} was disposed`);
  }
}

/** A `Gate` call that never ran (code `'call-settled'`): `reason` says why, and `message` is
 * exactly the text the model should read (the component's `explain` text, the same in every
 * host: `"not run: the user rejected this call"`), with no code prefix; so is `toString()`,
 * which frameworks use for a tool error's text (the AI SDK does). `callId` and `tool` name the
 * call. */
export class CallSettledError extends TurnstileError {
  declare readonly code: 'call-settled';
  readonly reason: Reason;
  readonly callId: string;
  readonly tool: string;
  /** The gate makes these; `message` is the component's text (`Turnstile.explain`). */
  /** `cause`: for a shared key's permit the store could not grant, the store's error
   * (`StoreUnavailableError`, `LeaseLostError`, ...). */
  constructor(reason: Reason, callId: string, tool: string, message: string, cause?: unknown) {
    super('call-settled', message);
    this.message = message;
    this.reason = reason;
    this.callId = callId;
    this.tool = tool;
    if (cause !== undefined) this.cause = cause;
  }
  override toString(): string {
    return this.message;
  }
}

/** The host's `persist` threw or rejected (`cause` is what it threw): the driver broke loudly.
 * Every live batch rejects with this, its running executions are aborted, the driver is
 * disposed, and nothing starts after it (`code` `'persist-failed'`). */
export class PersistError extends TurnstileError {
  declare readonly code: 'persist-failed';
  constructor(cause: unknown) {
    super('persist-failed', `persist failed, the driver is disposed: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.cause = cause;
  }
}

/** An error an execution threw before a restart, as the snapshot saved it: `name` and `message`
 * are the original's (its class and stack are not saved). */
export class RestoredError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

/** A request was not admitted within its time (`Admission.acquire`'s `timeoutMs`, or an MCP
 * request's `timeout` spent queued): it was given up while queued, consumed nothing and was
 * never sent (code `'timed-out'`). `name` is `'TimeoutError'`, as for a `DOMException` of
 * `AbortSignal.timeout`, so `error.name === 'TimeoutError'` catches every timeout alike;
 * `instanceof AdmissionTimeoutError` tells this one apart. `id` names the request. */
export class AdmissionTimeoutError extends AdmissionError {
  readonly id: string;
  readonly timeoutMs: number;
  constructor(id: string, timeoutMs: number) {
    super('timed-out', `${id} was not admitted within ${timeoutMs} ms`);
    this.name = 'TimeoutError';
    this.id = id;
    this.timeoutMs = timeoutMs;
  }
}
