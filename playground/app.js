// The page: editors and controls in, views out. The scheduler runs in a Web Worker (worker.js,
// session.js); every control posts one action there and renders the view that comes back. The
// scenario (layers, batch, actions) lives in the URL hash, so the address is a share link.
import { layerEditor } from './editor.js';
import { EXAMPLES } from './examples.js';
import { renderTimeline } from './timeline.js';

const $ = (id) => document.getElementById(id);
const EDIT_DELAY_MS = 300;
const HASH_PREFIX = '#s=';

const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
const replies = new Map();
const idlers = [];
let requestId = 0;
let editTimer = null;
let editors = [];
let lastHash = '';

// For tests and the curious: the last view, a fatal error (the worker or component failed), and
// a promise for "every edit sent and every request answered".
const pg = (window.__playground = { ready: false, worker: false, view: null, error: null, idle });

function send(message) {
  const id = ++requestId;
  worker.postMessage({ id, ...message });
  return new Promise((ok, fail) => replies.set(id, { ok, fail })).then(show, (e) => fatal(e.message));
}

function idle() {
  return replies.size === 0 && editTimer === null ? Promise.resolve() : new Promise((ok) => idlers.push(ok));
}

worker.onmessage = ({ data }) => {
  if ('ready' in data) {
    if (!data.ready) return fatal(data.error);
    pg.worker = data.worker;
    return;
  }
  const reply = replies.get(data.id);
  replies.delete(data.id);
  if (data.error) reply.fail(new Error(data.error));
  else reply.ok(data.view);
};
worker.onerror = (e) => fatal(`the worker failed: ${e.message ?? 'it could not load'}`);

function fatal(message) {
  const box = $('fatal');
  box.hidden = false;
  box.textContent = message;
  pg.error = message;
  settleIdle();
}

function settleIdle() {
  if (replies.size || editTimer !== null) return;
  while (idlers.length) idlers.shift()();
}

// --- scenario in, view out ---------------------------------------------------------------

function scenario() {
  return { layers: editors.map((e) => e.layer()), batch: $('batch').value };
}

/** Puts a scenario in the editors and has the worker replay it. */
function open(s) {
  editors = [];
  $('layers').replaceChildren();
  for (const layer of s.layers) addEditor(layer);
  $('batch').value = s.batch;
  const example = EXAMPLES.find((e) => e.batch === s.batch && JSON.stringify(e.layers) === JSON.stringify(s.layers));
  $('example').value = example?.id ?? '';
  fitBatch();
  clearTimeout(editTimer);
  editTimer = null;
  return send({ load: { ...s, actions: s.actions ?? [] } });
}

function addEditor(layer) {
  const editor = layerEditor(layer, {
    onInput: edited,
    onRemove: () => {
      editors = editors.filter((e) => e !== editor);
      editor.element.remove();
      edited();
      flushEdits();
    },
  });
  editors.push(editor);
  $('layers').append(editor.element);
}

/** An edit starts the schedule over, once typing pauses. */
function edited() {
  $('example').value = '';
  clearTimeout(editTimer);
  editTimer = setTimeout(flushEdits, EDIT_DELAY_MS);
}

/** The batch box grows with its lines (up to 24). */
function fitBatch() {
  $('batch').rows = Math.min(24, Math.max(4, $('batch').value.split('\n').length + 1));
}

function flushEdits() {
  if (editTimer === null) return;
  clearTimeout(editTimer);
  editTimer = null;
  send({ load: { ...scenario(), actions: [] } });
}

function act(action) {
  flushEdits();
  return send({ act: action });
}

function show(view) {
  pg.view = view;
  renderDiagnostics(view);
  renderControls(view);
  renderEntries(view);
  renderTimeline($('timeline'), view);
  renderEvents(view);
  writeHash(view.scenario);
  settleIdle();
}

// --- share links ---------------------------------------------------------------------------

function writeHash(s) {
  const json = JSON.stringify({ v: 1, layers: s.layers.map((l) => [l.name, l.text]), batch: s.batch, actions: s.actions });
  const bytes = new TextEncoder().encode(json);
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  lastHash = HASH_PREFIX + btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
  if (location.hash !== lastHash) history.replaceState(null, '', lastHash);
}

function readHash(hash) {
  if (!hash.startsWith(HASH_PREFIX)) return null;
  try {
    const binary = atob(hash.slice(HASH_PREFIX.length).replaceAll('-', '+').replaceAll('_', '/'));
    const s = JSON.parse(new TextDecoder().decode(Uint8Array.from(binary, (c) => c.charCodeAt(0))));
    if (s.v !== 1 || !Array.isArray(s.layers) || typeof s.batch !== 'string' || !Array.isArray(s.actions)) return null;
    return { layers: s.layers.map(([name, text]) => ({ name: String(name), text: String(text) })), batch: s.batch, actions: s.actions };
  } catch {
    return null;
  }
}

