// `@turnstile/scheduler/openai-agents`: the OpenAI Agents SDK (`@openai/agents`, tested with
// 0.20) adapter, the JS counterpart of `turnstile_scheduler.openai_agents` (same name, same
// meaning).
//
//   const agent = limited(new Agent({ name: 'rfd', model, tools: [rfdDraft, rfdRenumber] }), policy);
//   const result = await run(agent, 'renumber RFD 2 to 5, then 5 to 6');
//
// `limited(agent, target, options)` returns `agent.clone(...)` with two changes: its function
// tools are copies whose `invoke` waits for the scheduler, and its model is a view of the
// agent's model that reads each model response as the SDK receives it. The batch is the
// response itself, not loop-turn timing: every function call of one response to these tools is
// ONE batch, in the order the model wrote them (`id` = the call id, `tool` = the tool's name,
// `args` = the model's arguments, so a key template `fs:{path}` works), and `decide(label,
// call)` is asked about every call of it, in written order, before the component starts any
// of them. Each call's `invoke` then waits, in the SDK's own promise for it, until the scheduler
// releases it, and runs the original tool there; its result goes back to the model as usual.
//
// Where the response is caught, and why not a hook. The Python SDK awaits
// `AgentHooks.on_llm_end(context, agent, response)` before it runs any tool of the response;
// the JS SDK has no such event (an agent emits `agent_start`, `agent_end`, `agent_handoff`,
// `agent_tool_start`, `agent_tool_end`; a `Runner` the same with the agent added): the only
// public place where a whole response is known before its tools run is the `Model` itself,
// whose `getResponse` (or `getStreamedResponse`'s `response_done` event) the runner awaits
// before it processes the response. So the clone's model is a `Proxy` of the agent's model
// (the same object for everything else: `instanceof`, settings, retry advice) that records the
// function calls of each response. A `Model` sees no run, so the batch is submitted when the
// first of its calls reaches its tool's `invoke` (which gets the run's `RunContext`): on that
// run's driver, the whole response at once, before the first call can start. The record is
// found by the call's id, its tool and its arguments text.
//
// Schedulers. A `Policy` gives each run its own scheduler and driver (one per `RunContext`:
// `run`, `Runner.run`, streamed or not), made when the run's first limited call arrives and
// disposed at the agent's `agent_end` (its final output) or, when the run ends otherwise
// (an error, an interruption it never resumes), when its context is collected; the
// `conversation` limits of the policy are then per run. A `Scheduler` or a `Driver` is shared by
// every run of the agent (limits across conversations); the adapter never disposes it. Call ids
// still live in a shared driver are submitted as `ID@2`, `ID@3` ... (what `decide` then sees).
//
// A call the scheduler settles (rejected by `decide`, skipped, cancelled ...) is answered with
// the component's sentence as the tool's result ("not run: the user rejected this call"), as
// `limitTools` and the Python adapters answer; `settled: 'throw'` throws `CallSettledError` from
// the tool's `invoke` instead (the SDK then fails the run with a `ToolCallError`: a function
// tool's error function runs inside its own `invoke`, which a settled call never reaches). What
// the original tool returns or throws is what the SDK gets, unchanged: a `tool()` whose
// `execute` throws answers the model with its error function's text (the scheduler records the
// call as ended: the tool returned that text). Cancelling the run (the `signal` of `run`) or the
// SDK cancelling a response's tools (a sibling's fatal failure) cancels the response's batch:
// its queued calls never run (their keys move on), its running ones get their signal aborted
// and keep their slot until they end (or `abortGraceMs`). A tool's own `timeoutMs` counts from
// its start, not from its call (the copy has none; the original runs under
// `invokeFunctionTool`, which applies it).
//
// Tools whose calls the SDK may answer without invoking are left out of the response batch
// (the calls would be queued for a tool that never comes, holding the key): tools with a
// `needsApproval` other than the static `false`, with `inputGuardrails`, or with a dynamic
// `isEnabled`; and a call whose arguments are not JSON (the SDK answers it with a parse
// error). Each of their calls is a batch of its own when the SDK invokes it, so they are limited
// but not ordered with the response; use `decide` for approvals. A call of a response the SDK
// never invokes anyway (the run stopped first) is withdrawn at the run's next response or its
// end; a call of a response this adapter did not see (a run resumed from a `RunState`) is a
// batch of its own when it arrives, still limited. Only function tools are limited: hosted
// tools, MCP servers and handoffs are not tool calls the host runs. The agent's model must be
// a `Model` object (a model name is resolved by the runner's provider, which the adapter cannot
// see; `new OpenAIProvider().getModel(name)` gives the object).
//
// What it relies on in the SDK (each tested in test/openai-agents.test.mjs against the pinned
// version, so a release that changes it fails a test instead of racing):
// 1. The runner awaits `model.getResponse(request)` (streamed: `getStreamedResponse` to its
//    `response_done` event) before it invokes any tool of that response, and the response's
//    `output` holds its function calls as `{ type: 'function_call', callId, name, arguments }`
//    in the order the model wrote them.
// 2. A function tool is invoked as `tool.invoke(runContext, argumentsJson, details)`, with
//    `details.toolCall.callId` the call id and `details.signal` aborted when the run or the
//    response's tools are cancelled; `runContext` is one object for the whole run.
// 3. A copy (`{ ...tool, invoke }`) is a function tool as good as the original (the SDK keys its
//    own argument parsing on the original `invoke`: the copy's is parsed by the original's own
//    `invoke`, with the same result), and `agent.clone` keeps every other setting.
// 4. The SDK's static `needsApproval` / `isEnabled` are functions of no parameter (`length`
//    0), dynamic ones take the run context.
import { invokeFunctionTool, type Agent, type FunctionTool, type Model, type ModelRequest, type ModelResponse, type RunContext, type StreamEvent } from '@openai/agents';
import { Driver, type Decision, type DriverOptions, type EntryOutcome } from './driver.js';
import { CallSettledError } from './errors.js';
import { Scheduler } from './scheduler.js';
import { Policy } from './turnstile.js';
import { fail, func, millis, oneOf, record } from './validate.js';

