// End-to-end test of the playground in Debian's Chromium, driven by playwright-core. Every control
// is used the way a person would (approve, reject, ask, answer, fail one operation, 429, pause a
// key, cancel, restart from `unfinished()`, step, run, the examples, a share link, the config and
// batch editors), and what the page shows is checked against a `Scheduler` driven directly in
// Node through the same steps. After every phase, at 1280 px and 360 px wide: the page must not
// overflow horizontally and the newest event must be visible in the events list. Screenshots go
// to target/playground-screens/ ($SCREENSHOT_DIR overrides). Exits non-zero on failure.
// `node e2e/playground.mjs` (after `npm run build`).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { Scheduler, Turnstile } from '../dist/index.js';
import { EXAMPLES } from '../../../playground/examples.js';
import { server } from '../../../playground/serve.mjs';

const root = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
const shots = process.env.SCREENSHOT_DIR ?? join(process.env.CARGO_TARGET_DIR ?? join(root, 'target'), 'playground-screens');
mkdirSync(shots, { recursive: true });
rmSync(join(shots, 'failure.png'), { force: true });
const started = Date.now();
const turnstile = await Turnstile.load();
const example = (id) => EXAMPLES.find((e) => e.id === id);

// --- the reference: a Scheduler driven directly, one `step` per line of a script -------------

/** Runs `script` (steps with labels, as the page takes them) through a fresh Scheduler and
 * returns every start and settlement with its time. A `restart` line saves `unfinished()` and
 * resumes it in a new scheduler, as the page does. */
function reference(layers, calls, script) {
  const policy = turnstile.resolve(layers);
  let sched = new Scheduler(policy);
  const batch = sched.submit(calls);
  const n = (label) => batch.entry(label) ?? assert.fail(`no entry ${label}`);
  const starts = [];
  const settles = [];
  for (const s of script) {
    let inputs = { now: s.now };
    if (s.restart) {
      const saved = sched.unfinished();
      sched.dispose();
      sched = Scheduler.resume(policy, saved, { started: s.restart }).scheduler;
    } else {
      for (const k of ['approve', 'ask', 'answer', 'ok', 'failed']) if (s[k]) inputs[k] = s[k].map(n);
      if (s.reject) inputs.settle = s.reject.map((l) => ({ entry: n(l), how: 'rejected' }));
      if (s.retry) inputs.retry = s.retry.map(([l, until]) => ({ entry: n(l), until }));
      if (s.pause) inputs.pause = s.pause.map(([key, until]) => ({ key, until }));
      if (s.cancel) inputs.cancel = [batch.batch];
    }
    const out = sched.step(inputs);
    assert.deepEqual(out.errors, [], `reference step at ${s.now}`);
    for (const e of out.start) starts.push([batch.label(e), s.now]);
    for (const x of out.settle) settles.push([batch.label(x.entry), x.reason.kind, s.now]);
    inputs = null;
  }
  sched.dispose();
  return { starts, settles };
}

// --- page helpers ------------------------------------------------------------------------------

const settle = (page) => page.evaluate(() => window.__playground.idle());
async function click(page, selector) {
  await page.locator(selector).click();
  await settle(page);
}
const entryButton = (page, label, action) => `#entries .entry[data-label="${label}"] button[data-action="${action}"]`;
async function choose(page, id) {
  await page.selectOption('#example', id);
  await settle(page);
}

/** The failure checks: no horizontal overflow, and the newest event visible in its list. */
async function layout(page, where) {
  const r = await page.evaluate(() => {
    const list = document.querySelector('#events');
    const last = list.lastElementChild;
    let hidden = null;
    if (last) {
      const a = last.getBoundingClientRect();
      const b = list.getBoundingClientRect();
      if (list.hidden || a.height === 0 || a.top < b.top - 1 || a.bottom > b.bottom + 1) hidden = last.textContent;
    }
    const empty = document.querySelector('#events-empty');
    const clipped = [...document.querySelectorAll('.tl-label, .entry .label, .event .what')].filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent);
    return {
      overflow: document.documentElement.scrollWidth - innerWidth, width: innerWidth, hidden, clipped,
      header: document.querySelector('header').getBoundingClientRect().width,
      events: list.children.length, emptyShown: !empty.hidden && empty.getBoundingClientRect().height > 0,
    };
  });
  assert.ok(r.overflow <= 0, `${where}: the page overflows horizontally by ${r.overflow}px at ${r.width}px`);
  assert.ok(r.header >= r.width - 1, `${where}: the header is ${r.header}px wide at ${r.width}px`);
  assert.deepEqual(r.clipped, [], `${where}: labels clipped`);
  assert.equal(r.hidden, null, `${where}: the newest event is not visible in the events list`);
  assert.ok(r.events > 0 || r.emptyShown, `${where}: no events and no empty-state sentence`);
}

