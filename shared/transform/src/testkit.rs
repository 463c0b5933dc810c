//! Test support other crates' tests build on (the `testkit` feature): a
//! session of OpenCode messages, its envelope and warm clock, and the
//! helpers that read a pass's output back.
#![allow(clippy::indexing_slicing, clippy::expect_used)]

use serde_json::{Value, json};

use crate::report::PassOutput;
use mc_base::domain::envelope::Envelope;

pub const SESSION: &str = "ses_test";
pub const T0: i64 = 1_800_000_000_000;

pub fn user(id: &str, text: &str, at: i64) -> Value {
    json!({
        "info": {"id": id, "sessionID": SESSION, "role": "user", "time": {"created": at},
                 "agent": "build", "model": {"providerID": "anthropic", "modelID": "m"}},
        "parts": [{"id": format!("prt_{id}"), "sessionID": SESSION, "messageID": id, "type": "text", "text": text}]
    })
}

pub fn tool_step(id: &str, call: &str, tool: &str, output: &str, at: i64) -> Value {
    let input = json!({"filePath": format!("src/{call}.rs")});
    call_step(id, call, tool, &input, output, at)
}

/// A tool step calling `tool` with `input`.
pub fn call_step(id: &str, call: &str, tool: &str, input: &Value, output: &str, at: i64) -> Value {
    json!({
        "info": {"id": id, "sessionID": SESSION, "role": "assistant", "finish": "tool-calls",
                 "time": {"created": at, "completed": at + 500}, "providerID": "anthropic", "modelID": "m"},
        "parts": [
            {"id": format!("{id}_a"), "type": "step-start"},
            {"id": format!("{id}_r"), "type": "reasoning", "text": format!("thinking about {call}")},
            {"id": format!("{id}_b"), "type": "tool", "callID": call, "tool": tool,
             "state": {"status": "completed", "input": input,
                       "output": output, "title": call, "metadata": {}, "time": {"start": at, "end": at + 100}}},
            {"id": format!("{id}_c"), "type": "step-finish", "reason": "tool-calls"}
        ]
    })
}

pub fn answer(id: &str, text: &str, at: i64) -> Value {
    json!({
        "info": {"id": id, "sessionID": SESSION, "role": "assistant", "finish": "stop",
                 "time": {"created": at, "completed": at + 500}, "providerID": "anthropic", "modelID": "m"},
        "parts": [{"id": format!("{id}_a"), "type": "step-start"},
                  {"id": format!("{id}_t"), "type": "text", "text": text},
                  {"id": format!("{id}_c"), "type": "step-finish", "reason": "stop"}]
    })
}

/// A session of `turns` turns, each: user, two tool steps, an answer.
/// Tool outputs are large enough (~400 tokens) to be worth reclaiming.
pub fn session(turns: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for t in 0..turns {
        let at = T0 + t as i64 * 60_000;
        out.push(user(
            &format!("msg_{t:03}_u"),
            &format!("please do step {t}"),
            at,
        ));
        for s in 0..2 {
            let body = format!("line {t}.{s}: fn example() {{ return {t}; }}\n").repeat(40);
            out.push(tool_step(
                &format!("msg_{t:03}_s{s}"),
                &format!("call_{t}_{s}"),
                if s == 0 { "read" } else { "bash" },
                &body,
                at + 1000 + s as i64 * 1000,
            ));
        }
        out.push(answer(
            &format!("msg_{t:03}_z"),
            &format!("done with {t}"),
            at + 5000,
        ));
    }
    out
}

/// A session of `turns` turns that edits two files in turn and keeps a
/// todo list, each turn: user, an `edit` of `src/f<t % 2>.rs` (~1.2 KB of
/// old and new text), a `todowrite` of the list so far, a `read`, an answer.
pub fn editing_session(turns: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for t in 0..turns {
        let at = T0 + t as i64 * 60_000;
        out.push(user(
            &format!("msg_{t:03}_u"),
            &format!("please do step {t}"),
            at,
        ));
        let file = format!("src/f{}.rs", t % 2);
        let edit = json!({"filePath": file,
            "oldString": format!("fn step_{t}() {{ old(); }}\n").repeat(24),
            "newString": format!("fn step_{t}() {{ new(); }}\n").repeat(24)});
        out.push(call_step(
            &format!("msg_{t:03}_e"),
            &format!("edit_{t}"),
            "edit",
            &edit,
            "Edit applied successfully.",
            at + 1000,
        ));
        let todos: Vec<Value> = (0..=t)
            .map(|i| json!({"content": format!("step {i}"), "status": if i < t { "completed" } else { "in_progress" }, "priority": "medium"}))
            .collect();
        let todo_input = json!({"todos": todos});
        out.push(call_step(
            &format!("msg_{t:03}_t"),
            &format!("todo_{t}"),
            "todowrite",
            &todo_input,
            &serde_json::to_string_pretty(&todos).unwrap(),
            at + 2000,
        ));
        let body = format!("line {t}: fn example() {{ return {t}; }}\n").repeat(40);
        out.push(tool_step(
            &format!("msg_{t:03}_r"),
            &format!("read_{t}"),
            "read",
            &body,
            at + 3000,
        ));
        out.push(answer(
            &format!("msg_{t:03}_z"),
            &format!("done with {t}"),
            at + 5000,
        ));
    }
    out
}

/// The clock of a pass right after the last message (cache warm).
pub fn warm_now(messages: &[Value]) -> i64 {
    messages
        .iter()
        .filter_map(|m| {
            m["info"]["time"]["completed"]
                .as_i64()
                .or(m["info"]["time"]["created"].as_i64())
        })
        .max()
        .unwrap_or(T0)
        + 1000
}

/// An envelope with usage at `percent` of a 100k window.
pub fn envelope(messages: &[Value], percent: u64, now_ms: i64) -> Envelope {
    Envelope::from_value(json!({
        "harness": "opencode",
        "session_id": SESSION,
        "model": {"provider": "anthropic", "id": "m", "context_limit": 100_000, "output_limit": 0},
        "usage": {"input": percent * 1000, "cache_read": 0, "cache_write": 0, "output": 10},
        "now_ms": now_ms,
        "messages": messages,
    }))
    .unwrap()
}

/// The conversation without the synthetic head (m[0], m[1]).
pub fn body(out: &PassOutput) -> Vec<Value> {
    out.messages
        .iter()
        .filter(|m| m["info"]["syntheticHead"] != true)
        .cloned()
        .collect()
}

pub fn bytes(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| serde_json::to_string(v).unwrap())
        .collect()
}
