#!/usr/bin/env node
// `turnstile check FILE...`: resolves config layers (TOML files, or `.json` files holding the
// same shape), lowest precedence first, and prints every diagnostic rustc-style. Exit 0 when the
// config resolves (the resolved tools are listed), 1 on diagnostics, 2 on a usage or file error.
import { readFile } from 'node:fs/promises';
import { ConfigError, Turnstile, type LayerInput, type ToolPolicy } from './node.js';

const HELP = `usage: turnstile check [--deny-warnings] FILE...

Resolves config layers, lowest precedence first (program defaults, plugins, workspace,
user), and renders every problem with its key path, tools and source lines.
FILE is TOML, or JSON (.json) holding the same shape as an object.

  turnstile check plugin.toml user.toml
  npx @turnstile/scheduler check defaults.toml workspace.toml tools.json

A name a small edit away from one Turnstile reads (concurency, fanout) is a warning: it is
printed and the check still passes, unless --deny-warnings is given.

Exit status: 0 resolved, 1 diagnostics (or warnings with --deny-warnings), 2 usage or
unreadable file.
`;

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
      text = await readFile(file, 'utf8');
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
