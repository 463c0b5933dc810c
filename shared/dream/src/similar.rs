//! Lexical similarity: which memories of one category may say the same
//! thing. consolidate asks the model only about these groups, so a project
//! with no near-duplicates costs no model call.
//!
//! The rule: a memory's words are its lower-cased runs of letters, digits
//! and `_`, less a short list of function words, each cut to a crude stem
//! (`logged` → `log`, `migrations` → `migrat`, `dependency` → `depend`). Two
//! memories of one category are close when their word sets overlap by half
//! of their union (Jaccard ≥ 0.5), or when the smaller one (at least 3
//! words) is 80 % inside the larger (a restatement with more detail) —
//! unless their specifics conflict: each names a number or a path the other
//! does not (`5000 ms` and `1000 ms`, `keys.rs` and `providers.rs` are
//! different facts however alike the sentences). Close pairs join into
//! groups (connected components), at most [`MAX_GROUP`] memories each.

use std::collections::{BTreeMap, BTreeSet};

/// The most memories one group shows the model.
pub const MAX_GROUP: usize = 8;

/// Function words, and the modal and negation words rules are phrased with
/// (`never X` and `X must not happen` say one thing; that `always X` and
/// `never X` share their words is for the model to judge, not the grouping).
const STOP: &[&str] = &[
    "a", "an", "the", "is", "are", "was", "be", "to", "of", "in", "on", "for", "and", "or", "with",
    "by", "it", "its", "this", "that", "as", "at", "from", "into", "so", "all", "any", "every",
    "we", "our", "do", "does", "not", "never", "always", "must", "should", "can", "will",
];

/// The words of a memory, as the similarity rule counts them (stemmed).
pub fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// A crude stem: common endings off, a doubled last consonant undone, at
/// most six letters kept (numbers and identifiers are kept whole).
fn stem(word: &str) -> String {
    if word.chars().any(|c| c.is_ascii_digit() || c == '_') || !word.is_ascii() {
        return word.to_string();
    }
    let mut w = word.to_string();
    for suffix in ["ing", "ed", "es", "s"] {
        if w.len() > suffix.len() + 2 && w.ends_with(suffix) {
            w.truncate(w.len() - suffix.len());
            break;
        }
    }
    let bytes = w.as_bytes();
    if let [.., a, b] = bytes
        && a == b
        && !b"aeiouls".contains(b)
    {
        w.pop();
    }
    w.chars().take(6).collect()
}

/// Numbers and paths a memory names: what makes two alike sentences
/// different facts.
pub fn specifics(text: &str) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .map(|w| w.trim_matches('.'))
        .filter(|w| w.chars().any(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .collect();
    out.extend(super::verify::path_words(text));
    out
}

/// Whether the specifics of two memories conflict: both name some, and
/// neither's are all among the other's.
fn conflict(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    !a.is_empty() && !b.is_empty() && !a.is_subset(b) && !b.is_subset(a)
}

/// Whether two word sets are close by the rule above (specifics aside);
/// the score orders groups.
pub fn closeness(a: &BTreeSet<String>, b: &BTreeSet<String>) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let common = a.intersection(b).count() as f64;
    let union = (a.len() + b.len()) as f64 - common;
    let jaccard = common / union;
    let smaller = a.len().min(b.len());
    let containment = common / smaller as f64;
    (jaccard >= 0.5 || (smaller >= 3 && containment >= 0.8)).then_some(jaccard.max(containment))
}

/// One memory as the rule sees it.
#[derive(Debug, Clone)]
pub struct Item {
    pub id: i64,
    pub category: String,
    pub content: String,
}

