// The component's core modules, each URL written literally (`new URL('./component/NAME',
// import.meta.url)`) so that bundlers (Vite, webpack, Parcel) see and copy the assets. build.mjs
// fails when jco's output names other files than these.
export const CORE_FILES: Record<string, URL> = {
  'turnstile.core.wasm': new URL('./component/turnstile.core.wasm', import.meta.url),
  'turnstile.core2.wasm': new URL('./component/turnstile.core2.wasm', import.meta.url),
  'turnstile.core3.wasm': new URL('./component/turnstile.core3.wasm', import.meta.url),
};

export function coreUrl(name: string): URL {
  const url = CORE_FILES[name];
  if (!url) throw new Error(`turnstile: unknown core module ${name}`);
  return url;
}

/** Fetches and compiles a core module (browsers, workers). */
export async function fetchCore(name: string): Promise<WebAssembly.Module> {
  const url = coreUrl(name);
  const response = await fetch(url);
  if (!response.ok) throw new Error(`turnstile: fetching ${url}: ${response.status}`);
  if (typeof WebAssembly.compileStreaming === 'function' && response.headers.get('content-type')?.startsWith('application/wasm')) return WebAssembly.compileStreaming(response);
  return WebAssembly.compile(await response.arrayBuffer());
}
