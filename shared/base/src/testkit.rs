//! Test support other crates' tests build on (the `testkit` feature): the
//! Pi and Anthropic samples of `testdata/`, so no other crate reads this crate's folder,
//! and the OpenCode session the historian's and the pass's tests share.
#![allow(clippy::indexing_slicing, clippy::expect_used)]

/// A Pi context (every role Pi sends), as the codec's tests read it.
pub const PI_CONTEXT: &str = include_str!("../testdata/pi/context.json");
/// A Pi session file (a compaction, a branch).
pub const PI_SESSION: &str = include_str!("../testdata/pi/session.jsonl");
/// An Anthropic Messages request shaped like Claude Code's (compact JSON,
/// its body keys and breakpoints) with every block kind the codec reads.
pub const ANTHROPIC_REQUEST: &str = include_str!("../testdata/anthropic/request.json");

use serde_json::{Value, json};

use crate::domain::envelope::Envelope;

/// The clock of the shared historian session.
pub const NOW: i64 = 1_796_000_000_000;
/// Words per message: 30 turns are about 18k tokens, against a 20k window
/// whose protected tail is 8k.
pub const WORDS: usize = 300;

/// An OpenCode session of `turns` user/assistant pairs, each message about `words` words.
pub fn messages(session: &str, turns: usize, words: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for t in 0..turns {
        let at = NOW - 10_000_000 + t as i64 * 60_000;
        let filler = format!("{} ", ["alpha", "beta", "gamma", "delta"][t % 4]).repeat(words);
        out.push(
            json!({"info": {"id": format!("msg_{t:04}_u"), "sessionID": session, "role": "user",
                                 "time": {"created": at}},
                        "parts": [{"type": "text", "text": format!("Task {t}: {filler}")}]}),
        );
        out.push(json!({"info": {"id": format!("msg_{t:04}_a"), "sessionID": session, "role": "assistant",
                                 "finish": "stop", "time": {"created": at + 1_000, "completed": at + 5_000}},
                        "parts": [{"type": "text", "text": format!("Did task {t}. {filler}")},
                                  {"type": "tool", "callID": format!("c{t}"), "tool": "read",
                                   "state": {"status": "completed", "input": {"filePath": format!("src/f{t}.rs")},
                                             "output": "fn x() {}"}}]}));
    }
    out
}

pub fn envelope(session: &str, messages: Vec<Value>, usage: u64) -> Envelope {
    Envelope::from_value(json!({
        "harness": "opencode", "session_id": session,
        "model": {"provider": "p", "id": "m", "context_limit": 20_000},
        "usage": {"input": usage}, "now_ms": NOW, "messages": messages,
    }))
    .unwrap()
}
