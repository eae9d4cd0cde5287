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
//                           licenses from the repository root into the package.
// `node build.mjs --unpack` (npm's postpack) removes the copied licenses.
//
// jco is pinned to 1.12.0: its glue costs about 25 ns per scalar call where 1.35's costs 2.6 us
// (1.35 reads `process.env.JCO_DEBUG` several times per call and keeps async-task bookkeeping
// this WIT does not use). Patches, each guarded: the build fails when its pattern is gone, so a
// jco change cannot silently undo it.
// 1. `list<u64>` / `list<u32>` results (admission's tickets) are copied with `new T(memory.buffer.slice(...))`
//    (ArrayBuffer.prototype.slice on wasm memory costs 0.6-2 us); a typed-array slice of a view
//    costs 60-230 ns and yields the same fresh array.
// 2. The fallback loader builds the asset URL from a template (`new URL(`./${name}`, ...)`),
//    which bundlers glob, and imports `node:fs/promises`, which browser bundlers cannot
//    resolve; the package always passes its own loader with literal URLs (src/core-files.ts),
//    so the fallback is removed.
// 3. (jco >= 1.13) `_debugLog` reading `process.env` on every call is made to read it once.
// 4. Empty lists of records are lowered without calling the guest's allocator (see below).
// 5. One view of memory, and ASCII strings without TextEncoder / TextDecoder (see below).
// 6. A `u64` is read with `getBigUint64` instead of `BigInt.asUintN(64, getBigInt64(...))`: the
//    same value, one bigint made instead of two (every entry number the component reports).
// 7. `on-events` and `on-ended` also take entry numbers as a `BigUint64Array` (approvals; ends ok
//    then failed), lowered by copying 32-bit halves: no item object and no bigint per entry
//    (the package's one-kind rounds, see src/scheduler.ts).
// 8. `next-releases` can hand its `start` actions back as 32-bit halves pushed onto an array
//    (`nextReleases(now, starts)`), instead of an action object and a bigint each.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const licenses = ['LICENSE-MIT', 'LICENSE-APACHE'];
// The store texts: one source in the repository, shipped by this package and the Python one.
const storeTexts = join(root, 'shared', 'store');
const storeFiles = ['sqlite.sql', 'sqlite-statements.json', 'redis.lua', 'postgres.sql'];

