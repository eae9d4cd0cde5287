// build.mjs patch 1 (list<u64> results copied into a slab) gives what jco's copy gives, a fresh
// region each, across memory growth and a detached slab; patch 5 (one view of memory, ASCII
// strings without TextEncoder / TextDecoder, long ones encoded in place) gives exactly what jco's
// own string path gives: the patched helpers are read from the built glue and
// run against a memory of their own, next to jco's helpers as jco 1.12 writes them, on empty,
// ASCII (short and long), non-ASCII and lone-surrogate strings and on arbitrary bytes, with a
// memory that grows between allocations (so every view made before the growth is detached);
// then strings round-trip through the component itself as TextEncoder and TextDecoder would
// carry them, and entry numbers (patches 1, 4 and 6: lists of u64 lowered from and lifted into
// typed arrays, u64s read unsigned) cross exactly past 2^32, 2^53 and up to 2^64; a list of u64
// that is not a typed array of 8-byte items is a TypeError in the glue, never bytes it made up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Scheduler, Turnstile } from '../dist/index.js';
import { rng as seeded } from './fixtures/rng.mjs';

const glue = readFileSync(new URL('../dist/component/turnstile.js', import.meta.url), 'utf8');

function section(name, patch = 5) {
  const m = glue.match(new RegExp(`// turnstile build\\.mjs patch ${patch}: ${name} begin\\n([\\s\\S]*?)// turnstile build\\.mjs patch ${patch}: ${name} end`));
  assert.ok(m, `the built glue has no patch ${patch} ${name} section`);
  return m[1];
}

/** The patched helpers, as the glue defines them, over their own closure. */
const patched = new Function(`
  const utf8Decoder = new TextDecoder();
  const utf8Encoder = new TextEncoder();
  let utf8EncodedLen = 0;
  ${section('views')}
  ${section('strings')}
  ${section('lists', 1)}
  return { utf8Encode, utf8Decode, dataView, memoryBytes, memoryWords, liftU64, encodedLen: () => utf8EncodedLen };
`);

/** jco 1.12's own helpers (what the glue had before patch 5). */
function unpatched() {
  const utf8Decoder = new TextDecoder();
  const utf8Encoder = new TextEncoder();
  let utf8EncodedLen = 0;
  function utf8Encode(s, realloc, memory) {
    if (typeof s !== 'string') throw new TypeError('expected a string');
    if (s.length === 0) {
      utf8EncodedLen = 0;
      return 1;
    }
    let buf = utf8Encoder.encode(s);
    let ptr = realloc(0, 0, 1, buf.length);
    new Uint8Array(memory.buffer).set(buf, ptr);
    utf8EncodedLen = buf.length;
    return ptr;
  }
  const utf8Decode = (memory, ptr, len) => utf8Decoder.decode(new Uint8Array(memory.buffer, ptr, len));
  return { utf8Encode, utf8Decode, encodedLen: () => utf8EncodedLen };
}

/** A memory and a bump allocator that grows the memory on every `grow`-th allocation (by no
 * page once it has 16: a grow of 0 pages detaches the old buffer too), starting over at the
 * bottom when the next string does not fit (each string is compared before the next). A
 * reallocation (`old` not 0) moves the bytes to a new place, as `cabi_realloc` may. `calls`
 * lists every call made, as `[old length, new length]`. */
function arena(grow) {
  const memory = new WebAssembly.Memory({ initial: 4, maximum: 16 });
  let top = 8;
  let count = 0;
  const calls = [];
  const realloc = (old, oldLen, align, len) => {
    calls.push([oldLen, len]);
    assert.equal(old === 0, oldLen === 0);
    const kept = old === 0 ? new Uint8Array(0) : new Uint8Array(memory.buffer, old, oldLen).slice();
    if (++count % grow === 0) memory.grow(memory.buffer.byteLength < 16 * 65536 ? 1 : 0);
    if (top + len > memory.buffer.byteLength) top = 8;
    const ptr = top;
    top += len + 1;
    new Uint8Array(memory.buffer).set(kept.subarray(0, Math.min(oldLen, len)), ptr);
    return ptr;
  };
  return { memory, realloc, calls };
}