/** A call as the adapter submits it (what `decide` sees): the call id (or `ID@N`), the tool's
 * name, and the model's arguments (parsed JSON). */
export interface LimitedCall {
  id: string;
  tool: string;
  args: unknown;
}

export interface LimitedOptions {
  /** Decides each call of a response in written order, before any of it starts (default:
   * approve all); may be async (a prompt). */
  decide?: (label: string, call: LimitedCall) => Decision | Promise<Decision>;
  /** A call the scheduler settled: `'return'` (default) answers the model with the component's
   * sentence; `'throw'` throws `CallSettledError` from the tool. */
  settled?: 'return' | 'throw';
  /** Aborts a running call's signal (a `TimeoutError`) once it has run this long. */
  executionTimeoutMs?: number;
  /** Once a running call's signal aborted, how long it may still take before its slot is freed
   * (see `RunOptions.abortGraceMs`). */
  abortGraceMs?: number;
  /** The store client for the policy's shared keys, when the adapter makes the driver. */
  sharedKeys?: DriverOptions['sharedKeys'];
  /** The clock, when the adapter makes the driver. */
  clock?: DriverOptions['clock'];
  /** Told every wait, start, end and settlement, when the adapter makes the driver (see
   * `DriverOptions.onEvent`). */
  onEvent?: DriverOptions['onEvent'];
}

