// `@turnstile/scheduler/claude-agent`: the Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`,
// tested with 0.3.337 and its bundled Claude Code 2.1.337) adapter, the JS counterpart of
// `turnstile_scheduler.claude_agent.Turnstile` (same meaning). A factory, as the other JS
// adapters are, whose `query` is the SDK's own `query` with the conversation's tool calls
// scheduled:
//
//   const turnstile = claudeAgent(policy); // one scheduler, shared by every conversation it runs
//   for await (const message of turnstile.query({ prompt: 'renumber RFD 2 to 5', options: { ... } })) ...
//   turnstile.dispose();
//
// The SDK runs the Claude Code CLI as a subprocess; the CLI calls the model and runs the tools,
// and asks the host through hooks. The CLI starts a tool as soon as its `tool_use` block is
// streamed, before the model's response is complete, so a hook alone cannot know the response's
// other calls. This adapter therefore reads the CLI's output itself: it spawns the CLI for the
// SDK (`spawnClaudeCodeProcess`, wrapping yours when you gave one) and reads every line of its
// stdout, in order, before the SDK does (with the CLI's stream events on, dropped again unless
// you asked for `includePartialMessages`). It collects the main thread's `tool_use` blocks of
// each response in written order, and when the response ends (`message_stop`) submits them as
// ONE batch (`gate.expect`); `decide` is asked about each, and none starts before every one is
// decided. A `PreToolUse` hook (first among the `PreToolUse` hooks, matching every tool) holds
// each call until its response is complete and the scheduler releases it, then lets it go on
// (`{}`: no opinion, so the permission mode, other hooks and `canUseTool` still apply); the
// call's end is its `PostToolUse` (ok) or `PostToolUseFailure` (failed) hook, or its
// `tool_result` in the conversation (a call refused after the hook). A call the scheduler
// settles (rejected, skipped, cancelled ...) is denied by the hook, the component's sentence as
// the reason the model reads ("not run: the user rejected this call"). A call of a response not
// seen (a subagent's) is a batch of its own when its hook fires, still limited.
//
// Why the stdout and not the messages `query` yields: the SDK reads the CLI's output eagerly
// and answers hook requests at once, but hands the other messages to a queue that moves only as
// fast as the caller iterates; a caller that awaits slow work between messages (or stops reading)
// would hold every call of the response in its hook. The pipe is read as the SDK reads it, so
// the batch never depends on the caller.
//
// Scope. One adapter, one scheduler: a `Policy` makes a scheduler (and driver) that every
// conversation run through it shares, so a key's limit holds across conversations. A
// `Scheduler`, `Driver` or `Gate` given is shared the same way and never disposed by the
// adapter; `dispose()` disposes what it made. The CLI cannot interrupt a tool for the scheduler:
// past `executionTimeoutMs` or on `dispose()`, a released call keeps its slot until the CLI
// reports its end (or the conversation ends). With the adapter's spawn, the SDK's own local spawn
// is not used: the CLI's stderr goes to `options.stderr` when given (else it is drained), and
// errors the SDK builds from the exit do not carry its stderr tail.
//
// What it relies on (each tested in test/claude-agent.test.mjs against the pinned SDK and its
// bundled CLI, offline against a fake Messages API):
// 1. `spawnClaudeCodeProcess(options)` is given the CLI's command line and the SDK reads the
//    returned process's `stdout`, one JSON message a line (a hook request a `control_request`).
// 2. With `includePartialMessages`, the CLI writes each response's `message_stop` after the
//    `assistant` lines of its blocks; a tool's `assistant` line precedes its `PreToolUse` hook
//    request; a pending `PreToolUse` hook does not stop the response from streaming (nor, for
//    concurrency-safe tools, the hooks of the other calls).
// 3. `HookCallbackMatcher.timeout` (seconds) bounds how long a call may wait for its turn, and
//    `onFailure: 'block'` refuses the call when the hook fails or times out.
import { spawn } from 'node:child_process';
import { StringDecoder } from 'node:string_decoder';
import { Transform, type Readable } from 'node:stream';
import {
  query as sdkQuery,
  type HookCallback,
  type HookCallbackMatcher,
  type HookEvent,
  type HookJSONOutput,
  type Options,
  type Query,
  type SDKUserMessage,
  type SpawnedProcess,
  type SpawnOptions,
} from '@anthropic-ai/claude-agent-sdk';
import { Driver, type Decision } from './driver.js';
import { GATE_OPTIONS, Gate, adapterGate, releaseAdapterGate, type GateCallInput, type GateOptions } from './gate.js';
import { Scheduler } from './scheduler.js';
import { Policy } from './turnstile.js';
import { fail, record } from './validate.js';