/** What the page shows, read from the DOM. */
async function shown(page) {
  return page.evaluate(() => {
    const events = [...document.querySelectorAll('#events li')].map((li) => ({ kind: li.dataset.kind, label: li.dataset.label, t: Number(li.dataset.t), round: Number(li.dataset.round), text: li.querySelector('.what').textContent }));
    const entries = Object.fromEntries([...document.querySelectorAll('#entries .entry')].map((li) => [li.dataset.label, { badge: li.querySelector('.badge').textContent, why: li.querySelector('.why').textContent }]));
    const badge = (label) => entries[label]?.badge;
    return {
      events,
      entries,
      starts: events.filter((e) => e.kind === 'start').map((e) => [e.label, e.t]),
      settles: events.filter((e) => e.kind === 'settle').map((e) => [e.label, badge(e.label), e.t]),
      clock: document.querySelector('#clock').textContent,
      status: document.querySelector('#status').textContent,
      layers: [...document.querySelectorAll('.layer')].map((l) => [l.querySelector('.layer-name').value, l.querySelector('.layer-text').value]),
      batch: document.querySelector('#batch').value,
    };
  });
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}-${page.viewportSize().width}.png`), fullPage: true });
}

// --- phases --------------------------------------------------------------------------------------

/** The renumber chain: approve one entry, reject one, approve the rest; n1 asks a question and
 * keeps its slot; two reads end at one moment; answer; run; compare with the reference. */
async function renumber(page) {
  let s = await shown(page);
  assert.deepEqual(Object.values(s.entries).map((e) => e.badge), Array(8).fill('pending'));
  assert.match(s.entries.n1.why, /waits for your decision/);
  assert.match(s.status, /8 entries wait for your approval/);
  // Queued entries show as waiting from t = 0: a visible stub on every row.
  const stubs = await page.locator('.tl-row .seg.wait').evaluateAll((els) => els.map((e) => e.getBoundingClientRect().width));
  assert.equal(stubs.length, 8);
  assert.ok(stubs.every((w) => w >= 3), `waiting stubs at t = 0 are visible: ${stubs}`);
  // By keyboard: focus n1's Approve button and press Enter.
  await page.locator(entryButton(page, 'n1', 'approve')).focus();
  await page.keyboard.press('Enter');
  await settle(page);
  s = await shown(page);
  assert.match(s.entries.n1.why, /^n1: waiting: 7 calls of this batch still need a decision/);
  await click(page, entryButton(page, 'd2', 'reject'));
  await click(page, '#approve-all');
  s = await shown(page);
  assert.match(s.entries.n2.why, /^n2: waiting: rfd is full \(1 of 1 running: n1\)$/);
  assert.match(s.entries.n3.why, /^n3: waiting: behind n2, which comes first on rfd$/);
  assert.match(s.entries.d2.why, /^d2: not run: the user rejected this call$/);
  await click(page, entryButton(page, 'n1', 'ask'));
  await click(page, '#step');
  s = await shown(page);
  assert.equal(s.clock, 't = 50 ms');
  // Both reads end at t = 50, in one step.
  const ends = s.events.filter((e) => e.kind === 'end' && e.t === 50);
  assert.deepEqual(ends.map((e) => e.label), ['ls#0', 'ls#1']);
  assert.equal(new Set(ends.map((e) => e.round)).size, 1, 'the ends at one moment are one step');
  assert.equal(s.entries.n1.badge, 'asking');
  assert.match(s.entries.n1.why, /keeps its slot on key rfd/);
  assert.match(s.entries.n2.why, /rfd is full \(1 of 1 running: n1\)/);
  await click(page, '#step');
  assert.match((await shown(page)).events.at(-1).text, /until you answer: n1 asked a question/);
  await layout(page, 'renumber, asking');
  await click(page, entryButton(page, 'n1', 'answer'));
  await click(page, '#run');
  s = await shown(page);
  const ref = reference(example('renumber').layers, [
    ...['n1', 'n2', 'n3', 'n4'].map((id) => ({ id, tool: 'rfd_renumber' })),
    { id: 'd1', tool: 'rfd_draft' }, { id: 'd2', tool: 'rfd_draft' }, { id: 'ls', tool: 'rfd_list', operations: 2 },
  ], [
    { now: 0, approve: ['n1'] }, { now: 0, reject: ['d2'] }, { now: 0, approve: ['n2', 'n3', 'n4', 'd1', 'ls#0', 'ls#1'] },
    { now: 0, ask: ['n1'] }, { now: 50, ok: ['ls#0', 'ls#1'] }, { now: 50, answer: ['n1'] },
    { now: 170, ok: ['n1'] }, { now: 250, ok: ['n2'] }, { now: 330, ok: ['n3'] }, { now: 410, ok: ['n4'] }, { now: 470, ok: ['d1'] },
  ]);
  assert.deepEqual(s.starts, ref.starts);
  assert.deepEqual(s.starts, [['n1', 0], ['ls#0', 0], ['ls#1', 0], ['n2', 170], ['n3', 250], ['n4', 330], ['d1', 410]]);
  assert.deepEqual(s.settles, ref.settles.map(([l, kind, t]) => [l, kind, t]));
  assert.match(s.events.at(-2).text, /^done: batch 1 retired/);
  assert.equal(await page.locator('.tl-row[data-label="n1"] .seg.ask').count(), 1, 'the question shows on the timeline');
  await layout(page, 'renumber, done');
  await shot(page, 'renumber');
}

/** The share link reopens the same scenario, steps included, in a fresh page. */
async function shareLink(context, page) {
  const before = await shown(page);
  const url = page.url();
  assert.match(url, /#s=/);
  const again = await context.newPage();
  await again.setViewportSize(page.viewportSize());
  await again.goto(url);
  await again.waitForFunction(() => window.__playground?.ready, null, { timeout: 20000 });
  await settle(again);
  assert.deepEqual(await shown(again), before);
  await again.close();
}

/** GitHub quota: two ends at one moment; then cancel; then a restart (run again). */
async function github(page) {
  const calls = [['i1', 'github_issues'], ['p1', 'github_pulls'], ['i2', 'github_issues'], ['p2', 'github_pulls'], ['i3', 'github_issues']].map(([id, tool]) => ({ id, tool }));
  await choose(page, 'github');
  await click(page, '#approve-all');
  await click(page, '#run');
  let s = await shown(page);
  assert.deepEqual(s.starts, [['i1', 0], ['p1', 0], ['i2', 100], ['p2', 150], ['i3', 200]]);
  const at200 = s.events.filter((e) => e.kind === 'end' && e.t === 200);
  assert.deepEqual(at200.map((e) => e.label), ['i2', 'p2']);
  assert.equal(new Set(at200.map((e) => e.round)).size, 1, 'i2 and p2 end in one step');
  const right = (label) => page.locator(`.tl-row[data-label="${label}"] .seg.run`).evaluate((e) => Math.round(e.getBoundingClientRect().right));
  assert.equal(await right('i2'), await right('p2'), 'bars ending at one moment end at one x');
  await layout(page, 'github, run');
  await shot(page, 'github');

  // Cancel at t = 100: the parked p2 and i3 are settled; i1 and i2 keep their slots to the end.
  await click(page, '#reset');
  await click(page, '#approve-all');
  await click(page, '#step');
  await click(page, '#cancel');
  s = await shown(page);
  assert.equal(s.entries.p2.badge, 'cancelled');
  assert.match(s.entries.i3.why, /not run: the batch was cancelled$/);
  assert.ok(await page.locator('#cancel').isDisabled());
  await click(page, '#run');
  s = await shown(page);
  const cancelRef = reference(example('github').layers, calls, [{ now: 0, approve: ['i1', 'p1', 'i2', 'p2', 'i3'] }, { now: 100, ok: ['p1'] }, { now: 100, cancel: true }, { now: 150, ok: ['i1'] }, { now: 200, ok: ['i2'] }]);
  assert.deepEqual(s.starts, cancelRef.starts);
  assert.deepEqual(s.settles, cancelRef.settles);
  assert.match(s.events.at(-2).text, /^done/);
  await layout(page, 'github, cancelled');

  // Restart at t = 100 (run again): p1 ended and never runs again; i1 and i2 run again.
  await click(page, '#reset');
  await click(page, '#approve-all');
  await click(page, '#step');
  await page.selectOption('#restart-mode', 'run-again');
  await click(page, '#restart');
  s = await shown(page);
  assert.equal(s.entries.p1.badge, 'ok');
  assert.equal(s.entries.i1.badge, 'pending');
  assert.match(await page.locator('#saved pre').textContent(), /"version": 2/);
  await click(page, '#approve-all');
  await click(page, '#run');
  s = await shown(page);
  const restartRef = reference(example('github').layers, calls, [
    { now: 0, approve: ['i1', 'p1', 'i2', 'p2', 'i3'] }, { now: 100, ok: ['p1'] }, { now: 100, restart: 'run-again' },
    { now: 100, approve: ['i1', 'i2', 'p2', 'i3'] }, { now: 200, ok: ['i2'] }, { now: 250, ok: ['i1', 'p2'] }, { now: 350, ok: ['i3'] },
  ]);
  assert.deepEqual(s.starts, restartRef.starts);
  assert.deepEqual(s.starts.filter(([l]) => l === 'p1').length, 1, 'p1 ran once');
  assert.equal(await page.locator('.tl-row[data-label="i1"] .seg.run').count(), 2, 'i1: a lost run and a second one');
  await layout(page, 'github, restarted');
  await shot(page, 'restart');
}

/** Fan-out delete: fail#1 from the batch, then failing del#1 by hand, then a restart that
 * interrupts. */
async function deleteStop(page) {
  const calls = [{ id: 'del', tool: 'fs_delete_file', operations: 4 }, { id: 'r', tool: 'fs_read_file', operations: 2 }];
  await choose(page, 'delete');
  await click(page, '#approve-all');
  await click(page, '#run');
  let s = await shown(page);
  assert.deepEqual(['del#0', 'del#1', 'del#2', 'del#3', 'r#0', 'r#1'].map((l) => s.entries[l].badge), ['ok', 'failed', 'stopped', 'stopped', 'ok', 'ok']);
  assert.match(s.entries['del#2'].why, /not run: stopped after del#1 failed/);
  assert.deepEqual(s.settles, [['del#2', 'stopped', 120], ['del#3', 'stopped', 120]]);
  await layout(page, 'delete, run');
  await shot(page, 'delete');

  // The same without `fail#1`: del#1 is failed by hand once it runs.
  await page.locator('#batch').fill('del fs_delete_file*4 60\nr fs_read_file*2 40\n');
  await settle(page);
  await click(page, '#approve-all');
  await click(page, '#step');
  await click(page, '#step');
  await click(page, entryButton(page, 'del#1', 'fail'));
  s = await shown(page);
  const ref = reference(example('delete').layers, calls, [{ now: 0, approve: ['del#0', 'del#1', 'del#2', 'del#3', 'r#0', 'r#1'] }, { now: 40, ok: ['r#0', 'r#1'] }, { now: 60, ok: ['del#0'] }, { now: 60, failed: ['del#1'] }]);
  assert.deepEqual(s.starts, ref.starts);
  assert.deepEqual(s.settles, ref.settles);
  assert.equal(s.entries['del#0'].badge, 'ok');

  // Restart with `interrupt` while del#0 runs: it is settled interrupted, never run again.
  await click(page, '#reset');
  await click(page, '#approve-all');
  await click(page, '#step');
  await page.selectOption('#restart-mode', 'interrupt');
  await click(page, '#restart');
  await click(page, '#approve-all');
  await click(page, '#run');
  s = await shown(page);
  assert.equal(s.entries['del#0'].badge, 'interrupted');
  assert.match(s.entries['del#0'].why, /not run again: it was running when the host stopped, and its result is unknown/);
  const interruptRef = reference(example('delete').layers, calls, [
    { now: 0, approve: ['del#0', 'del#1', 'del#2', 'del#3', 'r#0', 'r#1'] }, { now: 40, ok: ['r#0', 'r#1'] }, { now: 40, restart: 'interrupt' },
    { now: 40, approve: ['del#1', 'del#2', 'del#3'] }, { now: 100, ok: ['del#1'] }, { now: 160, ok: ['del#2'] }, { now: 220, ok: ['del#3'] },
  ]);
  assert.deepEqual(s.starts, interruptRef.starts);
  assert.deepEqual(s.settles, interruptRef.settles);
  await layout(page, 'delete, interrupted');
}

