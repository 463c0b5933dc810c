//! The per-call record: one `calls` row per pass (one-shot, resident and
//! gateway), what mc decided and why, what the call was made of by source,
//! and the usage the provider reported for it.
//!
//! The provider's usage of a call reaches mc with the *next* call (the
//! harness hands over the last answer's numbers): [`record`] writes that
//! sample onto the previous row of the session, unless it is the same sample
//! again (no answer came between two passes). The gateway reads it from the
//! call's own answer and writes it at once ([`attach_usage`]), so a
//! session's last call has its usage too. What a
//! cache read that fell means is [`super::causes`]' business, at read time.

use rusqlite::{OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::Value;

use mc_base::config::TransformConfig;
use mc_base::domain::envelope::Usage;
use mc_base::domain::tags::{TagKind, TagRow};
use mc_base::error::Result;
use mc_base::tokens;

use super::report::{Bust, Decision};

/// How often (in row ids) the pass prunes the record down to its bounds.
pub const PRUNE_EVERY: i64 = 512;
const DAY_MS: i64 = 86_400_000;

/// What the head did on a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HeadMove {
    /// No head (a subagent's prompt).
    Off,
    /// The cached bytes again.
    Replayed,
    /// m[1] re-rendered.
    Refreshed,
    /// m[0] rebuilt.
    Rebuilt,
}

impl HeadMove {
    pub fn as_str(self) -> &'static str {
        match self {
            HeadMove::Off => "off",
            HeadMove::Replayed => "replayed",
            HeadMove::Refreshed => "refreshed",
            HeadMove::Rebuilt => "rebuilt",
        }
    }

    fn parse(s: &str) -> HeadMove {
        match s {
            "replayed" => HeadMove::Replayed,
            "refreshed" => HeadMove::Refreshed,
            "rebuilt" => HeadMove::Rebuilt,
            _ => HeadMove::Off,
        }
    }
}

/// A part of the prompt the harness sent besides the messages (its system
/// prompt, its tool set): a fingerprint, and its tokens when already known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptPart {
    pub print: String,
    /// `None`: count [`PromptPart::text`] unless the session's previous call had
    /// the same fingerprint (then its count again).
    pub tokens: Option<u64>,
    pub text: Option<String>,
}

impl PromptPart {
    /// The fingerprint and (lazily counted) text of a JSON value: a system
    /// prompt as an envelope carries it.
    pub fn of_value(value: &Value) -> PromptPart {
        let text = value.to_string();
        PromptPart {
            print: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes())),
            tokens: None,
            text: Some(text),
        }
    }

    /// Raw request bytes (the gateway's `system` and `tools` values), counted now.
    pub fn of_bytes(bytes: &[u8]) -> PromptPart {
        PromptPart {
            print: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes)),
            tokens: Some(u64::from(tokens::estimate(&String::from_utf8_lossy(bytes)))),
            text: None,
        }
    }
}

/// What a harness sent besides the messages, when the caller knows it
/// better than the envelope does (the gateway reads it from the request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prompt {
    pub system: Option<PromptPart>,
    pub tools: Option<PromptPart>,
}

/// Tokens of a call by where they come from (estimates).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Sources {
    /// The head (m[0] and m[1]) less its memory and pins.
    pub head: i64,
    pub memory: i64,
    pub pins: i64,
    /// Messages on the wire: text, reasoning, files.
    pub conversation: i64,
    /// Tool calls and their outputs on the wire.
    pub tool_output: i64,
}

impl Sources {
    /// Measure the messages on the wire (tags not dropped whose message the
    /// head does not cover) and the head's text.
    pub fn measure(
        bindings: &[Vec<Option<usize>>],
        ordinals: &[Option<i64>],
        tags: &[TagRow],
        covered_through: i64,
        head: Option<(&str, &str, i64)>,
    ) -> Sources {
        let mut sources = Sources::default();
        for (parts, ordinal) in bindings.iter().zip(ordinals) {
            if ordinal.is_some_and(|o| o <= covered_through) {
                continue;
            }
            for tag in parts.iter().flatten().filter_map(|i| tags.get(*i)) {
                if tag.dropped.is_some() {
                    continue;
                }
                match tag.kind {
                    TagKind::Tool => sources.tool_output += tag.tokens + tag.input_tokens,
                    TagKind::Message | TagKind::File => sources.conversation += tag.tokens,
                }
            }
        }
        if let Some((m0, m1, head_tokens)) = head {
            let bytes = (m0.len() + m1.len()).max(1) as i64;
            let share = |tag_bytes: usize| head_tokens * tag_bytes as i64 / bytes;
            let memory = share(
                section_bytes(m0, "project-memory")
                    + section_bytes(m1, "memory-updates")
                    + section_bytes(m1, "new-memories"),
            );
            let pins =
                share(section_bytes(m0, "pinned-messages") + section_bytes(m1, "pinned-messages"));
            sources.memory = memory;
            sources.pins = pins;
            sources.head = (head_tokens - memory - pins).max(0);
        }
        sources
    }
}

