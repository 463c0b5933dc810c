//! `query` / `ctx_search`: full-text search (FTS5, BM25) over the project's
//! memories, notes, compartments and raw messages of every session, one
//! ranked list. The user's words are quoted before they reach FTS5, so no
//! input is a syntax error; `"an exact phrase"` and `-word` (leave out) are
//! understood. When the query names the session asking, what that session
//! already sees is left out: memories rendered in its head, and raw messages
//! after its last compartment that are still on the wire.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use mc_base::error::{Error, Result};

use super::embed::{self, Item};
use super::preview;

/// The names of the sources, in their order (the tools' `sources` values).
pub const SOURCES: [&str; 5] = ["memory", "note", "compartment", "message", "commit"];

/// Where a hit comes from. The order is the tie-break between equal scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Memory,
    Note,
    Compartment,
    Message,
    Commit,
}

impl Source {
    pub const ALL: [Source; 5] = [
        Source::Memory,
        Source::Note,
        Source::Compartment,
        Source::Message,
        Source::Commit,
    ];

    /// Its name, as printed and as the `sources` filter spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Memory => "memory",
            Source::Note => "note",
            Source::Compartment => "compartment",
            Source::Message => "message",
            Source::Commit => "commit",
        }
    }

    pub fn parse(name: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// How much its hits weigh against another source's (memories first:
    /// they are the project's curated facts).
    fn boost(self) -> f64 {
        match self {
            Source::Memory => 1.3,
            Source::Compartment | Source::Message => 1.15,
            Source::Commit => 1.1,
            Source::Note => 1.0,
        }
    }

    /// The score of its hit at `rank` (0 is its best).
    fn score(self, rank: usize) -> f64 {
        let raw = 1.0 / (rank as f64 + 1.0);
        // Rounded so the printed score is the compared one (no float noise in output).
        (raw * self.boost() * 1000.0).round() / 1000.0
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub source: Source,
    /// `#12` (memory, note) or `<session>/c<sequence>` (compartment).
    pub reference: String,
    pub id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// A message hit: its ordinal and tag (what `ctx_expand` opens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<i64>,
    /// A commit hit: its full object name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    pub score: f64,
    pub snippet: String,
    /// What hybrid search embeds for this hit.
    #[serde(skip)]
    pub item: super::embed::Item,
}

/// `text` as an FTS5 expression: words and `"phrases"` any of which may
/// match, less every `-word` or `-"phrase"`. `None` when nothing is left to
/// look for.
pub fn fts_expression(text: &str) -> Option<String> {
    let mut wanted = Vec::new();
    let mut unwanted = Vec::new();
    // Question words left out, unless nothing else is left.
    let mut skipped: Vec<String> = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (negated, after) = match rest.strip_prefix('-') {
            Some(after) if !after.starts_with(char::is_whitespace) && !after.is_empty() => {
                (true, after)
            }
            _ => (false, rest),
        };
        let (term, next, quoted) = match after.strip_prefix('"').and_then(|a| a.split_once('"')) {
            Some((phrase, next)) => (phrase, next, true),
            None => match after.split_once(char::is_whitespace) {
                Some((word, next)) => (word, next, false),
                None => (after, "", false),
            },
        };
        // FTS5 strings end at a NUL; control characters are no words anyway.
        let term = term
            .replace('"', "")
            .replace(|c: char| c.is_control(), " ")
            .trim()
            .to_string();
        let filler = !negated && !quoted && is_stopword(&term);
        if filler {
            skipped.push(format!("\"{term}\""));
        } else if term.split_whitespace().next().is_some()
            && term.chars().any(char::is_alphanumeric)
        {
            let quoted = format!("\"{term}\"");
            if negated {
                unwanted.push(quoted);
            } else {
                wanted.push(quoted);
            }
        }
        rest = next.trim_start();
    }
    if wanted.is_empty() {
        wanted = skipped;
    }
    if wanted.is_empty() {
        return None;
    }
    let mut expression = if wanted.len() == 1 {
        wanted.join("")
    } else {
        format!("({})", wanted.join(" OR "))
    };
    for term in unwanted {
        expression.push_str(" NOT ");
        expression.push_str(&term);
    }
    Some(expression)
}

