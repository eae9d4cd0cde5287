// The case corpus runner for JavaScript: the same files, steps and renderings as the Rust runner
// (corpus/src/lib.rs), driving the transpiled component through the package's API.
// Format: tests/cases/README.md.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'smol-toml';
import { AdmissionError, ConfigError, ResumeError, Scheduler, SubmitError, Turnstile } from '../dist/index.js';

/** A number no scheduler or controller hands out: labels and batches that name nothing. */
export const NOTHING = 18446744073709551615n;

/** `NAME unbounded`, or `NAME` and each key of its set joined by ` + ` (corpus/src/lib.rs
 * `tool_line`); then ` fan-out` and ` stop` when they apply. */
export function toolLine(t) {
  let out = t.concurrency.length === 0 ? `${t.name} unbounded` : `${t.name} ${t.concurrency.map(keyText).join(' + ')}`;
  if (t.fanOut) out += ' fan-out';
  if (t.onError === 'stop') out += ' stop';
  return out;
}

/** One key of a tool line: `KEY/LIMIT` and its terms (corpus/src/lib.rs `key_text`). */
function keyText(c) {
  // A path key has no limit: `KEY path=PATH`.
  let out = c.path === undefined ? `${c.key}/${c.limit}` : `${c.key} path=${c.path}`;
  if (c.delayMs) out += ` delay=${c.delayMs}`;
  if (c.rates.length) out += ` rate=${c.rates.map((w) => `${w.count}/${w.perMs}ms${w.burst === c.burst ? '' : `:${w.burst}`}`).join(',')}`;
  if (c.burst !== 1) out += ` burst=${c.burst}`;
  if (c.weight !== 1) out += ` weight=${c.weight}`;
  if (c.adaptMin !== undefined) out += ` adapt=${c.adaptMin}`;
  if (c.retries !== 3) out += ` retries=${c.retries}`;
  if (c.maxWaitMs !== 300000) out += ` max_wait=${c.maxWaitMs}`;
  if (c.shared) out += ' shared';
  return out;
}

/** `LABEL REASON`, `LABEL stopped AFTER`, `LABEL rate-limited RETRIES` or `LABEL timed-out CAUSE`. */
export function settleLine(label, reason) {
  if (reason.kind === 'stopped') return `${label} stopped ${reason.after}`;
  if (reason.kind === 'rate-limited') return `${label} rate-limited ${reason.retries}`;
  if (reason.kind === 'timed-out') return `${label} timed-out ${reason.cause}`;
  return `${label} ${reason.kind}`;
}

