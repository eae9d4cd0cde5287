// `@turnstile/scheduler/langchain`: the LangChain v1 agents (`langchain`, tested with 1.5)
// adapter, the JS counterpart of `turnstile_scheduler.langchain.TurnstileMiddleware` (same
// meaning; a factory, as LangChain JS writes its own middleware: `humanInTheLoopMiddleware(...)`,
// `toolRetryMiddleware(...)` are functions returning `createMiddleware(...)`).
//
//   const agent = createAgent({ model, tools, middleware: [turnstileMiddleware(policy)] });
//   const result = await agent.invoke({ messages: [{ role: 'user', content: 'renumber RFD 2 to 5, then 5 to 6' }] });
//
// The batch is the model's response, not loop-turn timing. The middleware's `afterModel` hook
// sees the `AIMessage` before the graph starts any of its tool calls, and submits its tool calls
// not answered yet (`gate.expect`) as ONE batch, in the order the model wrote them (`id` = the
// tool call id, `tool` = its name, `args` = its arguments, so a key template `fs:{path}` works).
// `decide(label, call)` is asked about every call of the batch in written order, and the
// component starts none of them before every one was decided. Each call's `wrapToolCall` then
// takes its place (`gate.call` by the tool call's id), waits there until the scheduler releases
// it, runs the tool (`handler(request)`) and reports its end: a result is ok; an exception, or
// a `ToolMessage` with `status: 'error'` (LangChain's answer to a tool it cannot find), failed.
// A call the scheduler settles (rejected, skipped, cancelled, stopped ...) is answered with a
// `ToolMessage` (`status: 'error'`) whose content is the component's sentence ("not run: the
// user rejected this call"), as the other adapters answer; `settled: 'throw'` throws
// `CallSettledError` from the tool node instead (LangChain fails the run with a
// `MiddlewareError` whose `cause` it is). What the tool throws is thrown on, unchanged,
// and LangChain handles it as it handles any error out of a `wrapToolCall` middleware: a
// `ToolInvocationError` (arguments that do not fit the tool's schema) answers the model, any
// other error fails the run (LangChain 1.5's default for a tool node with `wrapToolCall`
// middleware, with or without this one): LangGraph then aborts the step's other tasks, so the
// response's queued calls end without running and their keys move on. LangGraph aborts them once
// the error reached it, after the failed call freed its slot: the call behind it on its key may
// start just before, with its signal aborted at once. The tool runs with a signal that also
// aborts when the scheduler stops the call (`executionTimeoutMs`, a cancelled batch), besides
// the run's own.
//
// Put it FIRST in `middleware: [...]`: its `afterModel` then runs last among the hooks (so it
// sees the calls as other middleware left them, e.g. `humanInTheLoopMiddleware`'s edits and
// rejections), and its `wrapToolCall` is outermost (retries of another middleware run inside
// the call's slot). A call of the response the graph never runs (a later hook that jumped
// elsewhere) is withdrawn at the next model call or at the agent's end; a call this middleware
// did not see in a response (a run resumed after an interrupt) is a batch of its own when it
// arrives, still limited. Structured-output calls (`extract-*`, which the graph answers itself)
// are left out of the batch.
//
// Scope. One middleware, one scheduler: a `Policy` makes a scheduler (and its driver) that every
// run and every thread of the agent shares, so a key's limit holds across conversations (never
// looser than per conversation). For limits per conversation, build the agent with a middleware
// per conversation. A `Scheduler`, `Driver` or `Gate` given is shared the same way and never
// disposed by the middleware; `dispose()` disposes what it made. Tool call ids must be unique
// among the calls in flight on the scheduler (providers make them so): a live duplicate is
// refused (`SubmitError` from the model's step).
//
// What it relies on in LangChain (each tested in test/langchain.test.mjs against the pinned
// `langchain`, so a release that changes it fails a test instead of racing):
// 1. A middleware's `afterModel(state, runtime)` runs with the state whose last message is the
//    model's `AIMessage`, its `tool_calls` in written order, and the graph dispatches none of
//    them to the tool node before the `afterModel` hooks have returned.
// 2. Each tool call then reaches `wrapToolCall(request, handler)` with `request.toolCall`
//    holding that call's `id`, `name` and `args`, `request.state.messages` the conversation,
//    `request.runtime.signal` the run's signal, and `request.tool` the registered tool, which
//    `handler` invokes (`request.tool.invoke(toolCall, config)`) when given another.
// 3. `handler` throws what the tool threw, and returns a `ToolMessage` (or a `Command`).
import { AIMessage, MiddlewareError, ToolInvocationError, ToolMessage, createMiddleware, type AgentMiddleware } from 'langchain';
import { Driver, type Decision } from './driver.js';
import { CallSettledError } from './errors.js';
import { GATE_OPTIONS, Gate, adapterGate, releaseAdapterGate, type GateCallInput, type GateOptions } from './gate.js';
import { Scheduler } from './scheduler.js';
import { Policy } from './turnstile.js';
import { oneOf, record } from './validate.js';

