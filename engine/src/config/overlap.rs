//! V5 across names: a key template makes key names at run time, so a template and a configured
//! key, or two templates, that can make the same name must give it the same limit, delay,
//! retries and shared, exactly as tools naming one key do. Otherwise which limit holds would
//! depend on which tool's call named the key first.
//!
//! The rule is decided statically, from the text alone (`KeyTemplate::can_make` and
//! `KeyTemplate::meets`): a placeholder can be any text, so a template is a glob with one `*`
//! per placeholder. A configured key (written, or the integer form's tool name) meets a
//! template when it matches the glob; two templates meet when their texts before the first
//! placeholder are one a prefix of the other and their texts after the last one a suffix of
//! the other, or when one can make the other's own text (the key of calls whose arguments do
//! not expand). It is conservative: a placeholder used twice counts as two, and the key length
//! is ignored, so it may report names no call can make, never miss one.
//!
//! Each template reports at most one diagnostic per field (the first name in configuration
//! order that disagrees; the message counts the others), and a key whose own tools already
//! disagree on a field is left to that diagnostic.

use super::validate::Declared;
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
    let mut first: Vec<[Option<(usize, String)>; 4]> = vec![Default::default(); info.len()];
    let mut more: Vec<[usize; 4]> = vec![[0; 4]; info.len()];
    let mut found: Vec<(usize, String)> = Vec::new();
    for (i, a) in info.iter().enumerate() {
        let Some(template) = &a.template else {
            continue;
        };
        found.clear();
        index.candidates(i, template, &info, &mut found);
        found.sort_by_key(|(j, _)| *j);
        found.dedup_by_key(|(j, _)| *j);
        for (j, name) in found.drain(..) {
            let b = &info[j];
            // A pair of templates belongs to the earlier one. From the later one, only what
            // the earlier one could not find itself: the later one making its own text.
            let owner = match &b.template {
                Some(other) if j < i => {
                    if other.globs_meet(template).is_some() || other.can_make(a.key) {
                        continue;
                    }
                    (j, i)
                }
                _ => (i, j),
            };
            for f in Field::ALL {
                if !disagree(&info[owner.0], &info[owner.1], f) {
                    continue;
                }
                match &first[owner.0][f as usize] {
                    Some((k, _)) if *k < owner.1 => more[owner.0][f as usize] += 1,
                    Some(_) => {
                        more[owner.0][f as usize] += 1;
                        first[owner.0][f as usize] = Some((owner.1, name.clone()));
                    }
                    None => first[owner.0][f as usize] = Some((owner.1, name.clone())),
                }
            }
        }
    }
    for (i, fields) in first.iter().enumerate() {
        for f in Field::ALL {
            if let Some((j, name)) = &fields[f as usize] {
                report(&info[i], &info[*j], name, f, more[i][f as usize], sink);
            }
        }
    }
}

/// Whether two names disagree on `f` (a key whose own tools disagree is already reported).
fn disagree(a: &Info<'_>, b: &Info<'_>, f: Field) -> bool {
    a.agreed[f as usize] && b.agreed[f as usize] && f.value(a.first) != f.value(b.first)
}