/// English function words that say how a question is asked, not what it
/// is about: with OR semantics they only let filler outrank the evidence
/// (on the QA set of the benchmark). Kept when a query has nothing else.
const STOPWORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "can", "did", "do", "does", "for",
    "from", "has", "have", "how", "i", "in", "is", "it", "its", "of", "on", "or", "our", "that",
    "the", "these", "this", "those", "to", "us", "was", "we", "were", "what", "when", "where",
    "which", "who", "why", "with", "you",
];

fn is_stopword(term: &str) -> bool {
    let lower = term.to_lowercase();
    STOPWORDS.binary_search(&lower.as_str()).is_ok()
}

/// A search and its filters.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    pub project: &'a str,
    pub text: &'a str,
    /// Only these sources (empty: all).
    pub sources: &'a [String],
    pub limit: usize,
    /// Only hits of this session (harness, session id).
    pub session: Option<(&'a str, &'a str)>,
    /// Only hits of sessions of this harness.
    pub harness: Option<&'a str>,
    /// Only what was written (or happened) in `[since, until)` (ms).
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// The session asking: what it already sees is left out.
    pub asking: Option<(&'a str, &'a str)>,
}

/// What the asking session already sees.
#[derive(Debug, Default)]
struct Visible {
    session: Option<i64>,
    memory_ids: Vec<i64>,
    /// Raw messages after this ordinal are on the wire (None: no compartment yet).
    boundary: Option<i64>,
}

fn visible(conn: &Connection, asking: Option<(&str, &str)>) -> Result<Visible> {
    let Some((harness, id)) = asking else {
        return Ok(Visible::default());
    };
    let Some(row) = mc_base::domain::sessions::find_session(conn, harness, id)? else {
        return Ok(Visible::default());
    };
    let memory_ids: Vec<i64> = conn
        .prepare_cached("SELECT memory_ids FROM heads WHERE session = ?1")?
        .query_row(params![row.id], |r| r.get::<_, String>(0))
        .optional()?
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let boundary: Option<i64> = conn
        .prepare_cached("SELECT max(end_ordinal) FROM compartments WHERE session = ?1")?
        .query_row(params![row.id], |r| r.get(0))?;
    Ok(Visible {
        session: Some(row.id),
        memory_ids,
        boundary,
    })
}

/// About `max` characters of `content` around the first word of the query it
/// contains (its start when none is found).
pub fn snippet(content: &str, text: &str, max: usize) -> String {
    let lower = content.to_lowercase();
    let at = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 1)
        .filter_map(|w| lower.find(&w.to_lowercase()))
        .min()
        .filter(|_| lower.len() == content.len())
        .unwrap_or(0);
    let start = mc_base::domain::content::floor_boundary(content, at.saturating_sub(max / 3));
    let tail = content.get(start..).unwrap_or(content);
    let shown = preview(tail, max);
    if start > 0 {
        format!("…{shown}")
    } else {
        shown
    }
}

/// The project's hits for `text` (see [`search`] for filters).
pub fn query(
    conn: &Connection,
    project: &str,
    text: &str,
    sources: &[String],
    limit: usize,
) -> Result<Vec<Hit>> {
    search(
        conn,
        &Request {
            project,
            text,
            sources,
            limit,
            ..Request::default()
        },
    )
}

/// One ranked list over the sources the request names. Message hits come
/// from what is indexed; run [`super::index::catch_up`] first to include the
/// newest.
pub fn search(conn: &Connection, request: &Request<'_>) -> Result<Vec<Hit>> {
    Ok(search_with(conn, request, None)?.hits)
}

/// A search's hits, and what the caller should be told about them.
#[derive(Debug, Clone, PartialEq)]
pub struct Searched {
    pub hits: Vec<Hit>,
    pub warnings: Vec<String>,
}

/// [`search`], ranked with `embeddings` when given: the full-text
/// candidates and the project's items nearest the query by vector alone,
/// by reciprocal rank fusion ([`embed::FUSION`]). Any trouble with the
/// embeddings (model missing, endpoint down, slow, wrong answer, nothing
/// stored yet) leaves the full-text ranking and says so in `warnings`.
pub fn search_with(
    conn: &Connection,
    request: &Request<'_>,
    embeddings: Option<&embed::Provider>,
) -> Result<Searched> {
    search_fused(conn, request, embeddings, &embed::FUSION)
}