/** The gate's options (`GateOptions`: used when the middleware makes the gate), and how a
 * settled call is answered. */
export interface TurnstileMiddlewareOptions extends GateOptions {
  /** Decides each call of a response in written order, before any of it starts (default:
   * approve all); may be async (a prompt). */
  decide?: (label: string, call: GateCallInput) => Decision | Promise<Decision>;
  /** A call the scheduler settled: `'return'` (default) answers the model with the component's
   * sentence in an error `ToolMessage`; `'throw'` throws `CallSettledError` from the tool node. */
  settled?: 'return' | 'throw';
}

/** The middleware, with the gate it runs the calls on. */
export type TurnstileMiddleware = AgentMiddleware & {
  /** The gate every call of every run of the agent goes through. */
  readonly gate: Gate;
  /** Cancels the calls in flight on the gate the middleware made (`gate.cancel()`), and disposes
   * the driver when it made that too (a `Policy` target); a `Gate` given is left alone.
   * Disposing twice is fine. */
  dispose(): void;
};

/** The tool node answered with an error `ToolMessage`: the call failed (carried through
 * `gate.call` to report it, then given back as the answer). */
class Failed extends Error {
  readonly answer: ToolMessage;
  constructor(answer: ToolMessage) {
    super(typeof answer.content === 'string' ? answer.content : JSON.stringify(answer.content));
    this.answer = answer;
  }
}

/** A LangChain v1 agent middleware running every tool call of `createAgent` through the
 * scheduler, each model response one batch in written order (see the module doc). `target` is
 * a `Policy` (a scheduler this middleware makes, shared by every run of the agent), a
 * `Scheduler`, a `Driver` or a `Gate`; give `decide`, `executionTimeoutMs`, `abortGraceMs` ... to
 * the `Gate` instead when you pass one. */
