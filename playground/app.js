// The playground: config layers and a batch in, the schedule out. It drives the same component
// as every host (through the JS package in /hosts/js/dist): it submits the batch, approves every
// entry in one `step`, and ends executions on a virtual clock, one `step` per end, so a step is
// deterministic: the running execution that ends first ends next. `inspect` says why each
// approved entry waits.
import { ConfigError, Scheduler, SubmitError, Turnstile } from '../hosts/js/dist/index.js';

const DEFAULT_LAYERS = [
  {
    name: 'plugin: jp-rfd',
    text: `# RFD 129: every jp-rfd tool that writes shares one key.
[conversation.tools.rfd_draft]
source = "local"
concurrency = { key = "rfd" }

[conversation.tools.rfd_renumber]
source = "local"
concurrency = { key = "rfd" }
`,
  },
  {
    name: 'user',
    text: `[conversation.tools.fs_read_file]
fan_out = true
`,
  },
];
const DEFAULT_BATCH = `n1 rfd_renumber
n2 rfd_renumber
n3 rfd_renumber
n4 rfd_renumber
d1 rfd_draft
d2 rfd_draft
d3 rfd_draft
r fs_read_file*2 15`;

const $ = (id) => document.getElementById(id);
const state = { turnstile: null, sched: null, submitted: null, now: 0, running: [], bars: [], keys: new Map(), done: false, timer: null, resetTimer: null };
// For tests and the curious: the current schedule as data.
window.__playground = { ready: false, bars: state.bars, diagnostics: [], waiting: [], error: null, events: [] };

function showFatal(message) {
  const box = $('fatal');
  box.hidden = false;
  box.textContent = message;
  window.__playground.error = message;
}
window.addEventListener('error', (e) => showFatal(`error: ${e.message}`));
window.addEventListener('unhandledrejection', (e) => showFatal(`error: ${e.reason?.message ?? e.reason}`));

function layerElement(layer) {
  const div = document.createElement('div');
  div.className = 'layer';
  div.innerHTML = `<div class="head"><input type="text" class="layer-name" aria-label="layer name"><button type="button" class="remove">Remove</button></div>
    <textarea class="layer-text" rows="9" spellcheck="false" aria-label="layer text"></textarea><pre class="source" aria-label="layer with diagnostics"></pre>`;
  div.querySelector('.layer-name').value = layer.name;
  div.querySelector('.layer-text').value = layer.text;
  div.querySelector('.remove').addEventListener('click', () => {
    div.remove();
    reset();
  });
  div.querySelector('.layer-text').addEventListener('input', resetSoon);
  div.querySelector('.layer-name').addEventListener('input', resetSoon);
  return div;
}

/** Resets once typing pauses; one timer for every input, and a reset (the button) cancels it,
 * so an edit never resets a schedule that was stepped after the edit was applied. */
function resetSoon() {
  clearTimeout(state.resetTimer);
  state.resetTimer = setTimeout(reset, 400);
}

function layers() {
  return [...document.querySelectorAll('.layer')].map((div) => ({
    name: div.querySelector('.layer-name').value || 'layer',
    text: div.querySelector('.layer-text').value,
  }));
}

/** Byte offsets (what spans carry) to string indices, for one layer's text. */
function byteToIndex(text) {
  const enc = new TextEncoder();
  const map = [];
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const ch = text.codePointAt(i);
    const s = String.fromCodePoint(ch);
    const n = enc.encode(s).length;
    for (let k = 0; k < n; k++) map[bytes + k] = i;
    bytes += n;
    if (s.length === 2) i++;
  }
  map[bytes] = text.length;
  return (b) => map[Math.min(b, bytes)] ?? text.length;
}

/** Shows each layer's text with every diagnostic's spans underlined. */
function renderSources(diagnostics) {
  document.querySelectorAll('.layer').forEach((div, index) => {
    const text = div.querySelector('.layer-text').value;
    const pre = div.querySelector('.source');
    const toIndex = byteToIndex(text);
    const spans = diagnostics
      .flatMap((d) => d.labels.map((l) => ({ ...l, code: d.code })))
      .filter((l) => l.span.layer === index)
      .map((l) => ({ start: toIndex(l.span.start), end: Math.max(toIndex(l.span.end), toIndex(l.span.start) + 1), title: `${l.code}: ${l.message}` }))
      .sort((a, b) => a.start - b.start);
    pre.replaceChildren();
    let at = 0;
    for (const s of spans) {
      if (s.start < at) continue;
      pre.append(text.slice(at, s.start));
      const mark = document.createElement('span');
      mark.className = 'underline';
      mark.title = s.title;
      mark.dataset.code = s.title.split(':')[0];
      mark.textContent = text.slice(s.start, s.end) || ' ';
      pre.append(mark);
      at = s.end;
    }
    pre.append(text.slice(at));
    pre.hidden = spans.length === 0;
  });
}