/// [`search_with`] with another fusion (the benchmark compares them).
pub fn search_fused(
    conn: &Connection,
    request: &Request<'_>,
    embeddings: Option<&embed::Provider>,
    fusion: &embed::Fusion,
) -> Result<Searched> {
    let limit = request.limit.clamp(1, 100);
    let per_source = if embeddings.is_some() {
        // A wider pool than the full-text list needs, so a hit the words rank low can rise.
        (limit * 3).max(fusion.depth)
    } else {
        (limit * 3).max(10)
    };
    let (scope, wanted) = scope_of(conn, request, per_source as i64)?;
    let mut hits = candidates(conn, &scope, &wanted)?;
    let mut warnings = Vec::new();
    if let Some(provider) = embeddings {
        let items: Vec<Item> = hits.iter().map(|h| h.item).collect();
        match embed::similar(
            conn,
            provider,
            request.project,
            request.text,
            &items,
            fusion.nearest,
        ) {
            Ok(similar) => {
                warnings.extend(similar.warnings);
                let found: std::collections::BTreeSet<Item> = items.iter().copied().collect();
                let mut only = Vec::new();
                let mut only_cosines = Vec::new();
                for (item, c) in similar.nearest {
                    if found.contains(&item) {
                        continue;
                    }
                    if let Some(hit) = item_hit(conn, &scope, &wanted, item)? {
                        only.push(hit);
                        only_cosines.push(c);
                    }
                }
                let (words, vectors) = fusion.scores(&similar.candidates, &only_cosines);
                // Scaled so the best possible is 2 (first in both), rounded
                // so the printed score is the compared one.
                let scaled = |s: &f64| (s * (embed::RRF_K + 1.0) * 10_000.0).round() / 10_000.0;
                for (hit, s) in hits.iter_mut().zip(&words) {
                    hit.score = scaled(s);
                }
                for (hit, s) in only.iter_mut().zip(&vectors) {
                    hit.score = scaled(s);
                }
                hits.extend(only);
                // Stable: equal fused scores keep the full-text order, words first.
                hits.sort_by(|a, b| b.score.total_cmp(&a.score));
                if similar.without_vector > 0 {
                    warnings.push(format!(
                        "{} of {} candidates have no embedding yet (run `mc-search index \
                         --embeddings`); they are ranked by full text alone",
                        similar.without_vector,
                        items.len()
                    ));
                }
            }
            Err(warning) => warnings.push(warning),
        }
    }
    hits.truncate(limit);
    Ok(Searched { hits, warnings })
}

/// The request as every source's search takes it, and the sources it wants
/// (all when empty; memories and commits only project-wide).
fn scope_of<'a>(
    conn: &Connection,
    request: &Request<'a>,
    per_source: i64,
) -> Result<(Scope<'a>, Vec<Source>)> {
    let expression = fts_expression(request.text)
        .ok_or_else(|| Error::input("a query needs at least one word to look for"))?;
    let mut wanted = Vec::new();
    for s in request.sources {
        wanted.push(Source::parse(s).ok_or_else(|| {
            Error::input(format!(
                "unknown source {s:?} (one of {})",
                SOURCES.join(", ")
            ))
        })?);
    }
    let (harness, session_id) = match request.session {
        Some((h, s)) => (Some(h), Some(s)),
        None => (request.harness, None),
    };
    let scope = Scope {
        expression,
        text: request.text,
        filter: MessageFilter {
            project: request.project,
            harness,
            session_id,
            since: request.since_ms.unwrap_or(i64::MIN),
            until: request.until_ms.unwrap_or(i64::MAX),
        },
        seen: visible(conn, request.asking)?,
        per_source,
    };
    // Memories and commits belong to the project, not to a session: a
    // session or harness filter leaves them out.
    let project_wide = session_id.is_none() && harness.is_none();
    let wanted = Source::ALL
        .into_iter()
        .filter(|s| wanted.is_empty() || wanted.contains(s))
        .filter(|s| project_wide || !matches!(s, Source::Memory | Source::Commit))
        .collect();
    Ok((scope, wanted))
}

/// Every wanted source's best `per_source` hits, in one list best first
/// (not cut to the limit).
fn candidates(conn: &Connection, scope: &Scope<'_>, wanted: &[Source]) -> Result<Vec<Hit>> {
    let mut hits = Vec::new();
    for source in wanted {
        match source {
            Source::Memory => hits.extend(memory_hits(conn, scope)?),
            Source::Note => hits.extend(note_hits(conn, scope)?),
            Source::Compartment => hits.extend(compartment_hits(conn, scope)?),
            Source::Message => hits.extend(message_source_hits(conn, scope)?),
            Source::Commit => hits.extend(commit_source_hits(conn, scope)?),
        }
    }
    // Highest score first; ties keep source order, then the lower id.
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.source.cmp(&b.source))
            .then_with(|| a.id.cmp(&b.id))
    });
    Ok(hits)
}

