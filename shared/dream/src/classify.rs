//! classify: each new or changed memory's importance (0–100: how much the
//! agent loses without it; heads render the important ones first) and scope
//! (`project`: true of this project only; `general`: true of the user's work
//! anywhere, a candidate for the user profile). A memory is a candidate when
//! it has no scope yet or its text changed since it was classified. Answer:
//!
//! ```text
//! <classify>
//! <memory id="12" importance="80" scope="project"/>
//! </classify>
//! ```
//!
//! Every memory sent is answered exactly once. Applying changes no text
//! (nothing is logged): heads order by importance at their next HARD fold.

use std::collections::BTreeMap;

use serde_json::json;

use mc_history::store;

use super::manifest::{self, escape};
use super::{Done, FailureClass, LiveMemory, Outcome, Run, TaskFailure, live_memories};

/// One verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub id: i64,
    pub importance: i64,
    pub scope: String,
}

/// The most tokens the answer about one memory takes.
const ANSWER_TOKENS: u64 = 20;

pub fn prompt(memories: &[&LiveMemory]) -> String {
    let mut out = String::from(
        "Task: classify. For each memory below give\n\
         - importance, 0 to 100: how much a coding agent working on this project loses if it \
         does not know it (90+: breaking it causes damage or rework; 50: useful; 20-: trivia);\n\
         - scope: \"project\" if it is true of this project only, \"general\" if it is a \
         preference or rule of the user that holds in any project.\n\n<memories>\n",
    );
    for m in memories {
        out.push_str(&line(m));
    }
    out.push_str(
        "</memories>\n\nAnswer every memory exactly once with this manifest:\n<classify>\n\
         <memory id=\"ID\" importance=\"0-100\" scope=\"project|general\"/>\n</classify>\n",
    );
    out
}

fn line(m: &LiveMemory) -> String {
    format!(
        "<memory id=\"{}\" category=\"{}\">{}</memory>\n",
        m.id,
        m.category,
        escape(&m.content)
    )
}

pub fn parse(answer: &str, sent: &[i64]) -> Result<Vec<Verdict>, String> {
    let elements = manifest::parse(answer, "classify", &["memory"])?;
    let verdicts =
        manifest::per_memory(elements, sent, &["id", "importance", "scope"], |id, el| {
            let importance = el
                .required("importance")?
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| (0..=100).contains(n))
                .ok_or_else(|| format!("memory #{id}'s importance is not 0-100"))?;
            let scope = el.required("scope")?.trim().to_ascii_lowercase();
            if scope != "project" && scope != "general" {
                return Err(format!(
                    "memory #{id}'s scope {scope:?} is not project or general"
                ));
            }
            Ok(Verdict {
                id,
                importance,
                scope,
            })
        })?;
    Ok(verdicts.into_values().collect())
}

pub fn run(run: &mut Run<'_, '_>) -> Result<Done, TaskFailure> {
    let project = run.project.clone();
    let memories = live_memories(run.store.conn(), &project)?;
    let candidates: Vec<&LiveMemory> = memories
        .iter()
        .filter(|m| {
            m.scope.is_none()
                || m.classified_key.as_deref() != Some(store::memory_key(&m.content).as_str())
        })
        .collect();
    if candidates.is_empty() {
        return Ok(Done::nothing(
            json!({"memories": memories.len(), "candidates": 0}),
        ));
    }
    let sent = run.fill(&candidates, line, |_| ANSWER_TOKENS, prompt);
    if sent.is_empty() {
        return Err(TaskFailure::new(
            FailureClass::Budget,
            "not one memory fits dream.task_token_budget",
        )
        .hint("raise dream.task_token_budget in the user config"));
    }
    let ids: Vec<i64> = sent.iter().map(|m| m.id).collect();
    let keys: BTreeMap<i64, String> = sent
        .iter()
        .map(|m| (m.id, store::memory_key(&m.content)))
        .collect();
    let answer = run.ask(&prompt(&sent))?;
    let verdicts = parse(&answer, &ids).map_err(TaskFailure::rejected)?;
    run.apply(|tx| {
        for v in &verdicts {
            let key = keys.get(&v.id).map(String::as_str).unwrap_or_default();
            store::set_memory_classification(tx, v.id, v.importance, &v.scope, key)?;
        }
        Ok(())
    })?;
    let general = verdicts.iter().filter(|v| v.scope == "general").count();
    Ok(Done {
        result: Outcome::Ok,
        detail: json!({
            "memories": memories.len(),
            "candidates": candidates.len(),
            "classified": verdicts.len(),
            "general": general,
            "left_for_next_run": candidates.len() - verdicts.len(),
        }),
        head: None,
    })
}
