//! The search behind the transform's recall hints
//! (`mc_transform_core::recall`): one full-text query over the project's
//! memories, compartments and raw messages, less what the asking session
//! sees — the memories its head shows, its own compartments (the head shows
//! them), its messages still on the wire. No embeddings: a hint must not
//! wait for a model.

use rusqlite::{Connection, OptionalExtension, params};

use mc_base::domain::sessions;
use mc_base::error::Result;
use mc_transform_core::recall::{Ask, Found, Kind, Recall};

use super::query::{self, Hit, Source};

/// mc-search's [`Recall`]: what the binaries hand the pass.
#[derive(Debug, Default, Clone, Copy)]
pub struct Search;

/// The sources a hint may name.
const SOURCES: [&str; 3] = ["memory", "compartment", "message"];

impl Recall for Search {
    fn find(&self, conn: &Connection, ask: &Ask<'_>) -> Result<Vec<Found>> {
        let sources: Vec<String> = SOURCES.iter().map(|s| s.to_string()).collect();
        let hits = query::search(
            conn,
            &query::Request {
                project: ask.project,
                text: ask.query,
                sources: &sources,
                // Room for the hits this session sees, left out below.
                limit: (ask.limit * 4).min(100),
                asking: Some((ask.harness, ask.session_id)),
                ..query::Request::default()
            },
        )?;
        let own = Own::read(conn, ask)?;
        let mut found = Vec::new();
        for hit in hits {
            if found.len() == ask.limit {
                break;
            }
            if let Some(f) = own.found(conn, hit, ask.session_id)? {
                found.push(f);
            }
        }
        Ok(found)
    }
}

/// The asking session as far as its view goes.
struct Own {
    /// Its row id (none: mc has not stored it yet).
    session: Option<i64>,
    /// Raw messages up to this ordinal are folded into its head.
    covered_through: i64,
    /// Its head's m[1] as last rendered: the memories new since m[0] (the
    /// query leaves out m[0]'s own).
    m1: String,
}

impl Own {
    fn read(conn: &Connection, ask: &Ask<'_>) -> Result<Own> {
        let Some(row) = sessions::find_session(conn, ask.harness, ask.session_id)? else {
            return Ok(Own {
                session: None,
                covered_through: 0,
                m1: String::new(),
            });
        };
        let (covered_through, m1) = conn
            .prepare_cached("SELECT covered_through, m1 FROM heads WHERE session = ?1")?
            .query_row(params![row.id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
            .unwrap_or_default();
        Ok(Own {
            session: Some(row.id),
            covered_through,
            m1,
        })
    }

    /// `hit` as a hint names it, unless the session sees it already.
    fn found(&self, conn: &Connection, hit: Hit, asking: &str) -> Result<Option<Found>> {
        let mine = hit.session_id.as_deref() == Some(asking);
        let of = |what: String| match &hit.session_id {
            Some(s) if !mine => format!("{what} of session {s}"),
            _ => what,
        };
        Ok(match hit.source {
            Source::Memory if self.in_m1(conn, hit.id)? => None,
            Source::Memory => Some(Found {
                kind: Kind::Memory,
                name: format!("memory {}", hit.reference),
                expand: None,
                text: hit.snippet,
            }),
            // Its own compartments are in its head already.
            Source::Compartment if mine => None,
            Source::Compartment => Some(Found {
                kind: Kind::Compartment,
                name: of(hit.reference.clone()),
                expand: None,
                text: hit.snippet,
            }),
            Source::Message => {
                let Some(ordinal) = hit.ordinal else {
                    return Ok(None);
                };
                if mine && !self.out_of_view(conn, ordinal, hit.tag)? {
                    return Ok(None);
                }
                let expand = mine.then(|| match hit.tag {
                    Some(tag) => format!("§{tag}§"),
                    None => format!("{ordinal}-{ordinal}"),
                });
                Some(Found {
                    kind: Kind::Message,
                    name: of(format!("message {ordinal}")),
                    expand,
                    text: hit.snippet,
                })
            }
            Source::Note | Source::Commit => None,
        })
    }

    /// Does the head's m[1] show memory `id`?
    fn in_m1(&self, conn: &Connection, id: i64) -> Result<bool> {
        if self.m1.is_empty() {
            return Ok(false);
        }
        let content: Option<String> = conn
            .prepare_cached("SELECT content FROM memories WHERE id = ?1")?
            .query_row(params![id], |r| r.get(0))
            .optional()?;
        Ok(content.is_some_and(|c| self.m1.contains(c.trim())))
    }

    /// Is the asking session's message `ordinal` (tag `tag`) off its wire:
    /// folded into the head, or dropped?
    fn out_of_view(&self, conn: &Connection, ordinal: i64, tag: Option<i64>) -> Result<bool> {
        if ordinal <= self.covered_through {
            return Ok(true);
        }
        let (Some(session), Some(tag)) = (self.session, tag) else {
            return Ok(false);
        };
        let status: Option<String> = conn
            .prepare_cached("SELECT status FROM tags WHERE session = ?1 AND number = ?2")?
            .query_row(params![session, tag], |r| r.get(0))
            .optional()?;
        Ok(status.as_deref() == Some("dropped"))
    }
}