/// What every source's search shares: the FTS5 expression, the filters and
/// what the asking session already sees.
struct Scope<'a> {
    expression: String,
    text: &'a str,
    filter: MessageFilter<'a>,
    seen: Visible,
    per_source: i64,
}

impl Scope<'_> {
    /// `?1`…`?7` of the note and compartment queries: the expression, the
    /// project, harness and session filters, the time range, the limit.
    fn params(&self) -> [&dyn rusqlite::ToSql; 7] {
        let filter = &self.filter;
        [
            &self.expression,
            &filter.project,
            &filter.harness,
            &filter.session_id,
            &filter.since,
            &filter.until,
            &self.per_source,
        ]
    }
}

/// The project's live memories that match, best first, less the ones the
/// asking session's head already shows.
fn memory_hits(conn: &Connection, scope: &Scope<'_>) -> Result<Vec<Hit>> {
    let (per_source, filter) = (scope.per_source, &scope.filter);
    // FTS5 ranks its own top rows cheaply; candidates are read a page at
    // a time and filtered, instead of joining every match before sorting.
    let mut rows: Vec<(i64, String, String)> = Vec::new();
    let mut offset = 0;
    loop {
        let page: Vec<i64> = conn
            .prepare_cached(
                "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?1
                 ORDER BY rank, rowid LIMIT ?2 OFFSET ?3",
            )?
            .query_map(
                params![scope.expression, page_size(per_source), offset],
                |r| r.get(0),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let full = page.len() as i64 == page_size(per_source);
        offset += page_size(per_source);
        for id in page {
            let row = conn
                .prepare_cached(
                    "SELECT id, category, content FROM memories WHERE id = ?1 AND project = ?2
                       AND status IN ('active', 'permanent') AND created_ms >= ?3 AND created_ms < ?4",
                )?
                .query_row(params![id, filter.project, filter.since, filter.until], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            rows.extend(row);
        }
        if rows.len() as i64 >= per_source || !full {
            break;
        }
    }
    rows.truncate(per_source as usize);
    let shown = rows
        .into_iter()
        .filter(|(id, ..)| !scope.seen.memory_ids.contains(id));
    Ok(shown
        .enumerate()
        .map(|(rank, (id, category, content))| {
            memory_hit(id, category, &content, Source::Memory.score(rank))
        })
        .collect())
}

/// A session note as a search hit, its snippet around `text`.
fn note_hit(id: i64, session_id: String, content: &str, text: &str, score: f64) -> Hit {
    Hit {
        source: Source::Note,
        reference: format!("#{id}"),
        id,
        session_id: Some(session_id),
        category: None,
        ordinal: None,
        tag: None,
        commit: None,
        score,
        snippet: snippet(content, text, 220),
        item: Item::Note(id),
    }
}

/// A memory as a search hit.
fn memory_hit(id: i64, category: String, content: &str, score: f64) -> Hit {
    Hit {
        source: Source::Memory,
        reference: format!("#{id}"),
        id,
        session_id: None,
        category: Some(category),
        ordinal: None,
        tag: None,
        commit: None,
        score,
        snippet: preview(content, 220),
        item: Item::Memory(id),
    }
}

// Every FTS table is the outer loop (CROSS JOIN fixes the order): with a
// plain JOIN the planner may walk the other table and run the MATCH once
// per row, which at 1,000 compartments or 2,000 commits cost 150 ms.

/// The notes of the project's sessions that match, best first.
fn note_hits(conn: &Connection, scope: &Scope<'_>) -> Result<Vec<Hit>> {
    let mut stmt = conn.prepare_cached(
        "SELECT n.id, s.session_id, n.content FROM notes_fts f
           CROSS JOIN notes n ON n.id = f.rowid CROSS JOIN sessions s ON s.id = n.session
         WHERE notes_fts MATCH ?1 AND n.project = ?2
           AND (?3 IS NULL OR s.harness = ?3) AND (?4 IS NULL OR s.session_id = ?4)
           AND n.created_ms >= ?5 AND n.created_ms < ?6
         ORDER BY bm25(notes_fts), n.id LIMIT ?7",
    )?;
    let rows = stmt.query_map(scope.params(), |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut hits = Vec::new();
    for (rank, row) in rows.enumerate() {
        let (id, session_id, content) = row?;
        hits.push(note_hit(
            id,
            session_id,
            &content,
            scope.text,
            Source::Note.score(rank),
        ));
    }
    Ok(hits)
}

/// The compartments of the project's sessions that match, best first.
fn compartment_hits(conn: &Connection, scope: &Scope<'_>) -> Result<Vec<Hit>> {
    // Title counts double: it names the whole piece of work.
    let mut stmt = conn.prepare_cached(
        "SELECT f.sequence, s.session_id, f.title, c.p2, c.start_ordinal, c.end_ordinal, f.session
         FROM compartments_fts f
           CROSS JOIN sessions s ON s.id = f.session
           CROSS JOIN compartments c ON c.session = f.session AND c.sequence = f.sequence
         WHERE compartments_fts MATCH ?1 AND s.project_identity = ?2
           AND (?3 IS NULL OR s.harness = ?3) AND (?4 IS NULL OR s.session_id = ?4)
           AND coalesce(c.end_ms, c.created_ms) >= ?5 AND coalesce(c.start_ms, c.created_ms) < ?6
         ORDER BY bm25(compartments_fts, 2.0, 1.0), f.session, f.sequence LIMIT ?7",
    )?;
    let rows = stmt.query_map(scope.params(), |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, i64>(5)?,
            r.get::<_, i64>(6)?,
        ))
    })?;
    let mut hits = Vec::new();
    for (rank, row) in rows.enumerate() {
        let (sequence, session_id, title, body, start, end, session) = row?;
        hits.push(Hit {
            source: Source::Compartment,
            reference: format!("c{sequence} (messages {start}-{end})"),
            id: sequence,
            session_id: Some(session_id),
            category: None,
            ordinal: None,
            tag: None,
            commit: None,
            score: Source::Compartment.score(rank),
            snippet: preview(&format!("{title}: {body}"), 220),
            item: Item::Compartment(session, sequence),
        });
    }
    Ok(hits)
}

