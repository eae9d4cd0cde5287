// The types of src/deno-core.js (source-phase imports TypeScript cannot parse).
declare const cores: Record<string, WebAssembly.Module>;
export default cores;
