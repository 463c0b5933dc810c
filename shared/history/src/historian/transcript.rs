//! What the historian may fold, and the compact transcript the model reads.
//!
//! The eligible range is the unfolded tail (messages above the last
//! compartment) minus the live tail: the newest `protected_tail(window)`
//! tokens, and — below the force band — the newest real user message and
//! everything after it. A message holding an open tool call of the current
//! turn ends the range too, so a call is never folded before its result.
//!
//! The transcript renders the range as blocks, one line each, every line
//! starting with the ordinals it covers: `[12] U: …` or `[13-15] A: …`.
//! Consecutive messages of one role merge into one block; tool calls show as
//! `TC: tool(argument)` (their outputs never); reasoning never shows.
//! Messages with nothing to show (step markers, compaction records, synthetic
//! context) join the next block, so the lines cover the range without gaps.

use std::collections::{BTreeSet, HashMap};

use regex::Regex;
use serde_json::Value;

use mc_base::codec::{Message, PartKind, Role};
use mc_base::tokens;

/// A part's text is cut after this many characters in the transcript.
const MAX_PART_CHARS: usize = 2_000;
/// A tool argument is cut after this many characters.
const MAX_ARG_CHARS: usize = 80;
/// Lookahead shown after a chunk cut by its budget: at most this many tokens…
pub const LOOKAHEAD_TOKENS: u64 = 1_500;
/// …and this many blocks.
const LOOKAHEAD_BLOCKS: usize = 3;

/// One message of the unfolded tail.
#[derive(Debug, Clone, Copy)]
pub struct TailMessage<'a> {
    pub ordinal: i64,
    pub message: &'a Message,
    /// Tokens it occupies in the live context (as the transform counts them).
    pub tokens: u64,
}

/// Where the eligible range ends, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eligible {
    /// `tail[..end]` may be folded.
    pub end: usize,
    /// `tail[protected_from..]` is the protected live tail (by tokens).
    pub protected_from: usize,
}

/// The eligible prefix of `tail` (oldest first). `live_floor`: keep the
/// newest real user message and everything after it (off in the force band).
pub fn eligible(tail: &[TailMessage<'_>], protected_tokens: u64, live_floor: bool) -> Eligible {
    let mut protected_from = tail.len();
    let mut kept = 0u64;
    for message in tail.iter().rev() {
        if kept >= protected_tokens {
            break;
        }
        protected_from -= 1;
        kept += message.tokens;
    }
    let mut end = protected_from;
    let newest_user = tail.iter().rposition(|t| t.message.is_real_user());
    if live_floor && let Some(user) = newest_user {
        end = end.min(user);
    }
    // A call of the current turn still waiting for its result stays unfolded.
    let turn_start = newest_user.unwrap_or(0);
    if let Some(open) = tail
        .iter()
        .take(end)
        .enumerate()
        .skip(turn_start)
        .find(|(_, t)| has_open_call(t.message))
        .map(|(i, _)| i)
    {
        end = open;
    }
    Eligible {
        end,
        protected_from,
    }
}

pub(crate) fn has_open_call(message: &Message) -> bool {
    message
        .parts
        .iter()
        .any(|p| p.kind == PartKind::Tool && !p.tool_is_closed())
}

/// A line of the transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// `U` (user) or `A` (assistant).
    pub role: char,
    /// Ordinals of every message in the block, noise included, ascending.
    pub ordinals: Vec<i64>,
    pub text: String,
    /// Nothing but tool calls (and noise): a gap here may heal.
    pub tool_only: bool,
    /// Ordinals of messages with nothing to show (they joined this block).
    pub quiet: Vec<i64>,
    pub tokens: u64,
}

impl Block {
    /// The first ordinal (0 for a block without messages, which [`blocks`]
    /// never builds).
    pub fn start(&self) -> i64 {
        self.ordinals.first().copied().unwrap_or_default()
    }

    /// The last ordinal (0 for a block without messages).
    pub fn end(&self) -> i64 {
        self.ordinals.last().copied().unwrap_or_default()
    }

    pub fn line(&self) -> String {
        let range = if self.start() == self.end() {
            format!("[{}]", self.start())
        } else {
            format!("[{}-{}]", self.start(), self.end())
        };
        format!("{range} {}: {}", self.role, self.text)
    }
}

/// What one message contributes.
struct Rendered {
    role: char,
    pieces: Vec<String>,
    tool_only: bool,
}

