// `@turnstile/scheduler/ai`: the Vercel AI SDK (`ai`, tested with 7.0) adapter. `limitTools`
// takes a tool set and returns the same tool set with each tool's `execute` routed through a
// `Gate` under the tool's name in the set (its `conversation.tools.NAME` in the config) and the
// tool-call id the SDK passes. This module imports nothing from `ai`: a tool is anything with an
// optional `execute(input, options)`, so the package has no dependency on the SDK.
//
// What it relies on in the SDK (each tested in test/ai.test.mjs against the pinned version, so
// an upgrade that breaks one fails a test):
// 1. `generateText` and `streamText` call the `execute` of every tool call of one step in the
//    order the model wrote the calls, all from the same macrotask (each through the same chain of
//    awaits from one `Promise.all(toolCalls.map(...))`): they form one batch, in written order.
// 2. `streamText` starts a step's tools only after the model's stream for that step ended
//    (`model-call-end`), not as each tool-call part arrives. Were that to change, calls arriving
//    in different tasks would form several batches: limits and the order per key would still
//    hold (later batches queue behind earlier ones), only `decide` would see them apart.
// 3. `execute(input, { toolCallId, abortSignal, ... })`: `toolCallId` is unique among the calls
//    in flight; `abortSignal` (the generation's) is passed through to the tool.
// 4. An error thrown from `execute` becomes that call's `tool-error` result, whose text the model
//    reads: a call Turnstile settles rejects with `CallSettledError`, whose message is that text
//    (the component's `explain` sentence, the same in every host).
// 5. `input` is the call's parsed arguments: it is the gate's `args`, so a tool whose key is a
//    template (`key = "fs:{path}"`) gets its key from the fields the model wrote.
// A tool whose `execute` returns an async iterable (preliminary results) is run to its end inside
// its slot and only its last value is returned.
import type { Driver } from './driver.js';
import { Gate, type GateOptions } from './gate.js';
import type { Scheduler } from './scheduler.js';
import type { Policy } from './turnstile.js';

/** What `limitTools` needs of a tool: an optional `execute(input, options)` as the AI SDK calls
 * it (`options.toolCallId`, `options.abortSignal`). */
export interface ToolLike {
  execute?: (input: any, options: any) => unknown;
}

/** Returns `tools` with every `execute` admitted by the gate (made from `target` unless it is
 * one; a policy gives a new scheduler: one per conversation). Tools without `execute` are kept
 * as they are. */
export function limitTools<T extends Record<string, ToolLike>>(tools: T, target: Gate | Driver | Scheduler | Policy, options?: GateOptions): T {
  if (typeof tools !== 'object' || tools === null) throw new TypeError('tools must be a tool set (an object of tools)');
  const gate = target instanceof Gate ? target : new Gate(target, options);
  const limited: Record<string, ToolLike> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool?.execute;
    if (typeof execute !== 'function') {
      limited[name] = tool;
      continue;
    }
    limited[name] = {
      ...tool,
      execute: (input: unknown, callOptions: { toolCallId: string; abortSignal?: AbortSignal }) =>
        gate.call(name, callOptions.toolCallId, input, (args, signal) => runTool(execute, args, { ...callOptions, abortSignal: signal }), {
          signal: callOptions.abortSignal,
        }),
    };
  }
  return limited as T;
}

async function runTool(execute: NonNullable<ToolLike['execute']>, input: unknown, options: unknown): Promise<unknown> {
  const result = execute(input, options);
  if (result !== null && typeof result === 'object' && !('then' in result) && Symbol.asyncIterator in result) {
    let last: unknown;
    for await (const value of result as AsyncIterable<unknown>) last = value;
    return last;
  }
  return await result;
}
