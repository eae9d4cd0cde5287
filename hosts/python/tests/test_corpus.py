"""The whole shared corpus through wasmtime-py, with the harness's expectations."""

from pathlib import Path

from corpus import case_files, run_files

CASES = Path(__file__).resolve().parents[3] / "tests" / "cases"


def test_the_shared_corpus_passes_through_wasmtime_py() -> None:
    files = case_files([CASES])
    assert len(files) >= 60, f"expected the whole corpus, found {len(files)}"
    passed, failed = run_files(files)
    assert not failed, "\n".join(f"FAIL {f.name}: {why}" for f, why in failed)
    assert passed == len(files)
