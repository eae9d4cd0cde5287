#!/usr/bin/env python3
"""Proves the simulator and the corpus can disagree: each mutant below breaks one rule of the
engine in place, the simulator (`--test sim`), the native corpus (`--test corpus`), the key
set oracle (`--test key_sets`), the path key oracle (`--test path_keys`) or the engine's unit
tests (`--lib`: the store's grant rule against `tests/shared/grant-rule.txt`) must then fail, and the file is restored whatever happens. Not
part of CI (each mutant recompiles the engine's tests); run it after changing a rule or its
checks:

    python3 engine/tests/mutants.py            # every mutant
    python3 engine/tests/mutants.py rate       # those whose name contains "rate"

Prints one line per mutant, `caught` or `MISSED`, and exits 1 if any was missed.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (name, file, text, replacement): every occurrence of the text is replaced.
MUTANTS = [
    (
        "lifting a pause does not wake the shared key of a granted set call waiting on it",
        "engine/src/schedule/time.rs",
        "for s in std::mem::take(&mut self.keys.key_mut(k).pause_wakes) {",
        "for s in std::mem::take(&mut self.keys.key_mut(k).pause_wakes).into_iter().filter(|_| false) {",
    ),
    (
        "a local key's walk starts a set's call without its shared key's permit",
        "engine/src/schedule/key_set.rs",
        "if let Some(shared) = first.filter(|&f| f != k && self.keys.key(f).shared) {",
        "if let Some(shared) = first.filter(|&f| false && f != k && self.keys.key(f).shared) {",
    ),
    (
        "a set's call yielding its shared permit is not queued again on its other keys",
        "engine/src/schedule/shared.rs",
        "self.keys.queue_again(other, b);",
        "let _ = (other, b);",
    ),
    (
        "a granted set call waiting on another key's pause is woken by that key, not its shared one",
        "engine/src/schedule/shared.rs",
        "                self.arm_key(k, gate);\n                let wakes",
        "                self.arm_key(key, gate);\n                let wakes",
    ),
    (
        "an adaptive shared key asks its store for its ceiling after a 429 (the store never sees it back off)",
        "engine/src/schedule/shared.rs",
        "limit: (key.limit != u32::MAX).then_some(key.limit),",
        "limit: (key.limit != u32::MAX).then_some(key.adapt.map_or(key.limit, |a| a.bounds().1)),",
    ),
    (
        "a shared key's permit request without its rate windows (each process takes the whole rate)",
        "engine/src/schedule/shared.rs",
        "rates: key.store_rates.to_vec(),",
        "rates: Vec::new(),",
    ),
    (
        "the store's grant rule lets a heavy call through as if it weighed 1",
        "engine/src/shared/grant.rs",
        "gate_ms = gate_ms.max(window_opens_at(w, tat_n(key, w), head.weight));",
        "gate_ms = gate_ms.max(window_opens_at(w, tat_n(key, w), 1));",
    ),
    (
        "a rate window off by one (opens a millisecond early)",
        "engine/src/schedule/rate.rs",
        "per_count(due, self.count, 1)",
        "per_count(due, self.count, 0)",
    ),
    (
        "a burst one larger than configured",
        "engine/src/schedule/rate.rs",
        "let slack = u128::from(self.burst - self.units(weight)) * u128::from(self.per_ms);",
        "let slack = u128::from(self.burst + 1 - self.units(weight)) * u128::from(self.per_ms);",
    ),
    (
        "an idle window keeps its credit (the bucket overflows)",
        "engine/src/schedule/rate.rs",
        "let base = if self.tat_n + u128::from(self.count) > paced {",
        "let base = if true || self.tat_n + u128::from(self.count) > paced {",
    ),
    (
        "a made key forgotten when its next start is due, not when it rested",
        "engine/src/schedule/keys/made.rs",
        "let gate = key.rested_at();",
        "let gate = key.gate();",
    ),
    (
        "adapt above the ceiling",
        "engine/src/schedule/adapt.rs",
        "if *limit >= self.max {",
        "if *limit >= self.max + 1 {",
    ),
    (
        "adapt below the floor",
        "engine/src/schedule/adapt.rs",
        "*limit = (*limit / 2).max(self.min);",
        "*limit = (*limit / 2).max(1);",
    ),
    (
        "a clean end that grows the limit at once",
        "engine/src/schedule/adapt.rs",
        "if self.clean < *limit {",
        "if self.clean < 1 {",
    ),
    (
        "a made key forgotten with what its adaptive limit learned",
        "engine/src/schedule/keys/made.rs",
        "if key.uses.refs == 0 && !key.adapted_down() {",
        "if key.uses.refs == 0 {",
    ),
    (
        "a heavy call that costs one unit",
        "engine/src/schedule/rate.rs",
        "self.tat_n = base + u128::from(weight) * u128::from(self.per_ms);",
        "self.tat_n = base + u128::from(self.per_ms);",
    ),
    (
        "every 429 halves, not once per generation",
        "engine/src/schedule/adapt.rs",
        "        if started != self.generation {\n            return;\n        }\n        self.generation += 1;",
        "        self.generation += 1;",
    ),
    (
        "a key set acquired partly (its other keys' room unchecked)",
        "engine/src/schedule/key_set.rs",
        "if !key.has_room() {",
        "if false && !key.has_room() {",
    ),
    (
        "a key set's call overtakes on one of its keys (queue front unchecked)",
        "engine/src/schedule/key_set.rs",
        "if q == e {",
        "if true || q == e {",
    ),
    (
        "a path key lets a later call on an overlapping path overtake a waiting one",
        "engine/src/schedule/path_key.rs",
        "let behind = waiting.iter().any(|&w| self.paths_meet(k, w, at));",
        "let behind = false && waiting.iter().any(|&w| self.paths_meet(k, w, at));",
    ),
    (
        "a path key compares paths by prefix, not by component (a/b meets a/bc)",
        "engine/src/path.rs",
        "matches!(long.as_bytes().get(short.len()), None | Some(b'/'))",
        "true",
    ),
    (
        "a path key's set acquired while a running call holds an overlapping path",
        "engine/src/schedule/path_key.rs",
        "self.held_clear(k, at) && self.waits_behind(k, e, at).is_none()",
        "self.waits_behind(k, e, at).is_none()",
    ),
    (
        "a move takes only its first path",
        "engine/src/schedule/layout.rs",
        "self.scratch_paths.push((m as u32, k, std::mem::take(&mut out)));",
        "if self.scratch_paths.is_empty() { self.scratch_paths.push((m as u32, k, std::mem::take(&mut out))); }",
    ),
]


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    missed = 0
    for name, path, text, replacement in MUTANTS:
        if only not in name:
            continue
        full = os.path.join(ROOT, path)
        with open(full) as f:
            original = f.read()
        if text not in original:
            print(f"STALE   {name}: the text to mutate is not in {path}")
            missed += 1
            continue
        try:
            with open(full, "w") as f:
                f.write(original.replace(text, replacement))
            rc = run(["cargo", "test", "-q", "-p", "turnstile-engine", "--release", "--test", "sim", "--test", "corpus", "--test", "key_sets", "--test", "path_keys", "--lib"])
        finally:
            with open(full, "w") as f:
                f.write(original)
        if rc == 0:
            print(f"MISSED  {name}")
            missed += 1
        else:
            print(f"caught  {name}")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
