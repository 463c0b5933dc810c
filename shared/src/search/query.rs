//! `query` / `ctx_search`, first form: full-text search (FTS5, BM25) over the
//! project's memories, notes and compartments, one ranked list. The user's
//! words are quoted before they reach FTS5, so no input is a syntax error.
//! ("mc-search II" adds raw messages, commits and embeddings.)

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::error::{Error, Result};

use super::preview;

pub const SOURCES: [&str; 3] = ["memory", "note", "compartment"];

/// How much one source's hits weigh against another's (memories first: they
/// are the project's curated facts).
fn boost(source: &str) -> f64 {
    match source {
        "memory" => 1.3,
        "compartment" => 1.15,
        _ => 1.0,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub source: &'static str,
    /// `#12` (memory, note) or `<session>/c<sequence>` (compartment).
    pub reference: String,
    pub id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    pub score: f64,
    pub snippet: String,
}

/// The words of `text` as an FTS5 expression any of which may match.
pub fn fts_expression(text: &str) -> Option<String> {
    let terms: Vec<String> = text
        .split_whitespace()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" OR "))
}

pub fn query(
    conn: &Connection,
    project: &str,
    text: &str,
    sources: &[String],
    limit: usize,
) -> Result<Vec<Hit>> {
    let expression =
        fts_expression(text).ok_or_else(|| Error::input("a query needs at least one word"))?;
    for s in sources {
        if !SOURCES.contains(&s.as_str()) {
            return Err(Error::input(format!(
                "unknown source {s:?} (one of {})",
                SOURCES.join(", ")
            )));
        }
    }
    let wants = |s: &str| sources.is_empty() || sources.iter().any(|x| x == s);
    let limit = limit.clamp(1, 100);
    let per_source = (limit * 3).max(10);
    let mut hits = Vec::new();
    if wants("memory") {
        let mut stmt = conn.prepare_cached(
            "SELECT m.id, m.category, m.content FROM memories_fts f JOIN memories m ON m.id = f.rowid
             WHERE memories_fts MATCH ?1 AND m.project = ?2 AND m.status IN ('active', 'permanent')
             ORDER BY bm25(memories_fts), m.id LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![expression, project, per_source as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for (rank, row) in rows.enumerate() {
            let (id, category, content) = row?;
            hits.push(Hit {
                source: "memory",
                reference: format!("#{id}"),
                id,
                session_id: None,
                category: Some(category),
                score: score("memory", rank),
                snippet: preview(&content, 220),
            });
        }
    }
    if wants("note") {
        let mut stmt = conn.prepare_cached(
            "SELECT n.id, s.session_id, n.content FROM notes_fts f
               JOIN notes n ON n.id = f.rowid JOIN sessions s ON s.id = n.session
             WHERE notes_fts MATCH ?1 AND n.project = ?2
             ORDER BY bm25(notes_fts), n.id LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![expression, project, per_source as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for (rank, row) in rows.enumerate() {
            let (id, session_id, content) = row?;
            hits.push(Hit {
                source: "note",
                reference: format!("#{id}"),
                id,
                session_id: Some(session_id),
                category: None,
                score: score("note", rank),
                snippet: preview(&content, 220),
            });
        }
    }
    if wants("compartment") {
        let mut stmt = conn.prepare_cached(
            "SELECT f.sequence, s.session_id, f.title, c.p2, c.start_ordinal, c.end_ordinal
             FROM compartments_fts f
               JOIN sessions s ON s.id = f.session
               JOIN compartments c ON c.session = f.session AND c.sequence = f.sequence
             WHERE compartments_fts MATCH ?1 AND s.project_identity = ?2
             ORDER BY bm25(compartments_fts), f.session, f.sequence LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![expression, project, per_source as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?;
        for (rank, row) in rows.enumerate() {
            let (sequence, session_id, title, body, start, end) = row?;
            hits.push(Hit {
                source: "compartment",
                reference: format!("c{sequence} (messages {start}-{end})"),
                id: sequence,
                session_id: Some(session_id),
                category: None,
                score: score("compartment", rank),
                snippet: preview(&format!("{title}: {body}"), 220),
            });
        }
    }
    // Highest score first; ties keep source order, then the lower id.
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| source_rank(a.source).cmp(&source_rank(b.source)))
            .then_with(|| a.id.cmp(&b.id))
    });
    hits.truncate(limit);
    Ok(hits)
}

fn source_rank(source: &str) -> usize {
    SOURCES
        .iter()
        .position(|s| *s == source)
        .unwrap_or(SOURCES.len())
}

fn score(source: &str, rank: usize) -> f64 {
    let raw = 1.0 / (rank as f64 + 1.0);
    // Rounded so the printed score is the compared one (no float noise in output).
    (raw * boost(source) * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_text_becomes_a_valid_expression() {
        assert_eq!(fts_expression("  "), None);
        assert_eq!(
            fts_expression("retry \"policy AND"),
            Some("\"retry\" OR \"\"\"policy\" OR \"AND\"".into())
        );
    }
}
