// The Node versions the README states, tested: the package's own tests of the core on the oldest
// Node `engines` allows (20.3.0), and the framework adapters' tests on Node 22 (the version
// `ai` 7 and `@openai/agents` declare). The Node binaries come from the npm registry
// (`node-<platform>-<arch>`, the packages the `node` package installs), cached in
// target/node-versions/; nothing is skipped: a version that cannot be fetched fails the run.
//
//   node e2e/node-versions.mjs
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const js = join(dirname(fileURLToPath(import.meta.url)), '..');
const cache = join(js, '..', '..', 'target', 'node-versions');
const engines = JSON.parse(readFileSync(join(js, 'package.json'), 'utf8')).engines.node;
const oldest = /^>=(\d+\.\d+\.\d+)$/.exec(engines)?.[1];
if (oldest === undefined) throw new Error(`package.json engines.node is ${engines}: expected >=X.Y.Z`);

const RUNS = [
  // The core everywhere it claims to run: drivers, the scenario corpus, config, the CLI.
  { version: oldest, tests: ['driver.test.mjs', 'driver-failures.test.mjs', 'scenarios.test.mjs', 'config.test.mjs', 'cli.test.mjs', 'persist.test.mjs', 'shared-memory.test.mjs'] },
  // The adapters where their frameworks say they run.
  { version: '22', tests: ['ai.test.mjs', 'openai-agents.test.mjs', 'langchain.test.mjs', 'mcp.test.mjs', 'telemetry.test.mjs', 'gate.test.mjs'] },
];

function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...options });
  if (r.status !== 0) {
    process.stderr.write(`${r.stdout ?? ''}${r.stderr ?? ''}`);
    throw new Error(`${cmd} ${args.join(' ')} exited with ${r.status ?? r.signal}`);
  }
  return r.stdout;
}

/** The `node` binary of `spec` (an exact version or a major), fetched once. */
function nodeBinary(spec) {
  const name = `node-${process.platform}-${process.arch}`;
  const dir = join(cache, `${name}-${spec}`);
  const bin = join(dir, 'package', 'bin', 'node');
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const tarball = run('npm', ['pack', `${name}@${spec}`, '--silent', '--pack-destination', dir]).trim().split('\n').pop();
  run('tar', ['xzf', join(dir, tarball), '-C', dir]);
  if (!existsSync(bin)) throw new Error(`${name}@${spec} holds no bin/node (${readdirSync(join(dir, 'package')).join(', ')})`);
  return bin;
}

for (const { version, tests } of RUNS) {
  const node = nodeBinary(version);
  const actual = run(node, ['--version']).trim();
  process.stdout.write(`node-versions: ${actual}: ${tests.join(' ')}\n`);
  // The CLI test spawns process.execPath, so it runs on this version too.
  const out = run(node, ['--test', ...tests.map((t) => join('test', t))], { cwd: js });
  const pass = /^# pass (\d+)$/m.exec(out)?.[1];
  const fail = /^# fail (\d+)$/m.exec(out)?.[1];
  const skipped = /^# skipped (\d+)$/m.exec(out)?.[1];
  if (fail !== '0' || skipped !== '0' || pass === undefined || pass === '0') throw new Error(`${actual}: ${pass} passed, ${fail} failed\n${out}`);
  process.stdout.write(`node-versions: ${actual}: ${pass} passed\n`);
}