/// Drops `<system-reminder>` blocks. The pattern is a constant that compiles;
/// were it ever not to, the text is kept as it is.
fn strip_system_reminders(text: &str) -> String {
    static RE: std::sync::OnceLock<Option<Regex>> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"(?is)<system-reminder>.*?</system-reminder>").ok());
    match re {
        Some(re) => re.replace_all(text, " ").into_owned(),
        None => text.to_string(),
    }
}

/// Whitespace runs become one space; long text is cut with a note.
fn squash(text: &str, max_chars: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined
        .char_indices()
        .nth(max_chars)
        .and_then(|(cut, _)| joined.split_at_checked(cut))
    {
        Some((kept, rest)) => format!("{kept}… [{} more chars]", rest.chars().count()),
        None => joined,
    }
}

/// `TC: description` or `TC: tool(argument)`; a failed call says so.
fn tool_summary(part: &mc_base::codec::Part) -> Option<String> {
    let name = part.tool_name().filter(|n| !n.is_empty())?;
    let input = part.tool_input();
    let field = |key: &str| {
        input
            .and_then(|i| i.get(key))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let description = field("description");
    let mut summary = match description {
        Some(d) => format!("TC: {name}: {}", squash(d, MAX_ARG_CHARS)),
        None => {
            let arg = [
                "filePath",
                "file_path",
                "path",
                "pattern",
                "query",
                "command",
                "url",
                "symbol",
            ]
            .iter()
            .find_map(|k| field(k));
            match arg {
                Some(arg) => format!("TC: {name}({})", squash(arg, MAX_ARG_CHARS)),
                None => format!("TC: {name}"),
            }
        }
    };
    if part.tool_status() == Some("error") {
        summary.push_str(" (failed)");
    }
    Some(summary)
}

fn render(message: &Message) -> Option<Rendered> {
    // The harness's own compaction records are not conversation.
    if message.is_summary()
        || message
            .parts
            .iter()
            .any(|p| p.type_name() == Some("compaction"))
    {
        return None;
    }
    let role = match message.role() {
        Role::User => 'U',
        Role::Assistant => 'A',
        Role::Other => return None,
    };
    let mut pieces = Vec::new();
    let mut has_text = false;
    for part in &message.parts {
        match part.kind {
            PartKind::Text if !part.is_ignored() => {
                // A user's synthetic parts are injected context (file
                // contents, reminders), not what the user said.
                if role == 'U' && part.is_synthetic() {
                    continue;
                }
                let text = part.text().unwrap_or_default();
                let text = if role == 'U' {
                    strip_system_reminders(text)
                } else {
                    text.to_string()
                };
                let text = squash(&text, MAX_PART_CHARS);
                if !text.is_empty() {
                    pieces.push(text);
                    has_text = true;
                }
            }
            PartKind::Tool => pieces.extend(tool_summary(part)),
            PartKind::File => {
                let name = part
                    .str_field("filename")
                    .or_else(|| part.str_field("mime"))
                    .unwrap_or("file");
                pieces.push(format!("[file {}]", squash(name, MAX_ARG_CHARS)));
                has_text = true;
            }
            _ => {}
        }
    }
    (!pieces.is_empty()).then_some(Rendered {
        role,
        pieces,
        tool_only: !has_text,
    })
}

/// The blocks of `messages` (ordinal, message; ascending). A block grows
/// while its role repeats and it stays under `max_block_tokens`. Noise joins
/// the next block; noise after the last block is left out.
pub fn blocks(messages: &[(i64, &Message)], max_block_tokens: u64) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut open: Option<Block> = None;
    let mut noise: Vec<i64> = Vec::new();
    let finish = |block: &mut Block| {
        block.tokens = u64::from(tokens::estimate(&block.line())) + 1;
    };
    for &(ordinal, message) in messages {
        let Some(rendered) = render(message) else {
            noise.push(ordinal);
            continue;
        };
        let text = rendered.pieces.join(" / ");
        let tokens = u64::from(tokens::estimate(&text));
        if let Some(block) = open.as_mut()
            && block.role == rendered.role
            && block.tokens + tokens <= max_block_tokens
        {
            block.quiet.extend_from_slice(&noise);
            block.ordinals.append(&mut noise);
            block.ordinals.push(ordinal);
            block.text.push_str(" / ");
            block.text.push_str(&text);
            block.tool_only &= rendered.tool_only;
            block.tokens += tokens;
            continue;
        }
        if let Some(mut done) = open.take() {
            finish(&mut done);
            out.push(done);
        }
        let quiet = std::mem::take(&mut noise);
        let mut ordinals = quiet.clone();
        ordinals.push(ordinal);
        open = Some(Block {
            role: rendered.role,
            ordinals,
            text,
            tool_only: rendered.tool_only,
            quiet,
            tokens,
        });
    }
    if let Some(mut done) = open {
        finish(&mut done);
        out.push(done);
    }
    out
}