export function inspectLine(st) {
  let out;
  switch (st.state.kind) {
    case 'ended':
      out = `${st.label} ended-${st.state.outcome}`;
      break;
    case 'settled':
      out = settleLine(st.label, st.state.reason);
      break;
    case 'aborted':
      out = `${st.label} aborted ${st.state.cause}`;
      break;
    default:
      out = `${st.label} ${st.state.kind}`;
  }
  if (st.wait) {
    if (st.wait.kind === 'batch-not-approved') out += ' waits batch-not-approved';
    else if (st.wait.kind === 'key-full') out += ` waits key-full ${st.wait.key} ${st.wait.limit} ${st.wait.running.join(',')}`;
    else if (st.wait.kind === 'behind') out += ` waits behind ${st.wait.label} on ${st.wait.key}`;
    else if (st.wait.kind === 'retry-at') out += ` waits retry-at ${st.wait.until}`;
    else if (st.wait.kind === 'permit-requested' || st.wait.kind === 'permit-granted') out += ` waits ${st.wait.kind} ${st.wait.key}`;
    else out += ` waits ${st.wait.kind} ${st.wait.key} ${st.wait.until}`;
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

/** A case's calls: `ID TOOL`, `ID TOOL*N` (a fan-out call of N operations) or `ID TOOL {JSON}`,
 * where everything after the tool is the call's arguments as JSON text, kept exactly as written
 * (cases test text that is not JSON too): `argsJson`, which `packedArguments` hands to `submit`. */
export function parseCalls(batch) {
  // One word, and the rest trimmed (corpus/src/lib.rs `parse_calls`).
  const word = (text) => {
    const s = text.trim();
    const at = s.search(/\s/);
    return at < 0 ? [s, ''] : [s.slice(0, at), s.slice(at).trim()];
  };
  return batch.calls.map((c) => {
    const [id, rest] = word(c);
    const [tool, argsJson] = word(rest);
    if (!id || !tool) throw new Error(`bad call ${JSON.stringify(c)}: write \`ID TOOL\`, \`ID TOOL*N\` or \`ID TOOL {JSON}\``);
    const call = { id, tool };
    const star = tool.indexOf('*');
    if (star >= 0) {
      const digits = tool.slice(star + 1);
      if (!/^[0-9]+$/.test(digits)) throw new Error(`bad operation count in ${JSON.stringify(c)}`);
      call.tool = tool.slice(0, star);
      call.operations = Number(digits);
    }
    if (argsJson) call.argsJson = argsJson;
    return call;
  });
}

/** The calls' arguments as `submit` takes them as written: `[call index, JSON text]` for each
 * call that has any (corpus/src/lib.rs `packed_arguments`). */
export function packedArguments(calls) {
  return calls.flatMap((c, i) => (c.argsJson === undefined ? [] : [[i, c.argsJson]]));
}

// Every field a case may have; anything else is an error, so a typo cannot drop an expectation.
const FIELDS = {
  case: ['description', 'name', 'title', 'notes', 'comment', 'reference', 'layer', 'diagnostics', 'warnings', 'rendered', 'tools', 'batch', 'admission', 'step', 'simulate'],
  layer: ['name', 'text'],
  batch: ['calls', 'execution_ms', 'abort_grace_ms'],
  admission: ['max_concurrent', 'allow_parallel'],
  simulate: ['duration_ms', 'durations', 'fail'],
  step: ['do', 'abort', 'pause_store', 'start', 'settle', 'acquire', 'release', 'error', 'errors', 'retired', 'unrestored', 'layers', 'inspect', 'admit', 'cancel', 'refused', 'drain', 'at', 'wake_at', 'comment', 'note', 'why'],
};

function checkFields(value, kind, where) {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${where}: expected a table`);
  for (const key of Object.keys(value)) {
    if (!FIELDS[kind].includes(key)) throw new Error(`${where}: unknown field \`${key}\``);
  }
}

function checkCase(caseData) {
  checkFields(caseData, 'case', 'case');
  const descriptive = ['name', 'title', 'notes', 'comment', 'reference'].filter((k) => k in caseData);
  if (descriptive.length > 1) throw new Error(`case: one of name, title, notes, comment, reference; got ${descriptive.join(', ')}`);
  (caseData.layer ?? []).forEach((l, i) => checkFields(l, 'layer', `layer ${i + 1}`));
  (caseData.batch ?? []).forEach((b, i) => checkFields(b, 'batch', `batch ${i + 1}`));
  if (caseData.admission) checkFields(caseData.admission, 'admission', 'admission');
  if (caseData.simulate) checkFields(caseData.simulate, 'simulate', 'simulate');
  (caseData.step ?? []).forEach((s, i) => {
    checkFields(s, 'step', `step ${i + 1}`);
    if (typeof s.do !== 'string') throw new Error(`step ${i + 1}: \`do\` is missing`);
    (s.layers ?? []).forEach((l, j) => checkFields(l, 'layer', `step ${i + 1} layer ${j + 1}`));
  });
}

const json = (x) => JSON.stringify(x, (_, v) => (typeof v === 'bigint' ? `${v}` : v));
const eq = (a, b) => json(a) === json(b);

function layersOf(specs) {
  return (specs ?? []).map((l, i) => ({ name: l.name ?? `L${i + 1}`, text: l.text }));
}