const rng = (seed) => seeded(seed).int;

const FIXED = [
  '',
  'c0',
  'fs_delete_file',
  '\0',
  '\x7f',
  '\x80',
  'é',
  'naïve',
  '日本語のツール',
  '\u{1F600}',
  'a\u{1F600}b',
  '\uD800',
  '\uDFFF',
  'x\uD800',
  '\uDC00y',
  'a\uD83Db',
  '\uD83D\uDE00\uD83D',
  'x'.repeat(64),
  'x'.repeat(65),
  'y'.repeat(100_000),
  'z'.repeat(70) + 'é',
  'é' + 'z'.repeat(70),
  'q'.repeat(63) + '\uD800',
];

/** Random strings: ASCII mostly, with non-ASCII, surrogates (paired and lone) and lengths
 * around the 64-character threshold. */
function randomString(int) {
  const n = [0, 1, 5, 63, 64, 65, 200, 3000][int(8)];
  const pool = [() => 32 + int(95), () => int(128), () => 0x80 + int(0x780), () => 0x800 + int(0xd000), () => 0xd800 + int(0x800), () => 0xe000 + int(0x2000)];
  const ascii = int(3) > 0;
  let s = '';
  for (let i = 0; i < n; i++) s += String.fromCharCode(ascii && int(50) ? 32 + int(95) : pool[int(pool.length)]());
  return s;
}

test('the patched glue lowers every string to the bytes jco lowers it to, across memory growth', () => {
  const int = rng(7);
  const strings = [...FIXED, ...Array.from({ length: 2000 }, () => randomString(int))];
  for (const grow of [1, 3, 1000]) {
    const a = arena(grow);
    const b = arena(grow);
    const p = patched();
    const u = unpatched();
    for (const s of strings) {
      a.calls.length = b.calls.length = 0;
      const pp = p.utf8Encode(s, a.realloc, a.memory);
      const up = u.utf8Encode(s, b.realloc, b.memory);
      assert.equal(p.encodedLen(), u.encodedLen(), `length of ${JSON.stringify(s.slice(0, 80))}`);
      // jco's one allocation; a string above 64 characters that is not ASCII first takes its
      // length in UTF-16 units, then grows to jco's.
      const ascii = !/[^\0-\x7f]/.test(s);
      assert.deepEqual(a.calls, s.length > 64 && !ascii ? [[0, s.length], ...b.calls.map(([, len]) => [s.length, len])] : b.calls, 'the allocations');
      const mine = new Uint8Array(a.memory.buffer, pp, p.encodedLen());
      const theirs = new Uint8Array(b.memory.buffer, up, u.encodedLen());
      assert.deepEqual(mine, theirs, `bytes of ${JSON.stringify(s.slice(0, 80))}`);
      // And back: the patched lifting reads what the unpatched one reads.
      assert.equal(p.utf8Decode(a.memory, pp, p.encodedLen()), u.utf8Decode(b.memory, up, u.encodedLen()));
    }
    assert.throws(() => p.utf8Encode(42, a.realloc, a.memory), /expected a string/);
  }
});

test('the patched glue lifts any bytes, valid UTF-8 or not, to the string jco lifts them to', () => {
  const int = rng(11);
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 10 });
  const p = patched();
  const u = unpatched();
  for (let round = 0; round < 3000; round++) {
    const len = [0, 1, 2, 3, 4, 63, 64, 65, 500][int(9)];
    const bytes = new Uint8Array(memory.buffer);
    const ptr = int(1000);
    for (let i = 0; i < len; i++) bytes[ptr + i] = int(4) ? int(128) : int(256);
    assert.equal(p.utf8Decode(memory, ptr, len), u.utf8Decode(memory, ptr, len), `bytes ${[...bytes.subarray(ptr, ptr + len)]}`);
    if (round % 500 === 0) memory.grow(1); // views made before are detached now
  }
  // Out of bounds: the same RangeError as jco's `new Uint8Array(buffer, ptr, len)`.
  const end = memory.buffer.byteLength;
  assert.throws(() => p.utf8Decode(memory, end - 2, 8), RangeError);
  assert.throws(() => u.utf8Decode(memory, end - 2, 8), RangeError);
});

