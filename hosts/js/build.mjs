// Builds the package: the component transpiled by jco into dist/component (ESM, .d.ts from the
// WIT docs, `--instantiation async` so that one process can hold independent instances), jco's
// glue patched (below), then the TypeScript wrapper compiled into dist/.
//
// `node build.mjs`          builds from target/turnstile.wasm (or $TURNSTILE_WASM); fails when missing.
//                           The store texts (the repository's shared/store/: SQLite schema and
//                           statements, Redis script, Postgres schema) are copied into dist/shared/store/, where
//                           the shared entry reads them (src/shared/texts.ts); fails without them.
// `node build.mjs --pack`   (npm's prepack) also builds the component with `cargo xtask build-guest`
//                           when it is missing, failing loudly if that fails, and copies the
//                           licenses and SHARED.md (the shared-key guide, one source for both
//                           packages) from the repository root into the package.
// `node build.mjs --unpack` (npm's postpack) removes the copied licenses and SHARED.md.
//
// jco is pinned to 1.12.0: its glue costs about 25 ns per scalar call where 1.35's costs 2.6 us
// (1.35 reads `process.env.JCO_DEBUG` several times per call and keeps async-task bookkeeping
// this WIT does not use). Patches, each guarded: the build fails when its pattern is gone, so a
// jco change cannot silently undo it.
// 1. `list<u64>` results (`next-releases`' starts and retired batches, admission's tickets, the
//    lease schedule's tickets) are copied with `new T(memory.buffer.slice(...))`: a new
//    ArrayBuffer each, which V8 allocates outside its heap above 64 bytes (about 1.7 us, an eighth
//    of the driver's time at batches of 1,000). Up to 512 numbers are copied into a slab instead, a
//    16 KB buffer whose regions are handed out in turn (a fresh region each, so no two results
//    share bytes; a new slab when one is full or was detached), each result a `BigUint64Array`
//    view of its region (about 90 ns); longer lists are a typed-array slice of their own; an empty
//    one is one frozen empty array. The package copies the lists it hands to a host
//    (`Scheduler.step`), so a host never holds a view of a slab.
// 2. The fallback loader builds the asset URL from a template (`new URL(`./${name}`, ...)`),
//    which bundlers glob, and imports `node:fs/promises`, which browser bundlers cannot
//    resolve; the package always passes its own loader with literal URLs (src/core-files.ts),
//    so the fallback is removed.
// 3. (jco >= 1.13) `_debugLog` reading `process.env` on every call is made to read it once.
// 4. Empty lists are lowered without calling the guest's allocator, and a `list<u64>` argument
//    (approvals, ends ok and failed) is copied into memory from its typed array through one view
//    (see below).
// 5. One view of memory, and ASCII strings without TextEncoder / TextDecoder (see below).
// 6. A `u64` is read with `getBigUint64` instead of `BigInt.asUintN(64, getBigInt64(...))`: the
//    same value, one bigint made instead of two (every entry number the component reports).
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
// Copied from the repository root into the package by --pack, removed by --unpack.
const rootFiles = ['LICENSE-MIT', 'LICENSE-APACHE', 'SHARED.md'];
// The store texts: one source in the repository, shipped by this package and the Python one.
const storeTexts = join(root, 'shared', 'store');
const storeFiles = ['sqlite.sql', 'sqlite-statements.json', 'redis.lua', 'postgres.sql'];

if (process.argv.includes('--unpack')) {
  for (const name of rootFiles) rmSync(join(here, name), { force: true });
  process.exit(0);
}
const pack = process.argv.includes('--pack');

const wasm = process.env.TURNSTILE_WASM ?? join(process.env.CARGO_TARGET_DIR ?? join(root, 'target'), 'turnstile.wasm');
if (!existsSync(wasm)) {
  if (!pack) {
    console.error(`build.mjs: ${wasm} is missing: run \`cargo xtask build-guest\` first`);
    process.exit(1);
  }
  console.error(`build.mjs: ${wasm} is missing: building it with \`cargo xtask build-guest\``);
  try {
    execFileSync('cargo', ['xtask', 'build-guest'], { cwd: root, stdio: 'inherit' });
  } catch (e) {
    console.error(`build.mjs: \`cargo xtask build-guest\` failed (${e.message}); the package cannot be packed without the component`);
    process.exit(1);
  }
  if (!existsSync(wasm)) {
    console.error(`build.mjs: \`cargo xtask build-guest\` ran but ${wasm} is still missing`);
    process.exit(1);
  }
}