/// One model call's worth of transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub blocks: Vec<Block>,
    /// Blocks right after the chunk, shown read-only so the model can tell
    /// whether the last topic goes on. Empty when the chunk ends the range.
    pub lookahead: Vec<Block>,
    /// Every ordinal of the chunk, ascending.
    pub ordinals: Vec<i64>,
    /// Ordinals in tool-only blocks, or with nothing to show: a gap made of
    /// these may heal.
    pub tool_only: BTreeSet<i64>,
    pub tokens: u64,
    /// Tokens of the eligible range from this chunk's start on.
    pub remaining_tokens: u64,
}

impl Chunk {
    /// The first ordinal (0 for a chunk without messages, which
    /// [`first_chunk`] never builds).
    pub fn first(&self) -> i64 {
        self.ordinals.first().copied().unwrap_or_default()
    }

    /// The last ordinal (0 for a chunk without messages).
    pub fn last(&self) -> i64 {
        self.ordinals.last().copied().unwrap_or_default()
    }

    /// The transcript lines.
    pub fn text(&self) -> String {
        lines(&self.blocks)
    }

    pub fn lookahead_text(&self) -> String {
        lines(&self.lookahead)
    }

    /// The first ordinal after the chunk the model was shown, if any.
    pub fn next_shown(&self) -> Option<i64> {
        self.lookahead.first().map(Block::start)
    }
}

