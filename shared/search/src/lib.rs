//! mc-search: what the agent (and the user) can get back and write — project
//! memory, session notes, the raw content behind drops and folds, a first
//! full-text query — and the agent tools that expose them (`tools`), the same
//! text over MCP and inside a harness plugin.
//!
//! Every function takes the project identity it serves: a memory, note or
//! compartment of another project is never visible, whatever id is asked for.

// The I/O rule, enforced: no printing here (and `shared/clippy.toml` refuses the
// environment, stdin/stdout and ureq's environment-reading defaults).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
// Nothing reachable from outside input may panic: no expect, no indexing or
// slicing that can go out of range; the few proven invariants carry an
// `allow` with the reason on the smallest item.
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

pub mod embed;
pub mod expand;
pub mod fts;
pub mod gitlog;
pub mod index;
pub mod mcp;
pub mod memory;
pub mod notes;
pub mod query;
pub mod recall;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tools;

#[cfg(test)]
mod tests;

use rusqlite::Connection;

use mc_base::domain::sessions::{self, SessionRow};
use mc_base::error::{Error, Result};

/// Who is asking: the project always, the session when there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    /// Project identity (`git:…` or `dir:…`).
    pub project: String,
    pub harness: String,
    pub session_id: Option<String>,
}

impl Scope {
    /// The session id, or an error naming what needs one.
    pub fn session_id(&self, what: &str) -> Result<&str> {
        self.session_id.as_deref().ok_or_else(|| {
            Error::input(format!("{what} needs a session")).with_hint(
                "pass --session ID (or \"session_id\" in the input); over MCP, Claude Code \
                 names its session to the server (mc-search mcp --harness claude-code) and \
                 other harnesses record theirs with a SessionStart hook (mc-search session-start)",
            )
        })
    }
}

/// The stored session of `scope`, which must belong to its project when the
/// session knows its project.
pub fn find_scoped_session(conn: &Connection, scope: &Scope, what: &str) -> Result<SessionRow> {
    let id = scope.session_id(what)?;
    let row = sessions::find_session(conn, &scope.harness, id)?
        .filter(|row| {
            row.project_identity
                .as_deref()
                .is_none_or(|p| p == scope.project)
        })
        .ok_or_else(|| {
            Error::input(format!(
                "mc has not seen {} session {id:?} in this project",
                scope.harness
            ))
            .with_hint("check the session id and --harness; mc learns a session on its first pass")
        })?;
    Ok(row)
}

/// A harness's SessionStart hook: record the session as the current one of
/// `project_dir` (what an MCP server in that folder serves), creating its
/// session row so notes and expands have somewhere to live.
pub fn record_session_start(
    store: &mut mc_base::store::Store,
    scope: &Scope,
    project_dir: &str,
    transcript_path: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    let id = scope.session_id("session-start")?;
    store.write(|tx| {
        if sessions::find_session(tx, &scope.harness, id)?.is_none() {
            sessions::create_session(tx, &scope.harness, id, false, Some(&scope.project), now_ms)?;
        }
        sessions::record_current(tx, &scope.harness, project_dir, id, transcript_path, now_ms)
    })
}

/// Make sure the session of `scope` has a row (created in the scope's
/// project), so notes and expands have somewhere to live: for a session the
/// harness itself named (an MCP server's environment) that mc has not seen
/// yet. Writes only when the row is missing.
pub fn ensure_session(store: &mut mc_base::store::Store, scope: &Scope, now_ms: i64) -> Result<()> {
    let Some(id) = scope.session_id.as_deref() else {
        return Ok(());
    };
    if sessions::find_session(store.conn(), &scope.harness, id)?.is_some() {
        return Ok(());
    }
    store.write(|tx| {
        if sessions::find_session(tx, &scope.harness, id)?.is_none() {
            sessions::create_session(tx, &scope.harness, id, false, Some(&scope.project), now_ms)?;
        }
        Ok(())
    })
}

/// `text` with every whitespace run one space, cut to `max` characters with `…`.
pub fn preview(text: &str, max: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if joined.chars().count() > max => {
            let mut kept = joined.get(..cut).unwrap_or_default().to_string();
            kept.push('…');
            kept
        }
        _ => joined,
    }
}

#[cfg(test)]
mod preview_tests {
    use super::preview;

    #[test]
    fn previews_collapse_whitespace_and_cut_on_characters() {
        assert_eq!(preview("a  b\n\tc", 10), "a b c");
        assert_eq!(preview("ééééé", 3), "éé…");
        assert_eq!(preview("abc", 3), "abc");
    }
}