test('one DataView of memory, made again only once memory grew', () => {
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 10 });
  const p = patched();
  const first = p.dataView(memory);
  assert.equal(p.dataView(memory), first, 'the same view while memory stays');
  assert.equal(p.memoryBytes(memory).buffer, first.buffer);
  memory.grow(1);
  const second = p.dataView(memory);
  assert.notEqual(second, first, 'a new view once memory grew');
  assert.equal(second.buffer, memory.buffer);
  assert.equal(p.memoryBytes(memory).length, 2 * 65536);
  assert.equal(p.memoryWords(memory).length, 2 * 65536 / 4);
  assert.equal(p.memoryWords(memory).buffer, memory.buffer);
  const other = new WebAssembly.Memory({ initial: 2 });
  assert.equal(p.dataView(other).buffer, other.buffer, 'another memory gets its own view');
});

test('strings round-trip through the component as TextEncoder and TextDecoder carry them', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'glue', text: '[conversation.tools.ops]\nconcurrency = 1\n' }]);
  const scheduler = new Scheduler(policy);
  const carried = (s) => new TextDecoder().decode(new TextEncoder().encode(s));
  const names = ['c0', 'é', 'naïve-日本', '\u{1F600}', 'x\uD800', '\uDC00y', 'a\uD83Db', 'k'.repeat(65), 'é' + 'k'.repeat(80), 'k'.repeat(200) + '\uDFFF'];
  for (const id of names) {
    for (const tool of ['ops', 'unconfigured-ü\uD800', 'x'.repeat(70)]) {
      const b = scheduler.submit([{ id, tool }]);
      assert.equal(scheduler.label(b.first), carried(id));
      assert.equal(scheduler.inspect(b.batch)[0].tool, carried(tool));
      scheduler.step({ approve: b.entries() });
      scheduler.step({ ok: b.entries() });
    }
  }
  // Long strings, both ways: a label of 20,000 characters comes back inside the sentence.
  for (const label of ['L'.repeat(20_000), 'é'.repeat(5000) + '\uD800', '']) {
    const message = t.explain(label, { kind: 'stopped', after: 1 });
    assert.ok(message.includes(carried(label)), `the sentence names ${JSON.stringify(label.slice(0, 20))}...`);
  }
  scheduler.dispose();
});

test('entry numbers cross exactly however large: typed lists both ways (patches 1 and 4), u64s read unsigned (patch 6)', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'glue', text: '[conversation.tools.ops]\nconcurrency = 2\n' }]);
  for (const nextEntry of [2n ** 32n - 2n, 2n ** 53n - 1n, 2n ** 64n - 20n]) {
    const state = { version: 2, policy: policy.fingerprint(), nextBatch: 1n, nextEntry, batches: [] };
    const { scheduler } = Scheduler.resume(policy, state, { started: 'run-again' });
    const b = scheduler.submit(Array.from({ length: 5 }, (_, i) => ({ id: `c${i}`, tool: 'ops' })));
    const entries = [...b.entries()];
    assert.equal(b.first, nextEntry);
    let out = scheduler.step({ approve: b.entries() });
    assert.deepEqual(out.errors, []);
    const started = [...out.start];
    while (out.retired.length === 0) {
      out = scheduler.step({ ok: out.start.length ? out.start.subarray(0, 1) : [], failed: out.start.subarray(1) });
      assert.deepEqual(out.errors, []);
      started.push(...out.start);
    }
    assert.deepEqual(started, entries, `every entry started once, exactly, from ${nextEntry}`);
    scheduler.dispose();
  }
});

