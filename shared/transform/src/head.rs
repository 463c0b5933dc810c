//! The head of the prompt in a pass: when m[0] re-materialises (HARD), when
//! m[1] is refreshed (SOFT, on passes that bust anyway), and the cached bytes
//! replayed on every other pass.

use std::collections::BTreeSet;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use mc_base::config::CacheTtl;
use mc_base::error::{Error, Result};
use mc_base::tokens;
use mc_history::decay::Compartment;
use mc_history::head::{self, M0Inputs, M1Inputs, PinnedText};
use mc_history::store;

use super::scheduler::ttl_expired;

/// The cached head of a session and the markers of what it covers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeadRow {
    pub m0: String,
    pub m1: String,
    pub m0_tokens: i64,
    pub m1_tokens: i64,
    pub materialized_ms: i64,
    pub reason: String,
    pub model_key: Option<String>,
    pub system_hash: Option<String>,
    pub render_key: String,
    pub project: Option<String>,
    pub covered_through: i64,
    pub m0_covered_through: i64,
    pub max_compartment_seq: i64,
    pub max_memory_id: i64,
    pub max_memory_mutation_id: i64,
    pub max_edit_id: i64,
    pub max_profile_id: i64,
    pub memory_epoch: i64,
    pub memory_ids: Vec<i64>,
    pub pinned_ids: Vec<String>,
    pub tiers: String,
    pub m1_memory_updates: i64,
}

fn json_list<T: serde::de::DeserializeOwned>(text: String) -> rusqlite::Result<Vec<T>> {
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

pub fn load_head(conn: &Connection, session: i64) -> Result<Option<HeadRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT m0, m1, m0_tokens, m1_tokens, materialized_ms, reason, model_key, system_hash,
                    render_key, project, covered_through, m0_covered_through, max_compartment_seq,
                    max_memory_id, max_memory_mutation_id, max_edit_id, max_profile_id, memory_epoch,
                    memory_ids, pinned_ids, tiers, m1_memory_updates
             FROM heads WHERE session = ?1",
        )?
        .query_row(params![session], |r| {
            Ok(HeadRow {
                m0: r.get(0)?,
                m1: r.get(1)?,
                m0_tokens: r.get(2)?,
                m1_tokens: r.get(3)?,
                materialized_ms: r.get(4)?,
                reason: r.get(5)?,
                model_key: r.get(6)?,
                system_hash: r.get(7)?,
                render_key: r.get(8)?,
                project: r.get(9)?,
                covered_through: r.get(10)?,
                m0_covered_through: r.get(11)?,
                max_compartment_seq: r.get(12)?,
                max_memory_id: r.get(13)?,
                max_memory_mutation_id: r.get(14)?,
                max_edit_id: r.get(15)?,
                max_profile_id: r.get(16)?,
                memory_epoch: r.get(17)?,
                memory_ids: json_list(r.get(18)?)?,
                pinned_ids: json_list(r.get(19)?)?,
                tiers: r.get(20)?,
                m1_memory_updates: r.get(21)?,
            })
        })
        .optional()?)
}

fn save_head(conn: &Connection, session: i64, h: &HeadRow) -> Result<()> {
    let ids = serde_json::to_string(&h.memory_ids).map_err(|e| Error::Corrupt(e.to_string()))?;
    let pins = serde_json::to_string(&h.pinned_ids).map_err(|e| Error::Corrupt(e.to_string()))?;
    conn.prepare_cached(
        "INSERT OR REPLACE INTO heads (session, m0, m1, m0_tokens, m1_tokens, materialized_ms, reason,
             model_key, system_hash, render_key, project, covered_through, m0_covered_through,
             max_compartment_seq, max_memory_id, max_memory_mutation_id, max_edit_id, max_profile_id,
             memory_epoch, memory_ids, pinned_ids, tiers, m1_memory_updates)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                 ?19, ?20, ?21, ?22, ?23)",
    )?
    .execute(params![
        session,
        h.m0,
        h.m1,
        h.m0_tokens,
        h.m1_tokens,
        h.materialized_ms,
        h.reason,
        h.model_key,
        h.system_hash,
        h.render_key,
        h.project,
        h.covered_through,
        h.m0_covered_through,
        h.max_compartment_seq,
        h.max_memory_id,
        h.max_memory_mutation_id,
        h.max_edit_id,
        h.max_profile_id,
        h.memory_epoch,
        ids,
        pins,
        h.tiers,
        h.m1_memory_updates
    ])?;
    Ok(())
}

/// What the store holds now, to compare with a cached head's markers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Markers {
    pub max_compartment_seq: i64,
    /// The newest ordinal any compartment covers.
    pub covered_through: i64,
    pub max_edit_id: i64,
    /// The newest edit that rebuilds m[0] at once (a delete or a merge); a
    /// recompute (`mc-historian recomp`) waits for a pass that busts anyway.
    pub max_forcing_edit_id: i64,
    pub max_memory_id: i64,
    pub max_memory_mutation_id: i64,
    pub max_profile_id: i64,
    pub memory_epoch: i64,
}