function parseBatch(text) {
  const calls = [];
  const extra = new Map();
  text.split('\n').forEach((line, i) => {
    const words = line.trim().split(/\s+/).filter(Boolean);
    if (!words.length || words[0].startsWith('#')) return;
    if (words.length < 2) throw new Error(`batch line ${i + 1}: write \`ID TOOL\`, \`ID TOOL*N\`, then optionally a duration and \`fail\``);
    const [id, toolSpec, ...rest] = words;
    const star = toolSpec.indexOf('*');
    const call = star < 0 ? { id, tool: toolSpec } : { id, tool: toolSpec.slice(0, star), operations: Number(toolSpec.slice(star + 1)) };
    if (call.operations !== undefined && !(Number.isInteger(call.operations) && call.operations >= 0)) throw new Error(`batch line ${i + 1}: bad operation count in \`${toolSpec}\``);
    let duration = 10;
    let fail = false;
    for (const w of rest) {
      if (w === 'fail') fail = true;
      else if (/^\d+$/.test(w)) duration = Number(w);
      else throw new Error(`batch line ${i + 1}: unexpected \`${w}\``);
    }
    calls.push(call);
    extra.set(id, { duration, fail });
  });
  if (!calls.length) throw new Error('the batch is empty: write at least one call');
  return { calls, extra };
}

function log(text) {
  const li = document.createElement('li');
  li.textContent = `t=${state.now} ${text}`;
  $('events').append(li);
  window.__playground.events.push(`t=${state.now} ${text}`);
}

function reset() {
  clearTimeout(state.resetTimer);
  stopAuto();
  $('batch-error').hidden = true;
  $('diagnostics').replaceChildren();
  $('events').replaceChildren();
  state.running = [];
  state.bars.length = 0;
  state.keys = new Map();
  state.now = 0;
  state.done = false;
  state.sched = null;
  state.submitted = null;
  window.__playground.events = [];
  window.__playground.diagnostics = [];
  window.__playground.error = null;
  let policy;
  try {
    policy = state.turnstile.resolve(layers());
    renderSources([]);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    window.__playground.diagnostics = e.diagnostics.map((d) => ({ code: d.code, line: d.labels[0]?.span.line, tools: d.tools }));
    renderSources(e.diagnostics);
    for (const d of e.diagnostics) {
      const div = document.createElement('div');
      div.className = 'error diagnostic';
      div.dataset.code = d.code;
      const pre = document.createElement('pre');
      pre.textContent = d.rendered;
      div.append(pre);
      $('diagnostics').append(div);
    }
    render();
    return;
  }
  try {
    const { calls, extra } = parseBatch($('batch').value);
    state.extra = extra;
    state.calls = calls;
    state.sched = new Scheduler(policy);
    for (const c of calls) state.keys.set(c.id, policy.tool(c.tool).concurrency?.key ?? null);
    state.submitted = state.sched.submit(calls);
    const { batch, first, count } = state.submitted;
    log(`submit: batch ${batch}, entries ${first} to ${first + BigInt(count) - 1n}`);
    log('approve every entry');
    apply(state.sched.step({ approve: state.submitted.entries() }));
  } catch (e) {
    state.sched = null;
    const message = e instanceof SubmitError ? `the batch was refused: ${e.message}` : e.message;
    $('batch-error').hidden = false;
    $('batch-error').textContent = message;
    window.__playground.error = message;
  }
  render();
}

/** Shows what one `step` decided: settlements, refused inputs, starts, retired batches. */
function apply(out) {
  const label = (entry) => state.submitted.label(entry) ?? `entry ${entry}`;
  for (const s of out.settle) {
    log(`settle ${label(s.entry)} ${s.reason.kind}${s.reason.kind === 'stopped' ? ` after ${s.reason.after}` : ''}`);
  }
  for (const e of out.errors) log(`refused: ${e.input} #${e.index}: ${e.code}: ${e.message}`);
  for (const entry of out.start) {
    const { id } = state.submitted.locate(entry).call;
    const { duration, fail } = state.extra.get(id) ?? { duration: 10, fail: false };
    const bar = { label: label(entry), lane: state.keys.get(id) ?? 'unkeyed', start: state.now, end: null, failed: fail };
    state.bars.push(bar);
    state.running.push({ entry, endsAt: state.now + duration, bar, fail });
    log(`start ${bar.label}`);
  }
  for (const batch of out.retired) log(`batch ${batch} retired: every entry has its response`);
}

