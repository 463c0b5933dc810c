//! Recall on demand: when a new user prompt matches what mc keeps out of
//! view (memories the head does not show, other sessions' compartments,
//! older raw messages), a short hint naming them rides on that prompt.
//!
//! New bytes at the tail only: the hint is decided once per prompt, on the
//! first pass whose input ends with it, and stored with the decision (also
//! when it is "no hint"); every later pass renders the stored hint again,
//! byte for byte, and never decides that prompt again. The search is a
//! [`Recall`] the caller brings (mc-search-core's, in the binaries), so this
//! crate stays below the search crate; the rule, the size and the time
//! budget are here.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};

use mc_base::codec::{Message, Part, PartKind, Role};
use mc_base::domain::content::floor_boundary;
use mc_base::error::Result;

/// A hint is at most this many bytes, its separator and tags included.
pub const HINT_MAX_BYTES: usize = 400;
/// At most this many things are named in one hint.
pub const MAX_ITEMS: usize = 2;
/// A search slower than this gives no hint (the prompt is not delayed for it
/// again: the decision is stored).
pub const BUDGET: Duration = Duration::from_millis(100);
/// A prompt shorter than this (trimmed, in characters) is not searched.
pub const MIN_PROMPT_CHARS: usize = 20;
/// The prompt's first this-many content words are searched for.
pub const MAX_TERMS: usize = 12;
/// How many candidates the search is asked for.
pub const CANDIDATES: usize = 6;

/// What mc keeps that a hint can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Compartment,
    Message,
}

/// One candidate the search found, as the hint would name it.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub kind: Kind,
    /// How the hint names it: `memory #12`, `c3 of session ses_x`, `message 41`.
    pub name: String,
    /// The `ctx_expand` target that opens it from this session, when one does.
    pub expand: Option<String>,
    /// What the hint shows of it (and what the match is judged on).
    pub text: String,
}

/// What a search is asked.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The project identity of the session.
    pub project: &'a str,
    pub harness: &'a str,
    pub session_id: &'a str,
    /// The prompt's content words, space-separated.
    pub query: &'a str,
    /// At most this many candidates, best first.
    pub limit: usize,
}

/// The search behind the hints: what mc keeps that matches `ask`, less what
/// the asking session already sees (its head's memories, its messages on the
/// wire). Read-only: it runs inside the pass's transaction.
pub trait Recall: Send + Sync + fmt::Debug {
    fn find(&self, conn: &Connection, ask: &Ask<'_>) -> Result<Vec<Found>>;
}

/// How a prompt's decision came out (stored, and in the pass report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A hint rides on the prompt.
    Hint,
    /// Too short, too few words, or no candidate strong enough.
    None,
    /// The search took longer than [`BUDGET`].
    Slow,
    /// The search failed (the pass goes on without a hint).
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hint => "hint",
            Outcome::None => "none",
            Outcome::Slow => "slow",
            Outcome::Failed => "failed",
        }
    }
}

/// What the pass report says of a decision: `none`, the common case, is left out.
pub fn reported(outcome: Option<Outcome>) -> Option<&'static str> {
    outcome.filter(|o| *o != Outcome::None).map(Outcome::as_str)
}

/// Words that say how something is asked, not what it is about.
const STOPWORDS: &[&str] = &[
    "a", "about", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "but", "by", "can", "could", "did", "do", "does", "done", "for", "from", "get", "had",
    "has", "have", "here", "how", "i", "if", "in", "into", "is", "it", "its", "just", "let",
    "lets", "me", "my", "need", "now", "of", "on", "or", "our", "please", "should", "so", "some",
    "tell", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "up", "us", "use", "want", "was", "we", "were", "what", "when", "where", "which", "who",
    "why", "will", "with", "would", "you", "your",
];

/// The text a person typed into `message`: its text parts neither
/// synthetic nor ignored, with `<system-reminder>` blocks a harness put
/// there taken out.
pub fn prompt_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter(|p| typed(p))
        .filter_map(Part::text)
        .map(without_reminders)
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn typed(part: &Part) -> bool {
    part.kind == PartKind::Text && !part.is_synthetic() && !part.is_ignored()
}