/// Groups of close memories (each of one category, two or more members,
/// members in id order), closest groups first. `skip(a, b)` leaves out a
/// pair already judged distinct.
pub fn groups(items: &[Item], skip: &dyn Fn(i64, i64) -> bool) -> Vec<Vec<i64>> {
    type Words = (i64, BTreeSet<String>, BTreeSet<String>);
    let mut by_category: BTreeMap<&str, Vec<Words>> = BTreeMap::new();
    for item in items {
        by_category
            .entry(item.category.as_str())
            .or_default()
            .push((item.id, words(&item.content), specifics(&item.content)));
    }
    let mut out: Vec<(f64, Vec<i64>)> = Vec::new();
    for members in by_category.values_mut() {
        members.sort_by_key(|(id, _, _)| *id);
        // Union-find over positions in `members`.
        let mut parent: Vec<usize> = (0..members.len()).collect();
        let mut best: BTreeMap<usize, f64> = BTreeMap::new();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while let Some(&p) = parent.get(i) {
                if p == i {
                    break;
                }
                let grand = parent.get(p).copied().unwrap_or(p);
                if let Some(slot) = parent.get_mut(i) {
                    *slot = grand;
                }
                i = p;
            }
            i
        }
        for (i, (id_a, a, spec_a)) in members.iter().enumerate() {
            for (j, (id_b, b, spec_b)) in members.iter().enumerate().skip(i + 1) {
                if skip(*id_a, *id_b) || conflict(spec_a, spec_b) {
                    continue;
                }
                if let Some(score) = closeness(a, b) {
                    let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
                    if ri != rj
                        && let Some(slot) = parent.get_mut(rj)
                    {
                        *slot = ri;
                    }
                    for r in [i, j] {
                        let e = best.entry(r).or_insert(0.0);
                        *e = e.max(score);
                    }
                }
            }
        }
        let mut components: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..members.len() {
            if best.contains_key(&i) {
                let r = root(&mut parent, i);
                components.entry(r).or_default().push(i);
            }
        }
        for positions in components.into_values() {
            if positions.len() < 2 {
                continue;
            }
            let score = positions
                .iter()
                .filter_map(|p| best.get(p))
                .fold(0.0_f64, |a, b| a.max(*b));
            let ids: Vec<i64> = positions
                .iter()
                .take(MAX_GROUP)
                .filter_map(|p| members.get(*p).map(|(id, _, _)| *id))
                .collect();
            out.push((score, ids));
        }
    }
    out.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.1.cmp(&b.1))
    });
    out.into_iter().map(|(_, ids)| ids).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: i64, category: &str, content: &str) -> Item {
        Item {
            id,
            category: category.into(),
            content: content.into(),
        }
    }

    #[test]
    fn restatements_group_and_distinct_facts_do_not() {
        let items = [
            item(1, "CONSTRAINTS", "Never log API keys."),
            item(2, "CONSTRAINTS", "API keys must never be logged."),
            item(
                3,
                "CONSTRAINTS",
                "Tests never touch the real home directory.",
            ),
            item(4, "NAMING", "Never log API keys."),
            item(
                5,
                "CONSTRAINTS",
                "Never log API keys, not even in debug output or error messages.",
            ),
            item(6, "CONSTRAINTS", "The database uses WAL mode."),
        ];
        let groups = groups(&items, &|_, _| false);
        assert_eq!(groups, vec![vec![1, 2, 5]]);
        // A pair judged distinct is not asked about again.
        let groups = super::groups(&items, &|a, b| {
            (a, b) == (1, 2) || (a, b) == (2, 5) || (a, b) == (1, 5)
        });
        assert!(groups.is_empty(), "{groups:?}");
    }

    #[test]
    fn stems_meet_and_conflicting_specifics_part() {
        assert_eq!(
            words("logged migrations dependency"),
            words("log migration depends")
        );
        let items = [
            item(1, "CONSTRAINTS", "Never log API keys."),
            item(2, "CONSTRAINTS", "Do not write API keys to any log."),
            item(
                3,
                "CONFIG_VALUES",
                "The database busy timeout is 5000 ms by default.",
            ),
            item(
                4,
                "CONFIG_VALUES",
                "The hook busy timeout is 1000 ms by default.",
            ),
            item(
                5,
                "CONFIG_VALUES",
                "By default the database busy timeout is 5000 ms.",
            ),
            item(
                6,
                "ARCHITECTURE",
                "Config keys live in shared/src/config/keys.rs.",
            ),
            item(
                7,
                "ARCHITECTURE",
                "Provider settings live in shared/src/config/providers.rs.",
            ),
        ];
        assert_eq!(groups(&items, &|_, _| false), vec![vec![1, 2], vec![3, 5]]);
    }

    #[test]
    fn nothing_close_means_no_group() {
        let items = [
            item(1, "CONFIG_VALUES", "transform.cache_ttl defaults to 5m."),
            item(
                2,
                "CONFIG_VALUES",
                "historian.chunk_tokens defaults to 32000.",
            ),
        ];
        assert!(groups(&items, &|_, _| false).is_empty());
        assert_eq!(closeness(&words(""), &words("x")), None);
    }
}
