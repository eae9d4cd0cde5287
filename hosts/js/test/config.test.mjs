// Config layers as TOML text or plain objects of the same shape: wrong shapes first (never an
// empty policy), then objects that resolve like their TOML, diagnostics that still name key paths,
// tools and the layer, and spans into the generated text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, Scheduler, Turnstile, TurnstileError } from '../dist/index.js';

const TOML = `
[conversation.tools.github_issues]
concurrency = { key = "github", limit = 4 }
[conversation.tools.github_pulls]
concurrency = { key = "github", limit = 4 }
[conversation.tools.fs_delete_file]
concurrency = 1
fan_out = { on_error = "stop" }
`;
const OBJECT = {
  conversation: {
    tools: {
      github_issues: { concurrency: { key: 'github', limit: 4 } },
      github_pulls: { concurrency: { key: 'github', limit: 4 } },
      fs_delete_file: { concurrency: 1, fan_out: { on_error: 'stop' } },
    },
  },
};

test('wrong shapes are TypeErrors naming what is wrong, never an empty policy', async () => {
  const t = await Turnstile.load();
  for (const [bad, mention] of [
    [{ user: TOML }, 'layers must be an array'],
    [TOML, 'layers must be an array'],
    [42, 'layers must be an array'],
    [[42], 'layers[0]'],
    [[TOML, null], 'layers[1]'],
    [[{ name: 'x', text: 1 }], 'layers[0].text'],
    [[{ name: 'x', value: 'not an object' }], 'layers[0].value'],
    [[{ conversation: { tools: { t: { concurrency: Symbol('x') } } } }], 'layers[0].conversation.tools.t.concurrency'],
    [[{ conversation: { tools: { t: { run: null } } } }], 'layers[0].conversation.tools.t.run'],
  ]) {
    assert.throws(() => t.resolve(bad), (e) => e instanceof TypeError && e.message.includes(mention), `${mention}`);
  }
});

test('a plain object resolves exactly like its TOML', async () => {
  const t = await Turnstile.load();
  const fromText = t.resolve([{ name: 'user.toml', text: TOML }]);
  const fromObject = t.resolve([{ name: 'user', value: OBJECT }]);
  const bare = t.resolve([OBJECT]);
  assert.deepEqual(fromObject.tools(), fromText.tools());
  assert.deepEqual(bare.tools(), fromText.tools());
  assert.equal(fromObject.fingerprint(), fromText.fingerprint());
  // Fields RFD 129 does not own are ignored, as in TOML; odd keys are quoted.
  const rich = t.resolve([{ conversation: { tools: { 'a.b': { concurrency: 2, source: 'mcp', parameters: [{ name: 'x', 'needs "quotes"': true }], created: new Date(0) } } }, assistant: { model: 'm' } }]);
  assert.deepEqual(rich.tools(), [{ name: 'a.b', concurrency: [{ key: 'a.b', limit: 2, delayMs: 0, rates: [], burst: 1, weight: 1, retries: 3, maxWaitMs: 300000, arguments: [], shared: false }], fanOut: false, onError: 'continue' }]);
});

test('max_wait resolves to maxWaitMs (a number), 300000 when unset, and tools naming a key agree on it', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ conversation: { tools: { slow: { concurrency: { key: 'slow', max_wait: '10m' } }, strict: { concurrency: { key: 'strict', max_wait: 0 } }, plain: { concurrency: 1 } } } }]);
  assert.equal(policy.tool('slow').concurrency[0].maxWaitMs, 600000);
  assert.equal(policy.tool('strict').concurrency[0].maxWaitMs, 0);
  assert.equal(policy.tool('plain').concurrency[0].maxWaitMs, 300000);
  assert.throws(
    () => t.resolve([{ conversation: { tools: { a: { concurrency: { key: 'k', max_wait: '10m' } }, b: { concurrency: { key: 'k' } } } } }]),
    (e) => e.diagnostics.length === 1 && e.diagnostics[0].code === 'concurrency-max-wait-conflict' && e.diagnostics[0].tools.join() === 'a,b',
  );
});

