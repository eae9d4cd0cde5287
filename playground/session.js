// The playground's model: a scenario (config layers, batch text, the actions taken so far) driven
// through the package's `Scheduler` on a virtual clock. It runs in the worker (worker.js); the
// page only renders `view()`. Loading a scenario replays its actions, so a share link reopens the
// same schedule exactly.
//
// The clock: an action (approve, ask, fail, ...) happens at the current time; `step` moves the
// clock to the next moment something happens (executions ending there, all in one `step`, or the
// scheduler's `wakeAt`), and `run` steps until nothing is left to happen without you.
import { BatchError, parseBatch, plannedFail, plannedLimit } from './batch.js';
import { explain } from './explain.js';

const RUN_STEPS_MAX = 10_000;
const TIME_MS_MAX = 86_400_000;

/** The actions a scenario records, each `[name, ...arguments]`. */
export const ACTIONS = {
  'approve-all': [],
  approve: ['label'],
  reject: ['label'],
  step: [],
  run: [],
  ask: ['label'],
  answer: ['label'],
  fail: ['label'],
  limit: ['label', 'ms'],
  pause: ['key', 'ms'],
  cancel: [],
  restart: ['started'],
};

export class Session {
  #api;
  #turnstile;

  /** `api`: the package's exports (`Scheduler`, `ConfigError`, `SubmitError`); `turnstile`: a
   * loaded `Turnstile`. */
  constructor(api, turnstile) {
    this.#api = api;
    this.#turnstile = turnstile;
    this.load({ layers: [], batch: '', actions: [] });
  }

  /** Starts a scenario over: resolves the layers, submits the batch at t = 0, replays the actions. */
  load({ layers, batch, actions = [] }) {
    this.sched?.dispose();
    Object.assign(this, {
      scenario: { layers: layers.map((l) => ({ name: String(l.name), text: String(l.text) })), batch: String(batch), actions: [] },
      now: 0, wakeAt: undefined, sched: null, submitted: null, policy: null,
      recs: [], byEntry: new Map(), byLabel: new Map(), keys: [], pauses: [], events: [], restarts: [],
      diagnostics: [], batchError: null, saved: null, done: false, cancelled: false, round: 0,
    });
    if (this.#resolve() && this.#submit()) for (const action of actions) this.#apply(action);
    return this.view();
  }

  /** Applies one action and returns the new view. */
  act(action) {
    this.#apply(action);
    return this.view();
  }

  #resolve() {
    const layers = this.scenario.layers.map((l, i) => ({ name: l.name.trim() || `layer ${i + 1}`, text: l.text }));
    try {
      this.policy = this.#turnstile.resolve(layers);
    } catch (e) {
      if (!(e instanceof this.#api.ConfigError)) throw e;
      this.diagnostics = e.diagnostics.map((d) => ({
        code: d.code, message: d.message, tools: d.tools, rendered: d.rendered,
        labels: d.labels.map((l) => ({ layer: l.span.layer, start: l.span.start, end: l.span.end, line: l.span.line, message: l.message })),
      }));
      return false;
    }
    const keys = new Map();
    for (const tool of this.policy.tools()) {
      for (const c of tool.concurrency) {
      if (!keys.has(c.key)) keys.set(c.key, { key: c.key, limit: c.limit, delayMs: c.delayMs, rates: c.rates, burst: c.burst, adaptMin: c.adaptMin, retries: c.retries, tools: [] });
      keys.get(c.key).tools.push(tool.name);
      }
    }
    this.keys = [...keys.values()];
    return true;
  }

  #submit() {
    let parsed;
    try {
      parsed = parseBatch(this.scenario.batch);
      this.sched = new this.#api.Scheduler(this.policy);
      this.submitted = this.sched.submit(parsed.calls);
    } catch (e) {
      if (!(e instanceof BatchError || e instanceof this.#api.SubmitError)) throw e;
      this.batchError = e instanceof BatchError ? e.message : `the scheduler refused the batch: ${e.message}`;
      this.sched?.dispose();
      this.sched = null;
      return false;
    }
    const s = this.submitted;
    for (let i = 0; i < s.count; i++) {
      const entry = s.first + BigInt(i);
      const { call, operation } = s.locate(entry);
      const plan = parsed.plans.get(call.id);
      const rec = {
        entry, label: s.label(entry), call: call.id, op: operation, tool: call.tool, key: undefined,
        durationMs: plan.durationMs, fails: plannedFail(plan, operation), limitMs: plannedLimit(plan, operation),
        state: { kind: 'pending' }, wait: null, run: null, runs: [], waits: [], settledAt: null,
      };
      this.recs.push(rec);
      this.byEntry.set(String(entry), rec);
      this.byLabel.set(rec.label, rec);
    }
    this.#log('submit', `batch ${s.batch} submitted: ${s.count} ${s.count === 1 ? 'entry' : 'entries'} in written order, every one pending until you decide`);
    this.#refresh();
    return true;
  }

  #apply(action) {
    if (!this.sched) return;
    this.round += 1;
    const problem = invalid(action);
    if (problem) {
      this.#log('refused', `ignored the action ${JSON.stringify(action)}: ${problem}`);
      return;
    }
    this.scenario.actions.push(action);
    const [name, a, b] = action;
    const rec = ACTIONS[name][0] === 'label' ? this.byLabel.get(a) : null;
    if (ACTIONS[name][0] === 'label' && !rec) {
      this.#log('refused', `ignored the action ${JSON.stringify(action)}: no entry is labelled ${a}`);
      return;
    }
    switch (name) {
      case 'approve-all': return this.#approveAll();
      case 'approve': return this.#decide(rec, 'approve');
      case 'reject': return this.#decide(rec, 'reject');
      case 'step': return void this.#step();
      case 'run': return this.#run();
      case 'ask': return this.#ask(rec);
      case 'answer': return this.#answer(rec);
      case 'fail': return this.#endNow(rec, 'failed');
      case 'limit': return this.#endNow(rec, 'rate-limited', b);
      case 'pause': return this.#pause(a, b);
      case 'cancel': return this.#cancel();
      case 'restart': return this.#restart(a);
    }
  }

  #approveAll() {
    const pending = this.recs.filter((r) => r.state.kind === 'pending');
    if (!pending.length) return this.#log('info', 'nothing to approve: no entry is pending');
    this.#log('decide', `you approve ${labels(pending)}`);
    this.#input({ approve: pending.map((r) => r.entry) });
  }

  #decide(rec, how) {
    this.#log('decide', `you ${how} ${rec.label}`);
    this.#input(how === 'approve' ? { approve: [rec.entry] } : { settle: [{ entry: rec.entry, how: 'rejected' }] });
  }

