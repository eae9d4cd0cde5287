// The case corpus runner for JavaScript: the same files, steps and renderings as the Rust
// runner (corpus/src/lib.rs), driving the transpiled component through the package's API.
// Format: tests/cases/README.md.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'smol-toml';
import { ConfigError, Turnstile, TurnstileError } from '../dist/index.js';

export function toolLine(t) {
  let out = t.concurrency ? `${t.name} ${t.concurrency.key}/${t.concurrency.limit}` : `${t.name} unbounded`;
  if (t.fanOut) out += ' fan-out';
  if (t.onError === 'stop') out += ' stop';
  return out;
}

function reasonParts(reason) {
  return reason.tag === 'stopped' ? [reason.tag, reason.val] : [reason.tag, undefined];
}

export function settleLine(label, name, after) {
  return after === undefined ? `${label} ${name}` : `${label} ${name} ${after}`;
}

export function inspectLine(st) {
  let name;
  let after;
  switch (st.state.tag) {
    case 'ended':
      name = `ended-${st.state.val}`;
      break;
    case 'settled':
      [name, after] = reasonParts(st.state.val);
      break;
    default:
      name = st.state.tag;
  }
  let out = settleLine(st.entry, name, after);
  if (st.wait) {
    if (st.wait.tag === 'batch-not-approved') out += ' waits batch-not-approved';
    else if (st.wait.tag === 'key-full') out += ` waits key-full ${st.wait.val.key} ${st.wait.val.limit} ${st.wait.val.running.join(',')}`;
    else out += ` waits behind ${st.wait.val}`;
  }
  return out;
}

export function diagLine(d) {
  let out = d.code;
  for (const l of d.labels) out += ` ${l.span.layerName}:${l.span.line}`;
  if (d.tools.length) out += ` tools=${d.tools.join(',')}`;
  return out;
}

const CLASSES = { call: 'call', 'tool-call': 'call', tool_call: 'call', request: 'request', read: 'request', control: 'control', reentrant: 'reentrant', 're-entrant': 'reentrant', 'reentrant-call': 'reentrant', 're-entrant-call': 'reentrant', reentrant_call: 'reentrant' };

export function parseCalls(batch) {
  return batch.calls.map((c) => {
    const words = c.trim().split(/\s+/);
    if (words.length !== 2) throw new Error(`bad call ${JSON.stringify(c)}`);
    const [id, tool] = words;
    const star = tool.indexOf('*');
    if (star < 0) return { id, tool };
    const n = Number(tool.slice(star + 1));
    if (!Number.isInteger(n)) throw new Error(`bad operation count in ${c}`);
    return { id, tool: tool.slice(0, star), operations: n };
  });
}

function codeOf(fn) {
  try {
    fn();
    return null;
  } catch (e) {
    if (e instanceof TurnstileError) return e.code;
    throw e;
  }
}

const eq = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function checkError(want, got) {
  if ((want ?? null) !== got) {
    throw new Error(want ? `want error ${want}, got ${got ?? 'success'}` : `unexpected error ${got}`);
  }
}

