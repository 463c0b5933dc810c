//! `mc-transform status`: what the store knows about one session.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use mc_base::config::CacheTtl;
use mc_base::error::Result;

use super::calls::{self, Call};
use super::causes::{self, Verdict};
use mc_base::store::Store;

use mc_base::domain::{sessions, tags};

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TokenSplit {
    pub active: i64,
    pub dropped: i64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TagCounts {
    pub total: i64,
    pub active: i64,
    pub dropped: i64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PassCounts {
    pub defer: i64,
    pub execute: i64,
    pub passthrough: i64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LastBust {
    pub bust: String,
    pub cause: Option<String>,
    pub at_ms: Option<i64>,
}

/// The cached head of the prompt.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HeadStatus {
    pub m0_tokens: i64,
    pub m1_tokens: i64,
    pub m0_bytes: usize,
    pub m1_bytes: usize,
    /// Why m[0] was last rebuilt, and when.
    pub materialized_reason: String,
    pub materialized_ms: i64,
    /// Raw messages up to this ordinal are folded into the head.
    pub covered_through: i64,
    /// Tier number → compartments rendered at it in m[0] (5 = archived).
    pub tiers: serde_json::Value,
    pub compartments: i64,
    pub memories_in_m0: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusReport {
    pub harness: String,
    pub session_id: String,
    pub project: Option<String>,
    /// The folder whose config every command of the session reads (recorded by its first pass).
    pub project_dir: Option<String>,
    /// The render rules its bytes were last produced with.
    pub render_version: i64,
    /// A subagent session: no head, no historian (the harness said so).
    pub subagent: bool,
    pub tags: TagCounts,
    /// Tokens by tag kind (message, file, tool); tool counts include inputs.
    pub tokens: std::collections::BTreeMap<String, TokenSplit>,
    /// Share of tags whose count is exact rather than estimated (0..1).
    pub exact_share: f64,
    pub pending_drops: Vec<i64>,
    pub last_decision: Option<String>,
    pub last_reason: Option<String>,
    pub last_bust: Option<LastBust>,
    pub last_error: Option<String>,
    pub passes: PassCounts,
    pub usage_percent: f64,
    pub input_tokens: i64,
    pub context_window: i64,
    pub reasoning_cleared_through: i64,
    pub tool_reclaim_watermark: i64,
    pub execute_owed: bool,
    pub head: Option<HeadStatus>,
    pub pins: usize,
    pub passes_materialized: i64,
    /// The historian's last run and last failure (with its cause), if it ever ran.
    pub historian: Option<mc_history::historian::HistorianStatus>,
    /// The context limit a provider's overflow error stated for the session's
    /// model (it caps the harness's limit on every pass on that model).
    pub learned_limit: Option<mc_base::domain::models::LearnedLimit>,
    /// A provider rejected the session's last request as too long and no
    /// pass has recovered yet: the next pass is an emergency.
    pub overflow_pending: bool,
    /// The model the session's last pass named (`provider/model`).
    pub model: Option<String>,
    /// The model a historian run would use and why (`model`,
    /// `model_source`, `model_reason`), when the caller chose one
    /// (`historian::choice`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub historian_model: Option<mc_history::historian::choice::ModelReport>,
    /// The newest recorded calls, oldest first, each with its cache verdict
    /// (filled by [`recent_calls`]; the caller picks how many).
    pub calls: Vec<CallView>,
}

/// One recorded call and what its cache read says.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CallView {
    #[serde(flatten)]
    pub call: Call,
    pub cache: Verdict,
}

/// The newest `limit` calls of a session with their verdicts (the one
/// before the first is read too, to judge it). Empty for an unknown session.
pub fn recent_calls(
    conn: &rusqlite::Connection,
    session: i64,
    ttl: CacheTtl,
    limit: usize,
) -> Result<Vec<CallView>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let calls = calls::recent(conn, session, limit + 1)?;
    let verdicts = causes::classify(&calls, causes::ttl_ms(ttl));
    let skip = calls.len().saturating_sub(limit);
    Ok(calls
        .into_iter()
        .zip(verdicts)
        .skip(skip)
        .map(|(call, cache)| CallView { call, cache })
        .collect())
}

/// [`status`] with the newest `calls` calls and their causes.
pub fn status_with_calls(
    store: &Store,
    harness: &str,
    session_id: &str,
    ttl: CacheTtl,
    calls: usize,
) -> Result<Option<StatusReport>> {
    let Some(mut report) = status(store, harness, session_id)? else {
        return Ok(None);
    };
    if let Some(session) = sessions::find_session(store.conn(), harness, session_id)? {
        report.calls = recent_calls(store.conn(), session.id, ttl, calls)?;
    }
    Ok(Some(report))
}

pub fn status(store: &Store, harness: &str, session_id: &str) -> Result<Option<StatusReport>> {
    let conn = store.conn();
    let Some(session) = sessions::find_session(conn, harness, session_id)? else {
        return Ok(None);
    };
    let Some(row) = conn
        .query_row(
            "SELECT last_decision, last_reason, last_bust, last_bust_cause, last_bust_ms, last_error,
                    passes_defer, passes_execute, passes_passthrough, last_usage_percent,
                    last_input_tokens, last_context_limit
             FROM sessions WHERE id = ?1",
            params![session.id],
            |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    PassCounts {
                        defer: r.get(6)?,
                        execute: r.get(7)?,
                        passthrough: r.get(8)?,
                    },
                    r.get::<_, f64>(9)?,
                    r.get::<_, i64>(10)?,
                    r.get::<_, i64>(11)?,
                ))
            },
        )
        .optional()?
    else {
        // Deleted since it was found: no session, as if it had never been.
        return Ok(None);
    };
    let mut tags = TagCounts::default();
    let mut tokens = std::collections::BTreeMap::new();
    let mut exact = 0i64;
    let mut stmt = conn.prepare(
        "SELECT kind, status, count(*), sum(tokens + input_tokens), sum(tokens_exact)
         FROM tags WHERE session = ?1 GROUP BY kind, status",
    )?;
    let mut rows = stmt.query(params![session.id])?;
    while let Some(r) = rows.next()? {
        let (kind, status, count, sum, exact_count): (String, String, i64, i64, i64) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
        tags.total += count;
        exact += exact_count;
        let split: &mut TokenSplit = tokens.entry(kind).or_default();
        if status == "active" {
            tags.active += count;
            split.active += sum;
        } else {
            tags.dropped += count;
            split.dropped += sum;
        }
    }
    let (last_decision, last_reason, bust, cause, at_ms, last_error, passes, pct, input, window) =
        row;
    let head = super::head::load_head(conn, session.id)?.map(|h| HeadStatus {
        m0_tokens: h.m0_tokens,
        m1_tokens: h.m1_tokens,
        m0_bytes: h.m0.len(),
        m1_bytes: h.m1.len(),
        materialized_reason: h.reason,
        materialized_ms: h.materialized_ms,
        covered_through: h.covered_through,
        tiers: serde_json::from_str(&h.tiers).unwrap_or_default(),
        compartments: 0,
        memories_in_m0: h.memory_ids.len(),
    });
    let head = match head {
        Some(mut h) => {
            h.compartments = conn.query_row(
                "SELECT count(*) FROM compartments WHERE session = ?1",
                params![session.id],
                |r| r.get(0),
            )?;
            Some(h)
        }
        None => None,
    };
    let pins = mc_history::store::pins(conn, session.id)?.len();
    let passes_materialized: i64 = conn.query_row(
        "SELECT passes_materialized FROM sessions WHERE id = ?1",
        params![session.id],
        |r| r.get(0),
    )?;
    let exact_share = if tags.total == 0 {
        0.0
    } else {
        (exact as f64 / tags.total as f64 * 1000.0).round() / 1000.0
    };
    Ok(Some(StatusReport {
        subagent: session.is_subagent,
        harness: harness.to_string(),
        session_id: session_id.to_string(),
        project: session.project_identity.clone(),
        project_dir: session.project_dir.clone(),
        render_version: session.render_version,
        tags,
        tokens,
        exact_share,
        pending_drops: tags::pending_drops(conn, session.id)?,
        last_decision,
        last_reason,
        last_bust: bust.map(|bust| LastBust { bust, cause, at_ms }),
        last_error,
        passes,
        usage_percent: (pct * 10.0).round() / 10.0,
        input_tokens: input,
        context_window: window,
        reasoning_cleared_through: session.reasoning_cleared_through,
        tool_reclaim_watermark: session.tool_reclaim_watermark,
        execute_owed: session.deferred_execute_ms.is_some(),
        head,
        pins,
        passes_materialized,
        historian: mc_history::historian::status(conn, session.id)?,
        learned_limit: match &session.last_model_key {
            Some(key) => mc_base::domain::models::learned_limit(conn, key)?,
            None => None,
        },
        overflow_pending: super::overflow::pending(conn, harness, session_id)?.is_some(),
        model: session.last_model_key.clone(),
        historian_model: None,
        calls: Vec::new(),
    }))
}