/// The raw messages that match, best first, less what the asking session
/// still has on the wire.
fn message_source_hits(conn: &Connection, scope: &Scope<'_>) -> Result<Vec<Hit>> {
    let found = message_hits(
        conn,
        &scope.expression,
        &scope.filter,
        &scope.seen,
        scope.per_source as usize,
    )?;
    found
        .into_iter()
        .enumerate()
        .map(|(rank, m)| message_hit(conn, m, scope.text, rank))
        .collect()
}

fn message_hit(conn: &Connection, m: MessageHit, text: &str, rank: usize) -> Result<Hit> {
    let what = match (m.kind.as_str(), &m.tool_name) {
        ("tool", Some(name)) => format!("tool {name}, "),
        _ => String::new(),
    };
    let tag_text = m.tag.map(|t| format!(" §{t}§")).unwrap_or_default();
    let content: String = conn
        .prepare_cached("SELECT content FROM raw_parts WHERE id = ?1")?
        .query_row(params![m.id], |r| r.get(0))?;
    Ok(Hit {
        source: Source::Message,
        reference: format!("{what}message {}{tag_text}", m.ordinal),
        id: m.id,
        session_id: Some(m.session_id),
        category: None,
        ordinal: Some(m.ordinal),
        tag: m.tag,
        commit: None,
        score: Source::Message.score(rank),
        snippet: snippet(&content, text, 220),
        item: Item::Message(m.id),
    })
}

/// The project's indexed commits that match, best first.
fn commit_source_hits(conn: &Connection, scope: &Scope<'_>) -> Result<Vec<Hit>> {
    let filter = &scope.filter;
    let found = commit_hits(
        conn,
        &scope.expression,
        filter.project,
        filter.since,
        filter.until,
        scope.per_source,
    )?;
    Ok(found
        .into_iter()
        .enumerate()
        .map(|(rank, c)| commit_hit(c, scope.text, rank))
        .collect())
}

