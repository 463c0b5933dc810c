//! When is a historian run due? One function, used by the transform's pass
//! report and by `mc-historian check`, so the two can never disagree — and
//! the functions that measure its input ([`pressure`], [`trigger_input`]),
//! shared the same way.

use std::collections::HashSet;
use std::sync::LazyLock;

use rusqlite::{Connection, params};
use serde::Serialize;

use mc_base::codec::{Message, Part, PartKind, Role};
use mc_base::domain::envelope::{ModelInfo, Usage};
use mc_base::domain::measure;
use mc_base::domain::tags::TagKind;
use mc_base::domain::tags::{measure_part, part_identity};
use mc_base::error::Result;

/// Fraction of the usable window protected from folding (the live tail) and its cap.
const PROTECTED_TAIL_SHARE: f64 = 0.40;
const PROTECTED_TAIL_CAP: u64 = 96_000;
/// Commit clusters in the unfolded tail that make a fold worthwhile.
pub const MIN_COMMIT_CLUSTERS: usize = 3;
/// A fold below this many eligible tokens is not worth a model call.
pub const MIN_CHUNK_TOKENS: u64 = 2_000;
pub const BLOCKING_PERCENT: f64 = 95.0;

#[derive(Debug, Clone, PartialEq)]
pub struct TriggerInput {
    pub usage_percent: f64,
    pub threshold: f64,
    pub force_band: f64,
    /// The usable input window, in tokens.
    pub window: u64,
    /// Tokens of raw content after the last compartment (not yet folded).
    pub tail_tokens: u64,
    /// Separate runs of commits mentioned in the unfolded tail.
    pub commit_clusters: usize,
    pub subagent: bool,
}

/// Why a historian run is due, first match wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DueReason {
    /// Usage is in the force band.
    ForceBand,
    /// The tail mentions enough separate runs of commits.
    CommitClusters,
    /// The eligible tail is three trigger budgets or more.
    TailSize,
    /// Usage is within two points of the threshold.
    ProjectedHeadroom,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Due {
    pub due: bool,
    pub reason: Option<DueReason>,
    /// At ≥ 95 % the adapter should wait for the fold before sending.
    pub blocking: bool,
    pub trigger_budget: u64,
    /// Tokens of the tail outside the protected live tail: what a run may fold.
    pub eligible_tokens: u64,
}

/// `clamp(round(window × threshold% × 0.05), 5 000, 50 000)`.
pub fn trigger_budget(window: u64, threshold: f64) -> u64 {
    ((window as f64 * threshold / 100.0 * 0.05).round() as u64).clamp(5_000, 50_000)
}

pub fn protected_tail(window: u64) -> u64 {
    ((window as f64 * PROTECTED_TAIL_SHARE).round() as u64).min(PROTECTED_TAIL_CAP)
}

pub fn historian_due(input: &TriggerInput) -> Due {
    let budget = trigger_budget(input.window, input.threshold);
    let eligible = input
        .tail_tokens
        .saturating_sub(protected_tail(input.window));
    let reason = if input.subagent || eligible < MIN_CHUNK_TOKENS {
        None
    } else if input.usage_percent >= input.force_band {
        Some(DueReason::ForceBand)
    } else if input.commit_clusters >= MIN_COMMIT_CLUSTERS && eligible >= budget {
        Some(DueReason::CommitClusters)
    } else if eligible >= 3 * budget {
        Some(DueReason::TailSize)
    } else if input.usage_percent >= input.threshold - 2.0 {
        Some(DueReason::ProjectedHeadroom)
    } else {
        None
    };
    Due {
        due: reason.is_some(),
        reason,
        blocking: reason.is_some() && input.usage_percent >= BLOCKING_PERCENT,
        trigger_budget: budget,
        eligible_tokens: eligible,
    }
}

/// Context pressure as the pass measures it: the provider-reported prompt
/// tokens (the envelope's usage sample, else the newest assistant message's)
/// over the usable window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pressure {
    pub prompt_tokens: u64,
    /// Whether any usage sample was found (else `prompt_tokens` is 0).
    pub sampled: bool,
    pub window: u64,
    pub usage_percent: f64,
}

