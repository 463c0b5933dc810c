//! consolidate: merge duplicate and near-duplicate memories.
//!
//! Lexical similarity (`similar`) proposes groups of memories of one
//! category that may say the same thing, leaving out pairs the model
//! already judged distinct (`dream_distinct`, by content key, so an edit
//! asks again). No group: no model call. Otherwise the model gets as many
//! groups as the budget allows and answers
//!
//! ```text
//! <consolidate>
//! <merge ids="12,40">One canonical wording that keeps every path, key and value.</merge>
//! </consolidate>
//! ```
//!
//! Each merge names two or more ids of one group, no id twice; the text is a
//! valid memory. Groups it does not merge are recorded as distinct. Applied
//! through `search::memory::merge_in` (the sources become `superseded`,
//! logged), all in one transaction.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::params;
use serde_json::json;

use mc_history::store;
use mc_search_core::memory;

use super::manifest::{self, escape};
use super::similar::{self, Item};
use super::{Done, FailureClass, Outcome, Run, TaskFailure, live_memories, secrets};

/// One merge the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    pub ids: Vec<i64>,
    pub content: String,
}

/// The prompt for `groups` (each a list of `(id, category, content)`).
pub fn prompt(groups: &[Vec<(i64, String, String)>]) -> String {
    let mut out = String::from(
        "Task: consolidate. Each group below holds memories of one category that may say the \
         same thing. For each set of memories that state the same fact (or where one only \
         restates another with less detail), write ONE canonical memory: terse, present tense, \
         keeping every path, key, value and reason the sources give. Leave memories that state \
         different facts alone (different values, different files, different rules are \
         different facts). Never merge across groups.\n\n<groups>\n",
    );
    for (n, group) in groups.iter().enumerate() {
        let category = group
            .first()
            .map(|(_, c, _)| c.as_str())
            .unwrap_or_default();
        out.push_str(&format!(
            "<group n=\"{}\" category=\"{category}\">\n",
            n + 1
        ));
        for (id, _, content) in group {
            out.push_str(&format!(
                "<memory id=\"{id}\">{}</memory>\n",
                escape(content)
            ));
        }
        out.push_str("</group>\n");
    }
    out.push_str(
        "</groups>\n\nAnswer with exactly this manifest (an empty <consolidate></consolidate> \
         when nothing should be merged):\n<consolidate>\n<merge ids=\"ID,ID\">the canonical \
         memory</merge>\n</consolidate>\n",
    );
    out
}

/// Parse and check the answer against the groups sent. `Err`: why it is
/// rejected (nothing is applied).
pub fn parse(answer: &str, groups: &[Vec<i64>]) -> Result<Vec<Merge>, String> {
    let elements = manifest::parse(answer, "consolidate", &["merge"])?;
    let group_of: BTreeMap<i64, usize> = groups
        .iter()
        .enumerate()
        .flat_map(|(g, ids)| ids.iter().map(move |id| (*id, g)))
        .collect();
    let mut used: BTreeSet<i64> = BTreeSet::new();
    let mut merges = Vec::new();
    for el in elements {
        el.only(&["ids"])?;
        let ids = manifest::ids(el.required("ids")?)?;
        let unique: BTreeSet<i64> = ids.iter().copied().collect();
        if unique.len() < 2 {
            return Err(format!(
                "<merge ids=\"{}\"> names fewer than two memories",
                el.required("ids")?
            ));
        }
        let mut group = None;
        for id in &unique {
            let Some(g) = group_of.get(id) else {
                return Err(format!("memory #{id} was not in any group"));
            };
            if group.is_some_and(|x| x != *g) {
                return Err(format!(
                    "<merge> joins memories of different groups (#{id})"
                ));
            }
            group = Some(*g);
            if !used.insert(*id) {
                return Err(format!("memory #{id} is merged twice"));
            }
        }
        let content = el.text()?;
        store::check_memory_content(content).map_err(|e| e.to_string())?;
        if let Some(reason) = secrets::secret_reason(content) {
            return Err(format!("a merged memory would hold {reason}"));
        }
        merges.push(Merge {
            ids: unique.into_iter().collect(),
            content: content.to_string(),
        });
    }
    Ok(merges)
}