/** A 429 storm on an adaptive limit: the limit halves, what waits says why, and it grows back. */
async function adaptive(page) {
  await choose(page, 'adaptive');
  await click(page, '#approve-all');
  await click(page, '#run');
  const s = await shown(page);
  // Eight calls, three of them run twice (their first run got a 429).
  assert.equal(s.starts.length, 11, JSON.stringify(s.starts));
  assert.deepEqual(s.starts.slice(0, 4).map(([l, t]) => [l, t]), [['a', 0], ['b', 0], ['c', 0], ['d', 0]]);
  // After the storm no more than the halved limit run at once: a, b, c ran again only as
  // slots under the new limit allowed, never four together again before d ended.
  const rerun = s.starts.slice(4).map(([l]) => l);
  assert.deepEqual([...rerun].sort(), ['a', 'b', 'c', 'e', 'f', 'g', 'h']);
  await layout(page, 'adaptive, run');
  await shot(page, 'adaptive');
}

/** RFD 129's renumber chain with a key set: each step waits only for calls on its numbers. */
async function renumberChain(page) {
  const args = { n1: { id: '008', new: '011' }, n2: { id: '011', new: '012' }, n3: { id: '003', new: '004' }, r1: { id: '012' }, r2: { id: '005' } };
  const calls = Object.entries(args).map(([id, a]) => ({ id, tool: id.startsWith('n') ? 'rfd_renumber' : 'rfd_read', args: a }));
  await choose(page, 'renumber-chain');
  await click(page, '#approve-all');
  let s = await shown(page);
  assert.match(s.entries.n2.why, /waiting: rfd:011 is full/);
  assert.match(s.entries.r1.why, /waiting: behind n2, which comes first on rfd:012/);
  await click(page, '#run');
  s = await shown(page);
  const ref = reference(example('renumber-chain').layers, calls, [
    { now: 0, approve: Object.keys(args) }, { now: 100, ok: ['r2'] }, { now: 300, ok: ['n1', 'n3'] }, { now: 600, ok: ['n2'] },
  ]);
  assert.deepEqual(s.starts, ref.starts);
  assert.deepEqual(s.starts, [['n1', 0], ['n3', 0], ['r2', 0], ['n2', 300], ['r1', 600]]);
  await layout(page, 'renumber chain, run');
  await shot(page, 'renumber-chain');
}