pub fn pressure(model: &ModelInfo, usage: Option<Usage>, messages: &[Message]) -> Pressure {
    let window = measure::usable_window(model);
    let prompt_tokens = usage.map(|u| u.prompt_tokens()).or_else(|| {
        messages
            .iter()
            .rev()
            .filter(|m| m.role() == Role::Assistant)
            .find_map(Message::usage_input_tokens)
    });
    Pressure {
        prompt_tokens: prompt_tokens.unwrap_or(0),
        sampled: prompt_tokens.is_some(),
        window,
        usage_percent: measure::usage_percent(prompt_tokens.unwrap_or(0), window),
    }
}

/// The text of a message as a reader sees it: its non-empty, non-ignored
/// text parts, trimmed, joined by blank lines.
pub fn message_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter(|p| p.kind == PartKind::Text && !p.is_ignored())
        .filter_map(Part::text)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The session's messages as the trigger reads them.
#[derive(Debug, Clone, Copy)]
pub struct Tail<'a> {
    pub messages: &'a [Message],
    /// Per message: its ordinal (`None` without an id). Messages no tool has
    /// seen yet carry the ordinal they will get, so they are above `covered_through`.
    pub ordinals: &'a [Option<i64>],
    /// Messages up to this ordinal are folded into compartments.
    pub covered_through: i64,
}

impl Tail<'_> {
    fn unfolded(&self) -> impl Iterator<Item = &Message> {
        self.messages
            .iter()
            .zip(self.ordinals)
            .filter(|(_, o)| o.is_some_and(|o| o > self.covered_through))
            .map(|(m, _)| m)
    }
}

/// The trigger's input. `tail_tokens` is what the transform has stored for
/// the unfolded tail (active tags above `covered_through`) plus
/// `untagged_tokens`: content of the input the transform has not tagged yet,
/// estimated as a pass would store it ([`untagged_tokens`]; 0 for the pass
/// itself, which tags everything first).
pub fn trigger_input(
    conn: &Connection,
    session: Option<i64>,
    pressure: &Pressure,
    threshold: f64,
    subagent: bool,
    tail: &Tail<'_>,
    untagged_tokens: u64,
) -> Result<TriggerInput> {
    let stored: i64 = match session {
        Some(session) => conn
            .prepare_cached(
                "SELECT coalesce(sum(tokens + input_tokens), 0) FROM tags
                 WHERE session = ?1 AND status = 'active' AND ordinal > ?2",
            )?
            .query_row(params![session, tail.covered_through], |r| r.get(0))?,
        None => 0,
    };
    // Each message's text is read where it is (`message_mentions_commit`
    // reads it as `mentions_commit` reads `message_text`).
    let commit_clusters = clusters(
        tail.unfolded()
            .filter(|m| m.role() == Role::Assistant)
            .map(message_mentions_commit),
    );
    Ok(TriggerInput {
        usage_percent: pressure.usage_percent,
        threshold,
        force_band: measure::force_band(threshold),
        window: pressure.window,
        tail_tokens: stored.max(0) as u64 + untagged_tokens,
        commit_clusters,
        subagent,
    })
}

/// Estimated tokens of the unfolded tail's content that has no tag yet, as the
/// pass would store it on first sight (finished tool calls only).
pub fn untagged_tokens(conn: &Connection, session: Option<i64>, tail: &Tail<'_>) -> Result<u64> {
    let tagged: HashSet<String> = match session {
        Some(session) => {
            let mut stmt = conn
                .prepare_cached("SELECT identity FROM tags WHERE session = ?1 AND ordinal > ?2")?;
            let rows = stmt.query_map(params![session, tail.covered_through], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        }
        None => HashSet::new(),
    };
    let mut total = 0u64;
    let mut seen = HashSet::new();
    for message in tail.unfolded() {
        let Some(id) = message.id() else { continue };
        for (index, part) in message.parts.iter().enumerate() {
            let Some((kind, identity)) = part_identity(id, index, part) else {
                continue;
            };
            if kind == TagKind::Tool && part.tool_output().is_none() {
                continue; // open calls get a tag once they finish
            }
            if tagged.contains(&identity) || !seen.insert(identity) {
                continue;
            }
            let (_, tokens, _, input_tokens) = measure_part(kind, part);
            total += (tokens + input_tokens).max(0) as u64;
        }
    }
    Ok(total)
}

/// Count runs of commit mentions: a commit verb with a 7–12 hex hash in a
/// text, where texts with no commit between them separate the runs.
pub fn commit_clusters<'a>(texts: impl IntoIterator<Item = &'a str>) -> usize {
    clusters(texts.into_iter().map(mentions_commit))
}