  /** Moves the clock to the next moment and reports everything that happens there in one
   * `step`. Returns false (and says why) when nothing is left to happen without you. */
  #step() {
    const at = this.#nextMoment();
    if (at === null) {
      const text = this.#idle();
      if (this.events.at(-1)?.text !== text) this.#log('idle', text);
      return false;
    }
    this.now = at;
    this.round += 1;
    const ending = this.recs.filter((r) => r.run && r.run.endsAt === at);
    const inputs = { ok: [], failed: [], retry: [] };
    const outcomes = new Map();
    for (const rec of ending) {
      if (rec.limitMs !== null) {
        inputs.retry.push({ entry: rec.entry, until: at + rec.limitMs });
        outcomes.set(rec, ['retry', inputs.retry.length - 1, 'rate-limited']);
        this.#log('end', `${rec.label} hits a rate limit (429, Retry-After ${rec.limitMs} ms)`, rec);
        rec.limitMs = null;
      } else {
        const list = rec.fails ? 'failed' : 'ok';
        inputs[list].push(rec.entry);
        outcomes.set(rec, [list, inputs[list].length - 1, list]);
        this.#log('end', `${rec.label} ends ${rec.fails ? 'failed' : 'ok'}`, rec);
      }
    }
    if (!ending.length) this.#log('wake', 'the scheduler wakes up, as it asked (wakeAt)');
    this.#input(inputs, (out) => {
      for (const [rec, [list, index, outcome]] of outcomes) {
        if (refused(out, list, index)) continue;
        // A rate limit pauses every key of the entry's set.
        if (outcome === 'rate-limited') for (const k of rec.keys ?? []) this.#pauseBand(k, at, inputs.retry[index].until);
        this.#closeRun(rec, outcome);
      }
    });
    return true;
  }

  #run() {
    for (let i = 0; i < RUN_STEPS_MAX && this.#step(); i++);
  }

  #ask(rec) {
    this.#log('ask', `${rec.label} asks a question`, rec);
    this.#input({ ask: [rec.entry] }, (out) => {
      if (refused(out, 'ask', 0) || !rec.run) return;
      rec.run.remainingMs = rec.run.endsAt - this.now;
      rec.run.endsAt = null;
      rec.run.asking.push({ from: this.now, to: null });
    });
  }

  #answer(rec) {
    this.#log('ask', `you answer ${rec.label}'s question; it runs on`, rec);
    this.#input({ answer: [rec.entry] }, (out) => {
      if (refused(out, 'answer', 0) || !rec.run) return;
      rec.run.endsAt = this.now + rec.run.remainingMs;
      rec.run.asking.at(-1).to = this.now;
    });
  }

  /** Ends a running execution now: failed, or rate limited (a 429 with Retry-After `ms`). */
  #endNow(rec, outcome, ms) {
    if (outcome === 'failed') {
      this.#log('end', `${rec.label} fails (you ended it)`, rec);
      this.#input({ failed: [rec.entry] }, (out) => {
        if (!refused(out, 'failed', 0) && rec.run) this.#closeRun(rec, 'failed');
      });
      return;
    }
    const until = this.now + ms;
    this.#log('end', `${rec.label} hits a rate limit (429, Retry-After ${ms} ms)`, rec);
    this.#input({ retry: [{ entry: rec.entry, until }] }, (out) => {
      if (refused(out, 'retry', 0) || !rec.run) return;
      for (const k of rec.keys ?? []) this.#pauseBand(k, this.now, until);
      this.#closeRun(rec, 'rate-limited');
    });
  }

  #pause(key, ms) {
    const until = this.now + ms;
    this.#log('pause', `you pause key ${key} for ${ms} ms, until t = ${until} ms`);
    this.#input({ pause: [{ key, until }] }, (out) => {
      if (!refused(out, 'pause', 0)) this.#pauseBand(key, this.now, until);
    });
  }

  #cancel() {
    this.#log('cancel', `you cancel batch ${this.submitted.batch}: what is parked is settled now; what runs keeps its slot until it ends`);
    this.#input({ cancel: [this.submitted.batch] }, (out) => {
      if (!refused(out, 'cancel', 0)) this.cancelled = true;
    });
  }

  /** The host stops and starts again: `unfinished()` is saved, and a fresh scheduler resumes it. */
  #restart(started) {
    const saved = this.sched.unfinished();
    this.saved = JSON.stringify(saved, (_, v) => (typeof v === 'bigint' ? String(v) : v), 2);
    this.sched.dispose();
    const lost = this.recs.filter((r) => r.run);
    for (const rec of lost) this.#closeRun(rec, 'lost');
    this.#log('restart', `the host stops${lost.length ? `; ${labels(lost)} ${lost.length === 1 ? 'was' : 'were'} running and ${lost.length === 1 ? 'its result is' : 'their results are'} lost` : ''}`);
    const { scheduler, unrestored } = this.#api.Scheduler.resume(this.policy, saved, { started });
    this.sched = scheduler;
    this.wakeAt = undefined;
    this.restarts.push({ at: this.now, started });
    this.#log('restart', `a fresh scheduler resumes from unfinished() (started: '${started}'): what ended stays ended, the rest is pending again and needs your decision`);
    for (const u of unrestored) this.#log('refused', `${u.call} was not restored: ${u.message} (${u.code})`);
    this.#input({});
  }

  /** One `step` at the current time; `ended(out)` records ends before starts are read. */
  #input(inputs, ended = () => {}) {
    const out = this.sched.step({ now: this.now, ...inputs });
    for (const e of out.errors) this.#log('refused', `the scheduler refused ${e.input} #${e.index}: ${e.message} (${e.code})`);
    ended(out);
    for (const s of out.settle) {
      const rec = this.byEntry.get(String(s.entry));
      rec.state = { kind: 'settled', reason: s.reason };
      rec.message = s.message;
      rec.settledAt = this.now;
      this.#log('settle', explain(statusOf(rec)), rec);
    }
    for (const entry of out.start) {
      const rec = this.byEntry.get(String(entry));
      rec.state = { kind: 'running' };
      rec.run = { start: this.now, end: null, endsAt: this.now + rec.durationMs, remainingMs: 0, asking: [], outcome: null };
      rec.runs.push(rec.run);
      this.#log('start', `${rec.label} starts${rec.runs.length > 1 ? ` (run ${rec.runs.length})` : ''}`, rec);
    }
    for (const batch of out.retired) {
      this.done = true;
      this.#log('done', `done: batch ${batch} retired, every entry has its response`);
    }
    this.wakeAt = out.wakeAt;
    this.#refresh();
  }

  #closeRun(rec, outcome) {
    const run = rec.run;
    run.end = this.now;
    run.outcome = outcome;
    if (run.asking.at(-1)?.to === null) run.asking.at(-1).to = this.now;
    rec.run = null;
    if (outcome === 'ok' || outcome === 'failed') rec.state = { kind: 'ended', outcome };
  }

  #pauseBand(key, from, until) {
    if (key !== undefined) this.pauses.push({ key, from, until });
  }

  /** Reads every entry's state and wait from `inspect`, and extends each entry's wait on the
   * timeline (a new segment when the reason changes). */
  #refresh() {
    const statuses = this.submitted ? this.sched.inspect(this.submitted.batch) : undefined;
    for (const rec of this.recs) {
      rec.wait = null;
      rec.why = null;
    }
    for (const status of statuses ?? []) {
      const rec = this.byEntry.get(String(status.entry));
      rec.state = status.state;
      rec.wait = status.wait ?? null;
      rec.why = status.why ?? null;
      // A response the host made (a rejection): the step reported no settlement, so no sentence.
      if (status.state.kind === 'settled' && !rec.message) rec.message = this.sched.explain(rec.label, status.state.reason);
      // Its keys: one, a key set's (shown joined), or none.
      rec.keys = status.keys;
      rec.key = status.keys.length ? status.keys.join(' + ') : undefined;
    }
    for (const rec of this.recs) {
      const wait = rec.state.kind === 'pending' ? { kind: 'pending' } : rec.state.kind === 'approved' ? rec.wait : null;
      const signature = wait && JSON.stringify(wait);
      const open = rec.waits.at(-1)?.to === null ? rec.waits.at(-1) : null;
      if (open && open.signature === signature) continue;
      if (open) {
        open.to = this.now;
        if (open.to === open.from) rec.waits.pop();
      }
      if (wait) rec.waits.push({ from: this.now, to: null, kind: wait.kind, signature, sentence: explain(statusOf(rec)) });
    }
  }

  #nextMoment() {
    let at = Infinity;
    for (const rec of this.recs) if (rec.run && rec.run.endsAt !== null) at = Math.min(at, rec.run.endsAt);
    if (this.wakeAt !== undefined) at = Math.min(at, Math.max(this.wakeAt, this.now));
    return at === Infinity ? null : at;
  }

  /** Why nothing happens on the clock. */
  #idle() {
    const pending = this.recs.filter((r) => r.state.kind === 'pending');
    const asking = this.recs.filter((r) => r.state.kind === 'asking');
    if (pending.length) return `nothing moves until every entry is decided: ${labels(pending)} ${pending.length === 1 ? 'needs' : 'need'} your approval or rejection`;
    if (asking.length) return `nothing moves on the clock until you answer: ${labels(asking)} asked a question`;
    if (this.done) return 'nothing left to do: every entry has its response';
    return 'nothing is left to happen on the clock';
  }

  #log(kind, text, rec) {
    const event = { n: this.events.length, round: this.round, t: this.now, kind, text };
    if (rec) event.label = rec.label;
    this.events.push(event);
  }

  /** Everything the page shows: plain data (no bigints), posted from the worker. */
  view() {
    const next = this.#nextMoment();
    const ending = next === null ? [] : this.recs.filter((r) => r.run?.endsAt === next);
    return {
      scenario: structuredClone(this.scenario),
      diagnostics: this.diagnostics,
      batchError: this.batchError,
      batch: this.submitted ? String(this.submitted.batch) : null,
      now: this.now,
      wakeAt: this.wakeAt ?? null,
      next: next === null ? null : { at: next, ending: ending.map((r) => r.label) },
      idle: next === null && this.sched ? this.#idle() : null,
      done: this.done,
      cancelled: this.cancelled,
      keys: this.keys,
      pauses: this.pauses,
      restarts: this.restarts,
      saved: this.saved,
      events: this.events,
      entries: this.recs.map((r) => ({
        label: r.label, entry: String(r.entry), call: r.call, op: r.op ?? null, tool: r.tool, key: r.key ?? null,
        durationMs: r.durationMs, state: r.state, sentence: explain(statusOf(r)), settledAt: r.settledAt,
        runs: r.runs.map((run) => ({ start: run.start, end: run.end, endsAt: run.endsAt, outcome: run.outcome, asking: run.asking.map((a) => ({ ...a })) })),
        waits: r.waits.map(({ from, to, kind, sentence }) => ({ from, to, kind, sentence })),
      })),
    };
  }
}