if (process.argv.includes('--unpack')) {
  for (const name of licenses) rmSync(join(here, name), { force: true });
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
let dvMemory;
function dvRefresh(mem) {
  const buffer = mem.buffer;
  if (typeof SharedArrayBuffer !== 'undefined' && buffer instanceof SharedArrayBuffer) throw new TypeError('turnstile: a shared memory never detaches; the glue cannot tell it grew');
  dv = new DataView(buffer);
  dvBytes = new Uint8Array(buffer);
  dvMemory = mem;
}
const dataView = mem => (mem === dvMemory && dvBytes.length !== 0) ? dv : (dvRefresh(mem), dv);
const memoryBytes = mem => (mem === dvMemory && dvBytes.length !== 0) ? dvBytes : (dvRefresh(mem), dvBytes);
// turnstile build.mjs patch 5: views end`;
const GLUE_STRINGS = `// turnstile build.mjs patch 5: strings begin
function utf8Encode(s, realloc, memory) {
  if (typeof s !== 'string') throw new TypeError('expected a string');
  const n = s.length;
  if (n === 0) {
    utf8EncodedLen = 0;
    return 1;
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
  if (n > 64) utf8Encoder.encodeInto(s, new Uint8Array(bytes.buffer, ptr, n));
  else for (let j = 0; j < n; j++) bytes[ptr + j] = s.charCodeAt(j);
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

// Patch 7's helper: 24-byte records, each an entry number (at `numberAt`) and a one-byte tag (at
// `tagAt`: `tag` for the first `split` records, `tagAfter` for the rest).
const GLUE_ENTRIES = `// turnstile build.mjs patch 7: entries begin
function lowerEntries(memory, ptr, list, numberAt, tagAt, tag, split, tagAfter) {
  const bytes = memoryBytes(memory);
  const words = new Uint32Array(bytes.buffer);
  const src = new Uint32Array(list.buffer, list.byteOffset, list.length * 2);
  for (let i = 0; i < list.length; i++) {
    const base = ptr + i * 24;
    bytes[base + tagAt] = i < split ? tag : tagAfter;
    const w = (base + numberAt) >> 2;
    words[w] = src[2 * i];
    words[w + 1] = src[2 * i + 1];
  }
}
// turnstile build.mjs patch 7: entries end`;

const gluePath = join(dist, 'component', 'turnstile.js');
let glue = readFileSync(gluePath, 'utf8');

// Patch 1: typed-array copies of list results.
const slice = /new (BigUint64Array|BigInt64Array|Uint32Array|Int32Array|Float64Array)\((memory\d+)\.buffer\.slice\((ptr\d+), \3 \+ (len\d+) \* (\d)\)\)/g;
const slices = glue.match(slice)?.length ?? 0;
if (slices === 0) fail('patch 1: no `new T(memoryN.buffer.slice(ptr, ptr + len * size))` in jco\'s glue; check the lifting of list results and update the patch');
glue = glue.replace(slice, 'new $1($2.buffer, $3, $4).slice()');

// Patch 4: an empty list of records (`submit-batch`'s calls, `on-ended`'s ends, `on-events`'s
// events, a saved state's lists) is lowered without a call to the guest's allocator: most
// rounds send no events or no ends. The pointer is the alignment, non-null and aligned, as the
// canonical ABI allows for an empty list (jco lowers an empty string the same way, as pointer
// 1). (Since WIT 0.3 no export takes a `list<u64>` / `list<u32>`, whose typed-array lowering this
// patch also covered; that part is gone with them.)
const lowerRecords = /var (result\d+) = realloc0\(0, 0, (\d+), (len\d+) \* (\d+)\);/g;
const lowered = glue.match(lowerRecords)?.length ?? 0;
if (lowered === 0) fail('patch 4: no list-of-records lowering (`var resultN = realloc0(0, 0, align, lenN * size);`) in jco\'s glue; check the lowering of list<call> / list<event> and update the patch');
glue = glue.replace(lowerRecords, (_, result, align, len, size) => `var ${result} = ${len} ? realloc0(0, 0, ${align}, ${len} * ${size}) : ${align};`);

// Patch 5: one `DataView` and one `Uint8Array` of the component's memory, made again only when
// memory grew. jco's `dataView(memory0)` compares `dv.buffer` with `memory0.buffer` on every field
// it reads or writes, and `WebAssembly.Memory.prototype.buffer` is a call into the engine (a
// twentieth of a batch's time); its strings make a `Uint8Array` per value. A grown memory
// detaches its old buffer (the JS API's "refresh the memory buffer"), and a typed array of a
// detached buffer has length 0: that is the check. Strings whose characters are all ASCII (call
// ids, tool names, keys, messages: nearly all) are written and read byte by byte (below 64
// characters; `encodeInto` / `decode` of one view above); any other string takes jco's own path,
// so the bytes and the strings are exactly jco's (test/glue.test.mjs compares the two).
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
glue = glue.replace(/new (BigUint64Array|BigInt64Array|Uint32Array|Int32Array|Float64Array)\((memory\d+)\.buffer, /g, 'new $1(memoryBytes($2).buffer, ');
if (/\bmemory\d*\.buffer\b/.test(glue.replace(/const buffer = mem\.buffer;/, ''))) fail('patch 5: the glue still reads `memoryN.buffer` somewhere: view it through `memoryBytes` or `dataView`');

// Patch 6: u64 fields read unsigned at once.
const u64Read = /BigInt\.asUintN\(64, (dataView\(memory\d+\))\.getBigInt64\(([^()]*)\)\)/g;
const u64Reads = glue.match(u64Read)?.length ?? 0;
if (u64Reads === 0) fail('patch 6: no `BigInt.asUintN(64, dataView(memoryN).getBigInt64(...))` in jco\'s glue; check how the glue lifts u64 fields and update the patch');
glue = glue.replace(u64Read, '$1.getBigUint64($2)');

// Patch 7: entry numbers lowered from a typed array. The records' layout is checked where the
// glue writes it (an `ended` is the entry at +0 and the end's tag at +8, an `approve` event its
// tag 0 at +0 and the entry at +8, both 24 bytes): a moved field fails the build.
function typedEntries(name, params, check, call) {
  const start = glue.indexOf(`Scheduler.prototype.${name} = function ${name}(arg1, arg2) {`);
  const end = glue.indexOf('Scheduler.prototype.', start + 1);
  if (start < 0 || end < 0) fail(`patch 7: jco's glue has no \`Scheduler.prototype.${name}(arg1, arg2)\`; check the bindings and update the patch`);
  let body = glue.slice(start, end);
  if (!check.every((re) => re.test(body))) fail(`patch 7: \`${name}\` no longer lowers its records as this patch copies them (${check.find((re) => !re.test(body))}); check the layout and update the patch`);
  const loop = /\n(\s*)for \(let i = 0; i < (vec\d+)\.length; i\+\+\) \{\n\s*const e = \2\[i\];\n\s*const base = (result\d+) \+ i \* 24;/;
  if (!loop.test(body)) fail(`patch 7: \`${name}\`'s lowering loop is not where it was; update the patch`);
  body = body.replace(`function ${name}(arg1, arg2) {`, `function ${name}(${params}) {`);
  body = body.replace(loop, (m, indent, vec, result) => `\n${indent}if (${vec} instanceof BigUint64Array) ${call(result, vec)}\n${indent}else` + m.slice(1 + indent.length - 1).replace(/^\s*/, ' '));
  glue = glue.slice(0, start) + body + glue.slice(end);
}
typedEntries('onEnded', 'arg1, arg2, arg3', [/var \{entry: v2_0, end: v2_1 \} = e;\n\s*dataView\(memory0\)\.setBigInt64\(base \+ 0, toUint64\(v2_0\), true\);/, /case 'ok': \{\n\s*dataView\(memory0\)\.setInt8\(base \+ 8, 0, true\);/, /case 'failed': \{\n\s*dataView\(memory0\)\.setInt8\(base \+ 8, 1, true\);/], (result, vec) => `lowerEntries(memory0, ${result}, ${vec}, 0, 8, 0, arg3, 1);`);
typedEntries('onEvents', 'arg1, arg2', [/case 'approve': \{\n\s*const e = variant\d+\.val;\n\s*dataView\(memory0\)\.setInt8\(base \+ 0, 0, true\);\n\s*dataView\(memory0\)\.setBigInt64\(base \+ 8, toUint64\(e\), true\);/], (result, vec) => `lowerEntries(memory0, ${result}, ${vec}, 8, 0, 0, ${vec}.length, 0);`);
const lowerHelpers = /\n( *)\/\/ turnstile build\.mjs patch 5: strings end\n/;
glue = glue.replace(lowerHelpers, (m, indent) => m + GLUE_ENTRIES.split('\n').map((line) => (line ? indent + line : line)).join('\n') + '\n');

// Patch 8: `start` actions as halves. After patch 6 (its u64 read is the one this matches).
{
  const start = glue.indexOf('Scheduler.prototype.nextReleases = function nextReleases(arg1) {');
  const end = glue.indexOf('Scheduler.prototype.', start + 1);
  if (start < 0 || end < 0) fail('patch 8: jco\'s glue has no `Scheduler.prototype.nextReleases(arg1)`; check the bindings and update the patch');
  let body = glue.slice(start, end);
  const startAction = /(\n\s*)variant(\d+)= \{\n\s*tag: 'start',\n\s*val: dataView\(memory0\)\.getBigUint64\(base \+ 8, true\)\n\s*\};\n\s*break;/;
  const found = startAction.exec(body);
  if (!found) fail('patch 8: `next-releases` no longer lifts `start(u64)` as `{ tag: \'start\', val: getBigUint64(base + 8) }`; check the layout and update the patch');
  const push = new RegExp(`\\n\\s*result\\d+\\.push\\(variant${found[2]}\\);`);
  if (!push.test(body)) fail('patch 8: `next-releases` no longer pushes each action as it lifts it; update the patch');
  body = body.replace('function nextReleases(arg1) {', 'function nextReleases(arg1, arg2) {');
  body = body.replace(startAction, (m, indent) => `${indent}if (arg2 !== undefined) {${indent}  arg2.push(dataView(memory0).getUint32(base + 8, true), dataView(memory0).getUint32(base + 12, true));${indent}  continue;${indent}}` + m);
  glue = glue.slice(0, start) + body + glue.slice(end);
}

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

execFileSync(bin('tsc'), ['-p', join(here, 'tsconfig.json')], { stdio: 'inherit' });

mkdirSync(join(dist, 'shared', 'store'), { recursive: true });
for (const name of storeFiles) {
  if (!existsSync(join(storeTexts, name))) fail(`${join(storeTexts, name)} is missing: the shared entry cannot open a store without it`);
  copyFileSync(join(storeTexts, name), join(dist, 'shared', 'store', name));
}

if (pack) {
  for (const name of licenses) {
    if (!existsSync(join(root, name))) fail(`${join(root, name)} is missing`);
    copyFileSync(join(root, name), join(here, name));
  }
}
console.log(`built ${dist} from ${wasm} (patched: ${slices} list copies, ${lowered} list lowerings, ${decodes} string liftings, ${u64Reads} u64 reads)`);