/// Sorted views of the names, so that a template looks only at names that share its leading
/// text: near-linear for the usual configs. Templates that begin with a placeholder (an empty
/// leading text) are compared with every template.
struct Index<'a> {
    /// Every key's text (plain keys, and templates' own texts), sorted.
    texts: Vec<(&'a str, usize)>,
    /// Every template's leading text, sorted.
    prefixes: Vec<(&'a str, usize)>,
}

impl<'a> Index<'a> {
    fn new(info: &'a [Info<'a>]) -> Self {
        let mut texts: Vec<(&str, usize)> =
            info.iter().enumerate().map(|(i, g)| (g.key, i)).collect();
        texts.sort_unstable();
        let mut prefixes: Vec<(&str, usize)> = info
            .iter()
            .enumerate()
            .filter_map(|(i, g)| g.template.as_ref().map(|t| (t.prefix(), i)))
            .collect();
        prefixes.sort_unstable();
        Self { texts, prefixes }
    }

    /// The names template `i` can meet and disagrees with on some field, each with a name
    /// both can make (possibly twice; the caller dedups).
    fn candidates(
        &self,
        i: usize,
        template: &KeyTemplate,
        info: &[Info<'_>],
        found: &mut Vec<(usize, String)>,
    ) {
        let a = &info[i];
        let differs = |j: usize| j != i && Field::ALL.iter().any(|&f| disagree(a, &info[j], f));
        let prefix = template.prefix();
        // Templates whose leading text is a prefix of this one's, or has it as a prefix.
        let mut meet = |j: usize| {
            let other = info[j].template.as_ref().filter(|_| differs(j));
            if let Some(name) = other.and_then(|other| template.globs_meet(other)) {
                found.push((j, name));
            }
        };
        for (end, _) in prefix.char_indices().chain([(prefix.len(), ' ')]) {
            let shorter = &prefix[..end];
            let from = self.prefixes.partition_point(|(p, _)| *p < shorter);
            for &(_, j) in self.prefixes[from..]
                .iter()
                .take_while(|(p, _)| *p == shorter)
            {
                meet(j);
            }
        }
        let from = self.prefixes.partition_point(|(p, _)| *p <= prefix);
        for &(_, j) in self.prefixes[from..]
            .iter()
            .take_while(|(p, _)| p.starts_with(prefix))
        {
            meet(j);
        }
        // Then keys and templates' own texts it can make: they start with its leading text.
        // (Pushed after the globs' shared names, which read better as the example.)
        let from = self.texts.partition_point(|(t, _)| *t < prefix);
        for &(text, j) in self.texts[from..]
            .iter()
            .take_while(|(t, _)| t.starts_with(prefix))
        {
            if differs(j) && template.can_make(text) {
                found.push((j, text.to_owned()));
            }
        }
    }
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
    agreed: [bool; 4],
}

impl<'a> Info<'a> {
    fn new((key, list): &'a Group) -> Option<Self> {
        let (tool, first) = list.first()?;
        let template = if list.iter().any(|(_, d)| !d.integer_form) {
            KeyTemplate::parse(key).ok().flatten()
        } else {
            None
        };
        let agreed = Field::ALL.map(|f| list.iter().all(|(_, d)| f.value(d) == f.value(first)));
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
    Retries,
    Shared,
}

impl Field {
    const ALL: [Self; 4] = [Self::Limit, Self::Delay, Self::Retries, Self::Shared];

    fn value(self, d: &Declared) -> u32 {
        match self {
            Self::Limit => d.limit,
            Self::Delay => d.delay.0,
            Self::Retries => d.retries.0,
            Self::Shared => d.shared.0,
        }
    }

    /// Where the value was written (the concurrency value when the field is not).
    fn at(self, d: &Declared) -> Loc {
        let written = match self {
            Self::Limit => None,
            Self::Delay => d.delay.1,
            Self::Retries => d.retries.1,
            Self::Shared => d.shared.1,
        };
        written.unwrap_or(d.loc)
    }

    /// The code, the field, and the plural noun for "conflicting ...".
    fn names(self) -> (Code, &'static str, &'static str) {
        match self {
            Self::Limit => (Code::ConcurrencyLimitConflict, "limit", "limits"),
            Self::Delay => (Code::ConcurrencyDelayConflict, "delay", "delays"),
            Self::Retries => (Code::ConcurrencyRetriesConflict, "retries", "retry caps"),
            Self::Shared => (Code::ConcurrencySharedConflict, "shared", "scopes"),
        }
    }

    /// `tool = value`, as the conflicts of one key write it.
    fn show(self, tool: &str, d: &Declared) -> String {
        let (value, set) = match self {
            Self::Limit if d.integer_form => {
                return format!(
                    "{tool} = {} (integer form: key is the tool's own name)",
                    d.limit
                );
            }
            Self::Limit => return format!("{tool} = {}", d.limit),
            Self::Delay => (format!("{} ms", d.delay.0), d.delay.1.is_some()),
            Self::Retries => (d.retries.0.to_string(), d.retries.1.is_some()),
            Self::Shared => ((d.shared.0 == 1).to_string(), d.shared.1.is_some()),
        };
        if set {
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