test('rate windows resolve to { count, perMs } in ascending order with their burst; their mistakes are typed diagnostics', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ conversation: { tools: { web: { concurrency: { key: 'brave', limit: 0, rate: ['2000/30d', '1/s'], burst: 10 } }, plain: { concurrency: 1 } } } }]);
  assert.deepEqual(policy.tool('web').concurrency[0].rates, [{ count: 1, perMs: 1000, burst: 10 }, { count: 2000, perMs: 2592000000, burst: 10 }]);
  const own = t.resolve([{ conversation: { tools: { web: { concurrency: { key: 'brave', rate: ['1/s', { rate: '2000/30d', burst: 2000 }] } } } } }]);
  assert.deepEqual(own.tool('web').concurrency[0].rates, [{ count: 1, perMs: 1000, burst: 1 }, { count: 2000, perMs: 2592000000, burst: 2000 }]);
  assert.equal(policy.tool('web').concurrency[0].burst, 10);
  assert.equal(policy.tool('web').concurrency[0].limit, 4294967295);
  assert.deepEqual(policy.tool('plain').concurrency[0].rates, []);
  assert.equal(policy.tool('plain').concurrency[0].burst, 1);
  for (const [concurrency, code] of [
    [{ key: 'k', rate: '5000' }, 'concurrency-type'],
    [{ key: 'k', rate: 5 }, 'concurrency-type'],
    [{ key: 'k', delay: 100, burst: 3 }, 'burst-without-rate'],
    [{ key: 'k', rate: '2000000/h', shared: true }, 'shared-rate-out-of-range'],
    [{ key: 'k', rate: '1/s', burst: 1000001, shared: true }, 'shared-rate-out-of-range'],
  ]) {
    assert.throws(
      () => t.resolve([{ conversation: { tools: { a: { concurrency } } } }]),
      (e) => e instanceof ConfigError && e.diagnostics.length === 1 && e.diagnostics[0].code === code,
      JSON.stringify(concurrency),
    );
  }
  assert.throws(
    () => t.resolve([{ conversation: { tools: { a: { concurrency: { key: 'k', rate: '1/s' } }, b: { concurrency: { key: 'k', rate: '2/s' } } } } }]),
    (e) => e.diagnostics[0].code === 'concurrency-rate-conflict' && e.diagnostics[0].tools.join() === 'a,b',
  );
});

test('an adaptive limit resolves to its ceiling and adaptMin; a fixed one has no adaptMin', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ conversation: { tools: { api: { concurrency: { key: 'api', limit: { max: 8, min: 2, adapt: 'aimd' } } }, plain: { concurrency: 3 } } } }]);
  assert.equal(policy.tool('api').concurrency[0].limit, 8);
  assert.equal(policy.tool('api').concurrency[0].adaptMin, 2);
  assert.equal('adaptMin' in policy.tool('plain').concurrency[0], false);
  for (const [limit, extra, code] of [
    [{ max: 4 }, {}, 'concurrency-type'],
    [{ max: 2, min: 3, adapt: 'aimd' }, {}, 'concurrency-type'],
  ]) {
    assert.throws(
      () => t.resolve([{ conversation: { tools: { a: { concurrency: { key: 'k', limit, ...extra } } } } }]),
      (e) => e instanceof ConfigError && e.diagnostics.length === 1 && e.diagnostics[0].code === code,
      JSON.stringify(limit),
    );
  }
  // The scheduler halves it on a rate-limited end: four start, then a 429 leaves room for two.
  const s = new Scheduler(t.resolve([{ conversation: { tools: { api: { concurrency: { key: 'api', limit: { max: 4, adapt: 'aimd' } } } } } }]));
  const batch = s.submit(['a', 'b', 'c', 'd', 'e', 'f'].map((id) => ({ id, tool: 'api' })));
  const e = (l) => batch.entry(l);
  assert.deepEqual([...s.step({ now: 0, approve: ['a', 'b', 'c', 'd', 'e', 'f'].map(e) }).start], ['a', 'b', 'c', 'd'].map(e));
  s.step({ now: 1, retry: [{ entry: e('a'), until: 1 }] });
  // b's end frees a slot, but two (c, d) is the limit now.
  assert.deepEqual([...s.step({ now: 2, ok: [e('b')] }).start], []);
  const why = s.inspect(batch.batch).find((x) => x.label === 'a').why;
  assert.match(why, /its limit adapts between 1 and 4 and is 2 now, halved after a rate limit/);
  s.dispose();
});

test('text and objects mix, lowest precedence first; a later object lifts a limit', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([TOML, { conversation: { tools: { fs_delete_file: { concurrency: 0, fan_out: false } } } }]);
  assert.deepEqual(policy.tool('fs_delete_file').concurrency, [], 'unbounded: no keys');
  assert.equal(policy.tool('github_pulls').concurrency[0].limit, 4);
});

