//! The gateway's pass against Codex-shaped requests: a real SQLite file, a
//! fixed clock, bodies written the way Codex 0.169.0 writes them (every item
//! with an id, reasoning with `encrypted_content` before each call).

use serde_json::{Value, json};

use super::*;
use crate::report::{Bust, Decision};
use crate::{ReduceRequest, reduce};
use mc_base::domain::envelope::Usage;

const T0: i64 = 1_800_000_000_000;
const MINUTE: i64 = 60_000;
const SESSION: &str = "01a23bf0-d2c3-7ee0-8036-3655ca831d14";

fn config() -> TransformConfig {
    TransformConfig {
        relief_drop: false,
        ..TransformConfig::default()
    }
}

/// A first prompt, then `turns` steps of reasoning + a call and its output.
fn conversation(turns: usize, size: usize) -> Vec<Value> {
    let mut items = vec![
        json!({"type": "message", "id": "msg_dev", "role": "developer",
               "content": [{"type": "input_text", "text": "You are Codex."}]}),
        json!({"type": "message", "id": "msg_env", "role": "user",
               "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/p</cwd>\n</environment_context>"}]}),
        json!({"type": "message", "id": "msg_u0", "role": "user",
               "content": [{"type": "input_text", "text": "find the bug in the parser"}]}),
    ];
    for k in 0..turns {
        let line = format!("{k}: fn item() {{ body }}\n");
        items.push(json!({"type": "reasoning", "id": format!("rs_{k}"),
            "summary": [{"type": "summary_text", "text": format!("step {k}")}],
            "content": null, "encrypted_content": format!("gAAAA{k}+/==")}));
        items.push(json!({"type": "function_call", "id": format!("fc_{k}"), "name": "exec_command",
            "arguments": format!("{{\"cmd\":\"cat src/f{k}.rs\"}}"), "call_id": format!("call_{k}")}));
        items.push(
            json!({"type": "function_call_output", "id": format!("fco_{k}"),
            "call_id": format!("call_{k}"), "output": line.repeat(size / line.len() + 1)}),
        );
    }
    items
}

fn request(items: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": "gpt-5-codex",
        "instructions": "You are Codex, a coding agent. Be concise.",
        "stream": true,
        "input": items,
        "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"summary": "auto"},
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": SESSION
    }))
    .unwrap()
}

fn headers(kind: &str, window: u64) -> Vec<(String, String)> {
    vec![
        ("session-id".into(), SESSION.into()),
        ("x-codex-window-id".into(), format!("{SESSION}:{window}")),
        (
            "x-codex-turn-metadata".into(),
            json!({"session_id": SESSION, "request_kind": kind}).to_string(),
        ),
    ]
}

struct Gate {
    pass: ResponsesPass,
    db: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn gate() -> Gate {
    gate_with(config())
}

fn gate_with(config: TransformConfig) -> Gate {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mc.db");
    let pass = ResponsesPass::open(&db, &StoreOptions::default(), config).unwrap();
    Gate {
        pass,
        db,
        _dir: dir,
    }
}

fn call<'a>(headers: &'a [(String, String)], body: &'a [u8], now_ms: i64) -> Call<'a> {
    Call {
        api: Api::OpenAiResponses,
        harness: HARNESS,
        session_id: Some(SESSION),
        path: "/openai/responses",
        headers,
        body,
        now_ms,
    }
}

impl Gate {
    /// One turn at `percent` of the default window (the previous answer's usage).
    fn send(&self, body: &[u8], percent: u64, now_ms: i64) -> (Vec<u8>, PassReport) {
        self.send_at(body, DEFAULT_WINDOW * percent / 100, now_ms)
    }

    /// One turn after an answer whose prompt was `input` tokens.
    fn send_at(&self, body: &[u8], input: u64, now_ms: i64) -> (Vec<u8>, PassReport) {
        let h = headers("turn", 0);
        if let Some(kept) = self.pass.memory.lock().unwrap().sessions.get_mut(SESSION) {
            kept.usage = Some(Usage {
                input,
                ..Usage::default()
            });
        }
        let (forward, report) = self.pass.run(&call(&h, body, now_ms)).unwrap();
        let sent = match forward {
            Forward::Untouched => body.to_vec(),
            Forward::Body(b) | Forward::Fallback(b) => b,
        };
        assert_pairs(&sent);
        (sent, report.expect("a turn runs the pass"))
    }