function statusOf(rec) {
  const status = { label: rec.label, tool: rec.tool, key: rec.key, state: rec.state };
  if (rec.why) status.why = rec.why;
  if (rec.message) status.message = rec.message;
  return status;
}

const refused = (out, input, index) => out.errors.some((e) => e.input === input && e.index === index);

function labels(recs) {
  const names = recs.map((r) => r.label);
  return names.length <= 1 ? names.join('') : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
}

/** Why an action (from a share link, so untrusted) is malformed, or null. */
function invalid(action) {
  if (!Array.isArray(action) || !Object.hasOwn(ACTIONS, action[0])) return 'unknown action';
  const params = ACTIONS[action[0]];
  if (action.length !== params.length + 1) return `expected ${params.length} argument(s)`;
  for (let i = 0; i < params.length; i++) {
    const v = action[i + 1];
    if (params[i] === 'ms' && !(Number.isInteger(v) && v >= 0 && v <= TIME_MS_MAX)) return `${v} is not a time in ms`;
    if (params[i] === 'started' && v !== 'run-again' && v !== 'interrupt') return "started is 'run-again' or 'interrupt'";
    if ((params[i] === 'label' || params[i] === 'key') && typeof v !== 'string') return `${params[i]} is a string`;
  }
  return null;
}
