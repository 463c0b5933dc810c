//! The raw-message index: the text of every kept part (user and assistant
//! text, tool calls with their input, tool outputs up to a cap) in FTS5,
//! drained from the queue a pass fills, in bounded batches, tokenized by
//! `porter unicode61` (migration 0011). Identifiers are indexed whole and split (`RetryPolicy` also as `retry policy`; `snake_case`
//! and paths split by the tokenizer itself), so a search by either form finds
//! them.

use rusqlite::{Connection, params};
use serde::Serialize;

use mc_base::error::Result;
use mc_base::store::Store;

/// How much of one tool output is indexed (the whole output stays
/// expandable; search finds it by its head, its call and its input).
pub const MAX_TOOL_OUTPUT_INDEXED: usize = 16 * 1024;
/// How much of any other part is indexed.
pub const MAX_TEXT_INDEXED: usize = 64 * 1024;
/// Rows indexed per write transaction.
const BATCH: usize = 256;

/// `text` up to `max` bytes, on a character boundary.
fn head(text: &str, max: usize) -> &str {
    let cut = mc_base::domain::content::floor_boundary(text, max);
    text.get(..cut).unwrap_or_default()
}

/// The pieces of identifiers written in camel case or with digits
/// (`RetryPolicy` → `Retry Policy`, `HTTP2Client` → `HTTP 2 Client`), for every
/// identifier that has any; the tokenizer already splits on `_`, `/`, `.`.
pub fn identifier_pieces(text: &str) -> String {
    let mut out = String::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = word.chars().collect();
        let mut pieces: Vec<String> = Vec::new();
        let mut current = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
            let next = chars.get(i + 1).copied();
            let boundary = match prev {
                None => false,
                Some(p) => {
                    (p.is_lowercase() && c.is_uppercase())
                        || (p.is_alphabetic() != c.is_alphabetic())
                        || (p.is_uppercase()
                            && c.is_uppercase()
                            && next.is_some_and(char::is_lowercase))
                }
            };
            if boundary && !current.is_empty() {
                pieces.push(std::mem::take(&mut current));
            }
            current.push(c);
        }
        if !current.is_empty() {
            pieces.push(current);
        }
        if pieces.len() > 1 {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&pieces.join(" "));
        }
    }
    out
}

/// What the index holds for one part.
pub fn index_text(
    kind: &str,
    tool_name: Option<&str>,
    tool_input: Option<&str>,
    content: &str,
) -> String {
    let mut text = String::new();
    if kind == "tool" {
        text.push_str(tool_name.unwrap_or_default());
        text.push('\n');
        text.push_str(head(tool_input.unwrap_or_default(), MAX_TEXT_INDEXED));
        text.push('\n');
        text.push_str(head(content, MAX_TOOL_OUTPUT_INDEXED));
    } else {
        text.push_str(head(content, MAX_TEXT_INDEXED));
    }
    let pieces = identifier_pieces(&text);
    if !pieces.is_empty() {
        text.push('\n');
        text.push_str(&pieces);
    }
    text
}

/// Parts kept but not indexed yet.
pub fn pending(conn: &Connection) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM message_index_queue")?
        .query_row([], |r| r.get(0))?)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IndexReport {
    /// Parts indexed by this call.
    pub indexed: u64,
    /// Parts still waiting (0 when the index is up to date).
    pub pending: u64,
}