type Target = Policy | Scheduler | Driver;
type Invoke = FunctionTool['invoke'];

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (error: unknown) => void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/** One function call of a response, from the response until its end. */
class Pending {
  /** Resolves when the scheduler releases it (its execution starts). */
  readonly released = deferred<void>();
  /** Settles with its entry's outcome: what `invoke` answers. */
  readonly answer = deferred<unknown>();
  /** The execution's promise (resolved by `invoke` with the tool's end), once released. */
  done: Deferred<unknown> | undefined;
  /** The execution's signal, once released. */
  signal: AbortSignal | undefined;
  /** Its `invoke` arrived. */
  arrived = false;
  /** It will not run (its invoke never came, or gave up waiting). */
  withdrawn = false;
  /** The label it was submitted under. */
  label: string;
  readonly tool: string;
  readonly id: string;
  readonly text: string;
  readonly args: unknown;
  readonly batch: ResponseBatch;

  constructor(tool: string, id: string, text: string, args: unknown, batch: ResponseBatch) {
    this.tool = tool;
    this.id = id;
    this.text = text;
    this.args = args;
    this.batch = batch;
    this.label = id;
  }

  /** It will not run: queued, its execution ends at once when released; released, now. */
  withdraw(): void {
    if (this.arrived) return;
    this.withdrawn = true;
    this.done?.reject(new Error(`${this.id} was never invoked by the SDK`));
  }
}

/** The calls of one model response (or one call invoked on its own). */
class ResponseBatch {
  readonly calls: Pending[] = [];
  readonly controller = new AbortController();
  submitted = false;
}

/** One run's driver and batches. Holds no reference to the run's context. */
class Run {
  readonly driver: Driver;
  readonly owns: boolean;
  readonly batches = new Set<ResponseBatch>();

  constructor(driver: Driver, owns: boolean) {
    this.driver = driver;
    this.owns = owns;
  }

  /** Withdraws every call of a past response the SDK did not invoke. */
  sweep(): void {
    for (const batch of this.batches) for (const p of batch.calls) if (!p.arrived) p.withdraw();
  }

  close(): void {
    this.sweep();
    if (this.owns) this.driver.dispose();
  }
}

const LIMITED = Symbol('turnstile.openai-agents.limited');
/** Response records kept for calls not invoked yet, at most (the oldest are dropped). */
const RECORDS_MAX = 1024;

/** What every run of one limited agent shares: the target, the options, the runs. */
class Limiter {
  readonly target: Target;
  readonly options: LimitedOptions;
  /** Tools whose calls join the response batch, by name: evaluated once (static policies). */
  readonly batched = new Map<string, Promise<boolean>>();
  readonly tools = new Map<string, FunctionTool>();
  readonly runs = new WeakMap<object, Run>();
  readonly finalizer = new FinalizationRegistry<Run>((run) => run.close());
  /** Responses whose calls have not all arrived, by call id, oldest first. */
  readonly records = new Map<string, ResponseBatch[]>();
  readonly recordOrder: ResponseBatch[] = [];
  /** Labels live in each driver (the scheduler refuses an id used in a live batch). */
  readonly held = new WeakMap<Driver, Set<string>>();

  constructor(target: Target, options: LimitedOptions) {
    this.target = target;
    this.options = options;
  }

  runOf(context: object): Run {
    let run = this.runs.get(context);
    if (run) return run;
    const { sharedKeys, clock, onEvent } = this.options;
    const driverOptions: DriverOptions = {};
    if (sharedKeys !== undefined) driverOptions.sharedKeys = sharedKeys;
    if (clock !== undefined) driverOptions.clock = clock;
    if (onEvent !== undefined) driverOptions.onEvent = onEvent;
    if (this.target instanceof Policy) {
      const scheduler = new Scheduler(this.target);
      try {
        run = new Run(new Driver(scheduler, driverOptions), true);
      } catch (error) {
        scheduler.dispose();
        throw error;
      }
      this.finalizer.register(context, run, run);
    } else if (this.target instanceof Scheduler) run = new Run(Driver.of(this.target, driverOptions), false);
    else run = new Run(this.target, false);
    this.runs.set(context, run);
    return run;
  }

