// The store texts the package ships (dist/shared/store/, copied by build.mjs) are the
// repository's shared/store/ files byte for byte, the one source the Python package ships too;
// the shared entry reads them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { STATEMENT_NAMES, STORE_TEXTS, postgresSchema, redisScript, sqliteTexts } from '../dist/shared/texts.js';

const source = new URL('../../../shared/store/', import.meta.url);

test('texts: the shipped store texts are the repository\'s, byte for byte', () => {
  const names = readdirSync(source).sort();
  assert.deepEqual(names, ['postgres.sql', 'redis.lua', 'sqlite-statements.json', 'sqlite.sql']);
  assert.deepEqual(readdirSync(STORE_TEXTS).sort(), names);
  for (const name of names) {
    assert.ok(readFileSync(new URL(name, STORE_TEXTS)).equals(readFileSync(new URL(name, source))), `dist/shared/store/${name} differs from shared/store/${name}: rebuild (node build.mjs)`);
  }
});

test('texts: the schema, its version and every statement; the Redis script; the Postgres schema', () => {
  const texts = sqliteTexts();
  assert.equal(texts.schemaVersion, 3);
  assert.match(texts.schema, /VALUES \('schema', '3'\)/);
  assert.deepEqual(Object.keys(texts.statements), [...STATEMENT_NAMES]);
  for (const text of Object.values(texts.statements)) assert.match(text, /turnstile_shared_/);
  assert.match(redisScript(), /^-- Turnstile shared keys, script 1/);
  assert.match(postgresSchema(), /^-- Turnstile shared keys on Postgres, schema 1/);
  assert.match(postgresSchema(), /VALUES \('schema', '1'\)/);
});