fn judged_distinct(
    conn: &rusqlite::Connection,
    project: &str,
) -> mc_base::Result<BTreeSet<(String, String)>> {
    Ok(conn
        .prepare_cached("SELECT key_a, key_b FROM dream_distinct WHERE project = ?1")?
        .query_map(params![project], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?)
}

pub fn run(run: &mut Run<'_, '_>) -> Result<Done, TaskFailure> {
    let project = run.project.clone();
    let conn = run.store.conn();
    let memories = live_memories(conn, &project)?;
    let keys: BTreeMap<i64, String> = memories
        .iter()
        .map(|m| (m.id, store::memory_key(&m.content)))
        .collect();
    let distinct = judged_distinct(conn, &project)?;
    let pair = |a: i64, b: i64| -> Option<(String, String)> {
        let (ka, kb) = (keys.get(&a)?.clone(), keys.get(&b)?.clone());
        Some(if ka <= kb { (ka, kb) } else { (kb, ka) })
    };
    let items: Vec<Item> = memories
        .iter()
        .map(|m| Item {
            id: m.id,
            category: m.category.clone(),
            content: m.content.clone(),
        })
        .collect();
    let all_groups = similar::groups(&items, &|a, b| {
        pair(a, b).is_some_and(|p| distinct.contains(&p))
    });
    if all_groups.is_empty() {
        return Ok(Done::nothing(
            json!({"memories": memories.len(), "groups": 0}),
        ));
    }
    let by_id: BTreeMap<i64, &super::LiveMemory> = memories.iter().map(|m| (m.id, m)).collect();
    let rows = |ids: &[i64]| -> Vec<(i64, String, String)> {
        ids.iter()
            .filter_map(|id| {
                by_id
                    .get(id)
                    .map(|m| (m.id, m.category.clone(), m.content.clone()))
            })
            .collect()
    };
    // As many groups as the budget allows, closest first; each merge's
    // answer is about as long as the group's longest memory.
    let answer_room = u64::from(run.settings.dream.max_output_tokens) * 3 / 4;
    let mut answers = 0u64;
    let mut sent: Vec<Vec<i64>> = Vec::new();
    for group in &all_groups {
        let mut trial: Vec<Vec<(i64, String, String)>> = sent.iter().map(|g| rows(g)).collect();
        let members = rows(group);
        let said = members
            .iter()
            .map(|(_, _, c)| u64::from(mc_base::tokens::estimate(c)))
            .max()
            .unwrap_or(0)
            + 20;
        trial.push(members);
        if !run.fits(&prompt(&trial)) || (!sent.is_empty() && answers + said > answer_room) {
            break;
        }
        answers += said;
        sent.push(group.clone());
    }
    if sent.is_empty() {
        let first = all_groups.first().map(|g| rows(g)).unwrap_or_default();
        return Err(TaskFailure::new(
            FailureClass::Budget,
            format!(
                "one group needs about {} tokens, more than dream.task_token_budget allows",
                run.cost(&prompt(&[first]))
            ),
        )
        .hint("raise dream.task_token_budget in the user config"));
    }
    let user = prompt(&sent.iter().map(|g| rows(g)).collect::<Vec<_>>());
    let answer = run.ask(&user)?;
    let merges = parse(&answer, &sent).map_err(TaskFailure::rejected)?;
    let now = run.now();
    let merged_ids: BTreeSet<i64> = merges.iter().flat_map(|m| m.ids.iter().copied()).collect();
    let mut results = Vec::new();
    let applied = run.apply(|tx| {
        for merge in &merges {
            let record = memory::merge_in(tx, &project, &merge.ids, &merge.content, None, now)?;
            results.push(json!({"from": merge.ids, "into": record.id}));
        }
        // Every pair of a sent group that was not merged together is distinct.
        let mut insert = tx.prepare_cached(
            "INSERT OR IGNORE INTO dream_distinct (project, key_a, key_b) VALUES (?1, ?2, ?3)",
        )?;
        let mut recorded = 0;
        for group in &sent {
            for (i, a) in group.iter().enumerate() {
                for b in group.iter().skip(i + 1) {
                    if merged_ids.contains(a) || merged_ids.contains(b) {
                        continue;
                    }
                    if let Some((ka, kb)) = pair(*a, *b) {
                        recorded += insert.execute(params![project, ka, kb])?;
                    }
                }
            }
        }
        Ok(recorded)
    });
    // A merge the store refuses (a memory changed since the prompt was
    // built) rejects the whole manifest: the transaction rolled back.
    let recorded = applied?;
    Ok(Done {
        result: Outcome::of_change(!merges.is_empty()),
        detail: json!({
            "memories": memories.len(),
            "groups": all_groups.len(),
            "groups_sent": sent.len(),
            "merged": results,
            "judged_distinct": recorded,
        }),
        head: None,
    })
}