async function share() {
  flushEdits();
  await idle();
  const status = $('share-status');
  try {
    await navigator.clipboard.writeText(location.href);
    status.textContent = 'Link copied.';
  } catch {
    status.textContent = 'Copy the address bar: it is the link.';
  }
}

// --- rendering -------------------------------------------------------------------------------

function renderDiagnostics(view) {
  const box = $('diagnostics');
  box.replaceChildren();
  editors.forEach((editor, layer) => {
    const spans = [];
    view.diagnostics.forEach((d, i) => d.labels.forEach((l, j) => {
      if (l.layer === layer) spans.push({ id: `d${i}-l${j}`, start: l.start, end: l.end, title: `${d.code}: ${l.message}` });
    }));
    editor.mark(spans);
  });
  view.diagnostics.forEach((d, i) => {
    const div = document.createElement('div');
    div.className = 'error diagnostic';
    div.dataset.code = d.code;
    const pre = document.createElement('pre');
    pre.textContent = d.rendered;
    div.append(pre);
    const first = d.labels[0];
    if (first && editors[first.layer]) {
      const button = document.createElement('button');
      button.type = 'button';
      button.textContent = 'Show in the layer';
      button.setAttribute('aria-label', `Show diagnostic ${i + 1} (${d.code}) in the layer`);
      button.addEventListener('click', () => editors[first.layer].select(first.start, first.end));
      div.append(button);
    }
    box.append(div);
  });
  $('batch-error').hidden = !view.batchError;
  $('batch-error').textContent = view.batchError ?? '';
}

function renderControls(view) {
  const live = view.batch !== null;
  const pending = view.entries.some((e) => e.state.kind === 'pending');
  $('clock').textContent = `t = ${view.now} ms`;
  $('approve-all').disabled = !pending;
  for (const id of ['step', 'run', 'restart', 'reset']) $(id).disabled = !live;
  $('cancel').disabled = !live || view.cancelled || view.done;
  const keySelect = $('pause-key');
  const keys = JSON.stringify(view.keys.map((k) => k.key));
  if (keySelect.dataset.keys !== keys) {
    keySelect.dataset.keys = keys;
    keySelect.replaceChildren(...view.keys.map((k) => new Option(k.key, k.key)));
  }
  $('pause').disabled = !live || !view.keys.length;
  keySelect.disabled = !view.keys.length;
  $('status').textContent = statusLine(view);
  $('status').hidden = !$('status').textContent;
  const saved = $('saved');
  saved.hidden = view.saved === null;
  saved.querySelector('pre').textContent = view.saved ?? '';
}

function statusLine(view) {
  if (view.diagnostics.length) return `The config has ${view.diagnostics.length} ${view.diagnostics.length === 1 ? 'problem' : 'problems'}: fix ${view.diagnostics.length === 1 ? 'it' : 'them'} to schedule the batch.`;
  if (view.batchError) return 'Fix the batch to schedule it.';
  const parts = [];
  if (view.next) {
    const what = view.next.ending.length ? `${view.next.ending.join(', ')} ${view.next.ending.length === 1 ? 'ends' : 'end'}` : 'the scheduler wakes up';
    parts.push(`Next step: t = ${view.next.at} ms, ${what}.`);
  }
  const pending = view.entries.filter((e) => e.state.kind === 'pending').length;
  if (pending) parts.push(`${pending} ${pending === 1 ? 'entry waits' : 'entries wait'} for your approval or rejection.`);
  if (view.idle && !pending) parts.push(`${view.idle[0].toUpperCase()}${view.idle.slice(1)}.`);
  return parts.join(' ');
}

const STATE_TEXT = { pending: 'pending', approved: 'waiting', running: 'running', asking: 'asking', aborted: 'aborted' };

function renderEntries(view) {
  const list = $('entries');
  // Keep the keyboard where it was: the same button, else the same entry's first button.
  const focused = document.activeElement?.dataset?.focus;
  const focusedEntry = list.contains(document.activeElement) ? document.activeElement.closest('.entry')?.dataset.label : undefined;
  list.replaceChildren();
  if (!view.entries.length) {
    list.append(Object.assign(document.createElement('li'), { className: 'empty', textContent: 'No entries: the batch is submitted once the config and the batch are valid.' }));
  }
  for (const e of view.entries) {
    const li = document.createElement('li');
    li.className = `entry state-${e.state.kind}`;
    li.dataset.label = e.label;
    li.tabIndex = -1;
    const head = document.createElement('div');
    head.className = 'entry-head';
    const state = e.state.kind === 'ended' ? e.state.outcome : e.state.kind === 'settled' ? e.state.reason.kind : STATE_TEXT[e.state.kind];
    head.innerHTML = '<code class="label"></code> <span class="tool"></span> <span class="badge"></span>';
    head.querySelector('.label').textContent = e.label;
    head.querySelector('.tool').textContent = e.key === null ? e.tool : `${e.tool} · ${e.key.includes(' + ') ? 'keys' : 'key'} ${e.key}`;
    head.querySelector('.badge').textContent = state;
    const why = document.createElement('p');
    why.className = 'why';
    why.textContent = e.sentence;
    li.append(head, why);
    const buttons = entryButtons(e);
    if (buttons.length) {
      const row = document.createElement('div');
      row.className = 'entry-actions';
      row.append(...buttons);
      li.append(row);
    }
    list.append(li);
  }
  if (focusedEntry !== undefined) {
    const entry = list.querySelector(`.entry[data-label="${CSS.escape(focusedEntry)}"]`);
    const target = list.querySelector(`[data-focus="${CSS.escape(focused ?? '')}"]`) ?? entry?.querySelector('button') ?? entry;
    target?.focus();
  }
}