/** Path keys: writes on paths apart run at once, a write on a held file waits, the tests take
 * the whole tree after every write before them, and a write after the tests waits for them. */
async function codingAgentTree(page) {
  const calls = [
    { id: 'w1', tool: 'write_file', args: { path: 'src/a.rs' } },
    { id: 'w2', tool: 'write_file', args: { path: 'src/b.rs' } },
    { id: 'w3', tool: 'write_file', args: { path: './src/a.rs' } },
    { id: 'm1', tool: 'move_file', args: { src: 'docs/x.md', dst: 'src/c.rs' } },
    { id: 't1', tool: 'run_tests' },
    { id: 'w4', tool: 'write_file', args: { path: 'README.md' } },
  ];
  await choose(page, 'coding-agent-tree');
  await click(page, '#approve-all');
  let s = await shown(page);
  assert.match(s.entries.w3.why, /waiting: fs:\/src\/a\.rs is full/);
  assert.match(s.entries.t1.why, /waiting: behind w3, which comes first on fs:\//);
  await click(page, '#run');
  s = await shown(page);
  const ref = reference(example('coding-agent-tree').layers, calls, [
    { now: 0, approve: calls.map((c) => c.id) }, { now: 200, ok: ['w2'] }, { now: 250, ok: ['m1'] }, { now: 300, ok: ['w1'] },
    { now: 500, ok: ['w3'] }, { now: 900, ok: ['t1'] },
  ]);
  assert.deepEqual(s.starts, ref.starts);
  assert.deepEqual(s.starts, [['w1', 0], ['w2', 0], ['m1', 0], ['w3', 300], ['t1', 500], ['w4', 900]]);
  await layout(page, 'coding agent tree, run');
  await shot(page, 'coding-agent-tree');
}

/** GitHub's quota as rate windows with a burst: five at once, then the hourly window's pace. */
async function githubQuota(page) {
  const ids = ['s1', 's2', 'i1', 'i2', 's3', 's4', 'i3', 'i4'];
  const calls = ids.map((id) => ({ id, tool: id.startsWith('s') ? 'github_search' : 'github_issue' }));
  await choose(page, 'github-quota');
  await click(page, '#approve-all');
  let s = await shown(page);
  assert.match(s.entries.s4.why, /waiting: github spaces its starts; the next may start in 720 ms/);
  await click(page, '#run');
  s = await shown(page);
  const ref = reference(example('github-quota').layers, calls, [
    { now: 0, approve: ids }, { now: 300, ok: ['s1', 's2', 'i1', 'i2', 's3'] }, { now: 720 }, { now: 1020, ok: ['s4'] },
    { now: 1440 }, { now: 1740, ok: ['i3'] }, { now: 2160 },
  ]);
  assert.deepEqual(s.starts, ref.starts);
  assert.deepEqual(s.starts, [['s1', 0], ['s2', 0], ['i1', 0], ['i2', 0], ['s3', 0], ['s4', 720], ['i3', 1440], ['i4', 2160]]);
  assert.ok(await page.locator('.tl-row[data-label="i4"] .seg.wait-key-spacing').count() >= 1, 'the pace shows as spacing');
  await layout(page, 'github quota, run');
  await shot(page, 'github-quota');
}

/** The rate-limited API: spacing, a 429 from the batch, then a 429 by hand and a key pause. */
async function rateLimit(page) {
  const calls = ['s1', 's2', 's3', 's4'].map((id) => ({ id, tool: 'search' }));
  await choose(page, 'rate-limit');
  await click(page, '#approve-all');
  let s = await shown(page);
  assert.match(s.entries.s2.why, /waiting: search-api spaces its starts; the next may start in 250 ms/);
  await click(page, '#run');
  s = await shown(page);
  const ref = reference(example('rate-limit').layers, calls, [
    { now: 0, approve: ['s1', 's2', 's3', 's4'] }, { now: 250 }, { now: 400, ok: ['s1'] }, { now: 500 }, { now: 650, retry: [['s2', 1250]] },
    { now: 800, ok: ['s3'] }, { now: 1250 }, { now: 1500 }, { now: 1650, ok: ['s2'] }, { now: 1700, ok: ['s4'] },
  ]);
  assert.deepEqual(s.starts, ref.starts);
  assert.deepEqual(s.starts, [['s1', 0], ['s2', 250], ['s3', 500], ['s2', 1250], ['s4', 1500]]);
  assert.ok(await page.locator('.tl-row[data-label="s2"] .seg.wait-key-spacing').count() >= 1, 'spacing shows');
  assert.ok(await page.locator('.tl-row[data-label="s2"] .seg.wait-key-paused').count() >= 1, 'the pause shows as a wait');
  assert.ok(await page.locator('.tl-row[data-label="s1"] .seg.band').count() >= 1, 'the pause shows as a band');
  await layout(page, 'rate limit, run');
  await shot(page, 'rate-limit');

  // A 429 by hand at t = 0 (Retry-After 400 ms: later than the spacing's 250), then the key
  // paused until t = 500.
  await click(page, '#reset');
  await click(page, '#approve-all');
  await page.locator('#retry-ms').fill('400');
  await click(page, entryButton(page, 's1', 'limit'));
  s = await shown(page);
  assert.match(s.entries.s1.why, /waiting: search-api is paused for 400 ms more/);
  await page.selectOption('#pause-key', 'search-api');
  await page.locator('#pause-ms').fill('500');
  await click(page, '#pause');
  s = await shown(page);
  assert.match(s.entries.s1.why, /waiting: search-api is paused for 500 ms more/);
  await click(page, '#step');
  s = await shown(page);
  const handRef = reference(example('rate-limit').layers, calls, [
    { now: 0, approve: ['s1', 's2', 's3', 's4'] }, { now: 0, retry: [['s1', 400]] }, { now: 0, pause: [['search-api', 500]] }, { now: 500 },
  ]);
  assert.deepEqual(s.starts, handRef.starts);
  assert.equal(s.clock, 't = 500 ms');
  await layout(page, 'rate limit, by hand');
}

/** Diagnostics: every span underlined (also at the end of a line), wrapped, never clipped; the
 * layer text shown once; empty states are sentences; batch errors. */
async function diagnostics(page) {
  await choose(page, 'renumber');
  const layer = page.locator('.layer-text').first();
  await layer.fill('[conversation.tools.rfd_draft]\nconcurrency = { key = "rfd", limit = 2 }\n\n[conversation.tools.rfd_renumber]\nconcurrency = { key = "rfd", limit = 3 }\n');
  await settle(page);
  let d = await page.evaluate(() => window.__playground.view.diagnostics);
  assert.equal(d[0].code, 'concurrency-limit-conflict');
  await spansVisible(page, d);
  // "Show in the layer" selects the primary span.
  await page.locator('.diagnostic button').first().click();
  assert.deepEqual(await layer.evaluate((t) => t.value.slice(t.selectionStart, t.selectionEnd)), '{ key = "rfd", limit = 2 }');
  // Empty states: sentences, not thin boxes.
  assert.ok(await page.locator('#events').isHidden());
  assert.match(await page.locator('#events-empty').textContent(), /fix the config/);
  assert.match(await page.locator('#timeline').textContent(), /Nothing to draw/);
  await layout(page, 'diagnostics');
  await shot(page, 'diagnostic');

  // A TOML syntax error at the end of a line: an empty span, shown by a marker.
  await layer.fill('[conversation.tools.rfd_draft\nconcurrency = 1\n');
  await settle(page);
  d = await page.evaluate(() => window.__playground.view.diagnostics);
  assert.equal(d[0].code, 'toml-syntax');
  assert.equal(d[0].labels[0].start, d[0].labels[0].end, 'an empty span');
  await spansVisible(page, d);
  await layout(page, 'syntax error');
  await shot(page, 'syntax-error');

  // The layer text is shown once: the backdrop's glyphs are transparent, and no other element
  // repeats the text.
  const once = await page.evaluate(() => {
    const layerEl = document.querySelector('.layer');
    const text = layerEl.querySelector('.layer-text').value.split('\n')[0];
    const backdrop = layerEl.querySelector('.backdrop');
    const others = [...document.querySelectorAll('body *')].filter((e) => !e.closest('.backdrop') && e.tagName !== 'TEXTAREA' && !e.closest('.diagnostic') && e.children.length === 0 && e.textContent.includes(text));
    return { color: getComputedStyle(backdrop).color, others: others.length };
  });
  assert.equal(once.color, 'rgba(0, 0, 0, 0)');
  assert.equal(once.others, 0);

  // Batch errors are shown on the page.
  await choose(page, 'renumber');
  await page.locator('#batch').fill('x');
  await settle(page);
  assert.match(await page.locator('#batch-error').innerText(), /batch line 1/);
  await page.locator('#batch').fill('a rfd_draft\na rfd_draft');
  await settle(page);
  assert.match(await page.locator('#batch-error').innerText(), /duplicate-id/);
  assert.match(await page.locator('#events-empty').textContent(), /fix the batch/);
  await layout(page, 'batch error');
}

/** Every label of every diagnostic has a visible mark inside its editor, and each rendered
 * diagnostic wraps instead of overflowing. */
async function spansVisible(page, diags) {
  const ids = diags.flatMap((d, i) => d.labels.map((_, j) => `d${i}-l${j}`));
  const boxes = await page.evaluate((ids) => ids.map((id) => {
    const el = document.querySelector(`.backdrop [data-span~="${id}"]`);
    if (!el) return { id, missing: true };
    const mark = el.classList.contains('marker') ? el.querySelector('.marker-box') : el;
    const r = mark.getBoundingClientRect();
    const editor = el.closest('.editor').getBoundingClientRect();
    return { id, width: r.width, height: r.height, inside: r.left >= editor.left && r.right <= editor.right + 0.5, underline: getComputedStyle(mark).textDecorationLine, border: getComputedStyle(mark).borderBottomWidth };
  }), ids);
  for (const b of boxes) {
    assert.ok(!b.missing, `span ${b.id} is marked`);
    assert.ok(b.width > 0 && b.height > 0, `span ${b.id} is visible: ${JSON.stringify(b)}`);
    assert.ok(b.inside, `span ${b.id} is inside its editor`);
    assert.ok(b.underline === 'underline' || b.border !== '0px', `span ${b.id} is underlined or marked`);
  }
  const clipped = await page.locator('.diagnostic pre').evaluateAll((pres) => pres.filter((p) => p.scrollWidth > p.clientWidth + 1).length);
  assert.equal(clipped, 0, 'a rendered diagnostic is clipped at the right edge');
}

// --- run ------------------------------------------------------------------------------------------

// Only the worker imports the package; the page's own modules never do.
for (const file of ['app.js', 'editor.js', 'timeline.js', 'examples.js']) {
  assert.doesNotMatch(readFileSync(join(root, 'playground', file), 'utf8'), /hosts\/js\/dist|from '\.\/(session|worker)\.js'/, `playground/${file} imports the package`);
}

const http = server();
await new Promise((ok) => http.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${http.address().port}/playground/`;
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'turnstile-chromium-')), {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let failed = false;
let current = null;
try {
  for (const width of [1280, 360]) {
    const page = (current = await context.newPage());
    await page.setViewportSize({ width, height: 900 });
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(base);
    await page.waitForFunction(() => window.__playground?.ready, null, { timeout: 20000 });
    assert.equal(await page.evaluate(() => window.__playground.error), null, 'the page shows a fatal error');
    // The component runs in a Web Worker: the worker says so from its own global scope, and the
    // page fetched no core module itself.
    assert.equal(await page.evaluate(() => window.__playground.worker), true);
    assert.deepEqual(await page.evaluate(() => performance.getEntriesByType('resource').map((r) => r.name).filter((n) => n.endsWith('.wasm'))), []);
    await layout(page, `first load at ${width}px`);
    await shot(page, 'first-load');
    await renumber(page);
    await shareLink(context, page);
    await github(page);
    await deleteStop(page);
    await rateLimit(page);
    await githubQuota(page);
    await renumberChain(page);
    await codingAgentTree(page);
    await adaptive(page);
    await shareLink(context, page);
    await diagnostics(page);
    assert.deepEqual(errors, []);
    assert.equal(await page.evaluate(() => window.__playground.error), null);
    await page.close();
    console.log(`playground e2e: ${width}px ok`);
  }
  console.log(`playground e2e: ok in ${((Date.now() - started) / 1000).toFixed(1)} s (screenshots in ${shots})`);
} catch (e) {
  failed = true;
  console.error('playground e2e failed:', e);
  if (current && !current.isClosed()) await current.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
} finally {
  await context.close();
  http.close();
}
process.exit(failed ? 1 : 0);
