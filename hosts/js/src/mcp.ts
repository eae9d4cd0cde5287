// `@turnstile/scheduler/mcp`: the MCP TypeScript SDK (`@modelcontextprotocol/sdk`, tested with
// 1.32) adapter. `admitClient(client, admission)` makes every request of one connected `Client`
// wait for an admission `Permit` of the binding's controller; it imports nothing from the SDK.
//
// Classes come from the component (`class-of-method`, the same table in every host): `tools/call`
// is `call`; `initialize`, `ping`, the list methods, `resources/subscribe` and `unsubscribe` and
// `logging/setLevel` are `control`; everything else (`resources/read`, `prompts/get`,
// `completion/complete`, newer methods) is `request`. Any request made through `extra.admitted`
// in a handler of a server request (sampling, elicitation, roots) while a tool call is in flight
// is `reentrant`, whatever its method: that is the one rule kept here, since only this side of
// the connection knows where a request was sent from.
//
// What it relies on in the SDK (tested in test/mcp.test.mjs against the pinned version):
// 1. Every `Client` method that sends a request (`callTool`, `listTools`, `readResource`,
//    `getPrompt`, `ping`, `connect`'s `initialize`, ...) calls `this.request(request, schema,
//    options)`. `admitClient` replaces `request` on the instance; a nested client for handlers
//    is `Object.create(client)` with its own `request`, so the SDK's methods run unchanged on it.
// 2. `request` options `timeout` (default 60 s), `maxTotalTimeout` and `signal`: the time spent
//    queued is taken off `timeout` and `maxTotalTimeout`, and the wait itself is bounded by
//    `timeout` (then `AdmissionTimeoutError`, as `Admission.acquire` rejects: never sent).
// 3. `setRequestHandler(schema, handler)` registers the handler of a server request (sampling):
//    handlers registered after `admitClient` get `extra.admitted`, a client whose requests are
//    `reentrant` with their parent. Over stdio nothing on the wire names the tool call a
//    sampling request came from, so the parent is a guess: the tool call on this connection
//    admitted last and still in flight. It is exact while the tool calls in flight form one
//    chain (one at a time, or each nested in the one before). It is a guess whenever several
//    are in flight side by side: with `allowParallel`, and also without it, because re-entrant
//    calls descending from an in-flight call are admitted without the tool-call serializer, so
//    siblings (two calls from one sampling handler, say) run together within the budget. A
//    wrong guess names another call of the same tree (or, with `allowParallel`, an unrelated
//    one): the budget is still counted, but `would-deadlock` is judged on the guessed line.
// 4. `close()` closes the transport and rejects what is in flight. `admitClient` shuts the
//    controller down first: queued requests reject with `ShutdownError`, in-flight ones have
//    their signal aborted (the SDK then sends `notifications/cancelled` and rejects them; their
//    slots, held as in 5, are freed when the transport closes), and every later request
//    rejects with `ShutdownError`.
// 5. A request that timed out or was aborted after it was sent keeps its slot until the server
//    answers it, or `abortGraceMs` passes (absent: until the answer), or the connection closes:
//    the SDK's timeout and abort send `notifications/cancelled` and reject at once, and the
//    server may still be running it (one that cannot stop answers late; the SDK's own server
//    stops and never answers, as the spec says a cancelled request SHOULD NOT be). The SDK
//    forgets the request when it rejects (a late answer only reaches `onerror`), so the
//    adapter watches the transport itself, through the `Transport` interface the SDK chains:
//    `connect(transport)` (wrapped) sets `transport.onmessage` and `onclose` before the SDK's
//    `connect`, which calls them first, and wraps `transport.send`, which `Protocol.request`
//    calls synchronously with the request's JSON-RPC id (a request that never reached `send`,
//    such as one whose signal was already aborted, was never sent and frees its slot at once).
import type { Admission, Permit } from './admission.js';
import { classOfMethod } from './free.js';
import type { AdmissionClass } from './types.js';
import { millis, record } from './validate.js';

/** The MCP SDK's request options that `admitClient` reads (others are passed through). */
export interface McpRequestOptions {
  signal?: AbortSignal;
  timeout?: number;
  maxTotalTimeout?: number;
  [option: string]: unknown;
}

