// The package's CLI (`turnstile`, dist/cli.js). `simulate` runs tests/simulate/runs.toml, which
// the Rust harness and the Python package's CLI run too: the same exit status and the same
// lines, PROGRAM standing for the program's name. Then this CLI's own usage mistakes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'smol-toml';

const here = dirname(fileURLToPath(import.meta.url));
const CLI = join(here, '..', 'dist', 'cli.js');
const SIM = join(here, '..', '..', '..', 'tests', 'simulate');

const cli = (args, cwd = join(SIM, 'files')) => {
  const r = spawnSync(process.execPath, [CLI, ...args], { cwd, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
};

test('simulate prints what every Turnstile CLI prints (tests/simulate/runs.toml)', () => {
  const { run } = parse(readFileSync(join(SIM, 'runs.toml'), 'utf8'));
  assert.ok(run.length >= 10, `runs.toml holds ${run.length} runs`);
  for (const r of run) {
    const got = cli(r.args);
    assert.deepEqual(
      { status: got.status, stdout: got.stdout, stderr: got.stderr.replaceAll('turnstile', 'PROGRAM') },
      { status: r.status, stdout: r.stdout, stderr: r.stderr },
      `${r.about}: ${JSON.stringify(r.args)}`,
    );
  }
});

test('simulate --help is the component text under this name; mistakes in flags exit 2 and point at it', () => {
  const help = cli(['simulate', '--help']);
  assert.equal(help.status, 0);
  assert.match(help.stdout, /^usage: turnstile simulate \[FILE\]/);
  assert.match(help.stdout, /\[\[batch\]\]/);
  assert.equal(cli(['simulate', '-h', '--calls', 'a x']).status, 0);
  for (const [args, says] of [
    [['simulate', '--frobnicate'], 'unknown option `--frobnicate`'],
    [['simulate', '--calls'], '--calls needs a value'],
    [['simulate', 'a.toml', 'b.toml'], 'one FILE at most'],
    [['simulate', '--duration', 'soon'], '--duration: expected MS or LABEL=MS'],
    [['simulate', '--duration', '=5'], '--duration: expected MS or LABEL=MS'],
    [['simulate', 'no-such-file.toml'], 'no-such-file.toml'],
    [['simulate', '--layer', 'no-such-layer.toml', '--calls', 'a x'], 'no-such-layer.toml'],
  ]) {
    const r = cli(args);
    assert.equal(r.status, 2, `${JSON.stringify(args)}: ${r.stderr}`);
    assert.equal(r.stdout, '', JSON.stringify(args));
    assert.ok(r.stderr.includes(says), `${JSON.stringify(args)}: no ${says} in ${r.stderr}`);
  }
  // A file that is not UTF-8 is refused (exit 2), never read with replacement characters.
  const dir = mkdtempSync(join(tmpdir(), 'turnstile-cli-'));
  writeFileSync(join(dir, 'latin1.toml'), Buffer.from('# caf\xe9\n[[batch]]\ncalls = ["a x"]\n', 'latin1'));
  const latin1 = cli(['simulate', 'latin1.toml'], dir);
  assert.equal(latin1.status, 2, latin1.stderr);
  assert.match(latin1.stderr, /latin1\.toml: not UTF-8 text/);
  rmSync(dir, { recursive: true, force: true });
  // `--` ends the options: a file named like a flag is a file.
  const dashed = cli(['simulate', '--', '--help']);
  assert.equal(dashed.status, 2);
  assert.match(dashed.stderr, /--help/);
});