/// Bytes of the first `<tag …>…</tag>` section of `text` (0 when absent).
fn section_bytes(text: &str, tag: &str) -> usize {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    let Some(start) = text.find(&open) else {
        return 0;
    };
    match text.get(start..).and_then(|rest| rest.find(&close)) {
        Some(end) => end + close.len(),
        None => 0,
    }
}

/// One pass, as [`record`] writes it.
#[derive(Debug, Clone)]
pub struct NewCall<'a> {
    pub session: i64,
    pub at_ms: i64,
    pub decision: Decision,
    pub reason: &'static str,
    pub bust: Bust,
    pub head: HeadMove,
    pub head_reason: Option<&'static str>,
    pub usage_percent: f64,
    pub context_window: u64,
    pub model: Option<&'a str>,
    pub prompt: Prompt,
    pub messages: usize,
    pub first_message: Option<&'a str>,
    pub sources: Sources,
    pub drops: usize,
    /// The usage the call arrived with: the previous call's answer.
    pub sample: Option<Usage>,
}

/// How much of the record is kept (`transform.calls_keep_rows`, `transform.calls_keep_days`).
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub rows: u64,
    pub days: u32,
}

impl Keep {
    pub fn of(config: &TransformConfig) -> Keep {
        Keep {
            rows: config.calls_keep_rows,
            days: config.calls_keep_days,
        }
    }
}