/** What `admitClient` needs of an MCP `Client` (structural: the SDK's `Client` fits). */
export interface McpClientLike {
  request(request: { method: string; params?: any }, resultSchema: any, options?: any): Promise<any>;
  setRequestHandler(schema: any, handler: (request: any, extra: any) => any): void;
  connect(transport: any, options?: any): Promise<void>;
  close(): Promise<void>;
  readonly transport?: unknown;
}

/** The part of the SDK's `Transport` the adapter watches (see the module doc, point 5). */
interface WatchedTransport {
  send(message: unknown, options?: unknown): Promise<void>;
  onmessage?: (message: any, extra?: any) => void;
  onclose?: () => void;
}

/** `admitClient`'s options. */
export interface AdmitOptions {
  /** How long a request that timed out or was aborted after it was sent keeps its slot waiting
   * for the server's answer, in ms; absent (the default): until the server answers it or the
   * connection closes. The same name and meaning as the driver's `abortGraceMs`: a stopped
   * call keeps its slot until it ends, or this much longer. Set it to the longest a tool of the
   * server may run on after its cancellation: a server that stops a cancelled call and never
   * answers it (the SDK's own server does, as the spec asks) otherwise keeps that slot until
   * the connection closes. */
  abortGraceMs?: number;
}

/** The extra a handler registered on an admitted client gets: `admitted` sends `reentrant`
 * requests descending from the tool call in flight (the client itself when none is). */
export type AdmittedExtra<C, E = Record<string, unknown>> = E & { admitted: C };

/** The client to send re-entrant requests with from a handler registered on an admitted client
 * (`extra.admitted`, typed). Throws a `TypeError` for an `extra` without one (a handler
 * registered before `admitClient`). */
export function admittedFrom<C extends McpClientLike>(extra: object): C {
  const client = (extra as { admitted?: C } | null)?.admitted;
  if (typeof client?.request !== 'function') throw new TypeError('this handler was not registered through an admitted client: call admitClient before setRequestHandler');
  return client;
}

/** The SDK's default request timeout. */
const DEFAULT_TIMEOUT_MS = 60_000;

/** The admission class of an MCP client request, without re-entrance: the component's
 * `class-of-method`. Needs the component loaded in this process (any `Turnstile.load()`). */
export function classOf(method: string): Exclude<AdmissionClass, 'reentrant'> {
  if (typeof method !== 'string') throw new TypeError(`method must be a string, got ${typeof method}`);
  return classOfMethod(method, 'classOf');
}

const admitted = new WeakSet<object>();

/** A request this adapter sent, by its JSON-RPC id, until its slot is given back. */
interface Sent {
  answered: boolean;
  /** Set while the slot is held for a request the caller gave up on: gives the slot back. */
  free?: () => void;
}

/** Makes every request of `client` go through `admission` (one controller per connection) and
 * returns the same client. Call it before `connect` to admit `initialize` too (and to watch
 * the transport from the start), and before registering handlers of server requests (sampling)
 * so that they get `extra.admitted`. A request that timed out or was aborted after it was sent
 * keeps its slot until the server answers it (see `AdmitOptions.abortGraceMs`). */
