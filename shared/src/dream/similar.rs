//! Lexical similarity: which memories of one category may say the same
//! thing. consolidate asks the model only about these groups, so a project
//! with no near-duplicates costs no model call.
//!
//! The rule: a memory's words are its lower-cased runs of letters, digits
//! and `_`, less a short list of function words. Two memories of one
//! category are close when their word sets overlap by half of their union
//! (Jaccard ≥ 0.5), or when the smaller one (at least 4 words) is 80 %
//! inside the larger (a restatement with more detail). Close pairs join into
//! groups (connected components), at most [`MAX_GROUP`] memories each.

use std::collections::{BTreeMap, BTreeSet};

/// The most memories one group shows the model.
pub const MAX_GROUP: usize = 8;

const STOP: &[&str] = &[
    "a", "an", "the", "is", "are", "was", "be", "to", "of", "in", "on", "for", "and", "or", "with",
    "by", "it", "its", "this", "that", "as", "at", "from", "into", "so", "all", "any", "we", "our",
];

/// The words of a memory, as the similarity rule counts them.
pub fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
        .collect()
}

/// Whether two word sets are close by the rule above; the score orders groups.
pub fn closeness(a: &BTreeSet<String>, b: &BTreeSet<String>) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let common = a.intersection(b).count() as f64;
    let union = (a.len() + b.len()) as f64 - common;
    let jaccard = common / union;
    let smaller = a.len().min(b.len());
    let containment = common / smaller as f64;
    (jaccard >= 0.5 || (smaller >= 4 && containment >= 0.8)).then_some(jaccard.max(containment))
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
    let mut by_category: BTreeMap<&str, Vec<(i64, BTreeSet<String>)>> = BTreeMap::new();
    for item in items {
        by_category
            .entry(item.category.as_str())
            .or_default()
            .push((item.id, words(&item.content)));
    }
    let mut out: Vec<(f64, Vec<i64>)> = Vec::new();
    for members in by_category.values_mut() {
        members.sort_by_key(|(id, _)| *id);
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
        for (i, (id_a, a)) in members.iter().enumerate() {
            for (j, (id_b, b)) in members.iter().enumerate().skip(i + 1) {
                if skip(*id_a, *id_b) {
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
                .filter_map(|p| members.get(*p).map(|(id, _)| *id))
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