  end(context: object): void {
    const run = this.runs.get(context);
    if (!run) return;
    this.runs.delete(context);
    this.finalizer.unregister(run);
    run.close();
  }

  /** Whether `tool`'s calls join the response batch (see the module doc). */
  isBatched(tool: FunctionTool): Promise<boolean> {
    let known = this.batched.get(tool.name);
    if (!known) {
      known = (async () => {
        if (tool.inputGuardrails && tool.inputGuardrails.length > 0) return false;
        if (typeof tool.isEnabled === 'function' && tool.isEnabled.length > 0) return false;
        if (typeof tool.needsApproval !== 'function' || tool.needsApproval.length > 0) return false;
        return (await (tool.needsApproval as () => Promise<boolean>)()) === false;
      })().catch(() => false);
      this.batched.set(tool.name, known);
    }
    return known;
  }

  /** Records the function calls of a response to these tools (the model's side). */
  async capture(response: ModelResponse | undefined): Promise<void> {
    const output = response?.output;
    if (!Array.isArray(output)) return;
    const batch = new ResponseBatch();
    const seen = new Set<string>();
    for (const item of output as any[]) {
      if (item?.type !== 'function_call' || item.namespace !== undefined) continue;
      const tool = this.tools.get(item.name);
      if (!tool || typeof item.callId !== 'string' || seen.has(item.callId)) continue;
      if (!(await this.isBatched(tool))) continue;
      let args: unknown;
      try {
        args = JSON.parse(item.arguments);
      } catch {
        continue; // the SDK answers it with a parse error, never invoking the tool
      }
      seen.add(item.callId);
      batch.calls.push(new Pending(tool.name, item.callId, item.arguments, args, batch));
    }
    if (batch.calls.length === 0) return;
    for (const p of batch.calls) {
      const list = this.records.get(p.id);
      if (list) list.push(batch);
      else this.records.set(p.id, [batch]);
    }
    this.recordOrder.push(batch);
    while (this.recordOrder.length > RECORDS_MAX) this.forgetRecord(this.recordOrder[0]!);
  }

  forgetRecord(batch: ResponseBatch): void {
    const at = this.recordOrder.indexOf(batch);
    if (at >= 0) this.recordOrder.splice(at, 1);
    for (const p of batch.calls) {
      const list = this.records.get(p.id);
      if (!list) continue;
      const i = list.indexOf(batch);
      if (i >= 0) list.splice(i, 1);
      if (list.length === 0) this.records.delete(p.id);
    }
  }

  /** The pending call `invoke` is for: in a batch of this run, else in a recorded response (then
   * submitted, whole, on this run), else a batch of its own. */
  claim(run: Run, tool: string, id: string, text: string): Pending {
    for (const batch of run.batches) {
      for (const p of batch.calls) if (!p.arrived && !p.withdrawn && p.id === id && p.tool === tool && p.text === text) return p;
    }
    const list = this.records.get(id);
    const batch = list?.find((b) => b.calls.some((p) => p.id === id && p.tool === tool && p.text === text));
    if (batch) {
      this.forgetRecord(batch);
      run.sweep(); // a new response: the calls of the last ones the SDK never invoked are withdrawn
      this.submit(run, batch);
      return batch.calls.find((p) => p.id === id && p.tool === tool && p.text === text)!;
    }
    const own = new ResponseBatch();
    let args: unknown;
    try {
      args = JSON.parse(text);
    } catch {
      args = undefined;
    }
    own.calls.push(new Pending(tool, id, text, args, own));
    this.submit(run, own);
    return own.calls[0]!;
  }