fn commit_hit(c: CommitRow, text_asked: &str, rank: usize) -> Hit {
    let day = jiff::Timestamp::from_millisecond(c.committed_ms)
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_default();
    let mut text = c.subject.clone();
    if !c.body.is_empty() {
        text.push_str(" — ");
        text.push_str(&c.body);
    }
    let mut shown = snippet(&text, text_asked, 180);
    if !c.paths.is_empty() {
        let paths: Vec<&str> = c.paths.lines().take(4).collect();
        let more = c.paths.lines().count().saturating_sub(paths.len());
        shown.push_str(&format!(
            " [{}{}]",
            paths.join(", "),
            if more > 0 {
                format!(" +{more}")
            } else {
                String::new()
            }
        ));
    }
    Hit {
        source: Source::Commit,
        reference: format!("commit {} ({day})", c.short_hash),
        id: c.id,
        session_id: None,
        category: None,
        ordinal: None,
        tag: None,
        commit: Some(c.hash),
        score: Source::Commit.score(rank),
        snippet: shown,
        item: Item::Commit(c.id),
    }
}

/// `item` as a hit of the request (`wanted` its sources), when it passes
/// its filters: what a vector found that the words did not. Its score is
/// the caller's to set.
fn item_hit(
    conn: &Connection,
    scope: &Scope<'_>,
    wanted: &[Source],
    item: Item,
) -> Result<Option<Hit>> {
    let filter = &scope.filter;
    let wants = |s: Source| wanted.contains(&s);
    let hit = match item {
        Item::Memory(id) if wants(Source::Memory) && !scope.seen.memory_ids.contains(&id) => conn
            .prepare_cached(
                "SELECT category, content FROM memories WHERE id = ?1 AND project = ?2
                   AND status IN ('active', 'permanent') AND created_ms >= ?3 AND created_ms < ?4",
            )?
            .query_row(params![id, filter.project, filter.since, filter.until], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .optional()?
            .map(|(category, content)| memory_hit(id, category, &content, 0.0)),
        Item::Note(id) if wants(Source::Note) => conn
            .prepare_cached(
                "SELECT s.session_id, n.content FROM notes n JOIN sessions s ON s.id = n.session
                 WHERE n.id = ?1 AND n.project = ?2
                   AND (?3 IS NULL OR s.harness = ?3) AND (?4 IS NULL OR s.session_id = ?4)
                   AND n.created_ms >= ?5 AND n.created_ms < ?6",
            )?
            .query_row(
                params![id, filter.project, filter.harness, filter.session_id, filter.since, filter.until],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
            )
            .optional()?
            .map(|(session_id, content)| note_hit(id, session_id, &content, scope.text, 0.0)),
        Item::Compartment(session, sequence) if wants(Source::Compartment) => conn
            .prepare_cached(
                "SELECT s.session_id, c.title, c.p2, c.start_ordinal, c.end_ordinal
                 FROM compartments c JOIN sessions s ON s.id = c.session
                 WHERE c.session = ?1 AND c.sequence = ?2 AND s.project_identity = ?3
                   AND (?4 IS NULL OR s.harness = ?4) AND (?5 IS NULL OR s.session_id = ?5)
                   AND coalesce(c.end_ms, c.created_ms) >= ?6 AND coalesce(c.start_ms, c.created_ms) < ?7",
            )?
            .query_row(
                params![
                    session,
                    sequence,
                    filter.project,
                    filter.harness,
                    filter.session_id,
                    filter.since,
                    filter.until
                ],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, i64>(4)?,
                    ))
                },
            )
            .optional()?
            .map(|(session_id, title, body, start, end)| Hit {
                source: Source::Compartment,
                reference: format!("c{sequence} (messages {start}-{end})"),
                id: sequence,
                session_id: Some(session_id),
                category: None,
                ordinal: None,
                tag: None,
                commit: None,
                score: 0.0,
                snippet: preview(&format!("{title}: {body}"), 220),
                item,
            }),
        Item::Message(id) if wants(Source::Message) => {
            match message_row(conn, id, filter, &scope.seen, &mut Sessions::new())? {
                Some(m) => Some(message_hit(conn, m, scope.text, 0)?),
                None => None,
            }
        }
        Item::Commit(id) if wants(Source::Commit) => conn
            .prepare_cached(
                "SELECT id, hash, short_hash, subject, body, paths, committed_ms FROM git_commits
                 WHERE id = ?1 AND project = ?2 AND committed_ms >= ?3 AND committed_ms < ?4",
            )?
            .query_row(params![id, filter.project, filter.since, filter.until], |r| {
                Ok(CommitRow {
                    id: r.get(0)?,
                    hash: r.get(1)?,
                    short_hash: r.get(2)?,
                    subject: r.get(3)?,
                    body: r.get(4)?,
                    paths: r.get(5)?,
                    committed_ms: r.get(6)?,
                })
            })
            .optional()?
            .map(|c| commit_hit(c, scope.text, 0)),
        _ => None,
    };
    Ok(hit)
}