/** The code of a thrown `Kind`, or null when `f` returned. */
function codeOf(Kind, f) {
  try {
    f();
    return null;
  } catch (e) {
    if (e instanceof Kind) return e.code;
    throw e;
  }
}

function checkError(want, got) {
  if ((want ?? null) !== got) {
    throw new Error(want ? `want error ${want}, got ${got ? `error ${got}` : 'success'}` : `unexpected error ${got}`);
  }
}

function outcomeWord(word) {
  if (word === 'ok') return 'ok';
  if (['failed', 'err', 'error'].includes(word)) return 'failed';
  throw new Error(`bad outcome ${json(word)}`);
}

/** A scheduling case: the scheduler, and the runner's maps from the file's names to numbers. */
class ScheduleRunner {
  constructor(turnstile, caseData, policy) {
    this.turnstile = turnstile;
    this.caseData = caseData;
    this.policy = policy;
    this.sched = new Scheduler(policy);
    /** Call id -> { first, operations } of its most recent submission. */
    this.calls = new Map();
    /** Entry number -> label. */
    this.labels = new Map();
    /** File batch number -> scheduler batch number, and back. */
    this.batches = new Map();
    this.fileBatch = new Map();
  }

  entry(label) {
    const hash = label.indexOf('#');
    const call = this.calls.get(hash < 0 ? label : label.slice(0, hash));
    if (!call) return NOTHING;
    if (hash < 0) return call.operations === undefined ? call.first : NOTHING;
    const digits = label.slice(hash + 1);
    if (call.operations === undefined || !/^(0|[1-9][0-9]*)$/.test(digits) || Number(digits) >= call.operations) return NOTHING;
    return call.first + BigInt(digits);
  }

  batch(word) {
    if (!/^[0-9]+$/.test(word ?? '')) throw new Error('expected a batch number');
    return this.batches.get(Number(word)) ?? NOTHING;
  }

  submit(n, calls, spec) {
    // The text crosses exactly as the case wrote it (the component judges it), not as `args`.
    const options = { arguments: packedArguments(calls) };
    if (spec.execution_ms !== undefined) options.executionMs = spec.execution_ms;
    if (spec.abort_grace_ms !== undefined) options.abortGraceMs = spec.abort_grace_ms;
    const submitted = this.sched.submit(calls.map(({ argsJson, ...call }) => call), options);
    this.batches.set(n, submitted.batch);
    this.fileBatch.set(submitted.batch, n);
    let at = submitted.first;
    for (const c of calls) {
      this.calls.set(c.id, { first: at, operations: c.operations });
      if (c.operations === undefined) this.labels.set(at, c.id);
      else for (let i = 0; i < c.operations; i++) this.labels.set(at + BigInt(i), `${c.id}#${i}`);
      at += BigInt(c.operations ?? 1);
    }
  }

  label(entry) {
    return this.labels.get(entry) ?? `?${entry}`;
  }

