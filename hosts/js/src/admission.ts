// Admission control for one binding (one shared MCP connection), synchronous (`begin`,
// `nextAdmissions`, `end`, `abandon`) and asynchronous (`acquire`, which waits for its turn and
// returns a disposable `Permit`). Both share one drain of the controller's admissions: tickets
// that an `acquire` waits for go to it, the rest are returned by `nextAdmissions`.
//
// `acquire` rules. The wait counts against `timeoutMs` (from the call to `acquire`); an abort or
// a timeout while queued abandons the request, which consumed nothing, and rejects with the
// signal's reason, or `AdmissionTimeoutError` for the timeout (an `AdmissionError` whose `name`
// is `'TimeoutError'`). `shutdown` rejects every
// waiter with `ShutdownError` and aborts the `signal` of every permit in flight (each still
// needs its `release`).
import type * as wa from './component/interfaces/turnstile-scheduler-admission.js';
import { AdmissionError, AdmissionTimeoutError, ShutdownError } from './errors.js';
import { Held, type Instance } from './instance.js';
import type { AdmissionClass, ShutdownReport } from './types.js';
import { millis, oneOf, record, signal as checkSignal, string, u64 } from './validate.js';

const CLASSES = ['call', 'request', 'control', 'reentrant'] as const;

export interface AcquireOptions {
  /** Aborting while queued gives up the request (it consumed nothing). */
  signal?: AbortSignal;
  /** How long the whole `acquire` may take, queueing included; then it rejects with
   * `AdmissionTimeoutError` and the request is given up (it consumed nothing). */
  timeoutMs?: number;
  /** The permit (or ticket) of the in-flight tool call a re-entrant call descends from. */
  parent?: Permit | bigint;
  /** Names the request in messages; unique among live requests (default: `CLASS-N`). */
  id?: string;
}

/** An admitted request. `release()` (or disposal) ends it; `signal` aborts when the controller
 * shuts down, so the work should stop (and still release). */
export class Permit {
  readonly ticket: bigint;
  readonly id: string;
  readonly class: AdmissionClass;
  readonly #admission: Admission;
  readonly #controller = new AbortController();
  #released = false;

  /** @internal */
  constructor(admission: Admission, ticket: bigint, id: string, cls: AdmissionClass) {
    this.#admission = admission;
    this.ticket = ticket;
    this.id = id;
    this.class = cls;
  }
  get signal(): AbortSignal {
    return this.#controller.signal;
  }
  get released(): boolean {
    return this.#released;
  }
  /** Ends the request (idempotent): its budget and lock go to the next waiter. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#admission.releasePermit(this);
  }
  /** @internal */
  abort(reason: unknown): void {
    this.#controller.abort(reason);
  }
  [Symbol.dispose](): void {
    this.release();
  }
}

interface Waiter {
  id: string;
  cls: AdmissionClass;
  resolve: (permit: Permit) => void;
  reject: (error: unknown) => void;
  /** Removes the abort listener and clears the timer. */
  cleanup: () => void;
}

/** Admission control for one binding. Requests are named by the tickets `begin` returns, never
 * reused by one controller. Throws `AdmissionError`. Disposable (disposal shuts it down). */
export class Admission {
  readonly #held: Held<wa.Admission>;
  readonly #waiters = new Map<bigint, Waiter>();
  readonly #permits = new Map<bigint, Permit>();
  /** Tickets admitted and not yet returned by `nextAdmissions` (the synchronous API's). */
  #ready: bigint[] = [];
  #shutdown = false;
  #count = 0;

  /** @internal `Turnstile.admission` makes these. */
  constructor(instance: Instance, raw: wa.Admission) {
    this.#held = new Held(instance, raw, this, 'this admission controller');
  }