pub fn current_markers(conn: &Connection, session: i64, project: Option<&str>) -> Result<Markers> {
    let (max_compartment_seq, covered_through) = conn
        .prepare_cached(
            "SELECT coalesce(max(sequence), 0), coalesce(max(end_ordinal), 0) FROM compartments WHERE session = ?1",
        )?
        .query_row(params![session], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let max_edit_id = conn
        .prepare_cached("SELECT coalesce(max(id), 0) FROM compartment_edits WHERE session = ?1")?
        .query_row(params![session], |r| r.get(0))?;
    let max_forcing_edit_id = conn
        .prepare_cached(
            "SELECT coalesce(max(id), 0) FROM compartment_edits
             WHERE session = ?1 AND kind != 'recompute'",
        )?
        .query_row(params![session], |r| r.get(0))?;
    let max_profile_id = conn
        .prepare_cached("SELECT coalesce(max(id), 0) FROM user_profile")?
        .query_row([], |r| r.get(0))?;
    let (max_memory_id, max_memory_mutation_id, memory_epoch) = match project {
        Some(p) => (
            conn.prepare_cached("SELECT coalesce(max(id), 0) FROM memories WHERE project = ?1")?
                .query_row(params![p], |r| r.get(0))?,
            conn.prepare_cached(
                "SELECT coalesce(max(id), 0) FROM memory_mutations WHERE project = ?1",
            )?
            .query_row(params![p], |r| r.get(0))?,
            store::memory_epoch(conn, p)?,
        ),
        None => (0, 0, 0),
    };
    Ok(Markers {
        max_compartment_seq,
        covered_through,
        max_edit_id,
        max_forcing_edit_id,
        max_memory_id,
        max_memory_mutation_id,
        max_profile_id,
        memory_epoch,
    })
}

/// Were the compartments recomputed since the cached head was built? Its
/// next busting pass rebuilds m[0] (they are no news m[1] could show).
pub fn recomputed_since(cache: &HeadRow, markers: &Markers) -> bool {
    markers.max_edit_id > cache.max_edit_id
}

/// Has anything arrived since the cached head was built that m[0] could fold in?
pub fn has_news(cache: &HeadRow, markers: &Markers) -> bool {
    markers.max_compartment_seq != cache.max_compartment_seq
        || markers.max_memory_id != cache.max_memory_id
        || markers.max_memory_mutation_id != cache.max_memory_mutation_id
        || markers.max_profile_id != cache.max_profile_id
}

/// What the pass knows that decides whether m[0] must be rebuilt.
pub struct HardSignals<'a> {
    pub model_key: Option<&'a str>,
    pub system_hash: Option<&'a str>,
    pub render_key: &'a str,
    pub project: Option<&'a str>,
    pub ttl: CacheTtl,
    /// The provider's last answer before this pass.
    pub last_response_ms: i64,
    pub now_ms: i64,
}

/// The HARD triggers, first match wins. New compartments, new memories, a new
/// profile entry or edited project docs are deliberately not among them: they
/// surface in m[1] and fold in at the next HARD.
pub fn must_materialize(
    cache: Option<&HeadRow>,
    signals: &HardSignals<'_>,
    markers: &Markers,
) -> Option<&'static str> {
    let Some(cache) = cache else {
        return Some("first_render");
    };
    if cache.render_key != signals.render_key {
        return Some("render_config");
    }
    if signals.model_key.is_some() && cache.model_key.as_deref() != signals.model_key {
        return Some("model_change");
    }
    if signals.system_hash.is_some() && cache.system_hash.as_deref() != signals.system_hash {
        return Some("system_change");
    }
    // The provider's cache of this head has expired: rebuilding it (and
    // re-tiering the decay) costs nothing. Once per idle window, because a
    // busting pass moves the response reference to its own time.
    if ttl_expired(signals.ttl, signals.last_response_ms, signals.now_ms)
        && signals.last_response_ms >= cache.materialized_ms
    {
        return Some("ttl_idle");
    }
    if cache.project.as_deref() != signals.project {
        return Some("project_change");
    }
    if markers.memory_epoch != cache.memory_epoch {
        return Some("memory_epoch");
    }
    if markers.max_forcing_edit_id > cache.max_edit_id {
        return Some("compartment_edit");
    }
    None
}

/// Everything a head render reads, gathered once per busting pass.
pub struct HeadContext<'a> {
    pub session: i64,
    pub project: Option<&'a str>,
    pub project_dir: Option<&'a Path>,
    pub model_key: Option<&'a str>,
    pub system_hash: Option<&'a str>,
    pub render_key: String,
    pub history_budget: u64,
    pub memory_budget: u64,
    pub dates: bool,
    pub now_ms: i64,
    /// Pinned messages of the session, with their text when the input has it.
    pub pinned: &'a [PinnedText],
}

fn count(text: &str) -> u64 {
    u64::from(tokens::estimate(text))
}

fn covered_pins(
    pinned: &[PinnedText],
    ordinal_of: &dyn Fn(&str) -> Option<i64>,
    through: i64,
) -> Vec<PinnedText> {
    pinned
        .iter()
        .filter(|p| ordinal_of(&p.id).is_some_and(|o| o <= through))
        .cloned()
        .collect()
}