  /** Runs one `do` line; returns what it observed. */
  run(step) {
    const [verb, ...args] = step.do.trim().split(/\s+/);
    const seen = { error: null, inputs: 0, many: false, errors: [], abort: [], pauseStore: [], start: [], settle: [], acquire: [], release: [], retired: [], unrestored: null, inspect: null, wakeAt: undefined };
    // `at = T` is the host's clock for every step call this step makes.
    const stepAt = (inputs = {}) => this.sched.step(step.at === undefined || inputs.now !== undefined ? inputs : { ...inputs, now: step.at });
    const time = (word) => {
      if (!/^[0-9]+$/.test(word ?? '')) throw new Error(`bad time ${json(word)}`);
      const n = Number(word);
      return Number.isSafeInteger(n) ? n : BigInt(word);
    };
    const gather = (out, positions) => {
      seen.abort.push(...out.abort.map((a) => `${this.label(a.entry)} ${a.cause}`));
      for (const e of out.start) {
        // The scheduler's own labels must agree with the runner's.
        const label = this.sched.label(e);
        if (label !== this.label(e)) throw new Error(`label(${e}): want ${json(this.label(e))}, got ${json(label)}`);
        seen.start.push(label);
      }
      seen.settle.push(...out.settle.map((s) => settleLine(this.label(s.entry), s.reason)));
      seen.acquire.push(...out.requests.map((r) => ({ label: this.label(r.entry), limit: r.limit ?? 'none' })));
      seen.release.push(...[...out.release].map((e) => this.label(e)));
      seen.pauseStore.push(...out.pauseStore.map((p) => `${p.key} ${p.until}`));
      seen.retired.push(...[...out.retired].map((b) => this.fileBatch.get(b) ?? `?${b}`));
      seen.wakeAt = out.wakeAt;
      for (const e of out.errors) {
        if (positions) seen.errors.push([positions(e), e.code]);
        else seen.error ??= e.code;
      }
      return out.errors.length === 0;
    };
    const each = (field, labels, wrap = (e) => e) => {
      if (!labels.length) throw new Error('expected at least one entry');
      for (const label of labels) {
        seen.inputs += 1;
        if (!gather(stepAt({ [field]: [wrap(this.entry(label))] }))) break;
      }
    };
    switch (verb) {
      case 'submit': {
        if (args.length > 1) throw new Error('expected `submit N`');
        const n = args.length ? Number(args[0]) : 1;
        const spec = (this.caseData.batch ?? [])[n - 1];
        if (!Number.isInteger(n) || !spec) throw new Error(`the case has no batch ${args[0]}`);
        const calls = parseCalls(spec);
        seen.inputs = 1;
        seen.error = codeOf(SubmitError, () => this.submit(n, calls, spec));
        gather(stepAt());
        break;
      }
      case 'approve':
      case 'ask':
      case 'answer':
        each(verb, args);
        break;
      case 'reject':
      case 'skip':
      case 'fail': {
        const how = { reject: 'rejected', skip: 'skipped', fail: 'failed' }[verb];
        each('settle', args, (entry) => ({ entry, how }));
        break;
      }
      case 'end':
        if (args.length !== 1 && args.length !== 2) throw new Error('expected `end LABEL ok|failed`');
        each(outcomeWord(args[1] ?? 'ok'), [args[0]]);
        break;
      case 'decline':
        if (args.length !== 1) throw new Error('expected `decline LABEL`');
        each('ok', args);
        break;
      case 'approve-many':
        seen.many = true;
        seen.inputs = args.length;
        gather(stepAt({ approve: args.map((l) => this.entry(l)) }), (e) => e.index);
        break;
      case 'end-many': {
        seen.many = true;
        seen.inputs = args.length;
        const lists = { ok: [], failed: [] };
        const positions = { ok: [], failed: [] };
        args.forEach((arg, i) => {
          const eqAt = arg.indexOf('=');
          if (eqAt < 0) throw new Error(`expected LABEL=ok|failed, got ${json(arg)}`);
          const outcome = outcomeWord(arg.slice(eqAt + 1));
          lists[outcome].push(this.entry(arg.slice(0, eqAt)));
          positions[outcome].push(i);
        });
        gather(stepAt(lists), (e) => positions[e.input][e.index]);
        break;
      }
      case 'now':
        if (args.length !== 1) throw new Error('expected `now MILLISECONDS`');
        seen.inputs = 1;
        gather(stepAt({ now: time(args[0]) }));
        break;
      case 'retry':
        if (args.length !== 2) throw new Error('expected `retry LABEL UNTIL`');
        seen.inputs = 1;
        gather(stepAt({ retry: [{ entry: this.entry(args[0]), until: time(args[1]) }] }));
        break;
      case 'pause':
        if (args.length !== 2) throw new Error('expected `pause KEY UNTIL`');
        seen.inputs = 1;
        gather(stepAt({ pause: [{ key: args[0], until: time(args[1]) }] }));
        break;
      case 'grant':
      case 'deny':
        // One step with every entry in `granted` (or `denied`).
        if (!args.length) throw new Error(`expected \`${verb} LABEL...\``);
        seen.inputs = args.length;
        gather(stepAt({ [verb === 'grant' ? 'granted' : 'denied']: args.map((l) => this.entry(l)) }));
        break;
      case 'cancel':
        if (args.length !== 1) throw new Error('expected `cancel N`');
        seen.inputs = 1;
        gather(stepAt({ cancel: [this.batch(args[0])] }));
        break;
      case 'restart': {
        if (args.length > 1 || (args.length === 1 && args[0] !== 'interrupt')) throw new Error('expected `restart` or `restart interrupt`');
        // Layers on the step give the policy this and every later restart resumes under.
        if (step.layers) this.policy = this.resolve(step.layers);
        const state = this.sched.unfinished();
        seen.error = codeOf(ResumeError, () => {
          const { scheduler, unrestored } = Scheduler.resume(this.policy, state, { started: args.length ? 'interrupt' : 'run-again' });
          this.sched = scheduler;
          seen.unrestored = unrestored.map((u) => `${u.call} ${u.code}`);
        });
        gather(stepAt());
        break;
      }
      case 'inspect': {
        if (args.length !== 1) throw new Error('expected `inspect N`');
        const statuses = this.sched.inspect(this.batch(args[0]));
        if (statuses === undefined) seen.error = 'unknown-batch';
        else seen.inspect = statuses.map(inspectLine);
        gather(stepAt());
        break;
      }
      default:
        throw new Error(`unknown event ${json(verb)}`);
    }
    return seen;
  }