fn saturated(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The previous row of a session, as [`record`] reads it.
struct Previous {
    id: i64,
    system_print: Option<String>,
    system_tokens: Option<i64>,
    tools_print: Option<String>,
    tools_tokens: Option<i64>,
    sample: Option<Usage>,
    has_usage: bool,
}

fn usage_of(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Option<Usage>> {
    let get = |i: usize| r.get::<_, Option<i64>>(at + i);
    let (Some(input), Some(read), Some(write), Some(output)) = (get(0)?, get(1)?, get(2)?, get(3)?)
    else {
        return Ok(None);
    };
    let u = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(Some(Usage {
        input: u(input),
        cache_read: u(read),
        cache_write: u(write),
        output: u(output),
    }))
}

/// The tokens of a piece: known, the previous call's when the fingerprint
/// is the same, else counted.
fn piece_tokens(piece: &PromptPart, previous: Option<(&Option<String>, Option<i64>)>) -> i64 {
    if let Some(n) = piece.tokens {
        return saturated(n);
    }
    if let Some((Some(print), Some(n))) = previous
        && *print == piece.print
    {
        return n;
    }
    piece
        .text
        .as_deref()
        .map_or(0, |t| i64::from(tokens::estimate(t)))
}

/// Write one pass's row (and the usage it brought onto the previous row);
/// every [`PRUNE_EVERY`] rows, prune to `keep`. The row's id.
pub fn record(tx: &Transaction<'_>, call: &NewCall<'_>, keep: Keep) -> Result<i64> {
    let previous = tx
        .prepare_cached(
            "SELECT id, system_print, system_tokens, tools_print, tools_tokens,
                    sample_input, sample_cache_read, sample_cache_write, sample_output,
                    cache_read IS NOT NULL
             FROM calls WHERE session = ?1 ORDER BY id DESC LIMIT 1",
        )?
        .query_row(params![call.session], |r| {
            Ok(Previous {
                id: r.get(0)?,
                system_print: r.get(1)?,
                system_tokens: r.get(2)?,
                tools_print: r.get(3)?,
                tools_tokens: r.get(4)?,
                sample: usage_of(r, 5)?,
                has_usage: r.get(9)?,
            })
        })
        .optional()?;
    if let (Some(sample), Some(prev)) = (call.sample, &previous)
        && !prev.has_usage
        && prev.sample != Some(sample)
        && sample.prompt_tokens() > 0
    {
        tx.prepare_cached(
            "UPDATE calls SET input = ?2, cache_read = ?3, cache_write = ?4, output = ?5
             WHERE id = ?1",
        )?
        .execute(params![
            prev.id,
            saturated(sample.input),
            saturated(sample.cache_read),
            saturated(sample.cache_write),
            saturated(sample.output),
        ])?;
    }
    let system_tokens = call.prompt.system.as_ref().map(|p| {
        piece_tokens(
            p,
            previous
                .as_ref()
                .map(|prev| (&prev.system_print, prev.system_tokens)),
        )
    });
    let tools_tokens = call.prompt.tools.as_ref().map(|p| {
        piece_tokens(
            p,
            previous
                .as_ref()
                .map(|prev| (&prev.tools_print, prev.tools_tokens)),
        )
    });
    let s = &call.sources;
    let sample = call.sample;
    tx.prepare_cached(
        "INSERT INTO calls (session, at_ms, decision, reason, bust, head, head_reason,
             usage_percent, context_window, model, system_print, tools_print, messages,
             first_message, system_tokens, tools_tokens, head_tokens, memory_tokens,
             pin_tokens, conversation_tokens, tool_tokens, drops,
             sample_input, sample_cache_read, sample_cache_write, sample_output)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
             ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)",
    )?
    .execute(params![
        call.session,
        call.at_ms,
        call.decision.as_str(),
        call.reason,
        call.bust.as_str(),
        call.head.as_str(),
        call.head_reason,
        call.usage_percent,
        saturated(call.context_window),
        call.model,
        call.prompt.system.as_ref().map(|p| p.print.as_str()),
        call.prompt.tools.as_ref().map(|p| p.print.as_str()),
        call.messages as i64,
        call.first_message,
        system_tokens,
        tools_tokens,
        s.head,
        s.memory,
        s.pins,
        s.conversation,
        s.tool_output,
        call.drops as i64,
        sample.map(|u| saturated(u.input)),
        sample.map(|u| saturated(u.cache_read)),
        sample.map(|u| saturated(u.cache_write)),
        sample.map(|u| saturated(u.output)),
    ])?;
    let id = tx.last_insert_rowid();
    if id % PRUNE_EVERY == 0 {
        prune(tx, id, call.at_ms, keep)?;
    }
    Ok(id)
}

/// Write the provider's usage of call `id` read from that call's own answer
/// (the gateway sees it as the stream ends), unless the row has usage
/// already or the answer counted no prompt. `true` when it was written;
/// the next call's sample then finds it there and changes nothing.
pub fn attach_usage(tx: &Transaction<'_>, id: i64, usage: &Usage) -> Result<bool> {
    if usage.prompt_tokens() == 0 {
        return Ok(false);
    }
    let written = tx
        .prepare_cached(
            "UPDATE calls SET input = ?2, cache_read = ?3, cache_write = ?4, output = ?5
             WHERE id = ?1 AND cache_read IS NULL",
        )?
        .execute(params![
            id,
            saturated(usage.input),
            saturated(usage.cache_read),
            saturated(usage.cache_write),
            saturated(usage.output),
        ])?;
    Ok(written == 1)
}

/// Drop rows beyond the newest `keep.rows` and older than `keep.days`.
pub fn prune(tx: &Transaction<'_>, newest_id: i64, now_ms: i64, keep: Keep) -> Result<usize> {
    let below = newest_id.saturating_sub(saturated(keep.rows));
    let before = now_ms.saturating_sub(i64::from(keep.days).saturating_mul(DAY_MS));
    Ok(tx
        .prepare_cached("DELETE FROM calls WHERE id <= ?1 OR at_ms < ?2")?
        .execute(params![below, before])?)
}

