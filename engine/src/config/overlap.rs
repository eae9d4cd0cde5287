//! V5 across names: a key template makes key names at run time, so a template and a configured
//! key, or two templates, that can make the same name must give it the same limit, delay,
//! rate, burst, retries, max_wait and shared, exactly as tools naming one key do. Otherwise which limit
//! holds would depend on which tool's call named the key first.
//!
//! The rule is decided statically, from the text alone (`KeyTemplate::can_make` and
//! `KeyTemplate::globs_meet`): a placeholder can be any text, so a template is a glob with one `*`
//! per placeholder. A configured key (written, or the integer form's tool name) meets a
//! template when it matches the glob; two templates meet when their texts before the first
//! placeholder are one a prefix of the other and their texts after the last one a suffix of
//! the other, or when one can make the other's own text (the key of calls whose arguments do
//! not expand). It is conservative: a placeholder used twice counts as two, and between two
//! templates the key length is ignored, so it may report names no call can make, never miss
//! one.
//!
//! Each template reports at most one diagnostic per field (the first name in configuration
//! order that disagrees; the message counts the others), and a key whose own tools already
//! disagree on a field is left to that diagnostic.

use super::validate::{Agreed, Declared};
use super::{Loc, Sink};
use crate::diagnostic::Code;
use crate::template::KeyTemplate;

/// One key name and the tools naming it, in configuration order.
pub(super) type Group = (String, Vec<(String, Declared)>);

pub(super) fn check(groups: &[Group], sink: &mut Sink) {
    let info: Vec<Info<'_>> = groups.iter().filter_map(Info::new).collect();
    let index = Index::new(&info);
    // Per template: the first name (by the other's configuration order) that disagrees on each
    // field, and how many more do.
    let mut first: Vec<[Option<(usize, Meet)>; Field::COUNT]> =
        vec![[None; Field::COUNT]; info.len()];
    let mut more: Vec<[usize; Field::COUNT]> = vec![[0; Field::COUNT]; info.len()];
    // `seen[j] == i + 1`: name j was already looked at for template i.
    let mut seen: Vec<usize> = vec![0; info.len()];
    for (i, a) in info.iter().enumerate() {
        let Some(template) = &a.template else {
            continue;
        };
        index.candidates(i, template, &info, |j, meet| {
            if seen[j] == i + 1 {
                return;
            }
            seen[j] = i + 1;
            // A pair of templates belongs to the earlier one. From the later one, only what
            // the earlier one could not find itself: the later one making its own text.
            let (owner, other, meet) = match &info[j].template {
                Some(t) if j < i => {
                    if t.globs_meet(template) || t.can_make(a.key) {
                        return;
                    }
                    (j, i, Meet::OwnText)
                }
                _ => (i, j, meet),
            };
            for f in Field::ALL {
                if !disagree(&info[owner], &info[other], f) {
                    continue;
                }
                let slot = &mut first[owner][f as usize];
                if slot.is_some() {
                    more[owner][f as usize] += 1;
                }
                if slot.is_none_or(|(k, _)| other < k) {
                    *slot = Some((other, meet));
                }
            }
        });
    }
    for (i, fields) in first.iter().enumerate() {
        for f in Field::ALL {
            if let Some((j, meet)) = fields[f as usize] {
                let (a, b) = (&info[i], &info[j]);
                let name = match (meet, &a.template, &b.template) {
                    (Meet::Globs, Some(x), Some(y)) => x.shared_name(y),
                    (Meet::OwnText, ..) => a.key.to_owned(),
                    _ => b.key.to_owned(),
                };
                report(a, b, &name, f, more[i][f as usize], sink);
            }
        }
    }
}

/// How a template meets another name: their placeholders can make one name, or the template
/// can make the other's text, or (found from the other side) the other can make its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Meet {
    Globs,
    Text,
    OwnText,
}

/// Whether two names disagree on `f` (a key whose own tools disagree is already reported).
fn disagree(a: &Info<'_>, b: &Info<'_>, f: Field) -> bool {
    a.agreed[f as usize] && b.agreed[f as usize] && !f.same(a.first, b.first)
}

/// Sorted views of the names, so that a template looks only at the names that share its
/// leading text, or its trailing text, whichever are fewer: near-linear for real configs
/// (10,000 tools of templates and keys resolve in about the time they take without the
/// check). Only templates that begin and end with a placeholder are compared with every name:
/// they can meet every template, so many of them that disagree cost time quadratic in their
/// number (10,000 such, each with its own limit, take minutes in a debug build).
struct Index {
    /// Every key's text (plain keys, and templates' own texts), forwards and reversed.
    texts: Sorted,
    texts_reversed: Sorted,
    /// Every template's leading text, and its trailing text reversed.
    prefixes: Sorted,
    suffixes_reversed: Sorted,
}