/** Advances to the next end; returns false when nothing is left to do. */
function step() {
  if (!state.sched || state.done) return false;
  if (!state.running.length) {
    state.done = true;
    log('done: every entry ended or settled');
    render();
    return false;
  }
  state.running.sort((a, b) => a.endsAt - b.endsAt);
  const next = state.running.shift();
  state.now = next.endsAt;
  next.bar.end = state.now;
  log(`end ${next.bar.label} ${next.fail ? 'failed' : 'ok'}`);
  apply(state.sched.step(next.fail ? { failed: [next.entry] } : { ok: [next.entry] }));
  if (!state.running.length) {
    state.done = true;
    log('done: every entry ended or settled');
  }
  render();
  return true;
}

function render() {
  $('clock').textContent = `t = ${state.now}`;
  const lanes = new Map();
  for (const bar of state.bars) {
    if (!lanes.has(bar.lane)) lanes.set(bar.lane, []);
    lanes.get(bar.lane).push(bar);
  }
  const horizon = Math.max(10, state.now, ...state.running.map((r) => r.endsAt));
  const timeline = $('timeline');
  timeline.replaceChildren();
  if (!lanes.size) timeline.textContent = 'nothing started yet';
  for (const [lane, bars] of lanes) {
    const row = document.createElement('div');
    row.className = 'lane';
    row.dataset.lane = lane;
    const name = document.createElement('div');
    name.className = 'name';
    name.textContent = lane === 'unkeyed' ? 'unkeyed' : `key ${lane}`;
    const track = document.createElement('div');
    track.className = 'track';
    const slots = [];
    for (const bar of bars) {
      const end = bar.end ?? state.now;
      let slot = slots.findIndex((e) => e <= bar.start);
      if (slot < 0) slot = slots.length;
      slots[slot] = bar.end ?? Infinity;
      const div = document.createElement('div');
      div.className = `bar${bar.end === null ? ' running' : ''}${bar.failed ? ' failed' : ''}`;
      div.dataset.entry = bar.label;
      div.style.left = `${(bar.start / horizon) * 100}%`;
      div.style.width = `${Math.max(((end - bar.start) / horizon) * 100, 2)}%`;
      div.style.top = `${3 + slot * 22}px`;
      div.textContent = bar.label;
      div.title = `${bar.label}: ${bar.start} to ${bar.end ?? 'running'}`;
      track.append(div);
    }
    track.style.height = `${Math.max(1, slots.length) * 22 + 4}px`;
    row.append(name, track);
    timeline.append(row);
  }
  const waiting = $('waiting');
  waiting.replaceChildren();
  window.__playground.waiting = [];
  // A retired batch is unknown to `inspect`: nothing of it waits any more.
  const statuses = state.sched && state.submitted ? state.sched.inspect(state.submitted.batch) ?? [] : [];
  for (const st of statuses) {
    if (!st.wait) continue;
    const w = st.wait;
    const why = w.kind === 'batch-not-approved' ? `the batch is not approved yet (${w.pending} pending)`
      : w.kind === 'key-full' ? `key ${w.key} is full (${w.running.length}/${w.limit}: ${w.running.join(', ')})`
        : w.kind === 'behind' ? `behind ${w.label}, which has not started`
          : w.kind === 'key-paused' ? `key ${w.key} is paused until ${w.until} ms`
            : w.kind === 'key-spacing' ? `key ${w.key} spaces its starts: next at ${w.until} ms`
              : `rate limited: runs again at ${w.until} ms`;
    const li = document.createElement('li');
    li.textContent = `${st.label} (${st.tool}): ${why}`;
    waiting.append(li);
    window.__playground.waiting.push({ label: st.label, wait: st.wait.kind });
  }
  if (!waiting.children.length) waiting.innerHTML = '<li>nothing waits</li>';
}

function stopAuto() {
  clearInterval(state.timer);
  state.timer = null;
  $('auto').checked = false;
}

async function main() {
  state.turnstile = await Turnstile.load();
  for (const layer of DEFAULT_LAYERS) $('layers').append(layerElement(layer));
  $('batch').value = DEFAULT_BATCH;
  $('batch').addEventListener('input', resetSoon);
  $('add-layer').addEventListener('click', () => {
    $('layers').append(layerElement({ name: `layer ${document.querySelectorAll('.layer').length + 1}`, text: '[conversation.tools.my_tool]\nconcurrency = 1\n' }));
    reset();
  });
  $('reset').addEventListener('click', reset);
  $('step').addEventListener('click', step);
  $('run').addEventListener('click', () => {
    while (step());
  });
  $('auto').addEventListener('change', (e) => {
    if (e.target.checked) {
      state.timer = setInterval(() => {
        if (!step()) stopAuto();
      }, 600);
    } else stopAuto();
  });
  reset();
  window.__playground.ready = true;
}

main().catch((e) => showFatal(`the component failed to load: ${e.message}`));