/** The buttons for what can happen to an entry in its state; each posts its action at click
 * time (the 429 button reads the Retry-After field then). */
function entryButtons(e) {
  const make = (text, name, aria, action = () => [name, e.label]) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = text;
    b.setAttribute('aria-label', aria);
    b.dataset.focus = `${name} ${e.label}`;
    b.dataset.action = name;
    b.addEventListener('click', () => act(action()));
    return b;
  };
  const fail = () => make('Fail now', 'fail', `${e.label} fails now`);
  switch (e.state.kind) {
    case 'pending':
      return [make('Approve', 'approve', `Approve ${e.label}`), make('Reject', 'reject', `Reject ${e.label}`)];
    case 'running':
      return [
        make('Ask a question', 'ask', `${e.label} asks a question`),
        fail(),
        make('429 now', 'limit', `${e.label} hits a rate limit (429) now`, () => ['limit', e.label, clampMs($('retry-ms').value)]),
      ];
    case 'asking':
      return [make('Answer', 'answer', `Answer ${e.label}'s question`), fail()];
    default:
      return [];
  }
}

const clampMs = (value) => Math.max(0, Math.min(86_400_000, Math.round(Number(value) || 0)));

function renderEvents(view) {
  const list = $('events');
  const empty = $('events-empty');
  list.replaceChildren();
  let round = -1;
  for (const ev of view.events) {
    // One round: one action, or one moment of the clock (everything that happens then).
    const li = document.createElement('li');
    li.className = `event event-${ev.kind}${ev.round !== round ? ' first' : ''}`;
    round = ev.round;
    li.dataset.round = ev.round;
    li.dataset.kind = ev.kind;
    li.dataset.t = ev.t;
    if (ev.label) li.dataset.label = ev.label;
    const t = document.createElement('span');
    t.className = 't';
    t.textContent = `${ev.t} ms`;
    const what = document.createElement('span');
    what.className = 'what';
    what.textContent = ev.text;
    li.append(t, what);
    list.append(li);
  }
  list.hidden = !view.events.length;
  empty.hidden = view.events.length > 0;
  empty.textContent = view.diagnostics.length ? 'No events: fix the config above, then the batch is submitted.' : 'No events: fix the batch above, then it is submitted.';
  // The newest event is always in view within the list.
  list.scrollTop = list.scrollHeight;
}

// --- wiring ----------------------------------------------------------------------------------

function main() {
  for (const e of EXAMPLES) $('example').append(new Option(e.title, e.id));
  $('example').append(new Option('(your own)', ''));
  $('example').addEventListener('change', (ev) => {
    const example = EXAMPLES.find((e) => e.id === ev.target.value);
    if (example) open(example);
  });
  $('batch').addEventListener('input', () => {
    fitBatch();
    edited();
  });
  $('add-layer').addEventListener('click', () => {
    addEditor({ name: `layer ${editors.length + 1}`, text: '[conversation.tools.my_tool]\nconcurrency = 1\n' });
    edited();
    flushEdits();
  });
  $('approve-all').addEventListener('click', () => act(['approve-all']));
  $('step').addEventListener('click', () => act(['step']));
  $('run').addEventListener('click', () => act(['run']));
  $('cancel').addEventListener('click', () => act(['cancel']));
  $('restart').addEventListener('click', () => act(['restart', $('restart-mode').value]));
  $('reset').addEventListener('click', () => open({ ...scenario(), actions: [] }));
  $('pause').addEventListener('click', () => {
    act(['pause', $('pause-key').value, clampMs($('pause-ms').value)]);
  });
  $('share').addEventListener('click', share);
  window.addEventListener('hashchange', () => {
    if (location.hash === lastHash) return;
    const s = readHash(location.hash);
    if (s) open(s);
  });
  open(readHash(location.hash) ?? EXAMPLES[0]).then(() => {
    pg.ready = true;
  });
}

main();