export function turnstileMiddleware(target: Policy | Scheduler | Driver | Gate, options: TurnstileMiddlewareOptions = {}): TurnstileMiddleware {
  const o = record(options, 'options', ['settled', ...GATE_OPTIONS]) as TurnstileMiddlewareOptions;
  if (o.settled !== undefined) oneOf(o.settled, 'options.settled', ['return', 'throw']);
  const { gate, owns } = adapterGate(target, o);
  const settled = o.settled ?? 'return';

  /** Withdraws the expected calls of the responses in `messages` (but `skip`) that never ran. */
  const sweep = (messages: unknown[], skip?: number) => {
    const waiting = gate.expected();
    if (waiting.length === 0) return;
    const ids = new Set<string>();
    messages.forEach((m, i) => {
      if (i !== skip && AIMessage.isInstance(m)) for (const c of m.tool_calls ?? []) if (c.id) ids.add(c.id);
    });
    for (const id of waiting) if (ids.has(id)) gate.withdraw(id);
  };

  /** A call of a response ended by an exception or a cancellation, which ends the graph's step:
   * the calls of the same response that never reached the middleware are withdrawn, so that none
   * keeps a slot waiting for a call that will not come. One that still comes is a batch of its
   * own. */
  const giveUpSiblings = (messages: unknown[], callId: string) => {
    const waiting = new Set(gate.expected());
    if (waiting.size === 0) return;
    for (let i = messages.length - 1; i >= 0; i--) {
      const m = messages[i];
      if (AIMessage.isInstance(m) && (m.tool_calls ?? []).some((c) => c.id === callId)) {
        for (const c of m.tool_calls ?? []) if (c.id && waiting.has(c.id)) gate.withdraw(c.id);
        return;
      }
    }
  };

  const middleware = createMiddleware({
    name: 'TurnstileMiddleware',

    // The batch: the model's response.
    afterModel: (state: any) => {
      const messages: unknown[] = state?.messages ?? [];
      const last = lastResponse(messages);
      sweep(messages, last);
      if (last === undefined) return undefined;
      const response = messages[last] as AIMessage;
      // As the graph does: the calls not answered yet (another middleware may have answered
      // some with a ToolMessage, e.g. a human's rejection).
      const answered = new Set(messages.slice(last + 1).flatMap((m) => (ToolMessage.isInstance(m) ? [m.tool_call_id] : [])));
      const calls: GateCallInput[] = [];
      for (const c of response.tool_calls ?? []) {
        if (!c.id || answered.has(c.id) || c.name.startsWith('extract-')) continue;
        calls.push({ id: c.id, tool: c.name, args: c.args });
      }
      gate.expect(calls);
      return undefined;
    },

    // Before the next model call, and at the agent's end: the calls of past responses that
    // never ran are withdrawn.
    beforeModel: (state: any) => {
      sweep(state?.messages ?? []);
      return undefined;
    },
    afterAgent: (state: any) => {
      sweep(state?.messages ?? []);
      return undefined;
    },

    // Each call.
    wrapToolCall: async (request: any, handler: any): Promise<any> => {
      const call = request.toolCall;
      const name: string = call?.name;
      const id: string | undefined = call?.id;
      if (!id) throw new TypeError(`${name}: the tool call has no id`);
      const runSignal: AbortSignal | undefined = request.runtime?.signal ?? undefined;
      const run = async (_args: unknown, signal: AbortSignal) => checked(await handler(withSignal(request, signal)));
      try {
        return await gate.call(name, id, call.args, run, runSignal ? { signal: runSignal } : {});
      } catch (error) {
        if (error instanceof Failed) return error.answer;
        if (error instanceof CallSettledError && !runSignal?.aborted) {
          if (settled === 'throw') throw error;
          return new ToolMessage({ content: error.message, tool_call_id: id, name, status: 'error' });
        }
        // LangChain answers the model with a bad-arguments error and goes on; anything else
        // ends the step.
        if (!isInvocationError(error)) giveUpSiblings(request.state?.messages ?? [], id);
        if (error instanceof CallSettledError && runSignal?.aborted) throw runSignal.reason;
        throw error;
      }
    },
  });

  let disposed = false;
  return Object.assign(middleware, {
    gate,
    dispose(): void {
      if (disposed) return;
      disposed = true;
      releaseAdapterGate(gate, owns);
    },
  }) as TurnstileMiddleware;
}

/** The index of the model's response: the last message, or the last AIMessage followed only by
 * ToolMessages (answers another middleware gave); undefined when it has no tool call. */
function lastResponse(messages: unknown[]): number | undefined {
  let i = messages.length - 1;
  while (i >= 0 && ToolMessage.isInstance(messages[i])) i--;
  const m = messages[i];
  if (i >= 0 && AIMessage.isInstance(m) && (m.tool_calls?.length ?? 0) > 0) return i;
  return undefined;
}

/** An error `ToolMessage` (LangChain's answer to a call it could not run) fails the call. */
function checked(result: unknown): unknown {
  if (ToolMessage.isInstance(result) && result.status === 'error') throw new Failed(result);
  return result;
}

function isInvocationError(error: unknown): boolean {
  let e = error;
  while (MiddlewareError.isInstance(e)) e = (e as any).cause;
  return ToolInvocationError.isInstance(e);
}

/** The request, with its tool invoked under `signal` too (the scheduler's: a timeout, a
 * cancelled batch), besides the run's. A request without a registered tool is given as is. */
function withSignal(request: any, signal: AbortSignal): any {
  const tool = request.tool;
  if (typeof tool !== 'object' || tool === null || typeof tool.invoke !== 'function') return request;
  const limitedTool = new Proxy(tool, {
    get(target, prop) {
      if (prop === 'invoke') {
        return (input: unknown, config?: any) => {
          const own: AbortSignal | undefined = config?.signal;
          return target.invoke(input, { ...config, signal: own ? AbortSignal.any([own, signal]) : signal });
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { ...request, tool: limitedTool };
}