/// Count runs of `true` (a text that mentions a commit) in `mentions`.
fn clusters(mentions: impl IntoIterator<Item = bool>) -> usize {
    let mut count = 0;
    let mut in_cluster = false;
    for has in mentions {
        if has && !in_cluster {
            count += 1;
        }
        in_cluster = has;
    }
    count
}

fn mentions_commit(text: &str) -> bool {
    has_commit_verb(text, &mut Vec::new()) && has_hash(text)
}

/// A commit verb anywhere in `text`, in any ASCII case (`lower`: a buffer
/// for the lowercased text).
fn has_commit_verb(text: &str, lower: &mut Vec<u8>) -> bool {
    static VERBS: LazyLock<[memchr::memmem::Finder<'static>; 4]> = LazyLock::new(|| {
        ["commit", "cherry-pick", "merge", "rebase"].map(memchr::memmem::Finder::new)
    });
    lower.clear();
    lower.extend(text.bytes().map(|b| b.to_ascii_lowercase()));
    VERBS.iter().any(|verb| verb.find(lower).is_some())
}

/// A run of 7–12 hex digits, not part of a longer one, with a digit and a
/// letter. (Read by bytes: a character that is no ASCII hex digit is made
/// of bytes that are none either, so the runs are the same.)
fn has_hash(text: &str) -> bool {
    let is_hash =
        |len: usize, digit: bool, letter: bool| (7..=12).contains(&len) && digit && letter;
    let (mut len, mut digit, mut letter) = (0, false, false);
    for b in text.bytes() {
        if b.is_ascii_hexdigit() {
            len += 1;
            digit |= b.is_ascii_digit();
            letter |= b.is_ascii_alphabetic();
        } else {
            if is_hash(len, digit, letter) {
                return true;
            }
            (len, digit, letter) = (0, false, false);
        }
    }
    is_hash(len, digit, letter)
}