    fn queue(&self, drop: &[i64]) {
        let mut store = Store::open(&self.db, &StoreOptions::default()).unwrap();
        let request = ReduceRequest {
            harness: HARNESS.into(),
            session_id: SESSION.into(),
            drop: drop.to_vec(),
        };
        assert_eq!(
            reduce(&mut store, &request, &config(), T0).unwrap().queued,
            drop
        );
    }
}

fn items(body: &[u8]) -> Vec<Value> {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["input"].as_array().unwrap().clone()
}

/// Every output has its call earlier in the request, every call its output
/// (the Responses API refuses either alone).
fn assert_pairs(body: &[u8]) {
    let items = items(body);
    let of = |kind: &str| -> Vec<String> {
        items
            .iter()
            .filter(|i| i["type"] == kind)
            .map(|i| i["call_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (calls, outputs) = (of("function_call"), of("function_call_output"));
    assert_eq!(calls, outputs, "calls and outputs unpaired");
}

fn output_of(items: &[Value], call: &str) -> String {
    items
        .iter()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == call)
        .and_then(|i| i["output"].as_str())
        .unwrap()
        .to_string()
}

fn tag_of(text: &str) -> i64 {
    let rest = text.strip_prefix('§').unwrap();
    rest.split('§').next().unwrap().parse().unwrap()
}

#[test]
fn tags_reach_the_wire_and_reasoning_leaves_byte_for_byte() {
    let g = gate();
    let input = request(&conversation(3, 400));
    let (sent, report) = g.send(&input, 30, T0);
    assert!(report.tags > 0, "{report:?}");
    assert!(output_of(&items(&sent), "call_0").starts_with('§'));
    let req = Request::parse(&input).unwrap();
    for item in &req.items {
        if item.kind != "function_call_output" && item.kind != "message" {
            let raw = req.bytes(item.span);
            assert!(
                mc_base::codec::anthropic::contains(&sent, raw),
                "{} re-serialised",
                item.kind
            );
        }
    }
    // Codex's own context is never tagged.
    assert!(mc_base::codec::anthropic::contains(
        &sent,
        b"\"<environment_context>"
    ));
}

#[test]
fn a_defer_request_repeats_the_previous_forwarded_bytes_up_to_its_tail() {
    let g = gate();
    let mut conv = conversation(4, 300);
    let (first, _) = g.send(&request(&conv), 30, T0);
    conv.extend(conversation(5, 300).split_off(conv.len()));
    let (second, report) = g.send(&request(&conv), 30, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(report.bust, Bust::None, "{report:?}");
    let (a, b) = (items(&first), items(&second));
    assert_eq!(b.len(), a.len() + 3);
    // Every byte up to the end of the first request's last item is the same.
    let end = Request::parse(&first)
        .unwrap()
        .items
        .last()
        .unwrap()
        .span
        .end;
    assert_eq!(first[..end], second[..end], "the earlier bytes moved");
}

#[test]
fn drops_wait_for_a_busting_request_and_replay_after() {
    let g = gate();
    let mut conv = conversation(24, 500);
    conv.push(
        json!({"type": "message", "id": "msg_a", "role": "assistant",
                     "content": [{"type": "output_text", "text": "Found it."}]}),
    );
    conv.push(json!({"type": "message", "id": "msg_u1", "role": "user",
                     "content": [{"type": "input_text", "text": "now fix it"}]}));
    let (first, _) = g.send(&request(&conv), 30, T0);
    let tag = tag_of(&output_of(&items(&first), "call_0"));
    g.queue(&[tag]);
    let (deferred, report) = g.send(&request(&conv), 30, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(deferred, first);
    let (busted, report) = g.send(&request(&conv), 70, T0 + 2 * MINUTE);
    assert_eq!(report.decision, Decision::Execute, "{report:?}");
    let dropped = output_of(&items(&busted), "call_0");
    assert!(dropped.starts_with("[dropped"), "{dropped}");
    // mc's head, when there is one, comes after Codex's developer message.
    assert_eq!(items(&busted)[0]["id"], "msg_dev");
    // The reasoning before the call is still there, byte for byte.
    assert!(mc_base::codec::anthropic::contains(
        &busted,
        br#""encrypted_content":"gAAAA0+/=="}"#
    ));
    let (again, report) = g.send(&request(&conv), 30, T0 + 3 * MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(again, busted);
}

/// Codex compacting at 180k (its config's window of 200k): 130k tokens are
/// under mc's threshold of the default window (65 % of 272k) but over it of
/// Codex's limit, so mc relieves the context before Codex would compact it.
#[test]
fn with_codex_s_compaction_limit_as_its_window_mc_relieves_before_codex_compacts() {
    let config = TransformConfig {
        relief_drop: true,
        protected_tags: 4,
        ..config()
    };
    let mut conv = conversation(24, 500);
    conv.push(json!({"type": "message", "id": "msg_u1", "role": "user",
                     "content": [{"type": "input_text", "text": "now fix it"}]}));
    let body = request(&conv);
    let default = gate_with(config.clone());
    let mut limited = gate_with(config);
    limited.pass = limited.pass.with_window(180_000);
    for g in [&default, &limited] {
        g.send_at(&body, 20_000, T0);
    }
    let (same, report) = default.send_at(&body, 130_000, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert!(output_of(&items(&same), "call_0").starts_with('§'));
    let (relieved, report) = limited.send_at(&body, 130_000, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Execute, "{report:?}");
    // Relief reclaimed the old outputs outside the protected window.
    let dropped = output_of(&items(&relieved), "call_0");
    assert!(dropped.starts_with("[dropped"), "{dropped}");
    let outputs = |body: &[u8]| -> Vec<String> {
        (0..24)
            .map(|k| output_of(&items(body), &format!("call_{k}")))
            .collect()
    };
    let gone = outputs(&relieved)
        .iter()
        .filter(|o| o.starts_with("[dropped"))
        .count();
    assert!(gone >= 12, "{gone} of 24 outputs reclaimed");
    assert!(outputs(&same).iter().all(|o| o.starts_with('§')));
}

#[test]
fn a_superseded_apply_patch_becomes_a_marker_whose_call_leaves_as_it_came() {
    let g = gate_with(TransformConfig {
        smart_drops: true,
        tool_reclaim: false,
        ..config()
    });
    // 24 patches (Codex's freeform apply_patch) alternating between two
    // files, one tag each: the oldest are outside the protected 20.
    let mut conv = conversation(0, 0);
    for k in 0..24 {
        let file = format!("src/f{}.rs", k % 2);
        let body = format!("-fn step_{k}() {{ old(); }}\n+fn step_{k}() {{ new(); }}\n").repeat(20);
        conv.push(json!({"type": "custom_tool_call", "id": format!("ctc_{k}"), "name": "apply_patch",
            "call_id": format!("call_{k}"),
            "input": format!("*** Begin Patch\n*** Update File: {file}\n@@\n{body}*** End Patch\n")}));
        conv.push(
            json!({"type": "custom_tool_call_output", "call_id": format!("call_{k}"),
            "output": format!("Success. Updated the following files:\nM {file}\n").repeat(20)}),
        );
    }
    conv.push(
        json!({"type": "message", "id": "msg_a", "role": "assistant",
                     "content": [{"type": "output_text", "text": "Done."}]}),
    );
    conv.push(json!({"type": "message", "id": "msg_u1", "role": "user",
                     "content": [{"type": "input_text", "text": "now run the tests"}]}));
    let input = request(&conv);
    g.send(&input, 30, T0);
    let (busted, report) = g.send(&input, 70, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Execute, "{report:?}");
    let sent = items(&busted);
    let output = |call: &str| -> String {
        sent.iter()
            .find(|i| i["type"] == "custom_tool_call_output" && i["call_id"] == call)
            .and_then(|i| i["output"].as_str())
            .unwrap()
            .to_string()
    };
    // The oldest patch of src/f0.rs was patched again: its output is the placeholder.
    assert!(
        output("call_0").starts_with("[dropped §"),
        "{}",
        output("call_0")
    );
    // The newest patch of each file keeps its output.
    for call in ["call_22", "call_23"] {
        assert!(
            output(call).contains("Success."),
            "{call}: {}",
            output(call)
        );
    }
    // Call items are opaque to the pass: each leaves as it came.
    for item in conv.iter().filter(|i| i["type"] == "custom_tool_call") {
        let kept = sent.iter().find(|i| i["id"] == item["id"]).unwrap();
        assert_eq!(kept, item);
    }
    let (again, report) = g.send(&input, 30, T0 + 2 * MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(again, busted);
}

#[test]
fn codex_s_compaction_and_other_side_requests_go_untouched() {
    let g = gate();
    let compaction = include_bytes!("../../../../tests/testdata/codex/04-compaction.body.json");
    let h = headers("compaction", 0);
    let (forward, report) = g.pass.run(&call(&h, compaction, T0)).unwrap();
    assert_eq!(forward, Forward::Untouched);
    assert!(report.is_none());
    let body = request(&conversation(2, 100));
    let mut c = call(&h, &body, T0);
    c.session_id = None;
    assert_eq!(g.pass.run(&c).unwrap().0, Forward::Untouched);
    let turn = headers("turn", 0);
    let mut c = call(&turn, &body, T0);
    c.path = "/openai/models";
    assert_eq!(g.pass.run(&c).unwrap().0, Forward::Untouched);
    c.api = Api::AnthropicMessages;
    c.path = "/openai/responses";
    assert_eq!(g.pass.run(&c).unwrap().0, Forward::Untouched);
    // Nothing of the session was kept for those.
    assert!(g.pass.memory.lock().unwrap().sessions.is_empty());
}

#[test]
fn the_real_codex_turn_gets_tags_and_keeps_its_pairs() {
    let g = gate();
    let body = include_bytes!("../../../../tests/testdata/codex/02-call-output.body.json");
    let (sent, report) = g.send(body, 10, T0);
    assert!(report.tags > 0, "{report:?}");
    assert!(output_of(&items(&sent), "call_1").starts_with('§'));
    assert!(mc_base::codec::anthropic::contains(
        &sent,
        br#""encrypted_content":"gAAAA+enc/1=="}"#
    ));
}

#[test]
fn the_answer_feeds_the_next_pass_and_an_overflow_is_learned() {
    let g = gate();
    let body = request(&conversation(2, 100));
    let h = headers("turn", 0);
    let c = call(&h, &body, T0);
    g.pass.run(&c).unwrap();
    let usage = Usage {
        input: 5000,
        cache_read: 4000,
        cache_write: 0,
        output: 20,
    };
    let answer = Answer {
        status: 200,
        usage: Some(usage),
        error_body: None,
    };
    assert!(!g.pass.learn(&c, &answer).unwrap());
    assert_eq!(
        g.pass.memory.lock().unwrap().sessions[SESSION].usage,
        Some(usage)
    );
    g.pass.run(&c).unwrap();
    let error = br#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#;
    let answer = Answer {
        status: 400,
        usage: None,
        error_body: Some(error),
    };
    assert!(
        g.pass.learn(&c, &answer).unwrap(),
        "the overflow was learned"
    );
    // A new window (Codex compacted) forgets the old window's usage.
    let later = headers("turn", 1);
    g.pass.run(&call(&later, &body, T0 + MINUTE)).unwrap();
    assert_eq!(g.pass.memory.lock().unwrap().sessions[SESSION].usage, None);
}

#[test]
fn each_codex_call_is_recorded_with_its_instructions_and_tool_set() {
    let g = gate();
    g.send(&request(&conversation(3, 400)), 20, T0);
    g.send(&request(&conversation(4, 400)), 21, T0 + MINUTE);
    // The same conversation with one more tool declared.
    let mut more: Value = serde_json::from_slice(&request(&conversation(5, 400))).unwrap();
    more["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "function", "name": "apply_patch", "parameters": {"type": "object"}}));
    g.send(&serde_json::to_vec(&more).unwrap(), 22, T0 + 2 * MINUTE);
    let store = Store::open(&g.db, &StoreOptions::default()).unwrap();
    let session = mc_base::domain::sessions::find_session(store.conn(), HARNESS, SESSION)
        .unwrap()
        .unwrap();
    type Row = (Option<String>, Option<String>, Option<i64>, Option<i64>);
    let rows: Vec<Row> = store
        .conn()
        .prepare(
            "SELECT system_print, tools_print, system_tokens, tools_tokens
             FROM calls WHERE session = ?1 ORDER BY id",
        )
        .unwrap()
        .query_map([session.id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(rows.len(), 3);
    assert!(
        rows.iter()
            .all(|r| r.2.is_some_and(|n| n > 0) && r.3.is_some_and(|n| n > 0)),
        "{rows:?}"
    );
    assert_eq!(rows[0].0, rows[2].0, "the same instructions");
    assert_eq!(rows[0].1, rows[1].1);
    assert_ne!(rows[1].1, rows[2].1, "a tool was added");
    assert!(rows[2].3 > rows[1].3);
}

#[test]
fn each_turn_gets_the_usage_of_its_own_response_completed() {
    let g = gate();
    let h = headers("turn", 0);
    let completed = |cached: u64| Answer {
        status: 200,
        usage: Some(Usage {
            input: 900,
            cache_read: cached,
            cache_write: 0,
            output: 120,
        }),
        error_body: None,
    };
    let reads = || -> Vec<Option<i64>> {
        let store = Store::open(&g.db, &StoreOptions::default()).unwrap();
        store
            .conn()
            .prepare("SELECT cache_read FROM calls ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    let first = request(&conversation(2, 300));
    let second = request(&conversation(3, 300));
    g.pass.run(&call(&h, &first, T0)).unwrap();
    assert_eq!(reads(), [None]);
    g.pass.learn(&call(&h, &first, T0), &completed(0)).unwrap();
    assert_eq!(
        reads(),
        [Some(0)],
        "the turn's own row, before any next turn"
    );
    g.pass.run(&call(&h, &second, T0 + MINUTE)).unwrap();
    g.pass
        .learn(&call(&h, &second, T0 + MINUTE), &completed(4_096))
        .unwrap();
    assert_eq!(reads(), [Some(0), Some(4_096)]);
}