impl Index {
    fn new(info: &[Info<'_>]) -> Self {
        let templates = || {
            info.iter()
                .enumerate()
                .filter_map(|(i, g)| g.template.as_ref().map(|t| (t, i)))
        };
        Self {
            texts: Sorted::new(info.iter().enumerate().map(|(i, g)| (g.key.to_owned(), i))),
            texts_reversed: Sorted::new(info.iter().enumerate().map(|(i, g)| (reverse(g.key), i))),
            prefixes: Sorted::new(templates().map(|(t, i)| (t.prefix().to_owned(), i))),
            suffixes_reversed: Sorted::new(templates().map(|(t, i)| (reverse(t.suffix()), i))),
        }
    }

    /// Calls `visit` with every name template `i` can meet and disagrees with on some field
    /// (some more than once): templates whose placeholders can make a name with its own first,
    /// then the names it can make.
    fn candidates(
        &self,
        i: usize,
        template: &KeyTemplate,
        info: &[Info<'_>],
        mut visit: impl FnMut(usize, Meet),
    ) {
        let a = &info[i];
        let differs = |j: usize| j != i && Field::ALL.iter().any(|&f| disagree(a, &info[j], f));
        let (prefix, suffix) = (template.prefix(), reverse(template.suffix()));
        // Templates whose leading texts are one a prefix of the other (or likewise trailing),
        // from the view with fewer.
        let by_suffix = self.suffixes_reversed.count_compatible(&suffix)
            < self.prefixes.count_compatible(prefix);
        let (view, p) = if by_suffix {
            (&self.suffixes_reversed, suffix.as_str())
        } else {
            (&self.prefixes, prefix)
        };
        view.for_compatible(p, |j| {
            // Meeting is symmetric: an earlier template found this pair itself.
            let other = info[j].template.as_ref().filter(|_| j > i);
            if differs(j) && other.is_some_and(|other| template.globs_meet(other)) {
                visit(j, Meet::Globs);
            }
        });
        // Keys and templates' own texts it can make start with its leading text and end with
        // its trailing text.
        let by_prefix = self.texts.starting_with(prefix);
        let by_suffix = self.texts_reversed.starting_with(&suffix);
        let texts = if by_prefix.len() <= by_suffix.len() {
            by_prefix
        } else {
            by_suffix
        };
        for &(_, j) in texts {
            if differs(j) && template.can_make(info[j].key) {
                visit(j, Meet::Text);
            }
        }
    }
}

/// Strings with the name each stands for, sorted, for prefix queries.
struct Sorted(Vec<(String, usize)>);

impl Sorted {
    fn new(items: impl Iterator<Item = (String, usize)>) -> Self {
        let mut items: Vec<(String, usize)> = items.collect();
        items.sort_unstable();
        Self(items)
    }

    /// The entries that start with `p` (`p` itself included).
    fn starting_with(&self, p: &str) -> &[(String, usize)] {
        let from = self.0.partition_point(|(s, _)| s.as_str() < p);
        let len = self.0[from..].partition_point(|(s, _)| s.starts_with(p));
        &self.0[from..from + len]
    }

    /// The entries equal to `shorter`.
    fn equal_to(&self, shorter: &str) -> &[(String, usize)] {
        let from = self.0.partition_point(|(s, _)| s.as_str() < shorter);
        let len = self.0[from..].partition_point(|(s, _)| s == shorter);
        &self.0[from..from + len]
    }

    /// How many entries are a prefix of `p` or have `p` as a prefix.
    fn count_compatible(&self, p: &str) -> usize {
        let shorter: usize = p
            .char_indices()
            .map(|(end, _)| self.equal_to(&p[..end]).len())
            .sum();
        shorter + self.starting_with(p).len()
    }

    /// Calls `f` with each entry that is a prefix of `p` or has `p` as a prefix, once.
    fn for_compatible(&self, p: &str, mut f: impl FnMut(usize)) {
        for (end, _) in p.char_indices() {
            self.equal_to(&p[..end]).iter().for_each(|&(_, j)| f(j));
        }
        self.starting_with(p).iter().for_each(|&(_, j)| f(j));
    }
}

fn reverse(s: &str) -> String {
    s.chars().rev().collect()
}

/// A key name as this check sees it.
struct Info<'a> {
    key: &'a str,
    /// Its template, when a table names it and it has placeholders.
    template: Option<KeyTemplate>,
    /// The first tool naming it, whose values stand for the key's.
    tool: &'a str,
    first: &'a Declared,
    /// Per field, whether every tool naming the key gives the same value (if not, that
    /// conflict is already reported).
    agreed: [bool; Field::COUNT],
}

impl<'a> Info<'a> {
    fn new((key, list): &'a Group) -> Option<Self> {
        let (tool, first) = list.first()?;
        let template = if list.iter().any(|(_, d)| !d.integer_form) {
            KeyTemplate::parse(key).ok().flatten()
        } else {
            None
        };
        let agreed = Field::ALL.map(|f| list.iter().all(|(_, d)| f.same(d, first)));
        Some(Self {
            key,
            template,
            tool,
            first,
            agreed,
        })
    }
}

#[derive(Clone, Copy)]
enum Field {
    Limit,
    Delay,
    Rate,
    Burst,
    Retries,
    MaxWait,
    Shared,
    Adapt,
    Path,
}

impl Field {
    const COUNT: usize = 9;
    const ALL: [Self; Self::COUNT] = [
        Self::Limit,
        Self::Delay,
        Self::Rate,
        Self::Burst,
        Self::Retries,
        Self::MaxWait,
        Self::Shared,
        Self::Adapt,
        Self::Path,
    ];

