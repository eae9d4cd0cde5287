// End-to-end test of the playground in Debian's Chromium, driven by playwright-core: load the
// page, check the default timeline, break the config and see the diagnostic underlined, change
// the config and run a batch, feed a bad batch, and save screenshots. Exits non-zero on failure.
// `node e2e/playground.mjs` (after `npm run build`). Screenshots go to $SCREENSHOT_DIR or target/.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { server } from '../../../playground/serve.mjs';

const root = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
const shots = process.env.SCREENSHOT_DIR ?? join(process.env.CARGO_TARGET_DIR ?? join(root, 'target'), 'playground');
mkdirSync(shots, { recursive: true });

const http = server();
await new Promise((ok) => http.listen(0, '127.0.0.1', ok));
const port = http.address().port;
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'turnstile-chromium-')), {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let failed = false;
try {
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(e.message));
  await page.goto(`http://127.0.0.1:${port}/playground/`);
  await page.waitForFunction(() => window.__playground?.ready, null, { timeout: 15000 });

  // The embedded default: the renumber chain and the drafts wait for each other on key rfd.
  const waiting = await page.evaluate(() => window.__playground.waiting);
  assert.deepEqual(waiting.map((w) => w.label), ['n2', 'n3', 'n4', 'd1', 'd2', 'd3']);
  assert.equal(waiting[0].wait, 'key-full');
  assert.equal(waiting[1].wait, 'behind');
  await page.click('#run');
  const bars = await page.evaluate(() => window.__playground.bars.map((b) => ({ ...b })));
  const rfd = bars.filter((b) => b.lane === 'rfd');
  assert.deepEqual(rfd.map((b) => b.label), ['n1', 'n2', 'n3', 'n4', 'd1', 'd2', 'd3']);
  for (let i = 1; i < rfd.length; i++) assert.equal(rfd[i].start, rfd[i - 1].end, `${rfd[i].label} starts when ${rfd[i - 1].label} ends`);
  assert.deepEqual(bars.filter((b) => b.lane === 'unkeyed').map((b) => [b.label, b.start]), [['r#0', 0], ['r#1', 0]]);
  assert.equal(await page.locator('.lane[data-lane="rfd"] .bar').count(), 7);
  // The last step retired the batch: inspect no longer knows it, and nothing waits.
  const events = await page.evaluate(() => window.__playground.events);
  assert.match(events.at(-2), /batch \d+ retired/);
  assert.deepEqual(await page.evaluate(() => window.__playground.waiting), []);
  assert.equal(await page.locator('#waiting').innerText(), 'nothing waits');
  await page.screenshot({ path: join(shots, 'default.png'), fullPage: true });

  // Break the config: disagreeing limits. The diagnostic shows, underlined at both spans.
  const plugin = page.locator('.layer-text').first();
  await plugin.fill('[conversation.tools.rfd_draft]\nconcurrency = { key = "rfd", limit = 2 }\n\n[conversation.tools.rfd_renumber]\nconcurrency = { key = "rfd" }\n');
  await page.click('#reset');
  await page.waitForFunction(() => window.__playground.diagnostics.length > 0);
  const diags = await page.evaluate(() => window.__playground.diagnostics);
  assert.equal(diags[0].code, 'concurrency-limit-conflict');
  assert.deepEqual(diags[0].tools, ['rfd_draft', 'rfd_renumber']);
  assert.equal(await page.locator('.layer').first().locator('.underline').count(), 2);
  assert.match(await page.locator('.diagnostic pre').first().innerText(), /error\[concurrency-limit-conflict\]/);
  await page.screenshot({ path: join(shots, 'diagnostic.png'), fullPage: true });

  // Fix it with a limit of 2 on both and run: two renumbers at a time, in written order.
  await plugin.fill('[conversation.tools.rfd_draft]\nconcurrency = { key = "rfd", limit = 2 }\n\n[conversation.tools.rfd_renumber]\nconcurrency = { key = "rfd", limit = 2 }\n');
  await page.locator('#batch').fill('n1 rfd_renumber 30\nn2 rfd_renumber\nn3 rfd_renumber\nd1 rfd_draft fail\nd2 rfd_draft');
  await page.click('#reset');
  assert.equal(await page.evaluate(() => window.__playground.diagnostics.length), 0);
  await page.click('#step');
  // After one step (n2 ended at t=10): n3 runs beside n1, d1 waits on the full key.
  assert.deepEqual(await page.evaluate(() => window.__playground.waiting), [{ label: 'd1', wait: 'key-full' }, { label: 'd2', wait: 'behind' }]);
  await page.click('#run');
  const run = await page.evaluate(() => window.__playground.bars.map((b) => [b.label, b.start, b.end]));
  assert.deepEqual(run, [['n1', 0, 30], ['n2', 0, 10], ['n3', 10, 20], ['d1', 20, 30], ['d2', 30, 40]]);
  await page.screenshot({ path: join(shots, 'limit-2.png'), fullPage: true });

  // A bad batch shows an error in the page, not a blank page.
  await page.locator('#batch').fill('x');
  await page.click('#reset');
  assert.match(await page.locator('#batch-error').innerText(), /batch line 1/);
  await page.locator('#batch').fill('a rfd_draft\na rfd_draft');
  await page.click('#reset');
  assert.match(await page.locator('#batch-error').innerText(), /duplicate-id/);
  // Malformed TOML is a diagnostic too.
  await plugin.fill('[conversation.tools.x\n');
  await page.click('#reset');
  assert.equal((await page.evaluate(() => window.__playground.diagnostics))[0].code, 'toml-syntax');
  assert.deepEqual(consoleErrors, []);
  console.log(`playground e2e: ok (screenshots in ${shots})`);
} catch (e) {
  failed = true;
  console.error('playground e2e failed:', e);
  const page = context.pages()[0];
  if (page) await page.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
} finally {
  await context.close();
  http.close();
}
process.exit(failed ? 1 : 0);
