//! archive-stale: free the head's memory budget.
//!
//! The rule:
//! 1. a live memory past its `expires_ms` is archived, no model asked;
//! 2. a memory is a stale candidate when it is `active` (never `permanent`),
//!    its importance is below 80 (or unknown), and nothing used it for
//!    `dream.stale_days`: no head rendered it and no query matched it since
//!    (`last_used_ms`, refreshed from the heads first), or, never used, it
//!    was written that long ago;
//! 3. the model sees the candidates and answers, for each exactly once,
//!
//! ```text
//! <archive_stale>
//! <memory id="12" verdict="archive">why it no longer earns its place</memory>
//! <memory id="13" verdict="keep"/>
//! </archive_stale>
//! ```
//!
//! Archived memories go through `search::memory::archive_in` (logged with
//! the reason); a kept one counts as used now, so it is asked about again
//! only after another `stale_days`.

use std::collections::BTreeMap;

use serde_json::json;

use mc_history::store;
use mc_search_core::memory;

use super::manifest::{self, escape};
use super::{Done, FailureClass, LiveMemory, Outcome, Run, TaskFailure, live_memories, usage};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;
/// Memories this important are never stale candidates.
pub const KEEP_IMPORTANCE: i64 = 80;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Archive(String),
    Keep,
}

pub fn prompt(memories: &[&LiveMemory], stale_days: u64) -> String {
    let mut out = format!(
        "Task: archive-stale. No session has shown these memories to the agent, and no search \
         has found them, for at least {stale_days} days. For each, decide whether it still \
         earns a place in the agent's limited memory. Archive: a restatement of what the code \
         says plainly, a volatile detail (line numbers, temporary state), a finished one-off \
         instruction, or a fact that no longer matters. Keep: constraints and rules (must, \
         never, always), reasons (because, to avoid), environment and path facts, and \
         anything you are unsure about.\n\n<memories>\n"
    );
    for m in memories {
        out.push_str(&line(m));
    }
    out.push_str(
        "</memories>\n\nAnswer every memory exactly once with this manifest (a short reason \
         inside each archive verdict):\n<archive_stale>\n<memory id=\"ID\" \
         verdict=\"archive\">reason</memory>\n<memory id=\"ID\" verdict=\"keep\"/>\n\
         </archive_stale>\n",
    );
    out
}

fn line(m: &LiveMemory) -> String {
    format!(
        "<memory id=\"{}\" category=\"{}\"{}>{}</memory>\n",
        m.id,
        m.category,
        m.importance
            .map(|i| format!(" importance=\"{i}\""))
            .unwrap_or_default(),
        escape(&m.content)
    )
}

pub fn parse(answer: &str, sent: &[i64]) -> Result<BTreeMap<i64, Verdict>, String> {
    let elements = manifest::parse(answer, "archive_stale", &["memory"])?;
    manifest::per_memory(elements, sent, &["id", "verdict"], |id, el| {
        Ok(match el.required("verdict")?.trim() {
            "archive" => Verdict::Archive(
                el.text
                    .as_deref()
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .unwrap_or("stale")
                    .to_string(),
            ),
            "keep" => Verdict::Keep,
            other => {
                return Err(format!(
                    "memory #{id}'s verdict {other:?} is not archive or keep"
                ));
            }
        })
    })
}

/// Whether `m` is a stale candidate at `now` (rule 2 above).
pub fn is_candidate(m: &LiveMemory, now: i64, stale_days: u64) -> bool {
    let cutoff = now.saturating_sub(
        i64::try_from(stale_days)
            .unwrap_or(i64::MAX)
            .saturating_mul(DAY_MS),
    );
    m.status == "active"
        && m.importance.is_none_or(|i| i < KEEP_IMPORTANCE)
        && m.last_used_ms.unwrap_or(m.created_ms) < cutoff
}

pub fn run(run: &mut Run<'_, '_>) -> Result<Done, TaskFailure> {
    let project = run.project.clone();
    let now = run.now();
    let stale_days = run.settings.dream.stale_days;
    run.apply(|tx| usage::refresh_from_heads(tx, &project))?;
    let memories = live_memories(run.store.conn(), &project)?;
    let expired: Vec<i64> = memories
        .iter()
        .filter(|m| m.expires_ms.is_some_and(|e| e <= now))
        .map(|m| m.id)
        .collect();
    let candidates: Vec<&LiveMemory> = memories
        .iter()
        .filter(|m| !expired.contains(&m.id) && is_candidate(m, now, stale_days))
        .collect();
    let mut archived: Vec<i64> = Vec::new();
    let mut kept: Vec<i64> = Vec::new();
    let mut verdicts = BTreeMap::new();
    let mut sent_count = 0;
    if !candidates.is_empty() {
        let sent = run.fill(
            &candidates,
            line,
            |_| 40,
            |chosen| prompt(chosen, stale_days),
        );
        if sent.is_empty() {
            return Err(TaskFailure::new(
                FailureClass::Budget,
                "not one memory fits dream.task_token_budget",
            )
            .hint("raise dream.task_token_budget in the user config"));
        }
        sent_count = sent.len();
        let ids: Vec<i64> = sent.iter().map(|m| m.id).collect();
        let answer = run.ask(&prompt(&sent, stale_days))?;
        verdicts = parse(&answer, &ids).map_err(TaskFailure::rejected)?;
    }
    run.apply(|tx| {
        for id in &expired {
            memory::archive_in(tx, &project, *id, Some("expired"), now)?;
        }
        for (id, verdict) in &verdicts {
            match verdict {
                Verdict::Archive(reason) => {
                    memory::archive_in(tx, &project, *id, Some(&format!("stale: {reason}")), now)?;
                    archived.push(*id);
                }
                Verdict::Keep => kept.push(*id),
            }
        }
        store::mark_memories_used(tx, &project, &kept, now)
    })?;
    let changed = !expired.is_empty() || !archived.is_empty();
    Ok(Done {
        result: Outcome::of_change(changed),
        detail: json!({
            "memories": memories.len(),
            "expired": expired,
            "candidates": candidates.len(),
            "sent": sent_count,
            "archived": archived,
            "kept": kept.len(),
        }),
        head: None,
    })
}
