// Every error the package throws on purpose. One base class, `TurnstileError`, with a stable
// string `code`; argument mistakes are the language's own `TypeError` / `RangeError` with a
// message naming the parameter (see `validate.ts`).
import type { AdmissionErrorCode, Diagnostic, InputError, InputErrorCode, InputKind, ResumeErrorCode, SubmitErrorCode } from './types.js';

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

/** A disposed scheduler, controller or driver was used (code `'disposed'`). */
export class DisposedError extends TurnstileError {
  declare readonly code: 'disposed';
  constructor(what: string) {
    super('disposed', `${what} was disposed`);
  }
}
