// Restart under SIGKILL (issue 19, DRIVERS.md "Persistence"): a child process runs a plan of
// batches with a file-backed `persist` and is killed at seeded random moments, then started
// again from what it persisted, until the plan is done. Its log must show: no call that had
// ended (its outcome reported) ever started again or was reported otherwise afterwards (say,
// interrupted), and every planned call got a final outcome (its batch resolved) equal to the
// first one reported.
// Real processes and real time: this is the one test that must run them (it kills a process).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rng } from './fixtures/rng.mjs';

const CHILD = new URL('./fixtures/crash-child.mjs', import.meta.url).pathname;
const KILLS = Number(process.env.TURNSTILE_CRASH_KILLS ?? 50);
const SEED = Number(process.env.TURNSTILE_CRASH_SEED ?? Date.now() % 100_000);

/** A small seeded generator (mulberry32). */
const random = (seed) => rng(seed).next;

/** Runs the child once; kills it `killAfterMs` after it said `from` (`ready`: its plan is
 * submitted; `running`: its first call started, so that a loaded machine, which starts calls
 * late, still sees kills while calls run), or lets it finish (undefined). Resolves with how it
 * ended. */
function runChild(dir, args, killAfterMs, from = 'ready') {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD, dir, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let timer;
    let said = '';
    child.stdout.on('data', (chunk) => {
      said += String(chunk);
      if (killAfterMs !== undefined && timer === undefined && said.includes(from)) timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve(signal ?? code);
    });
  });
}

/** Every violation of the contract the log shows. */
export function check(logText, labels) {
  const problems = [];
  const first = new Map();
  const finals = new Map();
  for (const line of logText.split('\n')) {
    if (!line || line === 'complete') continue;
    const [kind, label, ...rest] = line.split(' ');
    const what = rest.join(' ');
    if (kind === 'start') {
      if (first.has(label)) problems.push(`${label} ran again after it ended (${first.get(label)}): ${line}`);
    } else if (kind === 'outcome') {
      // A resumed driver reports saved outcomes again: the same, never another.
      if (!first.has(label)) first.set(label, what);
      else if (first.get(label) !== what) problems.push(`${label} reported ${first.get(label)} then ${what}`);
    } else if (kind === 'final') {
      if (!finals.has(label)) finals.set(label, what);
      else if (finals.get(label) !== what) problems.push(`${label} resolved with ${finals.get(label)} then ${what}`);
    }
  }
  for (const label of labels) {
    const final = finals.get(label);
    if (final === undefined) problems.push(`${label} never got its outcome (lost)`);
    else if (first.has(label) && first.get(label) !== final) problems.push(`${label} was reported ${first.get(label)} and resolved ${final}`);
  }
  return problems;
}

for (const started of ['run-again', 'interrupt']) {
  test(`SIGKILL at random moments (${KILLS} kills, started = ${started}): no ended call runs again or comes back interrupted, no outcome is lost`, { timeout: 120_000 }, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'turnstile-crash-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const seed = SEED + (started === 'interrupt' ? 1 : 0);
    const next = random(seed);
    const BATCHES = 150;
    const CALLS = 4;
    const args = [String(BATCHES), String(CALLS), started];
    let kills = 0;
    let finished = false;
    for (let round = 0; round < KILLS * 3 && kills < KILLS; round++) {
      const how = await runChild(dir, args, Math.floor(next() * 30), round % 2 ? 'running' : 'ready');
      if (how === 'SIGKILL') kills += 1;
      else if (how === 0) {
        finished = true;
        break;
      } else assert.fail(`the child exited with ${how} (seed ${seed})`);
    }
    // The rest of the plan, uninterrupted.
    if (!finished) assert.equal(await runChild(dir, args, undefined), 0);
    const labels = [];
    for (let k = 0; k < BATCHES; k++) for (let j = 0; j < CALLS; j++) labels.push(`b${k}.c${j}`);
    const logText = existsSync(join(dir, 'log')) ? readFileSync(join(dir, 'log'), 'utf8') : '';
    const problems = check(logText, labels);
    t.diagnostic(`seed ${seed}: ${kills} kills`);
    assert.equal(kills, KILLS, `the plan was done after ${kills} kills: make it longer`);
    // The kills landed while calls ran: some started call was cut off (and ran again, or came
    // back interrupted).
    const cut = labels.filter((l) => logText.split(`start ${l} `).length > 2 || logText.includes(`final ${l} settled interrupted`));
    assert.ok(cut.length > 0, 'no kill landed while a call ran');
    assert.deepEqual(problems, [], `seed ${seed}, ${kills} kills:\n${problems.slice(0, 20).join('\n')}`);
  });
}