/// Index up to `max` queued parts (all of them with `None`), oldest first, a
/// batch per transaction; `progress(done, total)` after each batch. Running
/// it again does nothing for what is indexed; two at once never index a part
/// twice (a batch takes its rows off the queue in the transaction that
/// indexes them).
pub fn catch_up(
    store: &mut Store,
    max: Option<u64>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<IndexReport> {
    catch_up_session(store, None, max, progress)
}

/// [`catch_up`] for the parts of one session (a stored session row id), or all.
pub fn catch_up_session(
    store: &mut Store,
    session: Option<i64>,
    max: Option<u64>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<IndexReport> {
    let waiting = match session {
        None => pending(store.conn())?,
        Some(s) => store
            .conn()
            .prepare_cached(
                "SELECT count(*) FROM message_index_queue q JOIN raw_parts r ON r.id = q.raw_part
                 WHERE r.session = ?1",
            )?
            .query_row(params![s], |r| r.get(0))?,
    };
    let total = (waiting as u64).min(max.unwrap_or(u64::MAX));
    let mut done = 0;
    while done < total {
        let want = (total - done).min(BATCH as u64);
        let n = store.write(|tx| index_batch(tx, session, want))?;
        if n == 0 {
            break;
        }
        done += n;
        progress(done, total);
    }
    Ok(IndexReport {
        indexed: done,
        pending: pending(store.conn())? as u64,
    })
}

/// A queued part: its id, and (when it still exists) kind, tool name, input, content.
type QueuedPart = (
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn index_batch(conn: &Connection, session: Option<i64>, want: u64) -> Result<u64> {
    let rows: Vec<QueuedPart> = conn
        .prepare_cached(
            "SELECT q.raw_part, r.kind, r.tool_name, r.tool_input, r.content
             FROM message_index_queue q LEFT JOIN raw_parts r ON r.id = q.raw_part
             WHERE ?2 IS NULL OR r.session = ?2
             ORDER BY q.raw_part LIMIT ?1",
        )?
        .query_map(params![want as i64, session], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut insert =
        conn.prepare_cached("INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)")?;
    let mut dequeue = conn.prepare_cached("DELETE FROM message_index_queue WHERE raw_part = ?1")?;
    for (id, kind, tool_name, tool_input, content) in &rows {
        if let (Some(kind), Some(content)) = (kind, content) {
            let text = index_text(kind, tool_name.as_deref(), tool_input.as_deref(), content);
            insert.execute(params![id, text])?;
        }
        dequeue.execute(params![id])?;
    }
    Ok(rows.len() as u64)
}

/// The state of the indexes: parts kept, indexed, waiting (the message
/// index), whether every full-text index is whole, and each one's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexCheck {
    pub parts: i64,
    pub indexed: i64,
    pub pending: i64,
    /// Every index passes (see `indexes`).
    pub healthy: bool,
    /// The first unhealthy index's problem, after its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    pub indexes: Vec<super::fts::FtsCheck>,
}

pub fn check(conn: &Connection) -> Result<IndexCheck> {
    let parts: i64 = conn.query_row("SELECT count(*) FROM raw_parts", [], |r| r.get(0))?;
    let pending = pending(conn)?;
    let indexed: i64 = conn.query_row(
        "SELECT count(*) FROM raw_parts WHERE id NOT IN (SELECT raw_part FROM message_index_queue)",
        [],
        |r| r.get(0),
    )?;
    let indexes = super::fts::check(conn)?;
    let problem = indexes
        .iter()
        .find_map(|i| i.problem.as_ref().map(|p| format!("{}: {p}", i.name)));
    Ok(IndexCheck {
        parts,
        indexed,
        pending,
        healthy: problem.is_none(),
        problem,
        indexes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_indexed_whole_and_in_pieces() {
        assert_eq!(identifier_pieces("RetryPolicy failed"), "Retry Policy");
        assert_eq!(identifier_pieces("HTTP2Client"), "HTTP 2 Client");
        assert_eq!(
            identifier_pieces("parseJSONBody E0308"),
            "parse JSON Body E 0308"
        );
        assert_eq!(identifier_pieces("plain words and snake_case"), "");
        let text = index_text(
            "tool",
            Some("read"),
            Some("{\"filePath\":\"src/RetryPolicy.rs\"}"),
            &"x".repeat(40_000),
        );
        assert!(text.starts_with("read\n{\"filePath\""));
        assert!(text.ends_with("Retry Policy"));
        assert!(text.len() < MAX_TOOL_OUTPUT_INDEXED + 200);
    }
}