  /** Submits `batch` on `run`'s driver. */
  submit(run: Run, batch: ResponseBatch): void {
    const driver = run.driver;
    let held = this.held.get(driver);
    if (!held) this.held.set(driver, (held = new Set()));
    const calls = batch.calls.map((pending) => {
      let label = pending.id;
      for (let n = 2; held!.has(label); n++) label = `${pending.id}@${n}`;
      held!.add(label);
      pending.label = label;
      return { id: label, tool: pending.tool, args: pending.args, pending };
    });
    batch.submitted = true;
    run.batches.add(batch);
    const { decide, executionTimeoutMs, abortGraceMs } = this.options;
    const done = driver.run(
      calls,
      (execution) => {
        const p = execution.call.pending;
        // Withdrawn while queued: it ends at once and holds no slot.
        if (p.withdrawn) return Promise.reject(new Error(`${p.id} was never invoked by the SDK`));
        p.signal = execution.signal;
        p.done = deferred();
        p.released.resolve();
        return p.done.promise;
      },
      {
        signal: batch.controller.signal,
        ...(decide && { decide: (label: string, call: LimitedCall) => decide(label, { id: call.id, tool: call.tool, args: call.args }) }),
        ...(executionTimeoutMs !== undefined && { executionTimeoutMs }),
        ...(abortGraceMs !== undefined && { abortGraceMs }),
        onOutcome: (outcome, call) => answer(call.pending, outcome),
      },
    );
    done.then(
      (outcomes) => {
        driver.forget(outcomes);
        finish(undefined, false);
      },
      (error) => finish(error, true),
    );
    const finish = (error: unknown, failed: boolean) => {
      run.batches.delete(batch);
      for (const call of calls) {
        held!.delete(call.id);
        if (failed) call.pending.answer.reject(error);
      }
    };
  }

  /** The copy's `invoke`: waits for the scheduler, then runs the original tool. */
  async invoke(original: FunctionTool, runContext: RunContext<any>, input: string, details?: any): Promise<unknown> {
    const id: string | undefined = details?.toolCall?.callId;
    const sdkSignal: AbortSignal | undefined = details?.signal;
    if (sdkSignal?.aborted) throw sdkSignal.reason;
    const run = this.runOf(runContext);
    const p = this.claim(run, original.name, id ?? `${original.name}-${++anonymous}`, input);
    p.arrived = true;
    // The SDK cancels the response's tools (the run's signal, a sibling's fatal failure): the
    // batch is cancelled, so no call of it is left queued for an invoke that never comes.
    const onAbort = () => p.batch.controller.abort(sdkSignal!.reason);
    sdkSignal?.addEventListener('abort', onAbort, { once: true });
    try {
      const first = await Promise.race([p.released.promise.then(() => true), p.answer.promise.then(() => false, () => false)]);
      if (first) {
        if (sdkSignal?.aborted && !p.signal?.aborted) {
          // Released as the SDK gave up on it: it does not start.
          p.done!.reject(sdkSignal.reason);
        } else {
          const signal = sdkSignal ? AbortSignal.any([sdkSignal, p.signal!]) : p.signal!;
          const inner = details ? Object.create(Object.getPrototypeOf(details), Object.getOwnPropertyDescriptors(details)) : {};
          Object.defineProperty(inner, 'signal', { value: signal, enumerable: true, configurable: true, writable: true });
          invokeFunctionTool({ tool: original, runContext, input, details: inner }).then(
            (value) => p.done!.resolve(value),
            (error) => p.done!.reject(error),
          );
        }
      }
      try {
        return await p.answer.promise;
      } catch (error) {
        if (error instanceof CallSettledError) {
          // Cancelled because the SDK gave up on the response: the SDK's own reason, which it
          // recognises as a cancellation.
          if (sdkSignal?.aborted && error.reason.kind === 'cancelled') throw sdkSignal.reason;
          if (this.options.settled !== 'throw') return error.message;
        }
        throw error;
      }
    } finally {
      sdkSignal?.removeEventListener('abort', onAbort);
    }
  }
}

let anonymous = 0;