test('diagnostics of an object layer name the key path, the tools and the layer; spans point into the JSON it crossed as', async () => {
  const t = await Turnstile.load();
  const conflicting = { conversation: { tools: { github_issues: { concurrency: { key: 'github', limit: 4 } }, github_pulls: { concurrency: { key: 'github', limit: 2 } }, bad: { concurrency: 'two' } } } };
  let error;
  assert.throws(
    () => t.resolve([{ name: 'plugin', value: conflicting }]),
    (e) => {
      error = e;
      return e instanceof ConfigError && e instanceof TurnstileError && e.code === 'invalid-config';
    },
  );
  const byCode = Object.fromEntries(error.diagnostics.map((d) => [d.code, d]));
  assert.deepEqual(Object.keys(byCode).sort(), ['concurrency-limit-conflict', 'concurrency-type']);
  const conflict = byCode['concurrency-limit-conflict'];
  assert.deepEqual(conflict.tools, ['github_issues', 'github_pulls']);
  assert.equal(conflict.labels[0].span.layerName, 'plugin');
  assert.ok(conflict.rendered.includes('"concurrency": { "key": "github", "limit": 2 }'), conflict.rendered);
  const type = byCode['concurrency-type'];
  assert.deepEqual(type.path, ['conversation', 'tools', 'bad', 'concurrency']);
  assert.ok(type.rendered.includes('--> plugin:'), type.rendered);
  assert.ok(error.message.includes('error[concurrency-type]'));
  // The same text from Python's package (`_json_layer.dumps`), so both cite the same lines.
  assert.deepEqual([conflict.labels[0].span.line, conflict.labels[0].span.column], [5, 24]);
  // A JSON text layer cites its own lines; JSON's null is refused where it stands.
  const json = '{\n  "conversation": {\n    "tools": {\n      "a": { "concurrency": { "key": "k", "limit": "two" } }\n    }\n  }\n}\n';
  assert.throws(() => t.resolve([{ name: 'tools.json', text: json }]), (e) => e.diagnostics.length === 1 && e.diagnostics[0].code === 'concurrency-type' && e.diagnostics[0].rendered.includes('tools.json:4:52'));
  assert.throws(() => t.resolve([{ name: 'n.json', text: '{"conversation": null}' }]), (e) => e.diagnostics[0].code === 'json-syntax' && e.diagnostics[0].message.includes('null'));
  // What JSON cannot hold is refused with its path before anything crosses.
  const cyclic = { concurrency: 1 };
  cyclic.again = cyclic;
  for (const [value, mention] of [[NaN, 'a finite number'], [2n ** 64n, 'within 2^53'], [cyclic, 'cycle'], [null, 'a JSON value'], ['\uD800', 'lone surrogates']]) {
    assert.throws(() => t.resolve([{ conversation: { tools: { t: value } } }]), (e) => e instanceof TypeError && e.message.includes('conversation.tools.t') && e.message.includes(mention), mention);
  }
  // A bare object is named by its position.
  assert.throws(() => t.resolve([{}, { conversation: { tools: { x: { concurrency: -1 } } } }]), (e) => e.diagnostics[0].labels[0].span.layerName === 'layer 2');
});

test('a key set resolves to every member, in written order; what a set cannot be is a typed diagnostic', async () => {
  const t = await Turnstile.load();
  const KEY_SET = '[conversation.tools.mv]\nconcurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]\n[conversation.tools.free]\nconcurrency = []\n';
  const policy = t.resolve([{ name: 'sets', text: KEY_SET }]);
  const member = (key, name) => ({ key, limit: 1, delayMs: 0, rates: [], burst: 1, weight: 1, retries: 3, maxWaitMs: 300000, arguments: [name], shared: false });
  assert.deepEqual(policy.tool('mv').concurrency, [member('fs:{src}', 'src'), member('fs:{dst}', 'dst')]);
  assert.deepEqual(policy.tool('free').concurrency, [], 'an empty set is unbounded');
  // The same set as an object layer.
  const fromObject = t.resolve([{ conversation: { tools: { mv: { concurrency: [{ key: 'fs:{src}' }, { key: 'fs:{dst}' }] }, free: { concurrency: [] } } } }]);
  assert.deepEqual(fromObject.tools(), policy.tools());
  assert.equal(fromObject.fingerprint(), policy.fingerprint());
  for (const [concurrency, code] of [
    [[{ key: 'fs:{path}' }, { key: 'fs:{path}' }], 'concurrency-key-repeated'],
    [[{ key: 'store', shared: true }, { key: 'bank', shared: true }], 'shared-key-in-set'],
    [[{ key: 'local', delay: 100 }, { key: 'store', shared: true }], 'shared-key-in-set'],
    [[{ key: 'e1', limit: { max: 4, adapt: 'aimd' } }, { key: 'e2', limit: { max: 2, adapt: 'aimd' } }], 'adaptive-keys-in-set'],
  ]) {
    assert.throws(
      () => t.resolve([{ conversation: { tools: { a: { concurrency } } } }]),
      (e) => e instanceof ConfigError && e.diagnostics.length === 1 && e.diagnostics[0].code === code && e.diagnostics[0].severity === 'error' && e.diagnostics[0].tools.join() === 'a',
      code,
    );
  }
});
