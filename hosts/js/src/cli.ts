#!/usr/bin/env node
// `turnstile check FILE...`: resolves config layers (TOML files, or `.json` files holding the
// same shape), lowest precedence first, and prints every diagnostic rustc-style. Exit 0 when the
// config resolves (the resolved tools are listed), 1 on diagnostics, 2 on a usage or file error.
// `turnstile simulate [FILE] [options]`: the component's timeline of batches on a virtual
// clock, with the flags of every Turnstile CLI (`turnstile simulate --help`).
import { readFile } from 'node:fs/promises';
import { ConfigError, Turnstile, type LayerInput, type ToolPolicy } from './node.js';
import { simulate, simulateHelp, SimulateError, type SimulateInput } from './simulate.js';

const HELP = `usage: turnstile check [--deny-warnings] FILE...
       turnstile simulate [FILE] [--layer LAYER.toml]... [--calls CALLS]... [--duration MS]...
                          [--fail LABEL]...

Resolves config layers, lowest precedence first (program defaults, plugins, workspace,
user), and renders every problem with its key path, tools and source lines.
FILE is TOML, or JSON (.json) holding the same shape as an object.

  turnstile check plugin.toml user.toml
  npx @turnstile/scheduler check defaults.toml workspace.toml tools.json

A name a small edit away from one Turnstile reads (concurency, fanout) is a warning: it is
printed and the check still passes, unless --deny-warnings is given.

Exit status: 0 resolved, 1 diagnostics (or warnings with --deny-warnings), 2 usage or
unreadable file.

simulate prints the timeline of batches on a virtual clock: what starts when, what waits and
why (\`turnstile simulate --help\` has its options and the case-file format).
`;

/** `simulate`'s flags, read as the Rust harness reads them: `--flag value` or `--flag=value`,
 * `--` ends the options, one FILE at most. A usage mistake is a string. */
async function simulateCommand(args: string[]): Promise<number> {
  const usage = (message: string): number => {
    process.stderr.write(`turnstile: ${message}\n(\`turnstile simulate --help\` says more)\n`);
    return 2;
  };
  const options = args.includes('--') ? args.slice(0, args.indexOf('--')) : args;
  if (options.includes('--help') || options.includes('-h')) {
    process.stdout.write(await simulateHelp('turnstile'));
    return 0;
  }
  const files: string[] = [];
  const layerFiles: string[] = [];
  const input: SimulateInput = { layers: [], calls: [], durations: [], fail: [] };
  let optionsDone = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (optionsDone || !arg.startsWith('-') || arg === '-') {
      files.push(arg);
      continue;
    }
    if (arg === '--') {
      optionsDone = true;
      continue;
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    if (!['--layer', '--calls', '--duration', '--fail'].includes(flag)) return usage(`unknown option \`${flag}\``);
    let value: string;
    if (eq > 0) value = arg.slice(eq + 1);
    else if (i + 1 < args.length) value = args[++i]!;
    else return usage(`${flag} needs a value`);
    if (flag === '--layer') layerFiles.push(value);
    else if (flag === '--calls') input.calls.push(value);
    else if (flag === '--fail') input.fail.push(value);
    else input.durations.push(value);
  }
  if (files.length > 1) return usage('simulate takes one FILE at most; add layers with --layer');
  const read = async (path: string): Promise<string | undefined> => {
    try {
      return await readText(path);
    } catch (e) {
      process.stderr.write(`turnstile: ${path}: ${(e as Error).message}\n`);
      return undefined;
    }
  };
  if (files[0] !== undefined) {
    const text = await read(files[0]);
    if (text === undefined) return 2;
    input.file = { name: files[0], text };
  }
  for (const path of layerFiles) {
    const text = await read(path);
    if (text === undefined) return 2;
    input.layers.push({ name: path, text });
  }
  try {
    const { warnings, timeline } = await simulate(input);
    for (const warning of warnings) process.stderr.write(`${warning}\n`);
    process.stdout.write(timeline);
    return 0;
  } catch (e) {
    if (!(e instanceof SimulateError)) throw e;
    // Diagnostics print as they are; a sentence is the program's.
    process.stderr.write(e.kind === 'config' ? `${e.message}\n` : `turnstile: ${e.message}\n`);
    if (e.exitStatus === 2) process.stderr.write('(`turnstile simulate --help` says more)\n');
    return e.exitStatus;
  }
}