/** Settles a call's answer with its entry's outcome. */
function answer(p: Pending, outcome: EntryOutcome): void {
  switch (outcome.status) {
    case 'ok':
      p.answer.resolve(outcome.value);
      return;
    case 'failed':
      p.answer.reject(outcome.error);
      return;
    case 'cancelled':
      if ('error' in outcome) p.answer.reject(outcome.error);
      else p.answer.resolve(outcome.value);
      return;
    case 'settled':
      p.answer.reject(new CallSettledError(outcome.reason, p.label, p.tool, outcome.message, outcome.error));
  }
}

/** The agent's model, seen through: each response's function calls are recorded. */
function watch(model: Model, limiter: Limiter): Model {
  return new Proxy(model, {
    get(target, prop) {
      if (prop === 'getResponse') {
        return async (request: ModelRequest) => {
          const response = await target.getResponse(request);
          await limiter.capture(response);
          return response;
        };
      }
      if (prop === 'getStreamedResponse') {
        return async function* (request: ModelRequest): AsyncIterable<StreamEvent> {
          for await (const event of target.getStreamedResponse(request)) {
            if ((event as any)?.type === 'response_done') await limiter.capture((event as any).response);
            yield event;
          }
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

const EVENTS = ['agent_start', 'agent_end', 'agent_handoff', 'agent_tool_start', 'agent_tool_end'] as const;

/** A clone of `agent` whose function tools run through the scheduler, each model response one
 * batch in written order (see the module doc). `target` is a `Policy` (a scheduler per run), a
 * `Scheduler` or a `Driver` (shared by every run). */
export function limited<A extends Agent<any, any>>(agent: A, target: Target, options: LimitedOptions = {}): A {
  if (typeof agent !== 'object' || agent === null || typeof (agent as any).clone !== 'function' || !Array.isArray((agent as any).tools)) {
    fail('agent', 'an Agent of @openai/agents', agent);
  }
  if (!(target instanceof Policy || target instanceof Scheduler || target instanceof Driver)) fail('target', 'a Policy, Scheduler or Driver', target);
  const o = record(options, 'options', ['decide', 'settled', 'executionTimeoutMs', 'abortGraceMs', 'sharedKeys', 'clock', 'onEvent']) as LimitedOptions;
  if (o.decide !== undefined) func(o.decide, 'options.decide');
  if (o.settled !== undefined) oneOf(o.settled, 'options.settled', ['return', 'throw']);
  if (o.executionTimeoutMs !== undefined) millis(o.executionTimeoutMs, 'options.executionTimeoutMs');
  if (o.abortGraceMs !== undefined) millis(o.abortGraceMs, 'options.abortGraceMs');
  if ((agent as any)[LIMITED]) throw new TypeError('this agent is limited already');
  const model = (agent as any).model;
  if (typeof model !== 'object' || model === null || typeof model.getResponse !== 'function') {
    throw new TypeError(
      `agent.model must be a Model object (got ${JSON.stringify(model)}): the adapter reads each model response from it; ` +
        'resolve a name first, e.g. `await new OpenAIProvider().getModel(name)`',
    );
  }
  const limiter = new Limiter(target, o);
  const tools = (agent.tools as any[]).map((tool) => {
    if (tool?.type !== 'function' || typeof tool.invoke !== 'function') return tool;
    const original = tool as FunctionTool;
    limiter.tools.set(original.name, original);
    const invoke: Invoke = (runContext, input, details) => limiter.invoke(original, runContext, input, details) as any;
    // No `timeoutMs` on the copy: the original's runs from its start (`invokeFunctionTool`).
    return { ...original, invoke, timeoutMs: undefined } as FunctionTool;
  });
  const clone = agent.clone({ tools, model: watch(model, limiter) } as any) as A;
  Object.defineProperty(clone, LIMITED, { value: true });
  // The agent's own listeners still hear the clone's events.
  for (const event of EVENTS) (clone as any).on(event, (...args: unknown[]) => (agent as any).emit(event, ...args));
  (clone as any).on('agent_end', (context: object) => limiter.end(context));
  return clone;
}
