// The component's core modules as source-phase imports (compiled, not instantiated), for the
// `deno` entry point (src/deno.ts). Plain JavaScript, copied into dist/ by build.mjs (TypeScript
// cannot parse `import source`); build.mjs fails when jco's output names other files than these.
import source core from './component/turnstile.core.wasm';
import source core2 from './component/turnstile.core2.wasm';
import source core3 from './component/turnstile.core3.wasm';

export default {
  'turnstile.core.wasm': core,
  'turnstile.core2.wasm': core2,
  'turnstile.core3.wasm': core3,
};
