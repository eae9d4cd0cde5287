// Builds the package: the component transpiled by jco into dist/component (ESM, .d.ts from the
// WIT docs, `--instantiation async` so that one process can hold independent instances), then
// the TypeScript wrapper compiled into dist/.
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const wasm = process.env.TURNSTILE_WASM ?? join(process.env.CARGO_TARGET_DIR ?? join(root, 'target'), 'turnstile.wasm');
if (!existsSync(wasm)) {
  console.error(`${wasm} is missing: run \`cargo xtask build-guest\` first`);
  process.exit(1);
}
const bin = (name) => join(here, 'node_modules', '.bin', name);
rmSync(join(here, 'dist'), { recursive: true, force: true });
execFileSync(bin('jco'), ['transpile', wasm, '-o', join(here, 'dist', 'component'), '--instantiation', 'async', '--name', 'turnstile', '-q'], { stdio: 'inherit' });
execFileSync(bin('tsc'), ['-p', join(here, 'tsconfig.json')], { stdio: 'inherit' });
console.log(`built ${join(here, 'dist')} from ${wasm}`);