fn lines(blocks: &[Block]) -> String {
    blocks
        .iter()
        .map(Block::line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first chunk of `blocks`: whole blocks while they fit in `budget`
/// tokens (the first always goes), then up to a few blocks of lookahead.
pub fn first_chunk(blocks: &[Block], budget: u64) -> Option<Chunk> {
    let first = blocks.first()?;
    let mut taken = 1;
    let mut tokens = first.tokens;
    while let Some(next) = blocks.get(taken) {
        if tokens + next.tokens > budget {
            break;
        }
        tokens += next.tokens;
        taken += 1;
    }
    let (chunk_blocks, after) = blocks.split_at_checked(taken).unwrap_or((blocks, &[]));
    let mut lookahead = Vec::new();
    let mut ahead_tokens = 0;
    for block in after.iter().take(LOOKAHEAD_BLOCKS) {
        if !lookahead.is_empty() && ahead_tokens + block.tokens > LOOKAHEAD_TOKENS {
            break;
        }
        ahead_tokens += block.tokens;
        lookahead.push(block.clone());
    }
    let chunk_blocks = chunk_blocks.to_vec();
    let tool_only = chunk_blocks
        .iter()
        .flat_map(|b| {
            if b.tool_only {
                b.ordinals.iter()
            } else {
                b.quiet.iter()
            }
        })
        .copied()
        .collect();
    Some(Chunk {
        ordinals: chunk_blocks
            .iter()
            .flat_map(|b| b.ordinals.iter().copied())
            .collect(),
        tool_only,
        blocks: chunk_blocks,
        lookahead,
        tokens,
        remaining_tokens: blocks.iter().map(|b| b.tokens).sum(),
    })
}

/// Per-message context tokens: the transform's stored count for tagged parts
/// (0 once dropped), the same estimate the transform would store for the rest.
pub fn message_tokens(message: &Message, stored: &HashMap<String, Option<u64>>) -> u64 {
    use mc_base::domain::tags::TagKind;
    use mc_base::domain::tags::{measure_part, part_identity};
    let Some(id) = message.id() else { return 0 };
    message
        .parts
        .iter()
        .enumerate()
        .filter_map(|(index, part)| {
            let (kind, identity) = part_identity(id, index, part)?;
            match stored.get(&identity) {
                Some(tokens) => Some(tokens.unwrap_or(0)),
                None if kind == TagKind::Tool && part.tool_output().is_none() => None,
                None => {
                    let (_, tokens, _, input) = measure_part(kind, part);
                    Some((tokens + input).max(0) as u64)
                }
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(id: &str, role: &str, parts: Value) -> Message {
        Message::decode(json!({"info": {"id": id, "role": role}, "parts": parts})).unwrap()
    }

    fn text(t: &str) -> Value {
        json!([{"type": "text", "text": t}])
    }

    fn tool(name: &str, input: Value, status: &str) -> Value {
        json!({"type": "tool", "callID": "c", "tool": name,
               "state": {"status": status, "input": input, "output": "OUTPUT NEVER SHOWN"}})
    }

    #[test]
    fn lines_start_with_their_ordinals_and_merge_roles() {
        let messages = [
            msg("m1", "user", text("Fix the   flaky\n lock test")),
            msg(
                "m2",
                "assistant",
                json!([{"type": "step-start"}, {"type": "reasoning", "text": "secret thoughts"},
                tool("read", json!({"filePath": "src/store.rs"}), "completed")]),
            ),
            msg(
                "m3",
                "assistant",
                json!([tool(
                    "bash",
                    json!({"command": "cargo test", "description": "Run the tests"}),
                    "error"
                )]),
            ),
            msg(
                "m4",
                "assistant",
                text("The lock is taken twice; fixed in src/store.rs."),
            ),
            msg("m5", "assistant", json!([{"type": "step-finish"}])),
            msg(
                "m6",
                "user",
                json!([{"type": "text", "text": "<system-reminder>ignore me</system-reminder> thanks, commit it"},
                                      {"type": "text", "text": "file body", "synthetic": true}]),
            ),
        ];
        let refs: Vec<(i64, &Message)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i as i64 + 11, m))
            .collect();
        let blocks = blocks(&refs, 10_000);
        let text = lines(&blocks);
        assert_eq!(
            text,
            "[11] U: Fix the flaky lock test\n\
             [12-14] A: TC: read(src/store.rs) / TC: bash: Run the tests (failed) / The lock is taken twice; fixed in src/store.rs.\n\
             [15-16] U: thanks, commit it"
        );
        assert!(!text.contains("OUTPUT NEVER SHOWN") && !text.contains("secret"));
        assert!(!blocks[1].tool_only);
        assert_eq!(blocks[2].ordinals, [15, 16], "noise joins the next block");
        assert_eq!(blocks[2].quiet, [15]);
        let chunk = first_chunk(&blocks, 100_000).unwrap();
        assert_eq!(chunk.tool_only.iter().copied().collect::<Vec<_>>(), [15]);
    }

    #[test]
    fn tool_only_blocks_and_trailing_noise() {
        let messages = [
            msg(
                "a",
                "assistant",
                json!([tool("grep", json!({"pattern": "lease"}), "completed")]),
            ),
            msg(
                "b",
                "assistant",
                json!([tool("glob", json!({}), "completed")]),
            ),
            msg("c", "user", text("ok")),
            msg("d", "assistant", json!([{"type": "step-start"}])),
        ];
        let refs: Vec<(i64, &Message)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i as i64 + 1, m))
            .collect();
        let blocks = blocks(&refs, 10_000);
        assert_eq!(blocks.len(), 2);
        assert!(blocks[0].tool_only);
        assert_eq!(blocks[0].line(), "[1-2] A: TC: grep(lease) / TC: glob");
        assert_eq!(
            blocks[1].end(),
            3,
            "trailing noise is left for the next run"
        );
    }

    #[test]
    fn compaction_records_and_long_text() {
        let long = "word ".repeat(1_000);
        let messages = [
            msg(
                "s",
                "assistant",
                json!([{"type": "text", "text": "summary of before"}]),
            ),
            msg("u", "user", text(&long)),
        ];
        let summary = Message::decode(json!({
            "info": {"id": "s", "role": "assistant", "summary": true},
            "parts": [{"type": "text", "text": "summary of before"}],
        }))
        .unwrap();
        let refs = [(1, &summary), (2, &messages[1])];
        let blocks = blocks(&refs, 100_000);
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].ordinals, [1, 2]);
        assert!(
            blocks[0].text.ends_with("more chars]"),
            "{}",
            &blocks[0].text[blocks[0].text.len() - 40..]
        );
        assert!(blocks[0].text.chars().count() < MAX_PART_CHARS + 40);
    }

    #[test]
    fn blocks_split_at_the_block_budget() {
        let messages: Vec<Message> = (0..6)
            .map(|i| msg(&format!("m{i}"), "assistant", text(&"token ".repeat(100))))
            .collect();
        let refs: Vec<(i64, &Message)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i as i64 + 1, m))
            .collect();
        let blocks = blocks(&refs, 250);
        assert!(blocks.len() >= 3, "{}", blocks.len());
        assert!(blocks.iter().all(|b| b.role == 'A'));
        let all: Vec<i64> = blocks.iter().flat_map(|b| b.ordinals.clone()).collect();
        assert_eq!(all, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn chunks_take_whole_blocks_and_show_lookahead() {
        let messages: Vec<Message> = (0..8)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                msg(&format!("m{i}"), role, text(&"alpha ".repeat(50)))
            })
            .collect();
        let refs: Vec<(i64, &Message)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i as i64 + 1, m))
            .collect();
        let blocks = blocks(&refs, 10_000);
        let per = blocks[0].tokens;
        let chunk = first_chunk(&blocks, per * 3).unwrap();
        assert_eq!(chunk.ordinals, [1, 2, 3]);
        assert_eq!(chunk.lookahead.len(), 3);
        assert_eq!(chunk.next_shown(), Some(4));
        let whole = first_chunk(&blocks, 1_000_000).unwrap();
        assert_eq!(whole.last(), 8);
        assert!(
            whole.lookahead.is_empty(),
            "the end of the range has no lookahead"
        );
        // The first block always goes, even when it alone is over budget.
        assert_eq!(first_chunk(&blocks, 1).unwrap().ordinals, [1]);
        assert!(first_chunk(&[], 10).is_none());
    }

    fn tail<'a>(messages: &'a [Message], tokens: &[u64]) -> Vec<TailMessage<'a>> {
        messages
            .iter()
            .zip(tokens)
            .enumerate()
            .map(|(i, (m, &t))| TailMessage {
                ordinal: i as i64 + 1,
                message: m,
                tokens: t,
            })
            .collect()
    }

    #[test]
    fn eligible_range_protects_the_live_tail() {
        let messages = vec![
            msg("u1", "user", text("one")),
            msg("a1", "assistant", text("done one")),
            msg("u2", "user", text("two")),
            msg("a2", "assistant", text("done two")),
            msg("u3", "user", text("three")),
            msg("a3", "assistant", text("working")),
        ];
        let t = tail(&messages, &[100, 100, 100, 100, 100, 100]);
        // 250 protected tokens: the newest three messages (300 ≥ 250).
        assert_eq!(
            eligible(&t, 250, true),
            Eligible {
                end: 3,
                protected_from: 3
            }
        );
        // Tiny protection: the newest real user message still bounds the range.
        assert_eq!(eligible(&t, 10, true).end, 4);
        // In the force band the floor is off.
        assert_eq!(eligible(&t, 10, false).end, 5);
        // Everything protected: nothing eligible.
        assert_eq!(eligible(&t, 10_000, false).end, 0);
    }

    #[test]
    fn open_calls_of_the_current_turn_end_the_range() {
        let messages = vec![
            msg("u1", "user", text("one")),
            msg(
                "a1",
                "assistant",
                json!([{"type": "tool", "callID": "x", "tool": "bash",
                                            "state": {"status": "running", "input": {}}}]),
            ),
            msg("u2", "user", text("two")),
            msg("a2", "assistant", text("ok")),
            msg(
                "a3",
                "assistant",
                json!([{"type": "tool", "callID": "y", "tool": "bash",
                                            "state": {"status": "pending", "input": {}}}]),
            ),
            msg("a4", "assistant", text("still going")),
        ];
        let t = tail(&messages, &[10; 6]);
        // A stale open call (an earlier turn) does not hold the range back;
        // the current turn's open call does.
        assert_eq!(eligible(&t, 1, false).end, 4);
    }

    #[test]
    fn message_tokens_prefer_stored_counts() {
        let m = msg(
            "m",
            "assistant",
            json!([{"type": "text", "text": "hello there world"},
            {"type": "tool", "callID": "c", "tool": "read", "state": {"status": "completed", "input": {"a": 1}, "output": "x"}},
            {"type": "tool", "callID": "d", "tool": "read", "state": {"status": "running", "input": {}}}]),
        );
        let fresh = message_tokens(&m, &HashMap::new());
        assert!(fresh > 0);
        let stored = HashMap::from([("m:p0".to_string(), Some(1000)), ("c@m".to_string(), None)]);
        assert_eq!(
            message_tokens(&m, &stored),
            1000,
            "dropped parts count 0; open calls nothing"
        );
    }
}
