// Argument checks, run before anything crosses into the component: jco converts silently
// (`-1` becomes 4294967295, `"1"` becomes 1n, `NaN` becomes 0), so every number, enum, string and
// shape is checked here, and a mistake is a `TypeError` (wrong type) or `RangeError` (right
// type, wrong value) whose message names the parameter.

export const U32_MAX = 0xffff_ffff;
export const U64_MAX = 0xffff_ffff_ffff_ffffn;

const describe = (value: unknown): string => {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return value.constructor?.name ? `a ${value.constructor.name}` : 'an object';
  return `${typeof value} ${String(value)}`;
};

export function fail(name: string, expected: string, value: unknown): never {
  throw new TypeError(`${name} must be ${expected}, got ${describe(value)}`);
}

/** A `u64` number (entry, batch, ticket): a bigint in 0 ..= 2^64 - 1. */
export function u64(value: unknown, name: string): bigint {
  if (typeof value !== 'bigint') fail(name, 'a bigint', value);
  if (value < 0n || value > U64_MAX) throw new RangeError(`${name} must be in 0 ..= 2^64 - 1, got ${value}n`);
  return value;
}

/** A `u32`-ranged integer as a JS number (no NaN, no fraction, no boolean, no bigint). */
export function u32(value: unknown, name: string, min = 0, max = U32_MAX): number {
  if (typeof value !== 'number') fail(name, 'a number', value);
  if (!Number.isInteger(value) || value < min || value > max) throw new RangeError(`${name} must be an integer in ${min} ..= ${max}, got ${value}`);
  return value;
}

/** A duration in milliseconds: a finite number, 0 ..= 2^31 - 1 (what timers take). */
export function millis(value: unknown, name: string): number {
  if (typeof value !== 'number') fail(name, 'a number of milliseconds', value);
  if (!(value >= 0 && value <= 0x7fff_ffff)) throw new RangeError(`${name} must be 0 ..= 2147483647 ms, got ${value}`);
  return value;
}

/** A time on the host's clock in milliseconds (`now`, `until`): a non-negative safe integer, or
 * a bigint for the whole range of the component's `u64`. */
export function time(value: unknown, name: string): bigint {
  if (typeof value === 'bigint') {
    if (value < 0n || value > U64_MAX) throw new RangeError(`${name} must be a number of milliseconds in 0 ..= 2^64 - 1, got ${value}`);
    return value;
  }
  if (typeof value !== 'number') fail(name, 'a number of milliseconds', value);
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be an integer number of milliseconds in 0 ..= 2^53 - 1, got ${value}`);
  return BigInt(value);
}

export function string(value: unknown, name: string): string {
  if (typeof value !== 'string') fail(name, 'a string', value);
  return value;
}

export function boolean(value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') fail(name, 'a boolean', value);
  return value;
}

export function oneOf<T extends string>(value: unknown, name: string, allowed: readonly T[]): T {
  if (typeof value !== 'string') fail(name, `one of ${allowed.map((a) => `'${a}'`).join(', ')}`, value);
  if (!(allowed as readonly string[]).includes(value)) throw new RangeError(`${name} must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${describe(value)}`);
  return value as T;
}

export function func(value: unknown, name: string): void {
  if (typeof value !== 'function') fail(name, 'a function', value);
}

/** A plain object (not null, not an array) whose keys are all in `known`: its own enumerable
 * fields, copied (an inherited field is never read: `Object.create({ cancel: [b] })` has none). */
export function record(value: unknown, name: string, known: readonly string[]): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, 'an object', value);
  const own: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) throw new TypeError(`${name} has an unknown field ${JSON.stringify(key)} (known: ${known.join(', ')})`);
    own[key] = (value as Record<string, unknown>)[key];
  }
  return own;
}

export function array(value: unknown, name: string): readonly unknown[] {
  if (!Array.isArray(value)) fail(name, 'an array', value);
  return value;
}

export function signal(value: unknown, name: string): AbortSignal | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || typeof (value as AbortSignal).addEventListener !== 'function' || typeof (value as AbortSignal).aborted !== 'boolean') fail(name, 'an AbortSignal', value);
  return value as AbortSignal;
}

const NONE = new BigUint64Array(0);

/** A list of `u64`s: a `BigUint64Array` as is, an array of bigints checked item by item; other
 * typed arrays (which jco would copy byte for byte) are refused. */
export function numbers(value: unknown, name: string): BigUint64Array {
  if (value === undefined) return NONE;
  if (value instanceof BigUint64Array) return value;
  if (!Array.isArray(value)) fail(name, 'a BigUint64Array or an array of bigints', value);
  const out = new BigUint64Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const item: unknown = value[i];
    out[i] = typeof item === 'bigint' && item >= 0n && item <= U64_MAX ? item : u64(item, `${name}[${i}]`);
  }
  return out;
}

/** The one clock a driver (and `SharedKeys`) reads: monotonic whole-or-fractional
 * milliseconds, and one-shot timers at a time on that clock. */
export interface Clock {
  /** Milliseconds, monotonic (the driver floors them and never goes back). */
  now(): number;
  /** Calls `fire` once the clock reaches `atMs` (or later); `cancel` withdraws it. */
  setTimer(atMs: number, fire: () => void): { cancel(): void };
}

/** Timers take at most 2^31 - 1 ms: a longer wait fires early, and the caller re-arms it. */
const TIMER_MAX_MS = 0x7fff_ffff;

/** `performance.now()` and `setTimeout`. */
export const SYSTEM_CLOCK: Clock = {
  now: () => performance.now(),
  setTimer(atMs, fire) {
    const timer = setTimeout(fire, Math.min(TIMER_MAX_MS, Math.max(0, atMs - performance.now())));
    return { cancel: () => clearTimeout(timer) };
  },
};

/** A `Clock` option: absent is the system clock. */
export function clockOption(value: unknown, name: string): Clock {
  if (value === undefined) return SYSTEM_CLOCK;
  if (typeof value !== 'object' || value === null || typeof (value as Clock).now !== 'function' || typeof (value as Clock).setTimer !== 'function') {
    fail(name, 'a clock ({ now(): number, setTimer(atMs, fire): { cancel() } })', value);
  }
  return value as Clock;
}