  resolve(specs) {
    try {
      return this.turnstile.resolve(layersOf(specs));
    } catch (e) {
      if (e instanceof ConfigError) throw new Error(`the restart's layers failed to resolve:\n${e.message}`);
      throw e;
    }
  }

  check(step) {
    const verb = step.do.trim().split(/\s+/)[0];
    for (const [field, only] of [['errors', ['approve-many', 'end-many']], ['unrestored', ['restart']], ['layers', ['restart']], ['inspect', ['inspect']]]) {
      if (step[field] !== undefined && !only.includes(verb)) throw new Error(`\`${field}\` is for ${only.join(' and ')} steps`);
    }
    for (const field of ['admit', 'cancel', 'refused', 'drain']) {
      if (step[field] !== undefined) throw new Error(`\`${field}\` is for admission steps`);
    }
    const seen = this.run(step);
    if (seen.many) {
      if (step.error !== undefined) throw new Error('approve-many and end-many list refused inputs in `errors = ["INDEX CODE"]`');
      const got = seen.errors.sort((a, b) => a[0] - b[0]).map(([i, code]) => `${i} ${code}`);
      if (!eq(got, step.errors ?? [])) throw new Error(`want errors ${json(step.errors ?? [])}, got ${json(got)}`);
    } else {
      checkError(step.error, seen.error);
      if (seen.error && seen.inputs === 1 && (seen.start.length || seen.settle.length)) {
        throw new Error(`a refused input changed something: start ${json(seen.start)} settle ${json(seen.settle)}`);
      }
    }
    if (step.inspect !== undefined && seen.inspect !== null && !eq(seen.inspect, step.inspect)) {
      throw new Error(`inspect: want ${json(step.inspect)}, got ${json(seen.inspect)}`);
    }
    if (verb === 'inspect' && step.inspect === undefined && seen.inspect !== null) throw new Error('inspect needs `inspect = [...]`');
    if (verb === 'restart' && seen.unrestored !== null && !eq(seen.unrestored, step.unrestored ?? [])) {
      throw new Error(`want unrestored ${json(step.unrestored ?? [])}, got ${json(seen.unrestored)}`);
    }
    if (!eq(seen.start, step.start ?? []) || !eq(seen.settle, step.settle ?? [])) {
      throw new Error(`want start ${json(step.start ?? [])} settle ${json(step.settle ?? [])}, got start ${json(seen.start)} settle ${json(seen.settle)}`);
    }
    if (!eq(seen.abort, step.abort ?? [])) throw new Error(`want abort ${json(step.abort ?? [])}, got ${json(seen.abort)}`);
    if (!eq(seen.pauseStore, step.pause_store ?? [])) throw new Error(`want pause_store ${json(step.pause_store ?? [])}, got ${json(seen.pauseStore)}`);
    // A wanted `LABEL limit=N` also checks the limit the request carries.
    seen.acquire = seen.acquire.map((a, i) => (step.acquire?.[i]?.includes(' limit=') ? `${a.label} limit=${a.limit}` : a.label));
    if (!eq(seen.acquire, step.acquire ?? []) || !eq(seen.release, step.release ?? [])) {
      throw new Error(`want acquire ${json(step.acquire ?? [])} release ${json(step.release ?? [])}, got acquire ${json(seen.acquire)} release ${json(seen.release)}`);
    }
    if (step.retired !== undefined && !eq(seen.retired, step.retired)) {
      throw new Error(`want retired ${json(step.retired)}, got ${json(seen.retired)}`);
    }
    if (step.wake_at !== undefined) {
      const want = step.wake_at === 'none' ? undefined : step.wake_at;
      if (want !== undefined && typeof want !== 'number') throw new Error(`wake_at: expected milliseconds or "none", got ${json(step.wake_at)}`);
      if (seen.wakeAt !== want) throw new Error(`want wake_at ${json(want ?? null)}, got ${json(seen.wakeAt ?? null)}`);
    }
  }
}

