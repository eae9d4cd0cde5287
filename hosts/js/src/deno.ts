// The `deno` entry point: core modules as source-phase imports (`import source m from
// './x.wasm'`, src/deno-core.js), which are part of Deno's module graph like any static import,
// so loading the package needs no permission at all (`deno run main.ts`, no `--allow-read`).
// Deno has source-phase imports of wasm since 2.6; an older Deno throws a SyntaxError parsing
// deno-core.js, which is why it is imported lazily (a literal specifier, still in the graph): on
// that SyntaxError the files are read from disk as the `node` entry does (needs `--allow-read`).
import { coreUrl } from './core-files.js';
import { setDefaultLoader } from './turnstile.js';

let cores: Promise<Record<string, WebAssembly.Module> | undefined> | undefined;

setDefaultLoader(async (name) => {
  cores ??= import('./deno-core.js').then(
    (m) => m.default,
    (e: unknown) => {
      if (e instanceof SyntaxError) return undefined;
      throw e;
    },
  );
  const table = await cores;
  if (!table) {
    const { readFile } = await import('node:fs/promises');
    return WebAssembly.compile(await readFile(coreUrl(name)));
  }
  const module = table[name];
  if (!module) throw new Error(`turnstile: unknown core module ${name}`);
  return module;
});

export * from './api.js';