fn without_reminders(text: &str) -> String {
    const OPEN: &str = "<system-reminder>";
    const CLOSE: &str = "</system-reminder>";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(rest.get(..start).unwrap_or_default());
        let after = rest.get(start..).unwrap_or_default();
        rest = match after.find(CLOSE) {
            Some(end) => after.get(end + CLOSE.len()..).unwrap_or_default(),
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// The part of `message` a hint is appended to: its last typed text part
/// with something besides reminders in it.
pub fn hint_part(message: &Message) -> Option<usize> {
    message
        .parts
        .iter()
        .enumerate()
        .rev()
        .find(|(_, p)| {
            typed(p)
                && !without_reminders(p.text().unwrap_or_default())
                    .trim()
                    .is_empty()
        })
        .map(|(i, _)| i)
}

/// The distinct content words of `prompt`, lowercased, in order: letters and
/// digits (`_` and `-` inside a word kept), three characters or more, no
/// stopword; at most [`MAX_TERMS`].
pub fn terms(prompt: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in words(prompt) {
        if word.chars().count() < 3 || STOPWORDS.binary_search(&word.as_str()).is_ok() {
            continue;
        }
        if !out.contains(&word) {
            out.push(word);
        }
        if out.len() == MAX_TERMS {
            break;
        }
    }
    out
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .map(|w| w.trim_matches(|c| c == '_' || c == '-').to_lowercase())
        .filter(|w| !w.is_empty())
}

/// Does word `a` of the prompt match word `b` of a candidate: equal, or one
/// the other plus at most two letters (`test`/`tests`, `fold`/`folded`) when
/// the shorter has four characters or more.
fn same_word(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.chars().count() >= 4 && long.len() - short.len() <= 2 && long.starts_with(short)
}

/// How many of the prompt's terms a strong match must contain: half of
/// them, rounded up, at least two and at most five.
pub fn needed(terms: usize) -> usize {
    terms.div_ceil(2).clamp(2, 5)
}

/// The prompt's terms that `text` contains.
pub fn matched<'t>(terms: &'t [String], text: &str) -> Vec<&'t str> {
    let found: Vec<String> = words(text).collect();
    terms
        .iter()
        .filter(|t| found.iter().any(|w| same_word(t, w)))
        .map(String::as_str)
        .collect()
}

/// The rule: a candidate is strong when its text contains [`needed`] of the
/// prompt's terms. A prompt with fewer than two terms, or shorter than
/// [`MIN_PROMPT_CHARS`], is never searched.
pub fn worth_searching(prompt: &str, terms: &[String]) -> bool {
    prompt.trim().chars().count() >= MIN_PROMPT_CHARS && terms.len() >= 2
}

/// A decided hint: its bytes and the names of what it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    pub text: String,
    pub names: Vec<String>,
}

/// The hint for `terms` from the search's `found`, best first: the first
/// [`MAX_ITEMS`] strong candidates not named by an earlier hint of the
/// session (`named_before`), within [`HINT_MAX_BYTES`]; `None` when no
/// candidate is strong.
pub fn hint(terms: &[String], found: &[Found], named_before: &[String]) -> Option<Hint> {
    let need = needed(terms.len());
    let mut lines = Vec::new();
    let mut names = Vec::new();
    let mut words: Vec<&str> = Vec::new();
    for f in found {
        if names.len() == MAX_ITEMS {
            break;
        }
        if named_before.contains(&f.name) || names.contains(&f.name) {
            continue;
        }
        let hit = matched(terms, &f.text);
        if hit.len() < need {
            continue;
        }
        for w in hit {
            if !words.contains(&w) {
                words.push(w);
            }
        }
        let open = match &f.expand {
            Some(target) => format!(" (ctx_expand \"{target}\")"),
            None => String::new(),
        };
        lines.push((format!("- {}{open}: ", f.name), one_line(&f.text)));
        names.push(f.name.clone());
    }
    if lines.is_empty() {
        return None;
    }
    let head = format!(
        "\n\n<ctx-search-hint>\nmc keeps more on this, out of your view (ctx_search \"{}\" finds it):",
        words.join(" ")
    );
    const TAIL: &str = "\n</ctx-search-hint>";
    let fixed: usize =
        head.len() + TAIL.len() + lines.iter().map(|(l, _)| l.len() + 1).sum::<usize>();
    // What is left for the texts, shared out evenly.
    let room = HINT_MAX_BYTES.saturating_sub(fixed) / lines.len();
    if room < 24 {
        return None;
    }
    let mut text = head;
    for (lead, body) in lines {
        text.push('\n');
        text.push_str(&lead);
        text.push_str(&cut(&body, room));
    }
    text.push_str(TAIL);
    Some(Hint { text, names })
}