const bin = (name) => join(here, 'node_modules', '.bin', name);
const dist = join(here, 'dist');
rmSync(dist, { recursive: true, force: true });
execFileSync(bin('jco'), ['transpile', wasm, '-o', join(dist, 'component'), '--instantiation', 'async', '--name', 'turnstile', '-q'], { stdio: 'inherit' });

function fail(message) {
  console.error(`build.mjs: ${message}`);
  process.exit(1);
}

// Patch 5's helpers, as they go into the glue (between the markers test/glue.test.mjs reads).
const GLUE_VIEWS = `// turnstile build.mjs patch 5: views begin
let dv = new DataView(new ArrayBuffer());
let dvBytes = new Uint8Array(0);
let dvWords = new Uint32Array(0);
let dvMemory;
function dvRefresh(mem) {
  const buffer = mem.buffer;
  if (typeof SharedArrayBuffer !== 'undefined' && buffer instanceof SharedArrayBuffer) throw new TypeError('turnstile: a shared memory never detaches; the glue cannot tell it grew');
  dv = new DataView(buffer);
  dvBytes = new Uint8Array(buffer);
  dvWords = new Uint32Array(buffer);
  dvMemory = mem;
}
const dataView = mem => (mem === dvMemory && dvBytes.length !== 0) ? dv : (dvRefresh(mem), dv);
const memoryBytes = mem => (mem === dvMemory && dvBytes.length !== 0) ? dvBytes : (dvRefresh(mem), dvBytes);
const memoryWords = mem => (mem === dvMemory && dvBytes.length !== 0) ? dvWords : (dvRefresh(mem), dvWords);
// turnstile build.mjs patch 5: views end`;
// Patch 1's helper, as it goes into the glue (between the markers test/glue.test.mjs reads).
const GLUE_LISTS = `// turnstile build.mjs patch 1: lists begin
const emptyBigUint64Array = Object.freeze(new BigUint64Array(0));
let slab = new Uint32Array(0);
let slabAt = 0;
function liftU64(mem, ptr, len) {
  if (len === 0) return emptyBigUint64Array;
  if (len > 512) return new BigUint64Array(memoryBytes(mem).buffer, ptr, len).slice();
  const from = memoryWords(mem);
  const src = ptr >>> 2;
  const words = len * 2;
  if (ptr % 8 !== 0 || src + words > from.length) throw new RangeError('turnstile: a list<u64> out of memory or misaligned');
  if (slabAt + words > slab.length) {
    slab = new Uint32Array(4096);
    slabAt = 0;
  }
  for (let i = 0; i < words; i++) slab[slabAt + i] = from[src + i];
  const out = new BigUint64Array(slab.buffer, slabAt * 4, len);
  slabAt += words;
  return out;
}
// turnstile build.mjs patch 1: lists end`;
const GLUE_STRINGS = `// turnstile build.mjs patch 5: strings begin
function utf8Encode(s, realloc, memory) {
  if (typeof s !== 'string') throw new TypeError('expected a string');
  const n = s.length;
  if (n === 0) {
    utf8EncodedLen = 0;
    return 1;
  }
  if (n > 64) {
    // All ASCII exactly when its n characters fit in n bytes.
    const ptr = realloc(0, 0, 1, n);
    if (utf8Encoder.encodeInto(s, new Uint8Array(memoryBytes(memory).buffer, ptr, n)).read === n) {
      utf8EncodedLen = n;
      return ptr;
    }
    const buf = utf8Encoder.encode(s);
    const grown = realloc(ptr, n, 1, buf.length);
    memoryBytes(memory).set(buf, grown);
    utf8EncodedLen = buf.length;
    return grown;
  }
  let i = 0;
  while (i < n && s.charCodeAt(i) < 0x80) i++;
  if (i < n) {
    let buf = utf8Encoder.encode(s);
    let ptr = realloc(0, 0, 1, buf.length);
    memoryBytes(memory).set(buf, ptr);
    utf8EncodedLen = buf.length;
    return ptr;
  }
  const ptr = realloc(0, 0, 1, n);
  const bytes = memoryBytes(memory);
  for (let j = 0; j < n; j++) bytes[ptr + j] = s.charCodeAt(j);
  utf8EncodedLen = n;
  return ptr;
}
function utf8Decode(memory, ptr, len) {
  const bytes = memoryBytes(memory);
  if (len <= 64 && ptr >= 0 && ptr + len <= bytes.length) {
    let s = '';
    for (let i = ptr, end = ptr + len; i < end; i++) {
      const b = bytes[i];
      if (b >= 0x80) return utf8Decoder.decode(new Uint8Array(bytes.buffer, ptr, len));
      s += String.fromCharCode(b);
    }
    return s;
  }
  return utf8Decoder.decode(new Uint8Array(bytes.buffer, ptr, len));
}
// turnstile build.mjs patch 5: strings end`;