  #call<T>(f: (raw: wa.Admission) => T): T {
    const raw = this.#held.get();
    return this.#held.instance.call(
      () => f(raw),
      (payload) => {
        const p = payload as wa.Error;
        return p.code === 'shutdown' ? new ShutdownError(p.message) : new AdmissionError(p.code, p.message);
      },
    );
  }

  /** Drains the controller's admissions while some `acquire` waits: waiters get their permits,
   * the rest is kept for `nextAdmissions` (and `end`, `abandon` and `shutdown` treat those as
   * the controller treats admissions not yet drained). Without waiters nothing is drained, so
   * the synchronous API is exactly the controller's. */
  #drain(): void {
    if (this.#waiters.size === 0) return;
    this.#drainAll();
  }

  #drainAll(): void {
    const admitted = this.#call((raw) => raw.nextAdmissions());
    for (const ticket of admitted) {
      const waiter = this.#waiters.get(ticket);
      if (!waiter) {
        this.#ready.push(ticket);
        continue;
      }
      this.#waiters.delete(ticket);
      waiter.cleanup();
      const permit = new Permit(this, ticket, waiter.id, waiter.cls);
      this.#permits.set(ticket, permit);
      waiter.resolve(permit);
    }
  }

  /** Asks to admit a request; it is admitted now or queued (`nextAdmissions` reports it either
   * way). `parent` is the ticket of the in-flight call a re-entrant call descends from. */
  begin(id: string, cls: AdmissionClass, parent?: bigint): bigint {
    string(id, 'id');
    oneOf(cls, 'cls', CLASSES);
    if (parent !== undefined) u64(parent, 'parent');
    const ticket = this.#call((raw) => raw.begin(id, cls, parent));
    this.#drain();
    return ticket;
  }

  /** An admitted request finished. */
  end(ticket: bigint): void {
    u64(ticket, 'ticket');
    if (this.#permits.has(ticket)) throw new AdmissionError('unknown-request', `ticket ${ticket} belongs to a permit: release the permit`);
    if (this.#ready.includes(ticket)) throw new AdmissionError('not-admitted', `ticket ${ticket} was not yet reported by nextAdmissions`);
    this.#call((raw) => raw.end(ticket));
    this.#drain();
  }

  /** A request gave up before the host learned it was admitted. */
  abandon(ticket: bigint): void {
    u64(ticket, 'ticket');
    if (this.#waiters.has(ticket)) throw new AdmissionError('unknown-request', `ticket ${ticket} belongs to a waiting acquire: abort its signal`);
    const at = this.#ready.indexOf(ticket);
    if (at >= 0) {
      // Admitted, drained for a waiter's sake, never reported: it consumed nothing but a moment.
      this.#ready.splice(at, 1);
      this.#call((raw) => raw.end(ticket));
    } else this.#call((raw) => raw.abandon(ticket));
    this.#drain();
  }

  /** The tickets of `begin` admitted since the last call, in admission order. */
  nextAdmissions(): BigUint64Array {
    this.#drainAll();
    const out = BigUint64Array.from(this.#ready);
    this.#ready = [];
    return out;
  }

  /** Requests in flight now (for diagnostics). */
  inFlight(): number {
    return this.#call((raw) => raw.inFlight());
  }

  /** Waits until a request of class `cls` is admitted and returns its permit. Rejects with
   * `ShutdownError` (shut down), `AdmissionError` (`would-deadlock`, `invalid-parent`, ...), the
   * signal's reason (aborted) or `AdmissionTimeoutError` (`timeoutMs` elapsed while queued). */
  acquire(cls: AdmissionClass, options: AcquireOptions = {}): Promise<Permit> {
    try {
      return this.#acquire(cls, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #acquire(cls: AdmissionClass, options: AcquireOptions): Promise<Permit> {
    oneOf(cls, 'cls', CLASSES);
    const o = record(options, 'options', ['signal', 'timeoutMs', 'parent', 'id']);
    const signal = checkSignal(o.signal, 'options.signal');
    const timeoutMs = o.timeoutMs === undefined ? undefined : millis(o.timeoutMs, 'options.timeoutMs');
    let parent: bigint | undefined;
    if (o.parent instanceof Permit) parent = o.parent.ticket;
    else if (o.parent !== undefined) parent = u64(o.parent, 'options.parent');
    const id = o.id === undefined ? `${cls}-${++this.#count}` : string(o.id, 'options.id');
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#shutdown) return Promise.reject(new ShutdownError());
    const ticket = this.#call((raw) => raw.begin(id, cls, parent));
    return new Promise<Permit>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const giveUp = (reason: unknown) => {
        if (this.#waiters.get(ticket) !== waiter) return;
        this.#waiters.delete(ticket);
        waiter.cleanup();
        try {
          this.#call((raw) => raw.abandon(ticket));
          this.#drain();
        } catch (error) {
          reject(error);
          return;
        }
        reject(reason);
      };
      const onAbort = () => giveUp(signal!.reason);
      const waiter: Waiter = {
        id,
        cls,
        resolve,
        reject,
        cleanup: () => {
          if (timer !== undefined) clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
        },
      };
      this.#waiters.set(ticket, waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs !== undefined) timer = setTimeout(() => giveUp(new AdmissionTimeoutError(id, timeoutMs)), timeoutMs);
      this.#drain();
    });
  }

  /** @internal */
  releasePermit(permit: Permit): void {
    this.#permits.delete(permit.ticket);
    if (this.#held.disposed) return;
    this.#call((raw) => raw.end(permit.ticket));
    this.#drain();
  }

  /** Refuses all further work: every waiting `acquire` rejects with `ShutdownError`, every
   * permit in flight has its `signal` aborted (and still needs its `release`). Returns what the
   * controller reported: `cancel` in flight, `refused` queued (their tickets are retired). */
  shutdown(): ShutdownReport {
    this.#shutdown = true;
    const report = this.#call((raw) => raw.shutdown());
    for (const ticket of report.refused) {
      const waiter = this.#waiters.get(ticket);
      if (!waiter) continue;
      this.#waiters.delete(ticket);
      waiter.cleanup();
      waiter.reject(new ShutdownError('the admission controller shut down while this request waited'));
    }
    const reason = new ShutdownError('the admission controller shut down');
    for (const ticket of report.cancel) this.#permits.get(ticket)?.abort(reason);
    if (this.#ready.length === 0) return { cancel: report.cancel, refused: report.refused };
    // Admissions drained for a waiter's sake but never reported are refused, as the controller
    // refuses its undrained ones: they are ended here and moved to `refused`.
    const undrained = new Set(this.#ready);
    this.#ready = [];
    for (const ticket of undrained) this.#call((raw) => raw.end(ticket));
    const refused = [...report.refused, ...[...report.cancel].filter((t) => undrained.has(t))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return { cancel: report.cancel.filter((t) => !undrained.has(t)), refused: BigUint64Array.from(refused) };
  }

  /** Shuts down (when not yet) and frees the controller; later use throws `DisposedError`. */
  dispose(): void {
    if (this.#held.disposed) return;
    if (!this.#shutdown && !this.#held.instance.broken) this.shutdown();
    this.#held.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}
