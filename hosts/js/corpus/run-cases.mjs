// Runs case files or folders through the transpiled component: `node corpus/run-cases.mjs DIR...`.
// Prints each failure and `N passed, M failed`; exits 1 on any failure.
import { caseFiles, runFiles } from './corpus.mjs';

const paths = process.argv.slice(2);
if (!paths.length) {
  console.error('usage: node corpus/run-cases.mjs FILE-OR-DIR...');
  process.exit(2);
}
const summary = await runFiles(caseFiles(paths));
for (const [file, why] of summary.failed) console.log(`FAIL ${file}: ${why}`);
console.log(`${summary.passed} passed, ${summary.failed.length} failed`);
process.exit(summary.failed.length ? 1 : 0);
