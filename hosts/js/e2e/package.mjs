// The package as a user gets it: `npm pack` (prepack builds it; see build.mjs), the tarball's
// contents checked, installed into a fresh project outside the repository, and used there:
// the example runs, the `turnstile check` bin renders diagnostics, TypeScript type-checks a host
// against the published types, a Node `worker_threads` worker with a heap cap runs a batch, and
// an app bundled by esbuild (the `browser` export condition) runs in Chromium on a page and
// inside a Web Worker. Exits non-zero on any failure. `node e2e/package.mjs` (needs the
// component at target/turnstile.wasm or $TURNSTILE_WASM, and Chromium at /usr/bin/chromium or
// $CHROMIUM; `--no-browser` skips the Chromium part).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = resolve(fileURLToPath(new URL('..', import.meta.url)));
const bin = (name) => join(here, 'node_modules', '.bin', name);
const work = mkdtempSync(join(tmpdir(), 'turnstile-package-'));
const step = (what) => console.log(`package: ${what}`);
let failures = 0;

function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...options });
  if (r.error) throw r.error;
  return r;
}

try {
  // 1. Pack: prepack builds dist (and the component when missing) and copies the licenses.
  step('npm pack');
  const packOut = execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: here, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  // The lifecycle scripts print before npm's JSON.
  const packed = JSON.parse(packOut.slice(packOut.search(/^\[/m)));
  const tarball = join(work, packed[0].filename);
  const files = packed[0].files.map((f) => f.path);
  for (const need of ['package.json', 'README.md', 'LICENSE-MIT', 'LICENSE-APACHE', 'dist/index.js', 'dist/node.js', 'dist/browser.js', 'dist/index.d.ts', 'dist/cli.js', 'dist/component/turnstile.js', 'dist/component/turnstile.core.wasm', 'dist/component/turnstile.core2.wasm', 'dist/component/turnstile.core3.wasm']) {
    assert.ok(files.includes(need), `the tarball lacks ${need}`);
  }
  assert.ok(!files.some((f) => f.startsWith('src/') || f.startsWith('test/')), 'the tarball ships sources or tests');
  // postpack removed the copied licenses from the working tree again.
  assert.ok(!readdirSync(here).includes('LICENSE-MIT'), 'postpack left LICENSE-MIT behind');
  const manifest = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));
  assert.ok(manifest.repository?.url && manifest.homepage, 'repository and homepage fields');
  assert.equal(manifest.exports['.'].browser, './dist/browser.js');
  assert.equal(manifest.exports['.'].node, './dist/node.js');
  assert.deepEqual(Object.keys(manifest.dependencies ?? {}), [], 'the package has no runtime dependency');

  // 2. A fresh project outside the repository.
  const app = join(work, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'fresh-host', private: true, type: 'module' }));
  step(`npm install ${packed[0].filename} into ${app}`);
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--offline', tarball], { cwd: app, stdio: ['ignore', 'inherit', 'inherit'] });

  // 3. The example, unchanged.
  step('example');
  copyFileSync(join(here, 'examples', 'agent-host.mjs'), join(app, 'agent-host.mjs'));
  const example = run('node', ['agent-host.mjs'], { cwd: app });
  assert.equal(example.status, 0, example.stderr);
  assert.match(example.stdout, /toolu_03 fs_read_file ok,ok/);

  // 4. The check bin.
  step('turnstile check');
  const cli = join(app, 'node_modules', '.bin', 'turnstile');
  const help = run(cli, ['--help'], { cwd: app });
  assert.equal(help.status, 0);
  assert.match(help.stdout, /usage: turnstile check/);
  writeFileSync(join(app, 'bad.toml'), '[conversation.tools.a]\nconcurrency = { key = "k", limit = 2 }\n[conversation.tools.b]\nconcurrency = { key = "k", limit = 3 }\n');
  writeFileSync(join(app, 'good.toml'), '[conversation.tools.a]\nconcurrency = 2\n');
  const bad = run(cli, ['check', 'bad.toml'], { cwd: app });
  assert.equal(bad.status, 1, bad.stderr);
  assert.match(bad.stdout, /error\[concurrency-limit-conflict\]/);
  assert.match(bad.stdout, /--> bad\.toml:2:15/);
  const good = run(cli, ['check', 'good.toml'], { cwd: app });
  assert.equal(good.status, 0, good.stderr);
  assert.equal(run(cli, ['check', 'missing.toml'], { cwd: app }).status, 2);

  // 5. TypeScript against the published types.
  step('tsc against the published types');
  writeFileSync(
    join(app, 'host.ts'),
    `import { Driver, Scheduler, Turnstile, type CallOutcome, type EntryOutcome, type Reason } from '@turnstile/scheduler';
const t = await Turnstile.load();
const driver = new Driver(new Scheduler(t.resolve([{ conversation: { tools: { k: { concurrency: 1 } } } }])));
const outcomes: CallOutcome[] = await driver.run([{ id: 'a', tool: 'k' }], async ({ signal }) => (signal.aborted ? 0 : 1));
const first: EntryOutcome = outcomes[0].entries[0];
// The call type flows to execute and decide (arguments ride along).
await driver.run([{ id: 'b', tool: 'k', args: { path: '/tmp/x' } }], async ({ call }) => call.args.path.length, { decide: (_label, call) => (call.args.path ? 'approve' : 'reject') });
const why = (r: Reason): string => (r.kind === 'stopped' ? \`stopped after \${r.after}\` : r.kind);
if (first.status === 'settled') console.log(why(first.reason));
else if (first.status === 'ok') console.log(first.value, typeof first.entry === 'bigint');
const permit = await t.admission({ maxConcurrent: 2, allowParallel: false }).acquire('call', { timeoutMs: 1000 });
permit.release();
driver.dispose();
`,
  );
  const tsc = run(bin('tsc'), ['--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--skipLibCheck', 'false', '--types', 'node', '--typeRoots', join(here, 'node_modules', '@types'), 'host.ts'], { cwd: app });
  assert.equal(tsc.status, 0, `tsc:\n${tsc.stdout}${tsc.stderr}`);

  // 6. A worker thread with a heap cap (the sandboxed hosts editors use).
  step('worker_threads with resourceLimits');
  writeFileSync(
    join(app, 'worker-host.mjs'),
    `import { Worker, isMainThread, parentPort } from 'node:worker_threads';
if (isMainThread) {
  const worker = new Worker(new URL(import.meta.url), { resourceLimits: { maxOldGenerationSizeMb: 32, maxYoungGenerationSizeMb: 4 } });
  worker.on('message', (m) => { console.log(JSON.stringify(m)); process.exit(0); });
  worker.on('error', (e) => { console.error(e); process.exit(1); });
} else {
  const { Driver, Scheduler, Turnstile } = await import('@turnstile/scheduler');
  const t = await Turnstile.load();
  const driver = new Driver(new Scheduler(t.resolve(['[conversation.tools.k]\\nconcurrency = 2\\n'])));
  let running = 0, peak = 0;
  const calls = Array.from({ length: 2000 }, (_, i) => ({ id: 'c' + i, tool: 'k' }));
  for (let round = 0; round < 20; round++) {
    await driver.run(calls, async () => { peak = Math.max(peak, ++running); await null; running--; });
  }
  parentPort.postMessage({ peak, live: driver.liveBatches });
}
`,
  );
  const worker = run('node', ['worker-host.mjs'], { cwd: app });
  assert.equal(worker.status, 0, worker.stderr);
  assert.deepEqual(JSON.parse(worker.stdout.trim()), { peak: 2, live: 0 });

  // 7. Bundled with esbuild for the browser, on a page and in a Web Worker, in Chromium.
  if (process.argv.includes('--no-browser')) step('browser part skipped (--no-browser)');
  else {
    step('esbuild bundle');
    const { build } = await import(join(here, 'node_modules', 'esbuild', 'lib', 'main.js'));
    const web = join(app, 'web');
    mkdirSync(web);
    const check = `import { Driver, Scheduler, Turnstile } from '@turnstile/scheduler';
export async function check() {
  const t = await Turnstile.load();
  const driver = new Driver(new Scheduler(t.resolve([{ conversation: { tools: { k: { concurrency: 1 } } } }])));
  const order = [];
  const out = await driver.run([{ id: 'a', tool: 'k' }, { id: 'b', tool: 'k' }], async ({ label }) => { order.push(label); await new Promise((r) => setTimeout(r, 5)); return label; });
  let diagnostic = null;
  try { t.resolve(['[conversation.tools.x]\\nconcurrency = "2"\\n']); } catch (e) { diagnostic = e.diagnostics[0].code; }
  driver.dispose();
  return { order, statuses: out.map((o) => o.entries[0].status), diagnostic };
}
`;
    writeFileSync(join(app, 'check.js'), check);
    writeFileSync(join(app, 'page.js'), `import { check } from './check.js';\ncheck().then((r) => { window.__page = r; }, (e) => { window.__page = { error: String(e) }; });\nconst w = new Worker('./worker.js', { type: 'module' });\nw.onmessage = (m) => { window.__worker = m.data; };\nw.onerror = (e) => { window.__worker = { error: e.message }; };\n`);
    writeFileSync(join(app, 'worker.js'), `import { check } from './check.js';\ncheck().then((r) => postMessage(r), (e) => postMessage({ error: String(e) }));\n`);
    await build({ entryPoints: [join(app, 'page.js'), join(app, 'worker.js')], bundle: true, format: 'esm', platform: 'browser', outdir: web, absWorkingDir: app, logLevel: 'warning' });
    const bundled = readFileSync(join(web, 'page.js'), 'utf8');
    assert.ok(!bundled.includes('node:fs'), 'the browser bundle imports node:fs');
    assert.ok(bundled.includes("new URL(\"./component/turnstile.core.wasm\", import.meta.url)"), 'the literal asset URL survived bundling');
    // esbuild leaves `new URL(..., import.meta.url)` as written: the assets go next to the bundle.
    mkdirSync(join(web, 'component'));
    const assets = join(app, 'node_modules', '@turnstile', 'scheduler', 'dist', 'component');
    for (const f of readdirSync(assets)) if (f.endsWith('.wasm')) copyFileSync(join(assets, f), join(web, 'component', f));
    writeFileSync(join(web, 'index.html'), '<!doctype html><meta charset="utf-8"><title>turnstile</title><script type="module" src="./page.js"></script>\n');

    const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };
    const http = createServer((req, res) => {
      const path = join(web, new URL(req.url, 'http://x').pathname);
      try {
        const body = readFileSync(path);
        res.writeHead(200, { 'content-type': types[extname(path)] ?? 'application/octet-stream' });
        res.end(body);
      } catch {
        res.writeHead(404).end();
      }
    });
    await new Promise((ok) => http.listen(0, '127.0.0.1', ok));
    step('Chromium: page and Web Worker');
    const { chromium } = await import(join(here, 'node_modules', 'playwright-core', 'index.mjs'));
    const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'turnstile-chromium-')), {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
    });
    try {
      const page = await context.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(`http://127.0.0.1:${http.address().port}/index.html`);
      await page.waitForFunction(() => window.__page && window.__worker, null, { timeout: 20000 });
      const want = { order: ['a', 'b'], statuses: ['ok', 'ok'], diagnostic: 'concurrency-type' };
      assert.deepEqual(await page.evaluate(() => window.__page), want);
      assert.deepEqual(await page.evaluate(() => window.__worker), want);
      assert.deepEqual(errors, []);
    } finally {
      await context.close();
      http.close();
    }
  }
  step('all passed');
} catch (e) {
  failures += 1;
  console.error(e);
} finally {
  rmSync(work, { recursive: true, force: true });
}
console.log(`${failures ? 0 : 1} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
