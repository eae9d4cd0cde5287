//! Path keys (`concurrency = { key = "fs", path = "{path}" }`): a key that is a tree of paths.
//! Two calls on one path key conflict when one's path is the other's or lies under it: a call
//! on `a` excludes calls on `a/b` and on the root, not on `b`.
//!
//! Paths are compared by their components after one normalization, the same in every host
//! because only the engine does it: `/` and `\` separate components; empty components and `.`
//! are dropped (`a//b`, `./a`, `a/` and `/a` are `a/b`, `a`, `a`, `a`); `..` removes the
//! component before it, and is kept only where there is none (`a/../b` is `b`, `../b` stays
//! `../b`). A leading `/` is not significant: a tree's paths are relative to its root, so `/a`
//! and `a` are one path (a tool that mixes them is over-excluded, never under). Case and
//! Unicode forms are compared as written. The root (`/`, `.` or empty) is every path's
//! ancestor.

use crate::fx::FxHashMap;

/// Writes the normalized form of `raw` into `out` (cleared first): its components joined by
/// `/`, empty for the root.
pub fn normalize(raw: &str, out: &mut String) {
    out.clear();
    for part in raw.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                let last = out.rfind('/').map_or(0, |i| i + 1);
                if out.is_empty() || &out[last..] == ".." {
                    if !out.is_empty() {
                        out.push('/');
                    }
                    out.push_str("..");
                } else {
                    out.truncate(last.saturating_sub(1));
                }
            }
            part => {
                if !out.is_empty() {
                    out.push('/');
                }
                out.push_str(part);
            }
        }
    }
}

/// Whether two normalized paths conflict: one is the other, or an ancestor of it.
pub fn overlap(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.is_empty()
        || (long.starts_with(short)
            && matches!(long.as_bytes().get(short.len()), None | Some(b'/')))
}

/// A multiset of normalized paths that answers "does this path overlap one of them" in time
/// proportional to the path's depth, not to how many paths it holds: each path is counted under
/// itself, and under every proper ancestor as a path below it.
#[derive(Debug, Default)]
pub(crate) struct PathSet {
    /// How many of the paths are exactly this one.
    exact: FxHashMap<String, u32>,
    /// How many of the paths lie strictly below this one.
    below: FxHashMap<String, u32>,
    len: usize,
}

impl PathSet {
    /// Whether `path` overlaps one of the paths: equal to one, above one, or below one.
    pub(crate) fn meets(&self, path: &str) -> bool {
        self.len > 0
            && (self.exact.contains_key(path)
                || self.below.contains_key(path)
                || ancestors(path).any(|a| self.exact.contains_key(a)))
    }

    /// Whether the root is among the paths (then every path overlaps one).
    pub(crate) fn has_root(&self) -> bool {
        self.exact.contains_key("")
    }

    pub(crate) fn insert(&mut self, path: &str) {
        *self.exact.entry(path.to_owned()).or_default() += 1;
        for a in ancestors(path) {
            *self.below.entry(a.to_owned()).or_default() += 1;
        }
        self.len += 1;
    }

    /// Removes one occurrence of `path` (which must be there).
    pub(crate) fn remove(&mut self, path: &str) {
        let held = Self::take_one(&mut self.exact, path);
        debug_assert!(held, "removed a path that is not held: {path:?}");
        if !held {
            return;
        }
        for a in ancestors(path) {
            Self::take_one(&mut self.below, a);
        }
        self.len -= 1;
    }

    fn take_one(map: &mut FxHashMap<String, u32>, path: &str) -> bool {
        match map.get_mut(path) {
            Some(1) => {
                map.remove(path);
                true
            }
            Some(n) => {
                *n -= 1;
                true
            }
            None => false,
        }
    }
}

/// The proper ancestors of a normalized path, the root (`""`) first; none for the root.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let root = (!path.is_empty()).then_some("");
    let inner = path.match_indices('/').map(move |(i, _)| &path[..i]);
    root.into_iter().chain(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

    fn norm(raw: &str) -> String {
        let mut out = "junk".to_owned();
        normalize(raw, &mut out);
        out
    }

    #[test]
    fn normalization_drops_what_names_no_component() {
        for (raw, want) in [
            ("a/b", "a/b"),
            ("./a", "a"),
            ("a/", "a"),
            ("a//b", "a/b"),
            ("/a", "a"),
            ("a\\b", "a/b"),
            ("/", ""),
            (".", ""),
            ("", ""),
            ("a/./b/.", "a/b"),
            ("a/../b", "b"),
            ("a/b/../../c", "c"),
            ("../b", "../b"),
            ("../../b", "../../b"),
            ("a/../../b", "../b"),
            ("a/..", ""),
            ("A/b", "A/b"),
        ] {
            assert_eq!(norm(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn overlap_is_by_whole_components() {
        for (a, b, want) in [
            ("a", "a", true),
            ("a", "a/b", true),
            ("a/b", "a", true),
            ("", "a/b", true),
            ("a/b", "", true),
            ("a", "b", false),
            ("a", "ab", false),
            ("ab", "a", false),
            ("a/b", "a/c", false),
            ("a/b", "a/bc", false),
            ("..", "../b", true),
            ("..", "b", false),
        ] {
            assert_eq!(overlap(a, b), want, "{a:?} {b:?}");
            assert_eq!(overlap(b, a), want, "{b:?} {a:?}");
        }
    }

    /// The set answers as `overlap` against each of its paths, through inserts and removals.
    #[test]
    fn a_path_set_meets_what_overlap_says() {
        let paths = [
            "", "a", "a/b", "a/b/c", "a/bc", "ab", "b", "b/a", "..", "../a",
        ];
        let mut set = PathSet::default();
        let mut held: Vec<&str> = Vec::new();
        let mut seed = 7u64;
        for _ in 0..2000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let p = paths[(seed >> 33) as usize % paths.len()];
            if seed >> 63 == 1 && !held.is_empty() {
                let q = held.swap_remove((seed >> 20) as usize % held.len());
                set.remove(q);
            } else {
                set.insert(p);
                held.push(p);
            }
            for q in paths {
                let want = held.iter().any(|h| overlap(h, q));
                assert_eq!(set.meets(q), want, "{q:?} against {held:?}");
            }
            assert_eq!(set.has_root(), held.contains(&""));
        }
    }
}