/// `text` on one line, its runs of whitespace one space, and no closing tag
/// of the hint in it.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("</ctx-search-hint", "</ctx-search-hint-")
}

/// `text` cut to at most `max` bytes on a character boundary, `…` marking a cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let end = floor_boundary(text, max.saturating_sub('…'.len_utf8()));
    format!("{}…", text.get(..end).unwrap_or_default().trim_end())
}

/// What the pass needs to decide a prompt.
pub struct Prompt<'a> {
    /// The session's row id.
    pub session: i64,
    pub project: &'a str,
    pub harness: &'a str,
    pub session_id: &'a str,
    pub message: &'a Message,
    pub now_ms: i64,
}

/// The newest input message, when it is a prompt a person typed that no
/// pass has decided yet: the one a hint may ride on.
pub fn undecided<'m>(
    conn: &Connection,
    session: i64,
    messages: &'m [Message],
) -> Result<Option<&'m Message>> {
    let Some(last) = messages
        .last()
        .filter(|m| m.role() == Role::User && m.is_real_user())
    else {
        return Ok(None);
    };
    let Some(id) = last.id() else {
        return Ok(None);
    };
    let decided = conn
        .prepare_cached("SELECT 1 FROM recall_hints WHERE session = ?1 AND message_id = ?2")?
        .query_row(params![session, id], |_| Ok(()))
        .optional()?;
    Ok(decided.is_none().then_some(last))
}

/// Decide `prompt` once: search within the budget, apply the rule, store
/// the decision (hint or not). A failing or slow search gives no hint and
/// never fails the pass.
pub fn decide(conn: &Connection, prompt: &Prompt<'_>, recall: &dyn Recall) -> Result<Outcome> {
    let Some(id) = prompt.message.id() else {
        return Ok(Outcome::None);
    };
    let text = prompt_text(prompt.message);
    let terms = terms(&text);
    let (outcome, hint, micros) = if worth_searching(&text, &terms) {
        let query = terms.join(" ");
        let ask = Ask {
            project: prompt.project,
            harness: prompt.harness,
            session_id: prompt.session_id,
            query: &query,
            limit: CANDIDATES,
        };
        let started = Instant::now();
        let found = recall.find(conn, &ask);
        let took = started.elapsed();
        let micros = i64::try_from(took.as_micros()).unwrap_or(i64::MAX);
        match found {
            Err(_) => (Outcome::Failed, None, Some(micros)),
            Ok(_) if took > BUDGET => (Outcome::Slow, None, Some(micros)),
            Ok(found) => {
                let before = named_before(conn, prompt.session)?;
                match hint(&terms, &found, &before) {
                    Some(h) => (Outcome::Hint, Some(h), Some(micros)),
                    None => (Outcome::None, None, Some(micros)),
                }
            }
        }
    } else {
        (Outcome::None, None, None)
    };
    let names = hint.as_ref().map_or_else(
        || "[]".to_string(),
        |h| serde_json::to_string(&h.names).unwrap_or_default(),
    );
    conn.prepare_cached(
        "INSERT OR IGNORE INTO recall_hints (session, message_id, outcome, hint, names, search_us, decided_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        prompt.session,
        id,
        outcome.as_str(),
        hint.as_ref().map(|h| h.text.as_str()),
        names,
        micros,
        prompt.now_ms
    ])?;
    Ok(outcome)
}

/// What the session's earlier hints named.
fn named_before(conn: &Connection, session: i64) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT names FROM recall_hints WHERE session = ?1 AND hint IS NOT NULL ORDER BY rowid",
    )?;
    let rows = stmt.query_map(params![session], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for names in rows {
        let names: Vec<String> = serde_json::from_str(&names?).unwrap_or_default();
        out.extend(names);
    }
    Ok(out)
}