export function admitClient<C extends McpClientLike>(client: C, admission: Admission, options: AdmitOptions = {}): C {
  if (typeof client?.request !== 'function' || typeof client.setRequestHandler !== 'function' || typeof client.connect !== 'function' || typeof client.close !== 'function') {
    throw new TypeError('client must be an MCP Client (request, setRequestHandler, connect and close)');
  }
  if (typeof admission?.acquire !== 'function' || typeof admission.shutdown !== 'function') throw new TypeError('admission must be an Admission');
  const o = record(options, 'options', ['abortGraceMs']);
  const abortGraceMs = o.abortGraceMs === undefined ? undefined : millis(o.abortGraceMs, 'options.abortGraceMs');
  if (admitted.has(client)) throw new TypeError('this client is already admitted');
  admitted.add(client);
  const send = client.request.bind(client);
  const register = client.setRequestHandler.bind(client);
  const connect = client.connect.bind(client);
  const close = client.close.bind(client);
  /** Tool calls in flight, in admission order (the last is a handler's parent). */
  const tools: bigint[] = [];
  let count = 0;
  /** Requests sent and not answered (or held), by JSON-RPC id. */
  const sent = new Map<unknown, Sent>();
  /** Set while a request of ours is being sent: learns its id from `transport.send`. */
  let sending: ((id: unknown) => void) | undefined;
  /** Whether the watched transport is connected (a request given up then may still run). */
  let open = false;
  /** Gives back every held slot: the connection closed, nothing runs for us there any more. */
  const freeAll = () => {
    for (const r of [...sent.values()]) r.free?.();
  };

  const watch = (transport: WatchedTransport) => {
    open = true;
    const write = transport.send.bind(transport);
    transport.send = (message, opts) => {
      const m = message as { id?: unknown; method?: unknown } | null;
      if (sending && typeof m?.method === 'string' && m.id !== undefined) {
        sending(m.id);
        sending = undefined;
      }
      return write(message, opts);
    };
    const onmessage = transport.onmessage;
    transport.onmessage = (message, extra) => {
      // A response (or error) of ours: before the SDK reads it, which drops it when the
      // request was given up.
      const r = message && typeof message === 'object' && !('method' in message) ? sent.get(message.id) : undefined;
      if (r) {
        r.answered = true;
        r.free?.();
      }
      onmessage?.call(transport, message, extra);
    };
    const onclose = transport.onclose;
    transport.onclose = () => {
      open = false;
      freeAll();
      onclose?.call(transport);
    };
  };
  if (client.transport) watch(client.transport as WatchedTransport);

  /** The caller gave up on a request the server may still run: its slot waits for the answer. */
  const hold = (id: unknown, r: Sent, permit: Permit) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    r.free = () => {
      if (timer !== undefined) clearTimeout(timer);
      sent.delete(id);
      permit.release();
    };
    if (abortGraceMs !== undefined) {
      timer = setTimeout(r.free, abortGraceMs);
      timer.unref?.();
    }
  };

  const request = async (req: { method: string; params?: unknown }, schema: unknown, options: McpRequestOptions | undefined, parent: bigint | undefined): Promise<unknown> => {
    const method = req?.method;
    const base = classOf(String(method));
    const cls: AdmissionClass = parent === undefined ? base : 'reentrant';
    const timeoutMs = options?.timeout ?? DEFAULT_TIMEOUT_MS;
    const queuedAt = performance.now();
    const permit: Permit = await admission.acquire(cls, {
      signal: options?.signal,
      timeoutMs,
      ...(parent !== undefined && { parent }),
      id: `${String(method).slice(0, 200)} #${++count}`,
    });
    // A tool call (re-entrant or not) is a parent for the handlers of server requests it causes.
    const isTool = base === 'call';
    if (isTool) tools.push(permit.ticket);
    let id: unknown;
    const r: Sent = { answered: false };
    try {
      const queuedMs = performance.now() - queuedAt;
      const signal = options?.signal ? AbortSignal.any([options.signal, permit.signal]) : permit.signal;
      const forwarded: McpRequestOptions = { ...options, signal, timeout: Math.max(1, timeoutMs - queuedMs) };
      if (options?.maxTotalTimeout !== undefined) forwarded.maxTotalTimeout = Math.max(1, options.maxTotalTimeout - queuedMs);
      let answer: Promise<unknown>;
      sending = (sentId) => {
        id = sentId;
        sent.set(id, r);
      };
      try {
        answer = send(req, schema, forwarded);
      } finally {
        sending = undefined;
      }
      return await answer;
    } finally {
      if (isTool) tools.splice(tools.lastIndexOf(permit.ticket), 1);
      // Sent, not answered, the connection open: the server may still run it.
      if (id !== undefined && !r.answered && open) hold(id, r, permit);
      else {
        if (id !== undefined) sent.delete(id);
        permit.release();
      }
    }
  };

  /** A client whose requests are re-entrant, descending from `parent`. */
  const nested = (parent: bigint): C => {
    const child = Object.create(client) as C;
    child.request = (req, schema, options) => request(req, schema, options, parent) as Promise<never>;
    return child;
  };

  client.request = (req, schema, options) => request(req, schema, options, undefined) as Promise<never>;
  client.setRequestHandler = (schema, handler) =>
    register(schema, (req: unknown, extra: Record<string, unknown>) => {
      const parent = tools.at(-1);
      return handler(req, { ...extra, admitted: parent === undefined ? client : nested(parent) });
    });
  client.connect = (transport: WatchedTransport, connectOptions?: unknown) => {
    watch(transport);
    return connect(transport, connectOptions);
  };
  client.close = async () => {
    try {
      admission.shutdown();
    } catch {
      // Already shut down or disposed: nothing more to refuse.
    }
    try {
      await close();
    } finally {
      freeAll();
    }
  };
  return client;
}