    /// The field as the check of one key's tools knows it (`None`: the limit).
    fn agreed(self) -> Option<Agreed> {
        match self {
            Self::Limit => None,
            Self::Delay => Some(Agreed::Delay),
            Self::Rate => Some(Agreed::Rate),
            Self::Burst => Some(Agreed::Burst),
            Self::Retries => Some(Agreed::Retries),
            Self::MaxWait => Some(Agreed::MaxWait),
            Self::Shared => Some(Agreed::Shared),
            Self::Adapt => Some(Agreed::Adapt),
            Self::Path => Some(Agreed::Path),
        }
    }

    /// Whether two declarations give the key the same value.
    fn same(self, a: &Declared, b: &Declared) -> bool {
        self.agreed().map_or(a.limit == b.limit, |g| g.same(a, b))
    }

    /// Where the value was written (the concurrency value when the field is not).
    fn at(self, d: &Declared) -> Loc {
        self.agreed().and_then(|g| g.at(d)).unwrap_or(d.loc)
    }

    /// The code, the field, and the plural noun for "conflicting ...".
    fn names(self) -> (Code, &'static str, &'static str) {
        self.agreed().map_or(
            (Code::ConcurrencyLimitConflict, "limit", "limits"),
            Agreed::names,
        )
    }

    /// `tool = value`, as the conflicts of one key write it.
    fn show(self, tool: &str, d: &Declared) -> String {
        let Some(g) = self.agreed() else {
            if d.integer_form {
                return format!(
                    "{tool} = {} (integer form: key is the tool's own name)",
                    d.limit
                );
            }
            return format!("{tool} = {}", d.limit);
        };
        let value = g.show(d);
        if g.at(d).is_some() {
            format!("{tool} = {value}")
        } else {
            format!("{tool} = {value} (not set: the default)")
        }
    }
}

fn report(a: &Info<'_>, b: &Info<'_>, name: &str, f: Field, more: usize, sink: &mut Sink) {
    let (code, field, noun) = f.names();
    let (left, right) = (f.show(a.tool, a.first), f.show(b.tool, b.first));
    let more = match more {
        0 => String::new(),
        1 => " (and 1 more key it can make disagrees)".to_owned(),
        n => format!(" (and {n} more keys it can make disagree)"),
    };
    let message = match b.template {
        None => format!(
            "key template {:?} can make the key {name:?}: conflicting {noun}: {left}, \
             {right}{more}; a template and every key it can make must give it the same {field}",
            a.key
        ),
        Some(_) => format!(
            "key templates {:?} and {:?} can make the same key (for example {name:?}): \
             conflicting {noun}: {left}, {right}{more}; templates that can make one key must \
             give it the same {field}",
            a.key, b.key
        ),
    };
    sink.push(
        code,
        &["conversation".to_owned(), "tools".to_owned()],
        message,
    )
    .label(f.at(a.first), left)
    .label(f.at(b.first), right)
    .tools(vec![a.tool.to_owned(), b.tool.to_owned()])
    .help(format!(
        "a made key shares one {field} whichever template or key names it: write the same \
             {field} in both, or keep the names apart (different text before or after the \
             placeholders)"
    ));
}
