// Deno with no permissions at all: the package packed (`npm pack`, as a user gets it), installed
// into a fresh project, and `import { ... } from 'npm:@turnstile/scheduler'` run with `deno run`
// and no permission flag. Deno picks the `deno` export condition (dist/deno.js), whose core
// modules are source-phase imports (dist/deno-core.js): part of the module graph, so nothing is
// read at run time. The `node` entry, by contrast, reads the .wasm files and needs --allow-read.
// The deno binary is the `deno` devDependency (its platform package, @deno/linux-x64-glibc here);
// without it this test fails, it is not skipped.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = resolve(fileURLToPath(new URL('..', import.meta.url)));
const deno = join(here, 'node_modules', '.bin', process.platform === 'win32' ? 'deno.cmd' : 'deno');
let work;
let app;

function denoRun(script, args = []) {
  const r = spawnSync(deno, ['run', '--cached-only', ...args, script], {
    cwd: app,
    encoding: 'utf8',
    // stdin is not a terminal, so Deno denies instead of prompting for a permission.
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', HOME: work, DENO_DIR: join(work, 'deno-dir'), DENO_NO_UPDATE_CHECK: '1', NO_COLOR: '1' },
    timeout: 60_000,
  });
  if (r.error) throw r.error;
  return r;
}

before(() => {
  const version = existsSync(deno) ? spawnSync(deno, ['--version'], { encoding: 'utf8' }) : undefined;
  assert.ok(
    version?.status === 0,
    `deno is missing or does not run (${deno}${version ? `: ${version.stderr || version.error}` : ''}): run \`npm install\` in hosts/js (the \`deno\` devDependency and its platform package, e.g. @deno/linux-x64-glibc)`,
  );
  work = mkdtempSync(join(tmpdir(), 'turnstile-deno-'));
  // --ignore-scripts: prepack would rebuild dist/ (removing it first) under the other test files
  // running in parallel; this packs the dist/ the rest of the suite tests.
  const packed = JSON.parse(execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], { cwd: here, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }));
  const files = packed[0].files.map((f) => f.path);
  for (const need of ['dist/deno.js', 'dist/deno-core.js', 'dist/component/turnstile.core.wasm']) assert.ok(files.includes(need), `the tarball lacks ${need}`);
  app = join(work, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'deno-host', private: true, type: 'module' }));
  // A package.json next to node_modules: Deno resolves npm: specifiers from the local
  // node_modules (its "manual" node_modules mode), no registry needed.
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--offline', '--ignore-scripts', join(work, packed[0].filename)], { cwd: app, stdio: ['ignore', 'ignore', 'pipe'] });
});

after(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

test('deno: npm:@turnstile/scheduler loads, resolves and drives calls with no permission flag', { timeout: 120_000 }, () => {
  writeFileSync(
    join(app, 'main.ts'),
    `import { Driver, Scheduler, Turnstile } from 'npm:@turnstile/scheduler';
const t = await Turnstile.load();
const driver = new Driver(new Scheduler(t.resolve(['[conversation.tools.k]\\nconcurrency = 1\\n'])));
let running = 0, peak = 0;
const order: string[] = [];
const out = await driver.run([{ id: 'a', tool: 'k' }, { id: 'b', tool: 'k' }, { id: 'c', tool: 'k' }], async ({ label }) => {
  peak = Math.max(peak, ++running);
  order.push(label);
  await new Promise((r) => setTimeout(r, 5));
  running--;
  return label.toUpperCase();
});
let diagnostic = null;
try { t.resolve(['[conversation.tools.x]\\nconcurrency = "2"\\n']); } catch (e) { diagnostic = e.diagnostics[0].code; }
driver.dispose();
console.log(JSON.stringify({ order, peak, entries: out.map((o) => { const e = o.entries[0]; return e.status === 'ok' ? e.value : e.status; }), diagnostic }));
`,
  );
  const r = denoRun('main.ts');
  assert.equal(r.status, 0, `deno run main.ts (no permissions) failed:\n${r.stderr}`);
  assert.deepEqual(JSON.parse(r.stdout.trim()), { order: ['a', 'b', 'c'], peak: 1, entries: ['A', 'B', 'C'], diagnostic: 'concurrency-type' });
});

test('deno: the node entry reads the .wasm files, which without --allow-read is NotCapable', { timeout: 120_000 }, () => {
  // What the `deno` condition avoids: before it, Deno took the `node` entry and failed so.
  writeFileSync(join(app, 'node-entry.mjs'), "import { Turnstile } from './node_modules/@turnstile/scheduler/dist/node.js';\nawait Turnstile.load();\nconsole.log('loaded');\n");
  const denied = denoRun('node-entry.mjs');
  assert.notEqual(denied.status, 0, 'the node entry loaded without read permission');
  assert.match(denied.stderr, /NotCapable: Requires read access/);
  const allowed = denoRun('node-entry.mjs', ['--allow-read']);
  assert.equal(allowed.status, 0, allowed.stderr);
  assert.equal(allowed.stdout.trim(), 'loaded');
});
