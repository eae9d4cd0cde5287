// The timeline: a time axis, then one group per concurrency key (unkeyed entries last) and one
// row per entry, labelled at the left so no label is ever clipped. Each row shows the entry's
// waits (coloured by why it waited), its runs (asking a question, planned remainder), when it
// was settled, its key's pauses, restarts, and the clock's current time. Every mark is at least
// a few pixels wide, so what happens at t = 0 is visible.
const TICK_SPACING_PX = 72;

export function renderTimeline(root, view) {
  root.replaceChildren();
  if (!view.entries.length) {
    root.append(paragraph('empty', view.diagnostics.length || view.batchError ? 'Nothing to draw until the config and the batch are valid.' : 'Nothing to draw yet.'));
    return;
  }
  const horizon = horizonOf(view);
  const pos = (t) => `${(100 * t) / horizon}%`;
  const grid = document.createElement('div');
  grid.className = 'tl';
  grid.append(axis(root, horizon, pos));
  for (const [key, entries] of groups(view.entries)) {
    const info = view.keys.find((k) => k.key === key);
    grid.append(groupHeader(key, info));
    const bands = view.pauses.filter((p) => p.key === key);
    for (const entry of entries) grid.append(row(view, entry, bands, pos));
  }
  root.append(grid);
}

function horizonOf(view) {
  let end = Math.max(view.now, view.wakeAt ?? 0);
  for (const e of view.entries) {
    for (const r of e.runs) end = Math.max(end, r.end ?? r.endsAt ?? view.now);
    if (e.settledAt !== null) end = Math.max(end, e.settledAt);
  }
  for (const p of view.pauses) end = Math.max(end, p.until);
  return Math.max(100, Math.ceil(end * 1.06));
}

function groups(entries) {
  const byKey = new Map();
  for (const e of entries) {
    const key = e.key ?? '';
    if (!byKey.has(key)) byKey.set(key, []);
    byKey.get(key).push(e);
  }
  const unkeyed = byKey.get('');
  byKey.delete('');
  if (unkeyed) byKey.set('', unkeyed);
  return byKey;
}

function axis(root, horizon, pos) {
  const row = element('div', 'tl-row tl-axis');
  row.append(element('div', 'tl-label', 't (ms)'));
  const track = element('div', 'tl-track');
  const width = Math.max(160, (root.clientWidth || 600) * 0.72);
  const step = niceStep(horizon / Math.max(2, Math.floor(width / TICK_SPACING_PX)));
  for (let t = 0; t < horizon * 0.9; t += step) {
    const tick = element('span', 'tick', String(t));
    tick.style.left = pos(t);
    track.append(tick);
  }
  row.append(track);
  return row;
}

function niceStep(raw) {
  const power = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

function groupHeader(key, info) {
  const facts = [];
  if (info) {
    facts.push(info.limit >= 4294967295 ? 'unbounded' : info.adaptMin !== undefined ? `limit adapts between ${info.adaptMin} and ${info.limit} (AIMD)` : `limit ${info.limit}`);
    if (info.delayMs) facts.push(`starts ${info.delayMs} ms apart`);
    if (info.rates?.length) facts.push(`rate ${info.rates.map((w) => `${w.count} per ${w.perMs} ms`).join(' and ')}, burst ${info.burst}`);
    facts.push(`${info.retries} ${info.retries === 1 ? 'retry' : 'retries'}`);
    facts.push(`tools: ${info.tools.join(', ')}`);
  }
  const text = key === '' ? 'no key: these start together once the batch is approved' : `key ${key} · ${facts.join(' · ')}`;
  return element('div', 'tl-group', text);
}

function row(view, entry, bands, pos) {
  const row = element('div', 'tl-row');
  row.dataset.label = entry.label;
  const label = element('div', 'tl-label', entry.label);
  label.title = `${entry.label} (${entry.tool})`;
  const track = element('div', 'tl-track');
  const span = (cls, from, to, title) => {
    const s = element('span', `seg ${cls}`);
    s.style.left = pos(from);
    s.style.width = `max(4px, ${pos(to - from)})`;
    s.title = title;
    track.append(s);
    return s;
  };
  for (const b of bands) span('band', b.from, b.until, `key ${b.key} paused from t = ${b.from} to ${b.until} ms`);
  for (const w of entry.waits) span(`wait wait-${w.kind}`, w.from, w.to ?? view.now, `t = ${w.from} to ${w.to ?? view.now} ms: ${w.sentence}`);
  for (const r of entry.runs) {
    const end = r.end ?? view.now;
    const bar = span(`run run-${r.outcome ?? 'live'}`, r.start, end, `${entry.label} ${r.outcome === null ? 'running since' : 'ran from'} t = ${r.start}${r.outcome === null ? '' : ` to ${end}`} ms${r.outcome ? `: ${r.outcome}` : ''}`);
    bar.dataset.start = r.start;
    for (const a of r.asking) span('ask', a.from, a.to ?? view.now, `${entry.label} asked a question at t = ${a.from} ms${a.to === null ? '' : `, answered at ${a.to} ms`}: it kept its slot`);
    if (r.outcome === null && r.endsAt !== null && r.endsAt > view.now) span('planned', view.now, r.endsAt, `${entry.label} is planned to end at t = ${r.endsAt} ms`);
  }
  if (entry.state.kind === 'settled') {
    const mark = element('span', 'settled', '✕');
    mark.style.left = pos(entry.settledAt);
    mark.title = entry.sentence;
    track.append(mark);
  }
  for (const r of view.restarts) {
    const line = element('span', 'restart');
    line.style.left = pos(r.at);
    line.title = `restart at t = ${r.at} ms (${r.started})`;
    track.append(line);
  }
  const now = element('span', 'now');
  now.style.left = pos(view.now);
  track.append(now);
  row.append(label, track);
  return row;
}

function element(tag, className, text) {
  const e = document.createElement(tag);
  e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function paragraph(className, text) {
  return element('p', className, text);
}