/** A file's text: UTF-8, refused (not patched with U+FFFD) when it is not, as the Rust and
 * Python CLIs refuse it. */
async function readText(path: string): Promise<string> {
  const bytes = await readFile(path);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new Error('not UTF-8 text');
  }
}

/** A key as the summary names it: a path key with its path (`fs path {path}`). */
const keyName = (c: ToolPolicy['concurrency'][number]): string => (c.path === undefined ? c.key : `${c.key} path ${c.path}`);

function line(t: ToolPolicy): string {
  const [only, ...rest] = t.concurrency;
  let out: string;
  if (only === undefined) out = `${t.name}: unbounded`;
  else if (rest.length === 0) out = `${t.name}: key ${keyName(only)}${only.path === undefined ? `, limit ${only.limit}` : ''}`;
  // A key set: every member, in written order.
  else out = `${t.name}: keys ${t.concurrency.map((c) => (c.path === undefined ? `${c.key} (limit ${c.limit})` : keyName(c))).join(' + ')}`;
  if (t.fanOut) out += `, fan-out${t.onError === 'stop' ? ' (stop on error)' : ''}`;
  return out;
}

async function main(args: string[]): Promise<number> {
  if (args[0] === 'simulate') return simulateCommand(args.slice(1));
  if (args.length === 0 || args.includes('--help') || args.includes('-h') || args[0] === 'help') {
    process.stdout.write(HELP);
    return args.length === 0 ? 2 : 0;
  }
  const [command, ...rest] = args;
  const denyWarnings = rest.includes('--deny-warnings');
  const files = rest.filter((a) => a !== '--deny-warnings');
  const unknown = files.find((a) => a.startsWith('--'));
  if (unknown !== undefined) {
    process.stderr.write(`turnstile check: unknown option ${unknown}\n\n${HELP}`);
    return 2;
  }
  if (command !== 'check') {
    process.stderr.write(`turnstile: unknown command ${JSON.stringify(command)}\n\n${HELP}`);
    return 2;
  }
  if (files.length === 0) {
    process.stderr.write(`turnstile check: no files\n\n${HELP}`);
    return 2;
  }
  const layers: LayerInput[] = [];
  for (const file of files) {
    let text: string;
    try {
      text = await readText(file);
    } catch (e) {
      process.stderr.write(`turnstile check: cannot read ${file}: ${(e as Error).message}\n`);
      return 2;
    }
    // The component reads a layer that starts with `{` as JSON, and cites its own lines.
    if (file.endsWith('.json') && !text.trimStart().startsWith('{')) {
      process.stderr.write(`turnstile check: ${file}: a JSON layer is an object (its text starts with \`{\`)\n`);
      return 2;
    }
    layers.push({ name: file, text });
  }
  const turnstile = await Turnstile.load();
  try {
    const policy = turnstile.resolve(layers);
    const tools = policy.tools();
    const warnings = policy.warnings();
    if (warnings.length > 0) {
      process.stdout.write(`${warnings.map((d) => d.rendered).join('\n\n')}\n\n`);
      process.stderr.write(`turnstile check: ${warnings.length} warning(s)\n`);
    }
    process.stdout.write(`ok: ${files.length} layer(s), ${tools.length} tool(s) configured\n${tools.map((t) => `  ${line(t)}\n`).join('')}`);
    return warnings.length > 0 && denyWarnings ? 1 : 0;
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stdout.write(`${e.message}\n`);
      process.stderr.write(`turnstile check: ${e.diagnostics.length} problem(s)\n`);
      return 1;
    }
    if (e instanceof TypeError) {
      process.stderr.write(`turnstile check: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}

process.exitCode = await main(process.argv.slice(2));
