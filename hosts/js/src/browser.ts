// The `browser` entry point (pages and workers): core modules fetched next to the package.
import { fetchCore } from './core-files.js';
import { setDefaultLoader } from './turnstile.js';

setDefaultLoader(fetchCore);

export * from './api.js';