/** How long a call may wait for its turn in its `PreToolUse` hook, in seconds (the CLI's
 * default is 60 s, after which the hook fails and, with `onFailure: 'block'`, the call is
 * refused). */
export const HOOK_TIMEOUT_SECONDS = 24 * 3600;

/** The gate's options (`GateOptions`: used when the adapter makes the gate), and the hooks'
 * timeout. */
export interface ClaudeAgentOptions extends GateOptions {
  /** Decides each call of a response in written order, before any of it starts (default:
   * approve all); may be async (a prompt). */
  decide?: (label: string, call: GateCallInput) => Decision | Promise<Decision>;
  /** Aborts a running call's signal once it has run this long; the CLI cannot stop the tool,
   * so the call keeps its slot until the CLI reports its end. */
  executionTimeoutMs?: number;
  /** How long a call may wait for its turn in its hook, in seconds (default a day); past it
   * the CLI refuses the call. */
  hookTimeoutSeconds?: number;
}

/** The adapter: the SDK's `query`, its tool calls scheduled, and the gate they go through. */
export interface TurnstileClaudeAgent {
  /** The gate every call of every conversation goes through. */
  readonly gate: Gate;
  /** `query({ prompt, options })` of `@anthropic-ai/claude-agent-sdk`, its tool calls scheduled
   * (the SDK's own `Query`: iterate it, `interrupt()`, `close()` ... as usual). */
  query(params: { prompt: string | AsyncIterable<SDKUserMessage>; options?: Options }): Query;
  /** Cancels the calls in flight on the gate the adapter made (`gate.cancel()`), and disposes
   * the driver when it made that too (a `Policy` target); a `Gate` given is left alone.
   * Disposing twice is fine. */
  dispose(): void;
}


/** The CLI reported the call failed (`PostToolUseFailure`, or an error `tool_result`). */
class Failed extends Error {}

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (error: unknown) => void;
  done: boolean;
}

function deferred<T>(): Deferred<T> {
  const d = { done: false } as Deferred<T>;
  d.promise = new Promise<T>((resolve, reject) => {
    d.resolve = (value) => {
      d.done = true;
      resolve(value);
    };
    d.reject = (error) => {
      d.done = true;
      reject(error);
    };
  });
  d.promise.catch(() => {});
  return d;
}

/** One model response of the main thread: its calls in written order, and whether it was
 * submitted (with the error `gate.expect` threw, if any). */
interface Response {
  calls: GateCallInput[];
  ready: Deferred<Error | undefined>;
}

/** A call that reached its hook. */
interface Call {
  released: Deferred<void>;
  ended: Deferred<unknown>;
  abort: AbortController;
}

const deny = (reason: string): HookJSONOutput => ({
  hookSpecificOutput: { hookEventName: 'PreToolUse', permissionDecision: 'deny', permissionDecisionReason: reason },
});

const isObject = (v: unknown): v is Record<string, any> => typeof v === 'object' && v !== null && !Array.isArray(v);

function text(content: unknown): string {
  if (Array.isArray(content)) return content.map((b) => (isObject(b) ? String(b.text ?? '') : '')).join('\n');
  return String(content);
}