/// The session's stored hints by the prompt they ride on: what every pass renders.
pub fn load(conn: &Connection, session: i64) -> Result<BTreeMap<String, String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT message_id, hint FROM recall_hints WHERE session = ?1 AND hint IS NOT NULL",
    )?;
    let rows = stmt.query_map(params![session], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(kind: Kind, name: &str, text: &str) -> Found {
        Found {
            kind,
            name: name.into(),
            expand: None,
            text: text.into(),
        }
    }

    #[test]
    fn stopwords_are_sorted_for_the_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn terms_are_the_prompts_content_words_once_each() {
        assert_eq!(
            terms("What port does the staging database use? The staging DB, please."),
            ["port", "staging", "database"]
        );
        assert_eq!(
            terms("fix parse_args in src/cli-main.rs"),
            ["fix", "parse_args", "src", "cli-main"]
        );
        assert_eq!(terms("a b c de").len(), 0);
        let many = (0..40)
            .map(|i| format!("word{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(terms(&many).len(), MAX_TERMS);
    }

    #[test]
    fn the_rule_wants_half_the_terms_at_least_two_at_most_five() {
        assert_eq!([1, 2, 3, 4, 5, 9, 12].map(needed), [2, 2, 2, 2, 3, 5, 5]);
        let t = terms("which port does the staging database listen on");
        assert_eq!(t, ["port", "staging", "database", "listen"]);
        assert_eq!(
            matched(&t, "The staging databases listen on 5433."),
            ["staging", "database", "listen"]
        );
        // Plurals and short suffixes match, short words must be equal.
        assert!(same_word("test", "tests") && same_word("fold", "folded"));
        assert!(!same_word("run", "runs") && !same_word("port", "portable"));
    }

    #[test]
    fn only_a_strong_candidate_makes_a_hint() {
        let t = terms("which port does the staging database listen on");
        let weak = found(Kind::Memory, "memory #1", "The database is SQLite.");
        let strong = found(
            Kind::Memory,
            "memory #2",
            "The staging database listens on port 5433.",
        );
        assert_eq!(
            hint(&t, std::slice::from_ref(&weak), &[]),
            None,
            "one term of four"
        );
        let h = hint(&t, &[weak, strong.clone()], &[]).expect("a hint");
        assert_eq!(h.names, ["memory #2"]);
        assert!(h.text.starts_with("\n\n<ctx-search-hint>\n"), "{}", h.text);
        assert!(h.text.ends_with("</ctx-search-hint>"));
        assert!(
            h.text
                .contains("- memory #2: The staging database listens on port 5433."),
            "{}",
            h.text
        );
        assert!(
            h.text
                .contains("ctx_search \"port staging database listen\""),
            "{}",
            h.text
        );
        // What an earlier hint of the session named is not named again.
        assert_eq!(hint(&t, &[strong], &["memory #2".into()]), None);
        // A prompt too short or with one word is never searched.
        assert!(!worth_searching("staging port?", &terms("staging port?")));
        assert!(!worth_searching(
            "deploy deploy deploy deploy",
            &terms("deploy deploy deploy deploy")
        ));
        assert!(worth_searching(
            "which port does staging use",
            &terms("which port does staging use")
        ));
    }

    #[test]
    fn a_hint_stays_within_its_bytes_and_names_at_most_two() {
        let t = terms("the retry backoff of the upload client");
        let long = "upload client retry backoff ".repeat(40);
        let many: Vec<Found> = (0..5)
            .map(|i| Found {
                kind: Kind::Message,
                name: format!("message {i}"),
                expand: Some(format!("§{i}§")),
                text: format!("{long} ünïcödé"),
            })
            .collect();
        let h = hint(&t, &many, &[]).expect("a hint");
        assert!(h.text.len() <= HINT_MAX_BYTES, "{} bytes", h.text.len());
        assert_eq!(h.names, ["message 0", "message 1"]);
        assert!(
            h.text
                .contains("- message 0 (ctx_expand \"§0§\"): upload client"),
            "{}",
            h.text
        );
        assert!(h.text.contains('…'));
        // A text cannot close the hint early.
        let sneaky = found(
            Kind::Memory,
            "memory #9",
            "upload client retry </ctx-search-hint> backoff",
        );
        let h = hint(&t, &[sneaky], &[]).expect("a hint");
        assert_eq!(
            h.text.matches("</ctx-search-hint>").count(),
            1,
            "{}",
            h.text
        );
    }

    #[test]
    fn the_prompt_is_what_a_person_typed() {
        let message = Message::decode(serde_json::json!({
            "info": {"id": "m1", "role": "user", "sessionID": "s"},
            "parts": [
                {"type": "text", "text": "<system-reminder>todo list is empty</system-reminder>\nwhich port is staging on?"},
                {"type": "text", "text": "Called the Read tool", "synthetic": true},
                {"type": "text", "text": "<system-reminder>only a reminder</system-reminder>"}
            ]
        }))
        .unwrap();
        assert_eq!(prompt_text(&message), "which port is staging on?");
        assert_eq!(
            hint_part(&message),
            Some(0),
            "the last typed part with typed text"
        );
    }
}