const gluePath = join(dist, 'component', 'turnstile.js');
let glue = readFileSync(gluePath, 'utf8');

// Patch 1: `list<u64>` results copied into a slab (see the header), the empty ones one frozen
// array. Any other typed list result is new to this WIT: the build fails until the patch
// covers it.
const slice = /new BigUint64Array\((memory\d+)\.buffer\.slice\((ptr\d+), \2 \+ (len\d+) \* 8\)\)/g;
const slices = glue.match(slice)?.length ?? 0;
if (slices === 0) fail('patch 1: no `new BigUint64Array(memoryN.buffer.slice(ptr, ptr + len * 8))` in jco\'s glue; check the lifting of list<u64> results and update the patch');
glue = glue.replace(slice, 'liftU64($1, $2, $3)');
if (/\.buffer\.slice\(/.test(glue)) fail('patch 1: jco\'s glue lifts a typed list other than list<u64> (`memoryN.buffer.slice(...)`); extend the patch to it');
const lists = /\n( *)let dv = new DataView\(new ArrayBuffer\(\)\);\n/;
if (!lists.test(glue)) fail('patch 1: jco\'s `let dv = new DataView(...)` is not where it was (the helper goes before it); update the patch');
glue = glue.replace(lists, (m, indent) => '\n' + GLUE_LISTS.split('\n').map((line) => (line ? indent + line : line)).join('\n') + m);

// Patch 4: an empty list (`submit-batch`'s fan-outs and arguments, `on-ended`'s lists, a saved
// state's lists) is lowered without a call to the guest's allocator: most rounds send no
// events, no failures and no rate limits. The pointer is the alignment, non-null and aligned, as
// the canonical ABI allows for an empty list (jco lowers an empty string the same way, as
// pointer 1). A `list<u64>` argument (approvals; ends ok and failed) is jco's typed-array copy,
// its bytes copied through patch 5's one view of memory; anything but a typed array of 8-byte
// items is a `TypeError` there (jco's copy would read no bytes from it and send garbage).
const lowerTyped = /var (ptr\d+) = realloc0\(0, 0, (\d+), (len\d+) \* (\d+)\);\n(\s*)var (src\d+) = new Uint8Array\((val\d+)\.buffer, \7\.byteOffset, \3 \* \4\);\n\s*\(new Uint8Array\(memory0\.buffer, \1, \3 \* \4\)\)\.set\(\6\);/g;
const typed = glue.match(lowerTyped)?.length ?? 0;
if (typed === 0) fail('patch 4: no typed list lowering (`realloc0(...)`, `new Uint8Array(valN.buffer, ...)`, `.set(srcN)`) in jco\'s glue; check the lowering of list<u64> (approve, ends) and update the patch');
glue = glue.replace(lowerTyped, (_, ptr, align, len, size, indent, _src, val) =>
  `if (!ArrayBuffer.isView(${val}) || ${val}.BYTES_PER_ELEMENT !== ${size}) throw new TypeError('turnstile: a list of ${size * 8}-bit numbers crosses as a typed array');\n` +
  `${indent}var ${ptr} = ${len} ? realloc0(0, 0, ${align}, ${len} * ${size}) : ${align};\n` +
  `${indent}if (${len}) memoryBytes(memory0).set(new Uint8Array(${val}.buffer, ${val}.byteOffset, ${len} * ${size}), ${ptr});`);
const lowerRecords = /var (result\d+) = realloc0\(0, 0, (\d+), (len\d+) \* (\d+)\);/g;
const lowered = glue.match(lowerRecords)?.length ?? 0;
if (lowered === 0) fail('patch 4: no list-of-records lowering (`var resultN = realloc0(0, 0, align, lenN * size);`) in jco\'s glue; check the lowering of the batch\'s lists / list<event> and update the patch');
glue = glue.replace(lowerRecords, (_, result, align, len, size) => `var ${result} = ${len} ? realloc0(0, 0, ${align}, ${len} * ${size}) : ${align};`);

// Patch 5: one `DataView` and one `Uint8Array` of the component's memory, made again only when
// memory grew. jco's `dataView(memory0)` compares `dv.buffer` with `memory0.buffer` on every field
// it reads or writes, and `WebAssembly.Memory.prototype.buffer` is a call into the engine (a
// twentieth of a batch's time); its strings make a `Uint8Array` per value. A grown memory
// detaches its old buffer (the JS API's "refresh the memory buffer"), and a typed array of a
// detached buffer has length 0: that is the check. Strings whose characters are all ASCII (call
// ids, tool names, keys, messages: nearly all) are written and read byte by byte up to 64
// characters; a longer string (a batch's ids and tools) is encoded with `encodeInto` straight
// into an allocation of its length in UTF-16 units, which it fills exactly when it is ASCII (else
// the allocation grows, through `cabi_realloc`, to jco's encoding); a longer one is lifted with
// `decode` of one view; any other string takes jco's own path, so the bytes and the strings are
// exactly jco's (test/glue.test.mjs compares the two).
const views = /\n( *)let dv = new DataView\(new ArrayBuffer\(\)\);\n\s*const dataView = mem => dv\.buffer === mem\.buffer \? dv : dv = new DataView\(mem\.buffer\);\n/;
if (!views.test(glue)) fail('patch 5: jco\'s `dataView` helper (`let dv = ...; const dataView = mem => dv.buffer === mem.buffer ? ...`) is not where it was; check how the glue views memory and update the patch');
glue = glue.replace(views, (_, indent) => '\n' + GLUE_VIEWS.split('\n').map((line) => (line ? indent + line : line)).join('\n') + '\n');
const encodeFn = /\n( *)function utf8Encode\(s, realloc, memory\) \{\n\s*if \(typeof s !== 'string'\) throw new TypeError\('expected a string'\);\n\s*if \(s\.length === 0\) \{\n\s*utf8EncodedLen = 0;\n\s*return 1;\n\s*\}\n\s*let buf = utf8Encoder\.encode\(s\);\n\s*let ptr = realloc\(0, 0, 1, buf\.length\);\n\s*new Uint8Array\(memory\.buffer\)\.set\(buf, ptr\);\n\s*utf8EncodedLen = buf\.length;\n\s*return ptr;\n\s*\}\n/;
if (!encodeFn.test(glue)) fail('patch 5: jco\'s `utf8Encode` is not the one this patch replaces; check how the glue lowers strings and update the patch');
glue = glue.replace(encodeFn, (_, indent) => '\n' + GLUE_STRINGS.split('\n').map((line) => (line ? indent + line : line)).join('\n') + '\n');
const decode = /utf8Decoder\.decode\(new Uint8Array\((memory\d+)\.buffer, (ptr\d+), (len\d+)\)\)/g;
const decodes = glue.match(decode)?.length ?? 0;
if (decodes === 0) fail('patch 5: no string lifting (`utf8Decoder.decode(new Uint8Array(memoryN.buffer, ptr, len))`) in jco\'s glue; check how the glue lifts strings and update the patch');
glue = glue.replace(decode, 'utf8Decode($1, $2, $3)');
if (/\bmemory\d*\.buffer\b/.test(glue.replace(/const buffer = mem\.buffer;/, ''))) fail('patch 5: the glue still reads `memoryN.buffer` somewhere: view it through `memoryBytes` or `dataView`');

// Patch 6: u64 fields read unsigned at once.
const u64Read = /BigInt\.asUintN\(64, (dataView\(memory\d+\))\.getBigInt64\(([^()]*)\)\)/g;
const u64Reads = glue.match(u64Read)?.length ?? 0;
if (u64Reads === 0) fail('patch 6: no `BigInt.asUintN(64, dataView(memoryN).getBigInt64(...))` in jco\'s glue; check how the glue lifts u64 fields and update the patch');
glue = glue.replace(u64Read, '$1.getBigUint64($2)');

// Patch 2: no template-built asset URL.
const fallback = /if \(!getCoreModule\) getCoreModule = \(name\) => fetchCompile\(new URL\(`\.\/\$\{name\}`, import\.meta\.url\)\);/;
if (!fallback.test(glue)) fail('patch 2: jco\'s fallback `getCoreModule` is not where it was; check that no template-built URL is left');
glue = glue.replace(fallback, "if (!getCoreModule) throw new TypeError('turnstile: getCoreModule is required');");
// ... and with it the fallback's loader, whose `import('node:fs/promises')` a browser bundler
// cannot resolve: the glue must name no `node:` module.
const fetchCompile = /\n\s*const isNode = typeof process[^\n]*\n\s*let _fs;\n\s*async function fetchCompile \(url\) \{\n[\s\S]*?\n {2}\}\n/;
if (!fetchCompile.test(glue)) fail('patch 2: jco\'s `fetchCompile` is not where it was');
glue = glue.replace(fetchCompile, '\n');
if (/fetchCompile|node:/.test(glue)) fail('patch 2: the glue still mentions fetchCompile or a node: module');

// Patch 3: `_debugLog` reads the environment once (only jco versions that call it).
const debugCalls = glue.match(/_debugLog\(/g)?.length ?? 0;
if (debugCalls > 1) {
  const debug = /const _debugLog = \(\.\.\.args\) => \{\s*if \(!globalThis\?\.process\?\.env\?\.JCO_DEBUG\) \{ return; \}/;
  if (!debug.test(glue)) fail('patch 3: `_debugLog` is called but its definition changed');
  glue = glue.replace(debug, 'const _jcoDebug = !!globalThis?.process?.env?.JCO_DEBUG;\n  const _debugLog = (...args) => {\n    if (!_jcoDebug) { return; }');
}
writeFileSync(gluePath, glue);

// The core modules jco names must be exactly the ones src/core-files.ts loads by literal URL.
const named = [...glue.matchAll(/getCoreModule\('([^']+)'\)/g)].map((m) => m[1]).sort();
const literal = [...readFileSync(join(here, 'src', 'core-files.ts'), 'utf8').matchAll(/new URL\('\.\/component\/([^']+)', import\.meta\.url\)/g)].map((m) => m[1]).sort();
if (named.join() !== literal.join()) fail(`jco's glue loads ${named.join(', ')} but src/core-files.ts has literal URLs for ${literal.join(', ')}: update src/core-files.ts`);
// ... and the ones src/deno-core.js imports (source phase) for the `deno` entry, which is plain
// JavaScript (TypeScript cannot parse `import source`) copied as it is.
const denoCore = readFileSync(join(here, 'src', 'deno-core.js'), 'utf8');
const sourced = [...denoCore.matchAll(/^import source \w+ from '\.\/component\/([^']+)';$/gm)].map((m) => m[1]).sort();
if (named.join() !== sourced.join()) fail(`jco's glue loads ${named.join(', ')} but src/deno-core.js imports ${sourced.join(', ')}: update src/deno-core.js`);
writeFileSync(join(dist, 'deno-core.js'), denoCore);

execFileSync(bin('tsc'), ['-p', join(here, 'tsconfig.json')], { stdio: 'inherit' });

mkdirSync(join(dist, 'shared', 'store'), { recursive: true });
for (const name of storeFiles) {
  if (!existsSync(join(storeTexts, name))) fail(`${join(storeTexts, name)} is missing: the shared entry cannot open a store without it`);
  copyFileSync(join(storeTexts, name), join(dist, 'shared', 'store', name));
}

if (pack) {
  for (const name of rootFiles) {
    if (!existsSync(join(root, name))) fail(`${join(root, name)} is missing`);
    copyFileSync(join(root, name), join(here, name));
  }
}
console.log(`built ${dist} from ${wasm} (patched: ${slices} list copies, ${typed} typed and ${lowered} record list lowerings, ${decodes} string liftings, ${u64Reads} u64 reads)`);