/** One CLI process: what its output said so far, and its calls in flight. */
class Conversation {
  readonly gate: Gate;
  readonly responses = new Map<string, Response>();
  /** Call id -> its response. */
  readonly owner = new Map<string, Response>();
  /** The main thread's response being streamed. */
  current: string | undefined;
  readonly calls = new Map<string, Call>();
  /** Call ids whose end the CLI reported. */
  readonly ended = new Set<string>();
  closed = false;

  constructor(gate: Gate) {
    this.gate = gate;
  }

  #response(id: string): Response {
    let r = this.responses.get(id);
    if (r === undefined) this.responses.set(id, (r = { calls: [], ready: deferred() }));
    return r;
  }

  // -- the CLI's output (in order, before the SDK reads it) -------------------------------------

  observe(m: Record<string, any>): void {
    if (this.closed) return;
    const main = m.parent_tool_use_id === null || m.parent_tool_use_id === undefined;
    if (m.type === 'stream_event' && main) {
      const event = isObject(m.event) ? m.event : {};
      if (event.type === 'message_start') {
        this.#complete(this.current); // a response cut short (a retried request)
        const id = isObject(event.message) ? event.message.id : undefined;
        this.current = typeof id === 'string' ? id : undefined;
        if (this.current !== undefined) this.#response(this.current);
      } else if (event.type === 'message_stop') {
        this.#complete(this.current);
        this.current = undefined;
      }
    } else if (m.type === 'assistant' && main) {
      const message = isObject(m.message) ? m.message : {};
      const r = this.#response(typeof message.id === 'string' ? message.id : '');
      for (const b of Array.isArray(message.content) ? message.content : []) {
        if (isObject(b) && b.type === 'tool_use' && typeof b.id === 'string' && b.id !== '' && !this.owner.has(b.id)) {
          r.calls.push({ id: b.id, tool: String(b.name ?? ''), args: b.input });
          this.owner.set(b.id, r);
        }
      }
    } else if (m.type === 'user') {
      const content = isObject(m.message) ? m.message.content : undefined;
      for (const b of Array.isArray(content) ? content : []) {
        if (isObject(b) && b.type === 'tool_result' && typeof b.tool_use_id === 'string') {
          this.#end(b.tool_use_id, b.is_error ? new Failed(text(b.content)) : b.content, !b.is_error);
        }
      }
    } else if (m.type === 'result') {
      this.#sweep();
    }
  }

  #complete(messageId: string | undefined): void {
    const r = messageId === undefined ? undefined : this.responses.get(messageId);
    if (r === undefined || r.ready.done) return;
    const calls = r.calls.filter((c) => !this.ended.has(c.id) && !this.calls.has(c.id));
    let error: Error | undefined;
    try {
      if (calls.length > 0) this.gate.expect(calls);
    } catch (e) {
      error = e instanceof Error ? e : new Error(String(e)); // SubmitError (an id live already), a disposed driver
    }
    r.ready.resolve(error);
  }

  /** The CLI reported the end of `callId` (the first report wins). */
  #end(callId: string, outcome: unknown, ok: boolean): void {
    this.ended.add(callId);
    const c = this.calls.get(callId);
    if (c === undefined) {
      this.gate.withdraw(callId); // expected, never reached its hook (refused before)
      return;
    }
    if (c.ended.done) return;
    if (ok) c.ended.resolve(outcome);
    else c.ended.reject(outcome);
  }

  /** The turn ended: calls expected and never claimed are withdrawn. */
  #sweep(): void {
    for (const callId of this.owner.keys()) if (!this.calls.has(callId)) this.gate.withdraw(callId);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.#sweep();
    for (const r of this.responses.values()) if (!r.ready.done) r.ready.resolve(undefined);
    for (const c of this.calls.values()) {
      if (!c.ended.done) c.ended.reject(new Failed('the conversation ended'));
      c.abort.abort(new Failed('the conversation ended'));
    }
  }

  // -- hooks --------------------------------------------------------------------------------------

  readonly pre: HookCallback = async (input, toolUseId, { signal }) => {
    const data = input as Record<string, any>;
    const callId = toolUseId ?? data.tool_use_id;
    const tool = String(data.tool_name ?? '');
    if (typeof callId !== 'string' || callId === '') return {};
    if (this.closed) return deny(`not run: ${tool} was cancelled`);
    const r = data.agent_id === undefined ? this.owner.get(callId) : undefined;
    if (r !== undefined) {
      const error = await r.ready.promise; // the whole response, submitted as one batch
      if (error !== undefined) return deny(error.message);
    }
    const c: Call = { released: deferred(), ended: deferred(), abort: new AbortController() };
    this.calls.set(callId, c);
    if (this.ended.has(callId)) c.ended.resolve(undefined);
    // The CLI gave up the hook (an interrupt) before the call was released: cancel it.
    const onAbort = () => {
      if (!c.released.done) c.abort.abort(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    const task = this.gate.call(tool, callId, data.tool_input, () => {
      c.released.resolve();
      // Stopped (timeout, cancelled): the CLI cannot interrupt the tool, so the call keeps its
      // slot until the CLI reports its end.
      return c.ended.promise;
    }, { signal: c.abort.signal });
    const outcome = await Promise.race([
      c.released.promise.then(() => undefined),
      task.then(
        () => undefined,
        (error: unknown) => error,
      ),
    ]);
    signal.removeEventListener('abort', onAbort);
    if (c.released.done) return {};
    if (signal.aborted || c.abort.signal.aborted) return deny(`not run: ${tool} was cancelled`);
    return deny(outcome instanceof Error ? outcome.message : String(outcome)); // CallSettledError: the component's sentence
  };

  readonly post: HookCallback = async (input, toolUseId) => {
    const data = input as Record<string, any>;
    const callId = toolUseId ?? data.tool_use_id;
    if (typeof callId === 'string' && callId !== '') {
      if (data.hook_event_name === 'PostToolUseFailure') this.#end(callId, new Failed(String(data.error ?? 'failed')), false);
      else this.#end(callId, data.tool_response, true);
    }
    return {};
  };
}

/** A Transform reading the CLI's stdout line by line: each line goes to the conversation first,
 * then on to the SDK (stream events only when the caller asked for them). */
function peek(stdout: Readable, conversation: Conversation, partial: boolean): Readable {
  const decoder = new StringDecoder('utf8');
  let rest = '';
  const line = (s: string, out: Transform) => {
    if (s.trim() === '') return out.push(s + '\n');
    let m: unknown;
    try {
      m = JSON.parse(s);
    } catch {
      out.push(s + '\n'); // not ours to judge: the SDK reports it
      return;
    }
    if (isObject(m)) {
      try {
        conversation.observe(m);
      } catch {
        // never let the adapter break the SDK's stream
      }
      if (m.type === 'stream_event' && !partial) return;
    }
    out.push(s + '\n');
  };
  const out = new Transform({
    transform(chunk: Buffer | string, _encoding, callback) {
      rest += typeof chunk === 'string' ? chunk : decoder.write(chunk);
      let i: number;
      while ((i = rest.indexOf('\n')) >= 0) {
        const s = rest.slice(0, i);
        rest = rest.slice(i + 1);
        line(s, this);
      }
      callback();
    },
    flush(callback) {
      rest += decoder.end();
      if (rest !== '') line(rest, this);
      rest = '';
      conversation.close();
      callback();
    },
  });
  stdout.on('error', (error) => out.destroy(error));
  stdout.pipe(out);
  return out;
}

/** The SDK's local spawn, as far as the public interface allows. */
function spawnLocal(options: SpawnOptions, stderr: ((data: string) => void) | undefined): SpawnedProcess {
  const child = spawn(options.command, options.args, { cwd: options.cwd, env: options.env as NodeJS.ProcessEnv, stdio: ['pipe', 'pipe', 'pipe'], signal: options.signal, windowsHide: true });
  const decoder = new StringDecoder('utf8');
  child.stderr.on('data', (chunk: Buffer) => {
    const s = decoder.write(chunk);
    if (stderr !== undefined && s !== '') stderr(s);
  });
  child.stderr.on('error', () => {});
  return child;
}

/** The Claude Agent SDK's `query`, every tool call of a conversation through the scheduler, one
 * model response at a time (see the module doc). `target` is a `Policy` (a scheduler this adapter
 * makes and shares across its conversations), a `Scheduler`, a `Driver` or a `Gate`; give
 * `decide`, `executionTimeoutMs`, `abortGraceMs` ... to the `Gate` instead when you pass one. */
export function claudeAgent(target: Policy | Scheduler | Driver | Gate, options: ClaudeAgentOptions = {}): TurnstileClaudeAgent {
  const o = record(options, 'options', [...GATE_OPTIONS, 'hookTimeoutSeconds']) as ClaudeAgentOptions;
  const hookTimeout = o.hookTimeoutSeconds ?? HOOK_TIMEOUT_SECONDS;
  if (typeof hookTimeout !== 'number' || !(hookTimeout > 0) || !Number.isFinite(hookTimeout)) fail('options.hookTimeoutSeconds', 'a positive number of seconds', hookTimeout);
  const { gate, owns } = adapterGate(target, o);

  let disposed = false;
  return {
    gate,
    query({ prompt, options: sdkOptions = {} }) {
      if (disposed) throw new Error('claudeAgent: disposed');
      const conversation = new Conversation(gate);
      const hooks: Partial<Record<HookEvent, HookCallbackMatcher[]>> = { ...(sdkOptions.hooks ?? {}) };
      hooks.PreToolUse = [{ hooks: [conversation.pre], timeout: hookTimeout, onFailure: 'block' }, ...(hooks.PreToolUse ?? [])];
      hooks.PostToolUse = [{ hooks: [conversation.post] }, ...(hooks.PostToolUse ?? [])];
      hooks.PostToolUseFailure = [{ hooks: [conversation.post] }, ...(hooks.PostToolUseFailure ?? [])];
      const partial = sdkOptions.includePartialMessages === true;
      const spawnInner = sdkOptions.spawnClaudeCodeProcess;
      const ours: Options = {
        ...sdkOptions,
        hooks,
        includePartialMessages: true,
        spawnClaudeCodeProcess(spawnOptions: SpawnOptions): SpawnedProcess {
          conversation.closed = false; // a respawn (the SDK's own restart) reads on
          const child = spawnInner !== undefined ? spawnInner(spawnOptions) : spawnLocal(spawnOptions, sdkOptions.stderr);
          const stdout = peek(child.stdout, conversation, partial);
          // The end of stdout closes the conversation; so does the process's exit or error, in
          // case a grandchild holds the pipe open.
          child.once('exit', () => void setImmediate(() => conversation.close()));
          child.once('error', () => conversation.close());
          return {
            stdin: child.stdin,
            stdout,
            get killed() {
              return child.killed;
            },
            get exitCode() {
              return child.exitCode;
            },
            get signalCode() {
              return child.signalCode;
            },
            kill: (signal) => child.kill(signal),
            on: ((event: 'exit' | 'error', listener: (...args: any[]) => void) => child.on(event as 'exit', listener)) as SpawnedProcess['on'],
            once: ((event: 'exit' | 'error', listener: (...args: any[]) => void) => child.once(event as 'exit', listener)) as SpawnedProcess['once'],
            off: ((event: 'exit' | 'error', listener: (...args: any[]) => void) => child.off(event as 'exit', listener)) as SpawnedProcess['off'],
          };
        },
      };
      return sdkQuery({ prompt, options: ours });
    },
    dispose(): void {
      if (disposed) return;
      disposed = true;
      releaseAdapterGate(gate, owns);
    },
  };
}