/** An admission case: the controller, and each request id's tickets in `begin` order. */
class AdmissionRunner {
  constructor(turnstile, spec) {
    const max = Math.max(0, Math.min(Number(spec.max_concurrent), 2 ** 32 - 1));
    this.adm = turnstile.admission({ maxConcurrent: max, allowParallel: !!spec.allow_parallel });
    this.tickets = new Map();
    this.names = new Map();
  }

  /** `ID` (its most recent ticket) or `ID@N` (its N-th); an id that never began names nothing. */
  ticket(word) {
    const at = word.lastIndexOf('@');
    if (at > 0 && /^[1-9][0-9]*$/.test(word.slice(at + 1)) && this.tickets.has(word.slice(0, at))) {
      return this.tickets.get(word.slice(0, at))[Number(word.slice(at + 1)) - 1] ?? NOTHING;
    }
    return this.tickets.get(word)?.at(-1) ?? NOTHING;
  }

  /** The inverse of `ticket`: `ID` for an id's most recent ticket, else `ID@N`. */
  name(ticket) {
    const found = this.names.get(ticket);
    if (!found) return `?${ticket}`;
    const [id, n] = found;
    return this.tickets.get(id).length === n ? id : `${id}@${n}`;
  }

  check(step) {
    for (const field of ['abort', 'pause_store', 'start', 'settle', 'acquire', 'release', 'errors', 'retired', 'unrestored', 'layers', 'inspect']) {
      if (step[field] !== undefined) throw new Error(`\`${field}\` is for scheduling steps`);
    }
    const words = step.do.trim().split(/\s+/);
    let cancel = [];
    let refused = [];
    let error = null;
    if (words[0] === 'begin' && (words.length === 3 || words.length === 4)) {
      const [, id, cls, parent] = words;
      error = codeOf(AdmissionError, () => {
        const ticket = this.adm.begin(id, CLASSES[cls] ?? cls, parent === undefined ? undefined : this.ticket(parent));
        const list = this.tickets.get(id) ?? [];
        list.push(ticket);
        this.tickets.set(id, list);
        this.names.set(ticket, [id, list.length]);
      });
    } else if (words[0] === 'end' && words.length === 2) error = codeOf(AdmissionError, () => this.adm.end(this.ticket(words[1])));
    else if (words[0] === 'abandon' && words.length === 2) error = codeOf(AdmissionError, () => this.adm.abandon(this.ticket(words[1])));
    else if (words[0] === 'shutdown' && words.length === 1) {
      const report = this.adm.shutdown();
      cancel = [...report.cancel].map((t) => this.name(t));
      refused = [...report.refused].map((t) => this.name(t));
    } else throw new Error('unknown admission event');
    checkError(step.error, error);
    if (step.drain === false) {
      if (step.admit !== undefined) throw new Error('`admit` with `drain = false`: nothing is drained');
    } else {
      const admit = [...this.adm.nextAdmissions()].map((t) => this.name(t));
      if (!eq(admit, step.admit ?? [])) throw new Error(`want admit ${json(step.admit ?? [])}, got ${json(admit)}`);
    }
    if (!eq(cancel, step.cancel ?? []) || !eq(refused, step.refused ?? [])) {
      throw new Error(`want cancel ${json(step.cancel ?? [])} refused ${json(step.refused ?? [])}, got cancel ${json(cancel)} refused ${json(refused)}`);
    }
  }
}

