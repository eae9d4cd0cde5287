// Turnstile for TypeScript and JavaScript: the component (transpiled by jco) behind a typed API.
// This universal entry point reads the core modules from disk under Node and fetches them
// elsewhere; the `node` and `browser` export conditions pick `node.js` / `browser.js`, which do
// only one (so a browser bundle has no `node:` import), and `deno` picks `deno.js`, which reads
// and fetches nothing (source-phase imports of the core modules).
import { fetchCore, coreUrl } from './core-files.js';
import { setDefaultLoader } from './turnstile.js';

setDefaultLoader(async (name) => {
  if (typeof process !== 'undefined' && process.versions?.node) {
    const { readFile } = await import('node:fs/promises');
    return WebAssembly.compile(await readFile(coreUrl(name)));
  }
  return fetchCore(name);
});

export * from './api.js';