fn compartments_of(conn: &Connection, session: i64) -> Result<Vec<Compartment>> {
    Ok(store::load_compartments(conn, session)?
        .into_iter()
        .map(|c| c.compartment)
        .collect())
}

/// HARD: rebuild m[0] from everything stored; m[1] restarts empty.
pub fn materialize(
    conn: &Connection,
    ctx: &HeadContext<'_>,
    markers: &Markers,
    reason: &'static str,
    ordinal_of: &dyn Fn(&str) -> Option<i64>,
) -> Result<HeadRow> {
    let compartments = compartments_of(conn, ctx.session)?;
    let memories = match ctx.project {
        Some(p) => store::live_memories(conn, p, ctx.now_ms)?,
        None => Vec::new(),
    };
    let profile = store::profile(conn)?;
    let docs = ctx
        .project_dir
        .map(head::read_project_docs)
        .unwrap_or_default();
    let pinned = covered_pins(ctx.pinned, ordinal_of, markers.covered_through);
    let m0 = head::render_m0(
        &M0Inputs {
            docs: &docs,
            profile: &profile,
            compartments: &compartments,
            memories: &memories,
            pinned: &pinned,
            history_budget: ctx.history_budget,
            memory_budget: ctx.memory_budget,
            dates: ctx.dates,
        },
        &count,
    );
    let m1 = head::M1_PLACEHOLDER.to_string();
    let row = HeadRow {
        m0_tokens: count(&m0.text) as i64,
        m1_tokens: count(&m1) as i64,
        m0: m0.text,
        m1,
        materialized_ms: ctx.now_ms,
        reason: reason.to_string(),
        model_key: ctx.model_key.map(str::to_string),
        system_hash: ctx.system_hash.map(str::to_string),
        render_key: ctx.render_key.clone(),
        project: ctx.project.map(str::to_string),
        covered_through: markers.covered_through,
        m0_covered_through: markers.covered_through,
        max_compartment_seq: markers.max_compartment_seq,
        max_memory_id: markers.max_memory_id,
        max_memory_mutation_id: markers.max_memory_mutation_id,
        max_edit_id: markers.max_edit_id,
        max_profile_id: markers.max_profile_id,
        memory_epoch: markers.memory_epoch,
        memory_ids: m0.memory_ids,
        pinned_ids: pinned.iter().map(|p| p.id.clone()).collect(),
        tiers: serde_json::to_string(&m0.tiers).unwrap_or_else(|_| "{}".into()),
        m1_memory_updates: 0,
    };
    save_head(conn, ctx.session, &row)?;
    Ok(row)
}

/// SOFT: re-render m[1] from the cached markers (m[0] untouched). Returns the
/// refreshed row and whether the pressure backstop asks for a fold.
pub fn refresh_m1(
    conn: &Connection,
    ctx: &HeadContext<'_>,
    cache: &HeadRow,
    markers: &Markers,
    ordinal_of: &dyn Fn(&str) -> Option<i64>,
) -> Result<(HeadRow, bool)> {
    let new_compartments: Vec<Compartment> = compartments_of(conn, ctx.session)?
        .into_iter()
        .filter(|c| c.sequence > cache.max_compartment_seq)
        .collect();
    let (new_memories, updates) = match ctx.project {
        Some(p) => {
            let in_m0: BTreeSet<i64> = cache.memory_ids.iter().copied().collect();
            let fresh = store::live_memories(conn, p, ctx.now_ms)?
                .into_iter()
                .filter(|m| m.id > cache.max_memory_id)
                .collect();
            let updates = store::mutations_since(conn, p, cache.max_memory_mutation_id)?
                .into_iter()
                .filter(|m| in_m0.contains(&m.memory))
                .collect::<Vec<_>>();
            (fresh, updates)
        }
        None => (Vec::new(), Vec::new()),
    };
    let new_profile: Vec<_> = store::profile(conn)?
        .into_iter()
        .filter(|p| p.id > cache.max_profile_id)
        .collect();
    let pinned: Vec<PinnedText> = covered_pins(ctx.pinned, ordinal_of, markers.covered_through)
        .into_iter()
        .filter(|p| !cache.pinned_ids.contains(&p.id))
        .collect();
    let m1 = head::render_m1(
        &M1Inputs {
            updates: &updates,
            new_compartments: &new_compartments,
            new_memories: &new_memories,
            new_profile: &new_profile,
            pinned: &pinned,
            memory_budget: ctx.memory_budget,
            dates: ctx.dates,
        },
        &count,
    );
    let m1_tokens = count(&m1) as i64;
    let row = HeadRow {
        m1,
        m1_tokens,
        covered_through: markers.covered_through.max(cache.m0_covered_through),
        m1_memory_updates: updates.len() as i64,
        ..cache.clone()
    };
    save_head(conn, ctx.session, &row)?;
    let backstop = row.m1_memory_updates > 40
        || row.m1_tokens as f64 > 0.20 * ctx.history_budget as f64
        || (row.m0_tokens >= 500 && row.m1_tokens as f64 > 0.15 * row.m0_tokens as f64);
    Ok((row, backstop))
}