/// A recorded call, as readers see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    pub id: i64,
    pub session: i64,
    pub at_ms: i64,
    pub decision: String,
    pub reason: String,
    pub bust: String,
    pub head: HeadMove,
    pub head_reason: Option<String>,
    pub usage_percent: f64,
    pub context_window: i64,
    pub model: Option<String>,
    #[serde(skip)]
    pub system_print: Option<String>,
    #[serde(skip)]
    pub tools_print: Option<String>,
    pub messages: i64,
    #[serde(skip)]
    pub first_message: Option<String>,
    pub system_tokens: Option<i64>,
    pub tools_tokens: Option<i64>,
    pub sources: Sources,
    pub drops: i64,
    /// The provider's usage of this call, once the next call brought it.
    pub usage: Option<Usage>,
}

const CALL_COLUMNS: &str = "id, session, at_ms, decision, reason, bust, head, head_reason,
    usage_percent, context_window, model, system_print, tools_print, messages, first_message,
    system_tokens, tools_tokens, head_tokens, memory_tokens, pin_tokens, conversation_tokens,
    tool_tokens, drops, input, cache_read, cache_write, output";

fn call_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Call> {
    Ok(Call {
        id: r.get(0)?,
        session: r.get(1)?,
        at_ms: r.get(2)?,
        decision: r.get(3)?,
        reason: r.get(4)?,
        bust: r.get(5)?,
        head: HeadMove::parse(&r.get::<_, String>(6)?),
        head_reason: r.get(7)?,
        usage_percent: r.get(8)?,
        context_window: r.get(9)?,
        model: r.get(10)?,
        system_print: r.get(11)?,
        tools_print: r.get(12)?,
        messages: r.get(13)?,
        first_message: r.get(14)?,
        system_tokens: r.get(15)?,
        tools_tokens: r.get(16)?,
        sources: Sources {
            head: r.get(17)?,
            memory: r.get(18)?,
            pins: r.get(19)?,
            conversation: r.get(20)?,
            tool_output: r.get(21)?,
        },
        drops: r.get(22)?,
        usage: usage_of(r, 23)?,
    })
}