/** Runs one parsed case on a fresh component instance; throws with the reason on failure. */
export async function runCase(caseData, turnstile) {
  const layers = (caseData.layer ?? []).map((l, i) => ({ name: l.name ?? `L${i + 1}`, text: l.text }));
  const steps = caseData.step ?? [];
  if (caseData.admission) {
    const max = Math.max(0, Math.min(Number(caseData.admission.max_concurrent), 2 ** 32 - 1));
    const adm = turnstile.admission({ maxConcurrent: max, allowParallel: !!caseData.admission.allow_parallel });
    steps.forEach((step, i) => {
      try {
        const words = step.do.trim().split(/\s+/);
        let cancel = [];
        let refused = [];
        let error;
        if (words[0] === 'begin' && (words.length === 3 || words.length === 4)) {
          error = codeOf(() => adm.begin(words[1], CLASSES[words[2]] ?? words[2], words[3]));
        } else if (words[0] === 'end' && words.length === 2) error = codeOf(() => adm.end(words[1]));
        else if (words[0] === 'abandon' && words.length === 2) error = codeOf(() => adm.abandon(words[1]));
        else if (words[0] === 'shutdown' && words.length === 1) ({ cancel, refused } = adm.shutdown());
        else throw new Error('unknown admission event');
        checkError(step.error, error ?? null);
        const admit = adm.nextAdmissions();
        if (!eq(admit, step.admit ?? []) || !eq(cancel, step.cancel ?? []) || !eq(refused, step.refused ?? [])) {
          throw new Error(`want admit ${JSON.stringify(step.admit ?? [])} cancel ${JSON.stringify(step.cancel ?? [])} refused ${JSON.stringify(step.refused ?? [])}, got admit ${JSON.stringify(admit)} cancel ${JSON.stringify(cancel)} refused ${JSON.stringify(refused)}`);
        }
      } catch (e) {
        throw new Error(`step ${i + 1} \`${step.do}\`: ${e.message}`);
      }
    });
    return;
  }
  let policy;
  try {
    policy = turnstile.resolve(layers);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    const want = caseData.diagnostics;
    if (!want) throw new Error(`the config failed to resolve:\n${e.message}`);
    const got = e.diagnostics;
    const ok = got.length === want.length && got.every((d, i) => (want[i].includes(' ') ? diagLine(d) === want[i] : d.code === want[i])) && got.every((d) => d.rendered.includes(d.code));
    if (!ok) throw new Error(`diagnostics: want ${JSON.stringify(want)}, got ${JSON.stringify(got.map(diagLine))}`);
    return;
  }
  if (caseData.diagnostics) throw new Error(`diagnostics: want ${JSON.stringify(caseData.diagnostics)}, but the config resolved`);
  for (const want of caseData.tools ?? []) {
    const name = want.trim().split(/\s+/)[0];
    const got = toolLine(policy.tool(name));
    if (got !== want) throw new Error(`tool ${name}: want ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  }
  let sched = turnstile.scheduler(policy);
  let batches = new Map();
  const batchOf = (word) => {
    const n = Number(word);
    if (!Number.isInteger(n)) throw new Error('expected a batch number');
    return batches.get(n) ?? 2 ** 32 - 1; // never submitted, or nothing left: no such batch
  };
  const verbs = {
    approve: (s, l) => s.approve(l),
    reject: (s, l) => s.settle(l, 'rejected'),
    skip: (s, l) => s.settle(l, 'skipped'),
    fail: (s, l) => s.settle(l, 'failed'),
    ask: (s, l) => s.beginQuestion(l),
    answer: (s, l) => s.endQuestion(l),
  };
  steps.forEach((step, i) => {
    try {
      const [verb, ...args] = step.do.trim().split(/\s+/);
      let error = null;
      if (verb === 'review' || verb === 'ended-all') {
        // No scheduling effect: the step only checks that nothing is released.
      } else if (verb === 'decline') {
        if (args.length !== 1) throw new Error('expected `decline LABEL`');
        error = codeOf(() => sched.onEnded(args[0], 'ok'));
      } else if (verb === 'submit') {
        const n = args.length ? Number(args[0]) : 1;
        const spec = (caseData.batch ?? [])[n - 1];
        if (!spec) throw new Error(`the case has no batch ${args[0]}`);
        const calls = parseCalls(spec);
        error = codeOf(() => batches.set(n, sched.submitBatch(calls)));
      } else if (verb in verbs) {
        if (!args.length) throw new Error('expected at least one entry');
        for (const label of args) {
          error = codeOf(() => verbs[verb](sched, label));
          if (error) break;
        }
      } else if (verb === 'approve-many') {
        error = codeOf(() => sched.approveMany(args));
      } else if (verb === 'end-many') {
        const ends = args.map((a) => {
          const [entry, word] = a.split('=');
          const outcome = word === 'ok' ? 'ok' : ['failed', 'err', 'error'].includes(word) ? 'failed' : null;
          if (!outcome) throw new Error(`expected LABEL=ok|failed, got ${a}`);
          return { entry, outcome };
        });
        error = codeOf(() => sched.onEndedMany(ends));
      } else if (verb === 'end') {
        if (args.length !== 1 && args.length !== 2) throw new Error('expected `end LABEL ok|failed`');
        const word = args[1] ?? 'ok';
        const outcome = word === 'ok' ? 'ok' : ['failed', 'err', 'error'].includes(word) ? 'failed' : null;
        if (!outcome) throw new Error(`bad outcome ${args[1]}`);
        error = codeOf(() => sched.onEnded(args[0], outcome));
      } else if (verb === 'cancel') {
        error = codeOf(() => sched.cancelBatch(batchOf(args[0])));
      } else if (verb === 'restart') {
        const unfinished = sched.unfinished();
        sched = turnstile.resume(policy, unfinished);
        const map = new Map(unfinished.map((b, i) => [b.batch, i + 1]));
        const old = batches;
        batches = new Map();
        for (const [n, id] of old) if (map.has(id)) batches.set(n, map.get(id));
      } else if (verb === 'inspect') {
        if (!step.inspect) throw new Error('inspect needs `inspect = [...]`');
        let got;
        error = codeOf(() => {
          got = sched.inspect(batchOf(args[0])).map(inspectLine);
        });
        if (!error && !eq(got, step.inspect)) throw new Error(`inspect: want ${JSON.stringify(step.inspect)}, got ${JSON.stringify(got)}`);
      } else {
        throw new Error(`unknown event ${JSON.stringify(verb)}`);
      }
      checkError(step.error, error);
      const r = sched.nextReleases();
      const settle = r.settle.map((s) => settleLine(s.entry, ...reasonParts(s.reason)));
      if (!eq(r.start, step.start ?? []) || !eq(settle, step.settle ?? [])) {
        throw new Error(`want start ${JSON.stringify(step.start ?? [])} settle ${JSON.stringify(step.settle ?? [])}, got start ${JSON.stringify(r.start)} settle ${JSON.stringify(settle)}`);
      }
    } catch (e) {
      throw new Error(`step ${i + 1} \`${step.do}\`: ${e.message}`);
    }
  });
}

/** Every `*.toml` under the given files or folders, sorted. */
export function caseFiles(paths) {
  return paths.flatMap((p) =>
    statSync(p).isDirectory()
      ? readdirSync(p).filter((f) => f.endsWith('.toml')).sort().map((f) => join(p, f))
      : [p],
  );
}

/** Runs files, each on a fresh instance; returns { passed, failed: [[file, why]] }. */
export async function runFiles(files) {
  const summary = { passed: 0, failed: [] };
  for (const file of files) {
    try {
      const caseData = parse(readFileSync(file, 'utf8'));
      await runCase(caseData, await Turnstile.load());
      summary.passed += 1;
    } catch (e) {
      summary.failed.push([file, e.message]);
    }
  }
  return summary;
}