test('a list of u64 crosses only as a typed array of 8-byte items: anything else is a TypeError, and nothing changed', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'glue', text: '[conversation.tools.ops]\nconcurrency = 2\n' }]);
  const scheduler = new Scheduler(policy);
  const raw = scheduler.held.get();
  const b = scheduler.submit([{ id: 'a', tool: 'ops' }]);
  const none = new BigUint64Array(0);
  for (const bad of [[b.first], Uint32Array.of(1, 0), new Uint8Array(8), { length: 1 }]) {
    assert.throws(() => raw.onEvents([{ tag: 'approve', val: bad }], undefined), { name: 'TypeError', message: /typed array/ });
    assert.throws(() => raw.onEnded({ ok: bad, failed: none, rateLimited: [] }, undefined), { name: 'TypeError', message: /typed array/ });
    assert.throws(() => raw.onEnded({ ok: none, failed: bad, rateLimited: [] }, undefined), { name: 'TypeError', message: /typed array/ });
  }
  // Nothing crossed: the entry is still pending, and the scheduler works on.
  assert.equal(scheduler.inspect(b.batch)[0].state.kind, 'pending');
  assert.deepEqual([...scheduler.step({ approve: b.entries() }).start], [b.first]);
  scheduler.dispose();
});

test('list<u64> results (patch 1) are what jco copies, each its own bytes, however the slab and memory change', () => {
  const int = rng(13);
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 20 });
  const p = patched();
  /** jco's own lifting. */
  const jco = (ptr, len) => new BigUint64Array(memory.buffer.slice(ptr, ptr + len * 8));
  const held = [];
  for (let round = 0; round < 3000; round++) {
    const len = [0, 1, 2, 8, 9, 100, 511, 512, 513, 2000][int(10)];
    const ptr = 8 * int(2000);
    const words = new Uint32Array(memory.buffer, ptr, len * 2);
    for (let i = 0; i < words.length; i++) words[i] = int(2 ** 32);
    const got = p.liftU64(memory, ptr, len);
    assert.ok(got instanceof BigUint64Array);
    assert.deepEqual(got, jco(ptr, len), `${len} numbers at ${ptr}`);
    held.push([got, got.slice()]);
    if (round % 700 === 0) memory.grow(1); // the memory's views are detached now
    if (round % 900 === 0 && got.length) structuredClone(got.buffer, { transfer: [got.buffer] }); // a detached slab
  }
  // No result shares a byte with a later one: each still holds what it was given (unless its
  // slab was transferred away on purpose above).
  for (const [got, copy] of held) if (got.buffer.byteLength) assert.deepEqual(got, copy);
  assert.equal(p.liftU64(memory, 8, 0), p.liftU64(memory, 16, 0), 'one empty array');
  assert.ok(Object.isFrozen(p.liftU64(memory, 8, 0)));
  // Out of memory or misaligned: a RangeError, as jco's slice of a view throws.
  const end = memory.buffer.byteLength;
  assert.throws(() => p.liftU64(memory, end - 8, 2), RangeError);
  assert.throws(() => p.liftU64(memory, 4, 2), RangeError);
});

test('the lists a step hands to a host are its own: not views of the glue\'s slab', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'glue', text: '[conversation.tools.free]\n' }]);
  const scheduler = new Scheduler(policy);
  const b = scheduler.submit(Array.from({ length: 20 }, (_, i) => ({ id: `c${i}`, tool: 'free' })));
  const out = scheduler.step({ approve: b.entries() });
  assert.deepEqual(out.start, b.entries());
  assert.equal(out.start.buffer.byteLength, out.start.byteLength, 'start owns its buffer');
  const done = scheduler.step({ ok: out.start });
  assert.deepEqual([...done.retired], [b.batch]);
  assert.equal(done.retired.buffer.byteLength, done.retired.byteLength, 'retired owns its buffer');
  scheduler.dispose();
});