/// The newest `limit` calls of a session (store id), oldest first.
pub fn recent(conn: &rusqlite::Connection, session: i64, limit: usize) -> Result<Vec<Call>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CALL_COLUMNS} FROM calls WHERE session = ?1 ORDER BY id DESC LIMIT ?2"
    ))?;
    let mut calls = stmt
        .query_map(
            params![session, i64::try_from(limit).unwrap_or(i64::MAX)],
            call_of,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    calls.reverse();
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::causes::{CacheState, Cause};
    use crate::run_pass;
    use crate::testkit::{SESSION, session, warm_now};
    use mc_base::domain::envelope::Envelope;
    use mc_base::domain::sessions;
    use mc_base::store::Store;

    fn envelope(messages: &[Value], sample: Option<(u64, u64, u64)>, now: i64) -> Envelope {
        Envelope::from_value(json!({
            "harness": "opencode",
            "session_id": SESSION,
            "model": {"provider": "anthropic", "id": "m", "context_limit": 100_000, "output_limit": 0},
            "usage": sample.map(|(input, read, write)| {
                json!({"input": input, "cache_read": read, "cache_write": write, "output": 50})
            }),
            "now_ms": now,
            "system": ["You are a coding agent."],
            "messages": messages,
        }))
        .unwrap()
    }

    /// A pass with the previous answer's `sample` (its prompt tokens are the
    /// usage the scheduler reads, of a 100k window).
    fn pass(
        store: &mut Store,
        turns: usize,
        sample: Option<(u64, u64, u64)>,
        at: i64,
    ) -> crate::PassOutput {
        let messages = session(turns);
        let now = warm_now(&messages) + at;
        let config = TransformConfig {
            relief_drop: false,
            ..TransformConfig::default()
        };
        run_pass(store, envelope(&messages, sample, now), &config, now).unwrap()
    }

    fn calls(store: &Store) -> Vec<Call> {
        let id = sessions::find_session(store.conn(), "opencode", SESSION)
            .unwrap()
            .unwrap()
            .id;
        recent(store.conn(), id, 100).unwrap()
    }

    #[test]
    fn every_pass_is_a_row_and_usage_lands_on_the_call_it_belongs_to() {
        let mut store = Store::open_in_memory().unwrap();
        pass(&mut store, 3, None, 0);
        pass(&mut store, 4, Some((100, 0, 30_000)), 0);
        // The same sample again: no answer came between, so it is no one's.
        pass(&mut store, 4, Some((100, 0, 30_000)), 1);
        pass(&mut store, 5, Some((100, 30_000, 2_000)), 0);
        let rows = calls(&store);
        assert_eq!(rows.len(), 4);
        let usage = |i: usize| {
            rows[i]
                .usage
                .map(|u| (u.input, u.cache_read, u.cache_write))
        };
        assert_eq!(usage(0), Some((100, 0, 30_000)));
        assert_eq!(usage(1), None);
        assert_eq!(usage(2), Some((100, 30_000, 2_000)));
        assert_eq!(usage(3), None, "its answer has not come yet");
        let first = &rows[0];
        assert_eq!(first.head, HeadMove::Rebuilt);
        assert_eq!(first.head_reason.as_deref(), Some("first_render"));
        assert_eq!(rows[1].head, HeadMove::Replayed);
        assert!(
            first.sources.tool_output > first.sources.conversation,
            "{:?}",
            first.sources
        );
        assert!(
            first.sources.conversation > 0 && first.sources.head > 0,
            "{:?}",
            first.sources
        );
        assert!(first.system_tokens.is_some_and(|n| n > 0));
        assert_eq!(first.system_tokens, rows[3].system_tokens);
        assert_eq!(rows[3].messages, 20);
        // The conversation grows with the turns.
        assert!(rows[3].sources.tool_output > first.sources.tool_output);
    }

    #[test]
    fn mcs_execute_at_the_threshold_is_named_as_the_cause_of_the_next_reads_fall() {
        let mut store = Store::open_in_memory().unwrap();
        pass(&mut store, 3, None, 0);
        pass(&mut store, 4, Some((100, 0, 30_000)), 0);
        pass(&mut store, 5, Some((100, 30_000, 2_000)), 0);
        // 70 %: over the threshold, mc executes and drops.
        let out = pass(&mut store, 6, Some((100, 32_000, 38_000)), 0);
        assert_eq!(out.pass.decision, crate::Decision::Execute);
        // The provider reads only the part before mc's first change.
        pass(&mut store, 7, Some((100, 8_000, 40_000)), 0);
        let id = sessions::find_session(store.conn(), "opencode", SESSION)
            .unwrap()
            .unwrap()
            .id;
        let views = crate::status::recent_calls(
            store.conn(),
            id,
            mc_base::config::CacheTtl::Millis(300_000),
            3,
        )
        .unwrap();
        assert_eq!(views.len(), 3);
        let states: Vec<_> = views.iter().map(|v| v.cache.state).collect();
        assert_eq!(
            states,
            [
                CacheState::Stable,
                CacheState::Partial,
                CacheState::NotReported
            ]
        );
        let bust = &views[1].cache;
        assert_eq!(bust.cause, Some(Cause::McExecute));
        assert_eq!(bust.trigger.as_deref(), Some("threshold"));
        assert_eq!(bust.expected_read, Some(70_000));
    }

    #[test]
    fn the_record_is_pruned_to_its_rows_and_days() {
        let mut store = Store::open_in_memory().unwrap();
        let keep = Keep { rows: 100, days: 1 };
        store
            .write(|tx| {
                let s = sessions::create_session(tx, "opencode", "s", false, None, 0)?;
                for i in 1..=1030i64 {
                    // The first 10 rows are two days old by the last one's clock.
                    let at = if i <= 10 { 0 } else { 3 * DAY_MS };
                    record(
                        tx,
                        &NewCall {
                            session: s.id,
                            at_ms: at + i,
                            decision: Decision::Defer,
                            reason: "cache_warm",
                            bust: Bust::None,
                            head: HeadMove::Replayed,
                            head_reason: None,
                            usage_percent: 1.0,
                            context_window: 1,
                            model: None,
                            prompt: Prompt::default(),
                            messages: 1,
                            first_message: None,
                            sources: Sources::default(),
                            drops: 0,
                            sample: None,
                        },
                        keep,
                    )?;
                }
                Ok(())
            })
            .unwrap();
        let ids: Vec<i64> = store
            .conn()
            .prepare("SELECT id FROM calls ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        // Pruned at 512 (days: 1..=10 go; rows: ≤ 412) and at 1024 (rows: ≤ 924).
        assert_eq!(ids.first(), Some(&925));
        assert_eq!(ids.len(), 106);
    }
}
