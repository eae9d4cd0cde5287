// Everything the package exports, whatever the entry point (`node`, `browser` or universal);
// each entry point only chooses how the component's core modules are loaded.
export { Turnstile, Policy, type LoadOptions } from './turnstile.js';
export { Scheduler, Submitted, type CallInput, type ResumeOptions, type SubmitOptions } from './scheduler.js';
export { Admission, Permit, type AcquireOptions } from './admission.js';
export { Driver, runBatch, type Execution, type Execute, type EntryOutcome, type CallOutcome, type RunOptions, type Decision, type LiveBatch, type DriverOptions, type DriverEvent, type Resumed } from './driver.js';
export type { Clock } from './validate.js';
export { Gate, type GateOptions, type GateCallOptions, type GateCallInput, type GateRun } from './gate.js';
export { TurnstileError, CallSettledError, RateLimitedError, ConfigError, SubmitError, ResumeError, AdmissionError, ShutdownError, RefusedInputError, InstanceBrokenError, DisposedError, PersistError, RestoredError } from './errors.js';
export type { LayerInput } from './layers.js';
export type { CoreModuleLoader } from './instance.js';
export type * from './types.js';
export { AdmissionTimeoutError } from './errors.js';