/** Runs one parsed case on a component instance; throws with the reason on failure. */
export async function runCase(caseData, turnstile) {
  checkCase(caseData);
  const steps = caseData.step ?? [];
  let runner;
  if (caseData.admission) runner = new AdmissionRunner(turnstile, caseData.admission);
  else {
    let policy;
    try {
      policy = turnstile.resolve(layersOf(caseData.layer));
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      const want = caseData.diagnostics;
      if (!want) throw new Error(`the config failed to resolve:\n${e.message}`);
      const got = e.diagnostics;
      const ok = got.length === want.length && got.every((d, i) => (want[i].includes(' ') ? diagLine(d) === want[i] : d.code === want[i]));
      if (!ok) throw new Error(`diagnostics: want ${json(want)}, got ${json(got.map(diagLine))}\n${e.message}`);
      // The full rendering, joined by newlines, exactly (trailing newlines aside).
      const text = got.map((d) => d.rendered).join('\n');
      const trim = (t) => t.replace(/\n+$/, '');
      // `rendered` is optional: compared in full when given (the project's own corpus gives it
      // everywhere, which a tidy check keeps).
      if (caseData.rendered !== undefined && trim(caseData.rendered) !== trim(text)) throw new Error(`rendered: want\n${caseData.rendered}\ngot\n${text}`);
      return;
    }
    if (caseData.diagnostics) throw new Error(`diagnostics: want ${json(caseData.diagnostics)}, but the config resolved`);
    // Its warnings, in the form of `diagnostics` (none by default, so an unexpected one fails);
    // `rendered`, when given, is then their full text.
    const warnings = policy.warnings();
    const wantWarnings = caseData.warnings ?? [];
    const warned = warnings.length === wantWarnings.length && warnings.every((d, i) => (wantWarnings[i].includes(' ') ? diagLine(d) === wantWarnings[i] : d.code === wantWarnings[i]));
    if (!warned) throw new Error(`warnings: want ${json(wantWarnings)}, got ${json(warnings.map(diagLine))}\n${warnings.map((d) => d.rendered).join('\n')}`);
    if (caseData.rendered !== undefined && warnings.length > 0) {
      const text = warnings.map((d) => d.rendered).join('\n');
      if (caseData.rendered.replace(/\n+$/, '') !== text.replace(/\n+$/, '')) throw new Error(`rendered: want\n${caseData.rendered}\ngot\n${text}`);
    }
    for (const want of caseData.tools ?? []) {
      const name = want.trim().split(/\s+/)[0];
      const got = toolLine(policy.tool(name));
      if (got !== want) throw new Error(`tool ${name}: want ${json(want)}, got ${json(got)}`);
    }
    runner = new ScheduleRunner(turnstile, caseData, policy);
  }
  steps.forEach((step, i) => {
    try {
      runner.check(step);
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
      // An integer past 2^53 (a time) is read as a bigint, which the package takes as a u64.
      const caseData = parse(readFileSync(file, 'utf8'), { integersAsBigInt: 'asNeeded' });
      await runCase(caseData, await Turnstile.load());
      summary.passed += 1;
    } catch (e) {
      summary.failed.push([file, e.message]);
    }
  }
  return summary;
}
