// The whole shared corpus through the transpiled component, with the harness's expectations.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { caseFiles, runFiles } from '../corpus/corpus.mjs';

const cases = fileURLToPath(new URL('../../../tests/cases', import.meta.url));

test('the shared corpus passes through jco', async () => {
  const files = caseFiles([cases]);
  assert.ok(files.length >= 60, `expected the whole corpus, found ${files.length}`);
  const summary = await runFiles(files);
  for (const [file, why] of summary.failed) console.error(`FAIL ${file}: ${why}`);
  assert.equal(summary.failed.length, 0, `${summary.passed} passed, ${summary.failed.length} failed`);
});
