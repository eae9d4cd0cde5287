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
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
  for (const need of ['package.json', 'README.md', 'SHARED.md', 'examples/agent-host.mjs', 'LICENSE-MIT', 'LICENSE-APACHE', 'dist/index.js', 'dist/node.js', 'dist/browser.js', 'dist/index.d.ts', 'dist/cli.js', 'dist/component/turnstile.js', 'dist/component/turnstile.core.wasm', 'dist/component/turnstile.core2.wasm', 'dist/component/turnstile.core3.wasm', 'dist/gate.js', 'dist/ai.js', 'dist/ai.d.ts', 'dist/mcp.js', 'dist/mcp.d.ts', 'dist/shared/store/sqlite.sql', 'dist/shared/store/sqlite-statements.json', 'dist/shared/store/redis.lua', 'dist/shared/store/postgres.sql']) {
    assert.ok(files.includes(need), `the tarball lacks ${need}`);
  }
  assert.ok(!files.some((f) => f.startsWith('src/') || f.startsWith('test/')), 'the tarball ships sources or tests');
  // The README stands alone: every path it names for a user (outside its last section,
  // "Developing Turnstile", which names repository files) is in the tarball.
  const readme = readFileSync(join(here, 'README.md'), 'utf8');
  const userPart = readme.slice(0, readme.indexOf('\n## Developing Turnstile\n'));
  assert.ok(userPart.length > 0 && userPart.length < readme.length, 'the README has a final "Developing Turnstile" section');
  for (const [, path] of userPart.matchAll(/`(?:node )?([\w@./-]+\.(?:mjs|js|ts|md|json))`/g)) {
    const shipped = path.replace(/^node_modules\/@turnstile\/scheduler\//, '');
    if (!shipped.includes('/') && !/^[A-Z]+\.md$/.test(shipped)) continue; // a module name (`a.js`, `index.js`), not a path
    assert.ok(files.includes(shipped), `the README names ${path}, which the tarball lacks`);
  }
  assert.doesNotMatch(userPart, /in the repository|hosts\/|\.jp\//, 'the README sends users to the repository');
  // postpack removed the copied licenses from the working tree again.
  assert.ok(!readdirSync(here).includes('LICENSE-MIT'), 'postpack left LICENSE-MIT behind');
  const manifest = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));
  assert.ok(manifest.repository?.url && manifest.homepage, 'repository and homepage fields');
  assert.equal(manifest.exports['.'].browser, './dist/browser.js');
  assert.equal(manifest.exports['.'].node, './dist/node.js');
  assert.deepEqual(Object.keys(manifest.dependencies ?? {}), [], 'the package has no runtime dependency');
  // The integrations: own entry points; the frameworks are optional peers, imported by no file.
  assert.equal(manifest.exports['./ai'].default, './dist/ai.js');
  assert.equal(manifest.exports['./mcp'].default, './dist/mcp.js');
  const peers = ['ai', '@modelcontextprotocol/sdk'];
  for (const peer of peers) assert.equal(manifest.peerDependenciesMeta?.[peer]?.optional, true, `${peer} is an optional peer`);
  for (const file of readdirSync(join(here, 'dist')).filter((f) => f.endsWith('.js'))) {
    const source = readFileSync(join(here, 'dist', file), 'utf8');
    assert.ok(!/from ['"](ai|ai\/[^'"]*|@modelcontextprotocol\/[^'"]*|zod)['"]|import\(['"](ai|@modelcontextprotocol)/.test(source), `dist/${file} imports a framework`);
  }

  // 2. A fresh project outside the repository.
  const app = join(work, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'fresh-host', private: true, type: 'module' }));
  step(`npm install ${packed[0].filename} into ${app}`);
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--offline', tarball], { cwd: app, stdio: ['ignore', 'inherit', 'inherit'] });

  for (const peer of ['ai', '@modelcontextprotocol/sdk', 'zod']) assert.ok(!existsSync(join(app, 'node_modules', peer)), `installing the package pulled ${peer}`);
  writeFileSync(join(app, 'bare.mjs'), "await import('@turnstile/scheduler/ai'); await import('@turnstile/scheduler/mcp'); console.log('bare ok');\n");
  const bare = run('node', ['bare.mjs'], { cwd: app });
  assert.equal(bare.status, 0, bare.stderr);

  // The store texts, installed: the repository's shared/store/ files byte for byte, read by the
  // shared entry's store code.
  const installedTexts = join(app, 'node_modules', '@turnstile', 'scheduler', 'dist', 'shared', 'store');
  for (const name of ['sqlite.sql', 'sqlite-statements.json', 'redis.lua', 'postgres.sql']) {
    assert.ok(readFileSync(join(installedTexts, name)).equals(readFileSync(join(here, '..', '..', 'shared', 'store', name))), `the installed ${name} differs from shared/store/${name}`);
  }
  writeFileSync(join(app, 'texts.mjs'), "await import('@turnstile/scheduler/shared'); const t = await import('./node_modules/@turnstile/scheduler/dist/shared/texts.js'); if (t.sqliteTexts().schemaVersion !== 3 || !t.redisScript().startsWith('-- Turnstile')) process.exit(1); console.log('texts ok');\n");
  const texts = run('node', ['texts.mjs'], { cwd: app });
  assert.equal(texts.status, 0, texts.stderr);

  // 3. The example, as installed (it imports the package by name) and copied, unchanged; the
  // installed SHARED.md is the repository's.
  step('example');
  assert.ok(readFileSync(join(app, 'node_modules', '@turnstile', 'scheduler', 'SHARED.md')).equals(readFileSync(join(here, '..', '..', 'SHARED.md'))), 'the installed SHARED.md differs from the repository\'s');
  const installed = run('node', [join('node_modules', '@turnstile', 'scheduler', 'examples', 'agent-host.mjs')], { cwd: app });
  assert.equal(installed.status, 0, installed.stderr);
  assert.match(installed.stdout, /toolu_03 fs_read_file ok,ok/);
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
  // A JSON file is cited by its own lines, as the component read it.
  writeFileSync(join(app, 'bad.json'), '{\n  "conversation": {\n    "tools": {\n      "a": { "concurrency": { "key": "k", "limit": "two" } }\n    }\n  }\n}\n');
  const badJson = run(cli, ['check', 'bad.json'], { cwd: app });
  assert.equal(badJson.status, 1, badJson.stderr);
  assert.match(badJson.stdout, /error\[concurrency-type\][^\n]*\n\s*--> bad\.json:4:52/);
  writeFileSync(join(app, 'list.json'), '[1]\n');
  assert.equal(run(cli, ['check', 'list.json'], { cwd: app }).status, 2);
  const good = run(cli, ['check', 'good.toml'], { cwd: app });
  assert.equal(good.status, 0, good.stderr);
  assert.equal(run(cli, ['check', 'missing.toml'], { cwd: app }).status, 2);
  // A typo that would silently lift a limit is a warning: exit 0, or 1 with --deny-warnings.
  writeFileSync(join(app, 'typo.toml'), '[conversation.tools.a]\nconcurency = { key = "k" }\n');
  const typo = run(cli, ['check', 'typo.toml'], { cwd: app });
  assert.equal(typo.status, 0, typo.stderr);
  assert.match(typo.stdout, /warning\[unknown-field-typo\]/);
  assert.match(typo.stdout, /did you mean `concurrency`/);
  assert.equal(run(cli, ['check', '--deny-warnings', 'typo.toml'], { cwd: app }).status, 1);
  assert.equal(run(cli, ['check', '--deny-warnings', 'good.toml'], { cwd: app }).status, 0);
  assert.equal(run(cli, ['check', '--nope', 'good.toml'], { cwd: app }).status, 2);
  // simulate: the embedded default from the installed package, and a case file of the user's.
  const sim = run(cli, ['simulate'], { cwd: app });
  assert.equal(sim.status, 0, sim.stderr);
  assert.match(sim.stdout, /70 {2}done {15}every entry ended or settled/);
  const calls = run(cli, ['simulate', '--layer', 'good.toml', '--calls', 'a1 a, a2 a'], { cwd: app });
  assert.equal(calls.status, 0, calls.stderr);
  assert.match(calls.stdout, /submit {2}batch 1 {4}2 calls/);

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

  // 5b. The integrations, as a user adds them: the frameworks installed next to the package (the
  // versions the package is tested with), the README's usage run and type-checked.
  step('integrations: ai and @modelcontextprotocol/sdk');
  const dev = manifest.devDependencies;
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', `ai@${dev.ai}`, `zod@${dev.zod}`, `@modelcontextprotocol/sdk@${dev['@modelcontextprotocol/sdk']}`], { cwd: app, stdio: ['ignore', 'inherit', 'inherit'] });
  writeFileSync(
    join(app, 'ai-host.mjs'),
    `import { generateText, isStepCount, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { z } from 'zod';
import { Turnstile } from '@turnstile/scheduler';
import { limitTools } from '@turnstile/scheduler/ai';
const policy = (await Turnstile.load()).resolve(['[conversation.tools.draft]\\nconcurrency = 1\\n']);
let running = 0, peak = 0, next = 1;
const draft = tool({ inputSchema: z.object({}), execute: async () => { peak = Math.max(peak, ++running); const id = next; await new Promise((r) => setTimeout(r, 5)); next = id + 1; running--; return 'draft ' + id; } });
const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
let step = 0;
const model = new MockLanguageModelV4({ doGenerate: async () => step++ === 0
  ? { content: ['c1', 'c2', 'c3'].map((id) => ({ type: 'tool-call', toolCallId: id, toolName: 'draft', input: '{}' })), finishReason: { unified: 'tool-calls', raw: undefined }, usage, warnings: [] }
  : { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] } });
const { text, steps } = await generateText({ model, tools: limitTools({ draft }, policy), stopWhen: isStepCount(3), prompt: 'go' });
console.log(JSON.stringify({ text, peak, results: steps[0].toolResults.map((r) => r.output) }));
`,
  );
  const aiHost = run('node', ['ai-host.mjs'], { cwd: app });
  assert.equal(aiHost.status, 0, aiHost.stderr);
  assert.deepEqual(JSON.parse(aiHost.stdout.trim()), { text: 'done', peak: 1, results: ['draft 1', 'draft 2', 'draft 3'] });
  copyFileSync(join(here, 'test', 'fixtures', 'mcp-server.mjs'), join(app, 'mcp-server.mjs'));
  writeFileSync(
    join(app, 'mcp-host.mjs'),
    `import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Turnstile } from '@turnstile/scheduler';
import { admitClient } from '@turnstile/scheduler/mcp';
const admission = (await Turnstile.load()).admission({ maxConcurrent: 2, allowParallel: false });
const client = admitClient(new Client({ name: 'host', version: '1.0.0' }), admission);
await client.connect(new StdioClientTransport({ command: process.execPath, args: ['mcp-server.mjs'], env: { PATH: process.env.PATH ?? '', MCP_LOG: 'mcp.jsonl', MCP_SERIAL: '1' } }));
const results = await Promise.all(['a', 'b', 'c'].map((name) => client.callTool({ name: 'work', arguments: { name, ms: 10 } })));
await client.close();
console.log(JSON.stringify(results.map((r) => r.content[0].text)));
`,
  );
  const mcpHost = run('node', ['mcp-host.mjs'], { cwd: app });
  assert.equal(mcpHost.status, 0, mcpHost.stderr);
  assert.deepEqual(JSON.parse(mcpHost.stdout.trim()), ['a done', 'b done', 'c done']);
  writeFileSync(
    join(app, 'integrations.ts'),
    `import { tool } from 'ai';
import { z } from 'zod';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CreateMessageRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { CallSettledError, Gate, Turnstile } from '@turnstile/scheduler';
import { limitTools } from '@turnstile/scheduler/ai';
import { admitClient, admittedFrom } from '@turnstile/scheduler/mcp';
const t = await Turnstile.load();
const policy = t.resolve([{ conversation: { tools: { draft: { concurrency: 1 } } } }]);
const tools = { draft: tool({ inputSchema: z.object({ title: z.string() }), execute: async ({ title }) => title.length }) };
const limited: typeof tools = limitTools(tools, policy);
const gate = new Gate(policy);
// The argument and result types flow through the gate.
const n: number = await gate.call('draft', 'id1', { title: 'x' }, async (args, signal) => args.title.length + (signal.aborted ? 1 : 0));
try { await gate.call('draft', 'id2', 1, async (x) => x + 1); } catch (e) { if (e instanceof CallSettledError) console.log(e.reason.kind, e.message); }
const client: Client = admitClient(new Client({ name: 'h', version: '1' }), t.admission({ maxConcurrent: 1, allowParallel: false }));
client.setRequestHandler(CreateMessageRequestSchema, async (_request, extra) => {
  await admittedFrom<Client>(extra).ping();
  return { model: 'm', role: 'assistant', content: { type: 'text', text: 'ok' } };
});
console.log(limited, n);
`,
  );
  const tscIntegrations = run(bin('tsc'), ['--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--skipLibCheck', 'true', '--types', 'node', '--typeRoots', join(here, 'node_modules', '@types'), 'integrations.ts'], { cwd: app });
  assert.equal(tscIntegrations.status, 0, `tsc (integrations):\n${tscIntegrations.stdout}${tscIntegrations.stderr}`);

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
