// The `node` entry point: core modules read from the package's files.
import { readFile } from 'node:fs/promises';
import { coreUrl } from './core-files.js';
import { setDefaultLoader } from './turnstile.js';

setDefaultLoader(async (name) => WebAssembly.compile(await readFile(coreUrl(name))));

export * from './api.js';
