// The batch box: one tool call a line, in the order the model wrote them, with how each
// execution behaves on the playground's virtual clock.
//
//   ID TOOL [OPTIONS]      a plain call
//   ID TOOL*N [OPTIONS]    a fan-out call of N operations (ID#0 .. ID#N-1)
//
// Options: a duration in milliseconds (`120` or `120ms`; default 100); `fail` (every entry of
// the call fails at its end) or `fail#1` / `fail#0,2` (those operations only); `429` (the first
// run hits a rate limit with Retry-After 300 ms), `429=600`, `429#1=600`; `NAME:VALUE` is an
// argument of the call (`id:008 new:011`), what a key template (`rfd:{id}`) makes its key
// from. `#` after a space (or at the start of a line) starts a comment.

export const DURATION_MS_DEFAULT = 100;
export const RETRY_AFTER_MS_DEFAULT = 300;
const DURATION_MS_MAX = 3_600_000;
const OPERATIONS_MAX = 64;

export class BatchError extends Error {
  constructor(line, message) {
    super(`batch line ${line}: ${message}`);
    this.line = line;
  }
}

/**
 * @returns {{ calls: { id: string, tool: string, operations?: number }[],
 *             plans: Map<string, { durationMs: number, fail: Set<number> | 'all',
 *                                  limited: { ops: Set<number> | 'all', retryAfterMs: number } | null }> }}
 */
export function parseBatch(text) {
  const calls = [];
  const plans = new Map();
  text.split('\n').forEach((raw, i) => {
    const line = i + 1;
    const words = raw.replace(/(^|\s)#.*$/, '').trim().split(/\s+/).filter(Boolean);
    if (!words.length) return;
    if (words.length < 2) throw new BatchError(line, 'write `ID TOOL` or `ID TOOL*N`, then options (a duration, `fail`, `429`)');
    const [id, spec, ...options] = words;
    const call = callOf(line, id, spec);
    const plan = { durationMs: DURATION_MS_DEFAULT, fail: new Set(), limited: null };
    for (const word of options) option(line, word, plan, call);
    calls.push(call);
    plans.set(id, plan);
  });
  if (!calls.length) throw new BatchError(1, 'the batch is empty: write at least one call, e.g. `a my_tool`');
  return { calls, plans };
}

/** Whether operation `op` (undefined for a plain call) of a call with this plan fails / hits a
 * rate limit on its first run. */
export const plannedFail = (plan, op) => plan.fail === 'all' || plan.fail.has(op ?? 0);
export const plannedLimit = (plan, op) => (plan.limited && (plan.limited.ops === 'all' || plan.limited.ops.has(op ?? 0)) ? plan.limited.retryAfterMs : null);

function callOf(line, id, spec) {
  const star = spec.indexOf('*');
  if (star < 0) return { id, tool: spec };
  const tool = spec.slice(0, star);
  const operations = Number(spec.slice(star + 1));
  if (!tool || !/^\d+$/.test(spec.slice(star + 1)) || operations < 1 || operations > OPERATIONS_MAX) {
    throw new BatchError(line, `\`${spec}\`: write TOOL*N with N from 1 to ${OPERATIONS_MAX}`);
  }
  return { id, tool, operations };
}

function option(line, word, plan, call) {
  const argument = /^([A-Za-z_][A-Za-z0-9_]*):(.+)$/.exec(word);
  if (argument) {
    call.args ??= {};
    call.args[argument[1]] = argument[2];
    return;
  }
  const duration = /^(\d+)(ms)?$/.exec(word);
  if (duration) {
    plan.durationMs = Number(duration[1]);
    if (plan.durationMs > DURATION_MS_MAX) throw new BatchError(line, `\`${word}\`: at most ${DURATION_MS_MAX} ms`);
    return;
  }
  const m = /^(fail|429)(?:#(\d+(?:,\d+)*))?(?:=(\d+)(?:ms)?)?$/.exec(word);
  if (!m || (m[1] === 'fail' && m[3] !== undefined)) throw new BatchError(line, `unexpected \`${word}\`: options are a duration (\`120\`), \`fail\`, \`fail#1\`, \`429\`, \`429=600\`, an argument \`name:value\``);
  let ops = 'all';
  if (m[2] !== undefined) {
    if (call.operations === undefined) throw new BatchError(line, `\`${word}\`: #i names an operation, and ${call.id} is a plain call`);
    ops = new Set(m[2].split(',').map(Number));
    for (const op of ops) if (op >= call.operations) throw new BatchError(line, `\`${word}\`: ${call.id} has operations #0 to #${call.operations - 1}`);
  }
  if (m[1] === 'fail') plan.fail = ops;
  else plan.limited = { ops, retryAfterMs: m[3] === undefined ? RETRY_AFTER_MS_DEFAULT : Number(m[3]) };
}