/// `mentions_commit(&message_text(message))`, without joining the texts:
/// the verb and the hash may sit in different parts, and the separator
/// the join puts between them is no hex digit and no part of a verb.
fn message_mentions_commit(message: &Message) -> bool {
    let texts = || {
        message
            .parts
            .iter()
            .filter(|p| p.kind == PartKind::Text && !p.is_ignored())
            .filter_map(Part::text)
    };
    let mut lower = Vec::new();
    texts().any(|t| has_commit_verb(t, &mut lower)) && texts().any(has_hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> TriggerInput {
        TriggerInput {
            usage_percent: 30.0,
            threshold: 65.0,
            force_band: 85.0,
            window: 200_000,
            tail_tokens: 0,
            commit_clusters: 0,
            subagent: false,
        }
    }

    #[test]
    fn budget_and_protected_tail() {
        assert_eq!(trigger_budget(200_000, 65.0), 6_500);
        assert_eq!(trigger_budget(20_000, 65.0), 5_000);
        assert_eq!(trigger_budget(2_000_000, 90.0), 50_000);
        assert_eq!(protected_tail(200_000), 80_000);
        assert_eq!(protected_tail(1_000_000), 96_000);
    }

    #[test]
    fn due_reasons_keep_their_wire_strings() {
        for (reason, text) in [
            (DueReason::ForceBand, "force_band"),
            (DueReason::CommitClusters, "commit_clusters"),
            (DueReason::TailSize, "tail_size"),
            (DueReason::ProjectedHeadroom, "projected_headroom"),
        ] {
            assert_eq!(serde_json::json!(reason), serde_json::json!(text));
        }
    }

    #[test]
    fn reasons_in_order() {
        // Nothing eligible: never due, even in the force band.
        let d = historian_due(&TriggerInput {
            usage_percent: 90.0,
            tail_tokens: 80_000,
            ..input()
        });
        assert_eq!((d.due, d.reason), (false, None));
        let d = historian_due(&TriggerInput {
            usage_percent: 90.0,
            tail_tokens: 90_000,
            ..input()
        });
        assert_eq!(d.reason, Some(DueReason::ForceBand));
        assert!(!d.blocking);
        let d = historian_due(&TriggerInput {
            usage_percent: 96.0,
            tail_tokens: 90_000,
            ..input()
        });
        assert!(d.blocking);
        let d = historian_due(&TriggerInput {
            tail_tokens: 80_000 + 6_500,
            commit_clusters: 3,
            ..input()
        });
        assert_eq!(d.reason, Some(DueReason::CommitClusters));
        let d = historian_due(&TriggerInput {
            tail_tokens: 80_000 + 6_499,
            commit_clusters: 3,
            ..input()
        });
        assert_eq!(d.reason, None);
        let d = historian_due(&TriggerInput {
            tail_tokens: 80_000 + 19_500,
            ..input()
        });
        assert_eq!(d.reason, Some(DueReason::TailSize));
        let d = historian_due(&TriggerInput {
            tail_tokens: 85_000,
            usage_percent: 63.0,
            ..input()
        });
        assert_eq!(d.reason, Some(DueReason::ProjectedHeadroom));
        let d = historian_due(&TriggerInput {
            tail_tokens: 85_000,
            usage_percent: 62.9,
            ..input()
        });
        assert_eq!(d.reason, None);
        let d = historian_due(&TriggerInput {
            tail_tokens: 500_000,
            subagent: true,
            ..input()
        });
        assert_eq!(d.reason, None, "subagents have no historian");
    }

    #[test]
    fn commit_clusters_are_runs() {
        let texts = [
            "committed as 3f2a9c1d",
            "merge 9ab3c4d5e done",
            "then I looked at the tests",
            "commit 0123abcd4 pushed",
            "no hash here, just commit talk",
            "rebased onto 77aa88bb",
        ];
        assert_eq!(commit_clusters(texts), 3);
        assert_eq!(commit_clusters(["deadbeef without a verb"]), 0);
    }

    #[test]
    fn a_hash_is_found_by_bytes_as_by_characters() {
        let by_characters = |text: &str| {
            text.split(|c: char| !c.is_ascii_hexdigit()).any(|w| {
                (7..=12).contains(&w.len())
                    && w.bytes().any(|b| b.is_ascii_digit())
                    && w.bytes().any(|b| b.is_ascii_alphabetic())
            })
        };
        for text in [
            "a1b2c3d",
            "a1b2c3",
            "a1b2c3d4e5f6",
            "a1b2c3d4e5f6a",
            "abcdefab",
            "12345678",
            "é1a2b3c4é",
            "→a1b2c3d←",
            "x a1b2c3d4 y",
            "a1b2c3d4e5f6a7 then 0badc0de",
            "",
            "ß",
            "deadbeef1",
        ] {
            assert_eq!(has_hash(text), by_characters(text), "{text:?}");
        }
    }

    #[test]
    fn a_message_mentions_a_commit_as_its_joined_text_does() {
        let message = |texts: &[&str]| {
            let parts = texts
                .iter()
                .map(|t| serde_json::json!({"type": "text", "text": t}))
                .collect::<Vec<_>>();
            Message::decode(
                serde_json::json!({"info": {"id": "m", "role": "assistant"}, "parts": parts}),
            )
            .unwrap()
        };
        for texts in [
            &["Committed a1b2c3d"][..],
            &["MERGED", "into 0badc0de1"],
            &["rebase", ""],
            &["  a1b2c3d  ", "cherry-pick it"],
            &["com", "mit a1b2c3d"],
            &["commit abcdefa"],
            &["commit a1b2c3", "d4e5f6"],
            &["commit a1b2c3d4e5f6a7"],
            &[],
        ] {
            let m = message(texts);
            assert_eq!(
                message_mentions_commit(&m),
                mentions_commit(&message_text(&m)),
                "{texts:?}"
            );
        }
    }
}