/// A commit hit as read from `git_commits`.
pub struct CommitRow {
    pub id: i64,
    pub hash: String,
    pub short_hash: String,
    pub subject: String,
    pub body: String,
    pub paths: String,
    pub committed_ms: i64,
}

/// Field weights of the commit index (subject, body, paths, hash): the
/// subject says what the commit is about, a hash asked for is the commit.
pub const COMMIT_WEIGHTS: [f64; 4] = [3.0, 1.0, 1.5, 10.0];

/// The project's best `want` commits for `expression` committed in
/// `[since, until)`, best first; equal scores: the newer commit first.
pub fn commit_hits(
    conn: &Connection,
    expression: &str,
    project: &str,
    since: i64,
    until: i64,
    want: i64,
) -> Result<Vec<CommitRow>> {
    commit_hits_weighted(
        conn,
        expression,
        project,
        (since, until),
        want,
        COMMIT_WEIGHTS,
    )
}

/// [`commit_hits`] with other field weights (the benchmark tunes them).
pub fn commit_hits_weighted(
    conn: &Connection,
    expression: &str,
    project: &str,
    (since, until): (i64, i64),
    want: i64,
    weights: [f64; 4],
) -> Result<Vec<CommitRow>> {
    let [s, b, p, h] = weights;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT g.id, g.hash, g.short_hash, g.subject, g.body, g.paths, g.committed_ms
         FROM commits_fts f CROSS JOIN git_commits g ON g.id = f.rowid
         WHERE commits_fts MATCH ?1 AND g.project = ?2
           AND g.committed_ms >= ?3 AND g.committed_ms < ?4
         ORDER BY bm25(commits_fts, {s}, {b}, {p}, {h}), g.committed_ms DESC, g.id DESC LIMIT ?5"
    ))?;
    let rows = stmt
        .query_map(params![expression, project, since, until, want], |r| {
            Ok(CommitRow {
                id: r.get(0)?,
                hash: r.get(1)?,
                short_hash: r.get(2)?,
                subject: r.get(3)?,
                body: r.get(4)?,
                paths: r.get(5)?,
                committed_ms: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

struct MessageFilter<'a> {
    project: &'a str,
    harness: Option<&'a str>,
    session_id: Option<&'a str>,
    since: i64,
    until: i64,
}

/// A message hit before its content is read.
struct MessageHit {
    id: i64,
    session: i64,
    session_id: String,
    ordinal: i64,
    tag: Option<i64>,
    kind: String,
    tool_name: Option<String>,
}

/// The largest FTS5 page: an index ranks its own top rows cheaply (`ORDER
/// BY rank LIMIT`), so candidates are taken a page at a time and filtered,
/// instead of joining every match before sorting.
const PAGE: i64 = 200;

/// A page asks for what is wanted and half again, for rows the filters
/// drop (every row read costs lookups, so no more than that).
fn page_size(want: i64) -> i64 {
    (want + want / 2).clamp(16, PAGE)
}

/// The best `want` message hits that pass the filter, best first; among
/// equal scores the newer message first (the latest word on a topic is
/// usually the one that holds).
fn message_hits(
    conn: &Connection,
    expression: &str,
    filter: &MessageFilter<'_>,
    seen: &Visible,
    want: usize,
) -> Result<Vec<MessageHit>> {
    let mut sessions = Sessions::new();
    let mut kept: Vec<(f64, i64, i64, MessageHit)> = Vec::new();
    let mut offset = 0;
    loop {
        let page: Vec<(i64, f64)> = conn
            .prepare_cached(
                "SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ?1
                 ORDER BY rank LIMIT ?2 OFFSET ?3",
            )?
            .query_map(params![expression, page_size(want as i64), offset], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let full = page.len() as i64 == page_size(want as i64);
        offset += page_size(want as i64);
        for (id, rank) in page {
            if let Some(hit) = message_row(conn, id, filter, seen, &mut sessions)? {
                kept.push((rank, hit.session, hit.ordinal, hit));
            }
        }
        if kept.len() >= want || !full {
            break;
        }
    }
    kept.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then_with(|| b.1.cmp(&a.1))
            .then_with(|| b.2.cmp(&a.2))
    });
    Ok(kept.into_iter().take(want).map(|(.., hit)| hit).collect())
}

/// The sessions a search has read: (harness, session id, project).
type Sessions = std::collections::BTreeMap<i64, Option<(String, String, Option<String>)>>;

/// Raw part `id` as a hit, when it passes the filter and the asking session
/// does not have it on the wire.
fn message_row(
    conn: &Connection,
    id: i64,
    filter: &MessageFilter<'_>,
    seen: &Visible,
    sessions: &mut Sessions,
) -> Result<Option<MessageHit>> {
    let Some((session, ordinal, identity, kind, tool_name)) = conn
        .prepare_cached(
            "SELECT session, ordinal, identity, kind, tool_name FROM raw_parts WHERE id = ?1",
        )?
        .query_row(params![id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
            ))
        })
        .optional()?
    else {
        return Ok(None);
    };
    if let std::collections::btree_map::Entry::Vacant(slot) = sessions.entry(session) {
        let row = conn
            .prepare_cached(
                "SELECT harness, session_id, project_identity FROM sessions WHERE id = ?1",
            )?
            .query_row(params![session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        slot.insert(row);
    }
    let Some(Some((harness, session_id, project))) = sessions.get(&session) else {
        return Ok(None);
    };
    if project.as_deref() != Some(filter.project)
        || filter.harness.is_some_and(|h| h != harness)
        || filter.session_id.is_some_and(|s| s != session_id)
    {
        return Ok(None);
    }
    if filter.since != i64::MIN || filter.until != i64::MAX {
        let at: Option<i64> = conn
            .prepare_cached("SELECT created_ms FROM messages WHERE session = ?1 AND ordinal = ?2")?
            .query_row(params![session, ordinal], |r| r.get(0))
            .optional()?
            .flatten();
        let at = at.unwrap_or(0);
        if at < filter.since || at >= filter.until {
            return Ok(None);
        }
    }
    let (tag, status): (Option<i64>, Option<String>) = conn
        .prepare_cached("SELECT number, status FROM tags WHERE session = ?1 AND identity = ?2")?
        .query_row(params![session, identity], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .map_or((None, None), |(n, s)| (Some(n), Some(s)));
    // Still on the wire for the asking session: it sees this already.
    if seen.session == Some(session)
        && seen.boundary.is_some_and(|b| ordinal > b)
        && status.as_deref() != Some("dropped")
    {
        return Ok(None);
    }
    Ok(Some(MessageHit {
        id,
        session,
        session_id: session_id.clone(),
        ordinal,
        tag,
        kind,
        tool_name,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_named_as_the_filter_spells_them() {
        assert_eq!(Source::ALL.map(Source::as_str), SOURCES);
        for source in Source::ALL {
            assert_eq!(Source::parse(source.as_str()), Some(source));
            assert_eq!(
                serde_json::to_value(source).unwrap(),
                serde_json::json!(source.as_str())
            );
        }
        assert_eq!(Source::parse("memories"), None);
    }

    #[test]
    fn any_text_becomes_a_valid_expression() {
        assert_eq!(fts_expression("  "), None);
        assert_eq!(fts_expression("- -- \"\" * ( )"), None);
        assert_eq!(fts_expression("retry"), Some("\"retry\"".into()));
        assert_eq!(
            fts_expression("retry \"lease policy\" -flaky AND*"),
            Some("(\"retry\" OR \"lease policy\" OR \"AND*\") NOT \"flaky\"".into())
        );
        assert_eq!(fts_expression("-only"), None, "nothing left to look for");
        // Question words are left out, unless they are all there is or quoted.
        assert_eq!(
            fts_expression("what is the max upload size"),
            Some("(\"max\" OR \"upload\" OR \"size\")".into())
        );
        assert_eq!(
            fts_expression("who was it"),
            Some("(\"who\" OR \"was\" OR \"it\")".into())
        );
        assert_eq!(
            fts_expression("\"the\" lease"),
            Some("(\"the\" OR \"lease\")".into())
        );
        assert_eq!(
            fts_expression("unclosed \"phrase here"),
            Some("(\"unclosed\" OR \"phrase\" OR \"here\")".into())
        );
    }
}
