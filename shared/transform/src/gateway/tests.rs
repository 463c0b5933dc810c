//! The gateway's pass against Claude Code-shaped requests: a real SQLite
//! file, a fixed clock, bodies written the way Claude Code writes them
//! (compact JSON, its three breakpoints, thinking before each tool call).

use serde_json::{Value, json};

use super::*;
use crate::report::{Bust, Decision};
use crate::{ReduceRequest, reduce};

const T0: i64 = 1_800_000_000_000;
const MINUTE: i64 = 60_000;

fn config() -> TransformConfig {
    TransformConfig {
        relief_drop: false,
        ..TransformConfig::default()
    }
}

/// `turns` tool steps after a first prompt; each result `size` bytes.
fn conversation(turns: usize, size: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>context</system-reminder>"},
        {"type": "text", "text": "find the bug in the parser"}]})];
    for k in 0..turns {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": format!("step {k}"), "signature": format!("sig{k}+/==")},
            {"type": "text", "text": format!("Reading file {k}.")},
            {"type": "tool_use", "id": format!("toolu_{k}"), "name": "Read",
             "input": {"file_path": format!("src/f{k}.rs")}}]}));
        let line = format!("{k}: fn item() {{ body }}\n");
        let output: String = line.repeat(size / line.len() + 1);
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{k}"), "content": output}]}));
    }
    messages
}

/// The request Claude Code sends for `messages`: its breakpoint on the last block.
fn request(messages: &[Value]) -> Vec<u8> {
    let mut messages = messages.to_vec();
    if let Some(block) = messages
        .last_mut()
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|b| b.last_mut())
    {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
    serde_json::to_vec(&json!({
        "model": "claude-sonnet-4-5",
        "messages": messages,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "text", "text": "Instructions.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
        "metadata": {"user_id": "u"},
        "max_tokens": 32000,
        "stream": true
    }))
    .unwrap()
}

struct Gate {
    pass: TransformPass,
    db: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn gate() -> Gate {
    gate_with(config())
}

fn gate_with(config: TransformConfig) -> Gate {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mc.db");
    let pass = TransformPass::open(&db, &StoreOptions::default(), config).unwrap();
    Gate {
        pass,
        db,
        _dir: dir,
    }
}

fn headers(agent: Option<&str>) -> Vec<(String, String)> {
    let mut h = vec![("anthropic-version".to_string(), "2023-06-01".to_string())];
    if let Some(agent) = agent {
        h.push(("x-claude-code-agent-id".into(), agent.into()));
    }
    h
}

fn call<'a>(
    session: Option<&'a str>,
    path: &'a str,
    headers: &'a [(String, String)],
    body: &'a [u8],
    now_ms: i64,
) -> Call<'a> {
    Call {
        api: Api::AnthropicMessages,
        harness: "claude-code",
        session_id: session,
        path,
        headers,
        body,
        now_ms,
    }
}

impl Gate {
    /// One call of `session` at `percent` of the window (the previous
    /// answer's usage), answered; the forwarded body and the report.
    fn send(&self, session: &str, body: &[u8], percent: u64, now_ms: i64) -> (Vec<u8>, PassReport) {
        let h = headers(None);
        let c = call(Some(session), "/v1/messages?beta=true", &h, body, now_ms);
        // What the previous answer reported, as the server would have told us.
        if let Some(kept) = memory::lock_memory(&self.pass.memory)
            .sessions
            .get_mut(session)
        {
            kept.usage = Some(Usage {
                input: DEFAULT_WINDOW * percent / 100,
                ..Usage::default()
            });
        }
        let (forward, report) = self.pass.run(&c).unwrap();
        let sent = match forward {
            Forward::Untouched => body.to_vec(),
            Forward::Body(b) | Forward::Fallback(b) => b,
        };
        assert_pairs(&sent);
        (
            sent,
            report.expect("a main-conversation call runs the pass"),
        )
    }

    fn queue(&self, session: &str, drop: &[i64]) {
        let mut store = Store::open(&self.db, &StoreOptions::default()).unwrap();
        let request = ReduceRequest {
            harness: HARNESS.into(),
            session_id: session.into(),
            drop: drop.to_vec(),
        };
        let queued = reduce(&mut store, &request, &config(), T0).unwrap().queued;
        assert_eq!(queued, drop);
    }
}

/// Every `tool_result` answers a `tool_use` of the message just before it,
/// and every `tool_use` is answered in the message after it.
/// And Anthropic's breakpoint rules hold: at most four, 1-hour ones first.
fn assert_pairs(body: &[u8]) {
    let points = Request::parse(body).unwrap().breakpoints();
    assert!(points.len() <= anthropic::MAX_BREAKPOINTS, "{points:?}");
    assert!(
        points.windows(2).all(|w| w[0].long || !w[1].long),
        "{points:?}"
    );
    let v: Value = serde_json::from_slice(body).unwrap();
    let messages = v["messages"].as_array().unwrap();
    let ids = |m: &Value, kind: &str, key: &str| -> Vec<String> {
        m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == kind)
            .map(|b| b[key].as_str().unwrap().to_string())
            .collect()
    };
    for (i, m) in messages.iter().enumerate() {
        let results = ids(m, "tool_result", "tool_use_id");
        let calls = i
            .checked_sub(1)
            .map(|p| ids(&messages[p], "tool_use", "id"))
            .unwrap_or_default();
        for r in &results {
            assert!(
                calls.contains(r),
                "result {r} of message {i} without its call"
            );
        }
        let uses = ids(m, "tool_use", "id");
        let answered = messages
            .get(i + 1)
            .map(|n| ids(n, "tool_result", "tool_use_id"));
        if let Some(answered) = answered {
            for u in &uses {
                assert!(
                    answered.contains(u),
                    "call {u} of message {i} without its result"
                );
            }
        }
    }
}

fn sent_messages(body: &[u8]) -> Vec<Value> {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["messages"].as_array().unwrap().clone()
}

/// The `tool_result` block answering `call`.
fn result_of(messages: &[Value], call: &str) -> Value {
    messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == call)
        .unwrap()
}

fn tag_of(text: &str) -> i64 {
    let rest = text.strip_prefix('§').unwrap();
    rest.split('§').next().unwrap().parse().unwrap()
}

#[test]
fn tags_reach_the_wire_and_thinking_leaves_byte_for_byte() {
    let g = gate();
    let input = request(&conversation(3, 400));
    let (sent, report) = g.send("s1", &input, 30, T0);
    assert!(report.tags > 0, "{report:?}");
    let messages = sent_messages(&sent);
    let result = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .unwrap();
    assert!(
        result["content"].as_str().unwrap().starts_with('§'),
        "{result}"
    );
    // Thinking, tool calls and the system leave as their input bytes.
    let req = Request::parse(&input).unwrap();
    for (i, item) in req.items.iter().enumerate() {
        for span in &item.blocks {
            let raw = req.bytes(*span);
            if anthropic::contains(raw, b"\"thinking\"")
                || anthropic::contains(raw, b"\"tool_use\"")
            {
                assert!(
                    anthropic::contains(&sent, raw),
                    "message {i}: a block re-serialised"
                );
            }
        }
    }
    assert!(anthropic::contains(&sent, req.bytes(req.system.unwrap())));
}

#[test]
fn a_defer_request_repeats_the_previous_forwarded_bytes() {
    let g = gate();
    let mut messages = conversation(4, 300);
    let (first, _) = g.send("s1", &request(&messages), 30, T0);
    let before = Request::parse(&first).unwrap();
    messages.extend(conversation(5, 300).split_off(9));
    let (second, report) = g.send("s1", &request(&messages), 30, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(report.bust, Bust::None, "{report:?}");
    let after = Request::parse(&second).unwrap();
    // Every message but the one whose breakpoint Claude Code moved away.
    let same = before.items.len() - 1;
    for i in 0..same {
        assert_eq!(
            before.item_bytes(i),
            after.item_bytes(i),
            "message {i} changed"
        );
    }
    assert_eq!(after.items.len(), before.items.len() + 2);
}

#[test]
fn drops_wait_for_a_busting_request_and_replay_after() {
    let g = gate();
    let mut messages = conversation(24, 500);
    // A finished turn and a new prompt: not mid-turn, so a bust may happen.
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Found it."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "now fix it"}]}));
    let (first, _) = g.send("s1", &request(&messages), 30, T0);
    let sent = sent_messages(&first);
    let tag = tag_of(result_of(&sent, "toolu_0")["content"].as_str().unwrap());
    g.queue("s1", &[tag]);
    // Queued, not applied: the prefix stays.
    let (deferred, report) = g.send("s1", &request(&messages), 30, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(deferred, first);
    // A busting request applies it; the call keeps its skeleton.
    let (busted, report) = g.send("s1", &request(&messages), 70, T0 + 2 * MINUTE);
    assert_eq!(report.decision, Decision::Execute, "{report:?}");
    let sent = sent_messages(&busted);
    let dropped = result_of(&sent, "toolu_0")["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(dropped.starts_with("[dropped"), "{dropped}");
    // And it is replayed byte for byte on the next (deferring) request.
    let (again, report) = g.send("s1", &request(&messages), 30, T0 + 3 * MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(again, busted);
}

#[test]
fn a_superseded_edit_becomes_a_marker_whose_call_leaves_as_it_came() {
    let g = gate_with(TransformConfig {
        smart_drops: true,
        tool_reclaim: false,
        ..config()
    });
    // Twelve edits alternating between two files, then a new prompt.
    let mut messages =
        vec![json!({"role": "user", "content": [{"type": "text", "text": "refactor the parser"}]})];
    for k in 0..12 {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Editing {k}.")},
            {"type": "tool_use", "id": format!("toolu_{k}"), "name": "Edit",
             "input": {"file_path": format!("src/f{}.rs", k % 2),
                       "old_string": format!("fn step_{k}() {{ old(); }}\n").repeat(20),
                       "new_string": format!("fn step_{k}() {{ new(); }}\n").repeat(20)}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{k}"),
             "content": format!("The file src/f{}.rs has been updated.\n", k % 2).repeat(20)}]}));
    }
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]}));
    messages
        .push(json!({"role": "user", "content": [{"type": "text", "text": "now run the tests"}]}));
    let input = request(&messages);
    g.send("s1", &input, 30, T0);
    let (busted, report) = g.send("s1", &input, 70, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Execute, "{report:?}");
    let sent = sent_messages(&busted);
    // The oldest edit of src/f0.rs was edited again: its result is the placeholder.
    let marker = result_of(&sent, "toolu_0")["content"].clone();
    assert!(
        marker.as_str().unwrap().starts_with("[dropped §"),
        "{marker}"
    );
    // The newest edit of each file keeps its result.
    for call in ["toolu_10", "toolu_11"] {
        let kept = result_of(&sent, call)["content"].clone();
        assert!(
            kept.as_str().unwrap().contains("has been updated"),
            "{call}: {kept}"
        );
    }
    // A tool_use block is opaque to the pass (the codec maps only the
    // result): the call leaves as it came, its arguments whole.
    let req = Request::parse(&input).unwrap();
    for item in &req.items {
        for span in &item.blocks {
            let raw = req.bytes(*span);
            if anthropic::contains(raw, b"\"tool_use\"") {
                assert!(
                    anthropic::contains(&busted, raw),
                    "a tool_use re-serialised"
                );
            }
        }
    }
    // The next, deferring request replays the marker byte for byte.
    let (again, report) = g.send("s1", &input, 30, T0 + 2 * MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(again, busted);
}

#[test]
fn side_requests_go_untouched() {
    let g = gate();
    let h = headers(None);
    let main = request(&conversation(2, 100));
    let mut title: Value = serde_json::from_slice(&main).unwrap();
    title.as_object_mut().unwrap().remove("tools");
    let title = serde_json::to_vec(&title).unwrap();
    let mut compact = conversation(2, 100);
    compact.push(json!({"role": "user", "content": [{"type": "text",
        "text": format!("{COMPACTION_PROMPT}, paying close attention")}]}));
    let compact_then_system = {
        // 2.1.197 may end the compaction call on a system message (its
        // skills list) after the summary prompt.
        let mut m = compact.clone();
        m.push(json!({"role": "system", "content": "The following skills are available"}));
        request(&m)
    };
    let compact = request(&compact);
    for (session, path, body) in [
        (Some("s1"), "/v1/messages", compact_then_system.as_slice()),
        (Some("s1"), "/v1/messages", title.as_slice()),
        (
            Some("s1"),
            "/v1/messages/count_tokens?beta=true",
            main.as_slice(),
        ),
        (Some("s1"), "/v1/messages", compact.as_slice()),
        (None, "/v1/messages", main.as_slice()),
    ] {
        let (forward, report) = g.pass.run(&call(session, path, &h, body, T0)).unwrap();
        assert_eq!(forward, Forward::Untouched, "{path}");
        assert!(report.is_none());
    }
    // Not JSON: an error, which the server turns into an untouched forward.
    assert!(
        g.pass
            .request(&call(Some("s1"), "/v1/messages", &h, b"{nope", T0))
            .is_err()
    );
}

#[test]
fn two_sessions_and_a_subagent_stay_apart() {
    let g = gate();
    let a = conversation(3, 300);
    let b = conversation(2, 500);
    let (a1, _) = g.send("A", &request(&a), 30, T0);
    let (_b1, _) = g.send("B", &request(&b), 30, T0);
    // A subagent of A: its own session, in subagent mode.
    let h = headers(Some("agent7"));
    let sub = request(&conversation(1, 100));
    g.pass
        .run(&call(Some("A"), "/v1/messages", &h, &sub, T0))
        .unwrap();
    let (a2, report) = g.send("A", &request(&a), 30, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer);
    assert_eq!(a2, a1);
    let store = Store::open(&g.db, &StoreOptions::default()).unwrap();
    let mut sessions: Vec<String> = store
        .conn()
        .prepare("SELECT session_id FROM sessions WHERE harness = 'claude-code' ORDER BY 1")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    sessions.sort();
    assert_eq!(sessions, ["A", "A/agent/agent7", "B"]);
}

#[test]
fn claude_codes_own_compaction_is_followed_without_a_bust_of_ours() {
    let g = gate();
    let messages = conversation(5, 500);
    g.send("s1", &request(&messages), 30, T0);
    // Claude Code compacted: a summary and the next prompt replace the history.
    let compacted = vec![
        json!({"role": "user", "content": [{"type": "text",
            "text": "This session is being continued from a previous conversation. Summary: parser bug."}]}),
        json!({"role": "user", "content": [{"type": "text", "text": "go on"}]}),
    ];
    let (first, report) = g.send("s1", &request(&compacted), 30, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert!(
        sent_messages(&first)
            .iter()
            .any(|m| m.to_string().contains("parser bug"))
    );
    let mut next = compacted.clone();
    next.extend(conversation(1, 200).split_off(1));
    let (second, report) = g.send("s1", &request(&next), 30, T0 + 2 * MINUTE);
    assert_eq!(report.bust, Bust::None, "{report:?}");
    let (a, b) = (
        Request::parse(&first).unwrap(),
        Request::parse(&second).unwrap(),
    );
    assert_eq!(a.item_bytes(0), b.item_bytes(0));
}

#[test]
fn the_answer_feeds_the_next_pass() {
    let g = gate();
    let h = headers(None);
    let body = request(&conversation(2, 100));
    let c = call(Some("s1"), "/v1/messages", &h, &body, T0);
    let (_, report) = g.pass.run(&c).unwrap();
    assert!(report.unwrap().usage_percent < 10.0);
    let usage = Usage {
        input: 10,
        cache_read: 150_000,
        cache_write: 2_000,
        output: 300,
    };
    let ok = Answer {
        status: 200,
        usage: Some(usage),
        error_body: None,
    };
    assert!(!g.pass.learn(&c, &ok).unwrap());
    let c = call(Some("s1"), "/v1/messages", &h, &body, T0 + MINUTE);
    let (_, report) = g.pass.run(&c).unwrap();
    assert!(report.unwrap().usage_percent > 70.0);
    // A context overflow teaches the limit; another error does not.
    let overflow = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
    let other = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let answer = |body: &'static [u8]| Answer {
        status: 400,
        usage: None,
        error_body: Some(body),
    };
    assert!(!g.pass.learn(&c, &answer(other)).unwrap());
    let c = call(Some("s1"), "/v1/messages", &h, &body, T0 + 2 * MINUTE);
    g.pass.run(&c).unwrap();
    assert!(g.pass.learn(&c, &answer(overflow)).unwrap());
    // An answer to a call the pass never worked on teaches nothing.
    let side = call(Some("s1"), "/v1/messages/count_tokens", &h, b"{}", T0);
    assert!(!g.pass.learn(&side, &answer(overflow)).unwrap());
}

#[test]
fn each_gateway_call_is_recorded_with_its_system_prompt_and_tool_set() {
    let g = gate();
    let messages = conversation(3, 400);
    g.send("s-rec", &request(&messages), 20, T0);
    g.send("s-rec", &request(&conversation(4, 400)), 21, T0 + MINUTE);
    // The same conversation with one more tool declared.
    let mut more: Value = serde_json::from_slice(&request(&conversation(5, 400))).unwrap();
    more["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "Write", "input_schema": {"type": "object"}}));
    g.send(
        "s-rec",
        &serde_json::to_vec(&more).unwrap(),
        22,
        T0 + 2 * MINUTE,
    );
    let store = Store::open(&g.db, &StoreOptions::default()).unwrap();
    let session = mc_base::domain::sessions::find_session(store.conn(), HARNESS, "s-rec")
        .unwrap()
        .unwrap();
    type Row = (
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );
    let rows: Vec<Row> = store
        .conn()
        .prepare(
            "SELECT system_print, tools_print, system_tokens, tools_tokens, input
             FROM calls WHERE session = ?1 ORDER BY id",
        )
        .unwrap()
        .query_map([session.id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(rows.len(), 3);
    assert!(
        rows.iter()
            .all(|r| r.2.is_some_and(|n| n > 0) && r.3.is_some_and(|n| n > 0))
    );
    assert_eq!(rows[0].0, rows[2].0, "the same system prompt");
    assert_eq!(rows[0].1, rows[1].1);
    assert_ne!(rows[1].1, rows[2].1, "a tool was added");
    assert!(rows[2].3 > rows[1].3);
    // The usage each next call brought is on the call it belongs to.
    assert_eq!(
        rows[0].4,
        Some(i64::try_from(DEFAULT_WINDOW * 21 / 100).unwrap())
    );
}

impl Gate {
    /// Publish one compartment over the first `end` messages of session `s`,
    /// as the historian does.
    fn publish(&self, s: &str, end: i64) {
        use mc_history::store::{self as history, NewCompartment};
        let mut store = Store::open(&self.db, &StoreOptions::default()).unwrap();
        let session: i64 = store
            .conn()
            .query_row("SELECT id FROM sessions WHERE session_id = ?1", [s], |r| {
                r.get(0)
            })
            .unwrap();
        let id_of = |o: i64| -> String {
            store
                .conn()
                .query_row(
                    "SELECT message_id FROM messages WHERE session = ?1 AND ordinal = ?2",
                    [session, o],
                    |r| r.get(0),
                )
                .unwrap()
        };
        let c = NewCompartment {
            start_ordinal: 1,
            end_ordinal: end,
            start_message_id: id_of(1),
            end_message_id: id_of(end),
            start_ms: None,
            end_ms: None,
            title: "Parser hunt".into(),
            tiers: [
                "Parser hunt: the whole story".into(),
                "Parser hunt: shorter".into(),
                "Parser hunt: short".into(),
                "Parser hunt".into(),
            ],
            importance: 50,
            episode: Some("debugging".into()),
        };
        store
            .write(|tx| history::publish_compartments(tx, session, &[c], T0))
            .unwrap();
    }
}

#[test]
fn claude_codes_compaction_brings_a_fold_the_head_lacks_in_once() {
    let g = gate();
    let mut messages = conversation(5, 500);
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Found it."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "now fix it"}]}));
    g.send("s1", &request(&messages), 30, T0);
    // The historian folds; the head waits for a bust.
    g.publish("s1", 4);
    let (waiting, report) = g.send("s1", &request(&messages), 30, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert!(!String::from_utf8_lossy(&waiting).contains("Parser hunt"));
    // Claude Code compacts: everything after the head is new bytes anyway,
    // so the head takes the fold now, once.
    let compacted = vec![
        json!({"role": "user", "content": [{"type": "text",
            "text": "This session is being continued from a previous conversation. Summary: parser bug."}]}),
        json!({"role": "user", "content": [{"type": "text", "text": "go on"}]}),
    ];
    let (first, report) = g.send("s1", &request(&compacted), 30, T0 + 2 * MINUTE);
    assert_eq!(
        (report.decision, report.reason),
        (Decision::Execute, "history_rewritten"),
        "{report:?}"
    );
    let text = String::from_utf8_lossy(&first).to_string();
    assert_eq!(
        text.matches("Parser hunt: the whole story").count(),
        1,
        "{text}"
    );
    // Then it is replayed, and a compaction with nothing new to show is no bust.
    let mut next = compacted.clone();
    next.push(json!({"role": "assistant", "content": [{"type": "text", "text": "On it."}]}));
    next.push(json!({"role": "user", "content": [{"type": "text", "text": "and?"}]}));
    let (second, report) = g.send("s1", &request(&next), 30, T0 + 3 * MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert_eq!(
        Request::parse(&second).unwrap().item_bytes(0),
        Request::parse(&first).unwrap().item_bytes(0)
    );
    let again =
        vec![json!({"role": "user", "content": [{"type": "text", "text": "Summary two."}]})];
    let (_, report) = g.send("s1", &request(&again), 30, T0 + 4 * MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
}

#[test]
fn a_failed_pass_sends_the_last_shape_and_the_new_tail() {
    let g = gate();
    let mut messages = conversation(24, 500);
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Found it."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "now fix it"}]}));
    let (first, _) = g.send("s1", &request(&messages), 30, T0);
    let tag = tag_of(
        result_of(&sent_messages(&first), "toolu_0")["content"]
            .as_str()
            .unwrap(),
    );
    g.queue("s1", &[tag]);
    let (shaped, report) = g.send("s1", &request(&messages), 70, T0 + MINUTE);
    assert_eq!(report.decision, Decision::Execute, "{report:?}");
    let before = sent_messages(&shaped);

    // The fault: another process holds the database; the pass cannot run.
    let blocker = rusqlite::Connection::open(&g.db).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    g.pass
        .store
        .lock()
        .unwrap()
        .set_busy_timeout(std::time::Duration::ZERO)
        .unwrap();
    let mut grown = messages.clone();
    for turn in 0..2 {
        grown.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("Step {turn}.")}]}));
        grown.push(
            json!({"role": "user", "content": [{"type": "text", "text": format!("more {turn}")}]}),
        );
        let body = request(&grown);
        let h = headers(None);
        let c = call(
            Some("s1"),
            "/v1/messages",
            &h,
            &body,
            T0 + (2 + turn as i64) * MINUTE,
        );
        let (forward, report) = g.pass.run(&c).unwrap();
        assert!(report.is_none());
        let Forward::Fallback(sent) = forward else {
            panic!("turn {turn}: not mc's shape: {forward:?}");
        };
        assert_pairs(&sent);
        let after = sent_messages(&sent);
        // mc's shape, the dropped output still dropped, then the new tail as it came.
        assert_eq!(after.len(), before.len() + 2 * (turn + 1));
        let strip = |m: &Value| {
            let mut m = m.clone();
            for block in m["content"].as_array_mut().into_iter().flatten() {
                if let Some(block) = block.as_object_mut() {
                    block.remove("cache_control");
                }
            }
            m
        };
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert_eq!(strip(a), strip(b), "turn {turn}: message {i} changed");
        }
        assert!(
            result_of(&after, "toolu_0")["content"]
                .as_str()
                .unwrap()
                .starts_with("[dropped")
        );
        let sent_tail = &after[before.len()..];
        let came = sent_messages(&body);
        assert_eq!(sent_tail, &came[came.len() - sent_tail.len()..]);
    }
    // A request that does not extend the last shape goes as it came.
    let other = request(&conversation(2, 100));
    let h = headers(None);
    let c = call(Some("s1"), "/v1/messages", &h, &other, T0 + 5 * MINUTE);
    assert!(g.pass.run(&c).is_err());

    // The database back, the pass runs again.
    blocker.execute_batch("ROLLBACK").unwrap();
    let (back, report) = g.send("s1", &request(&grown), 30, T0 + 6 * MINUTE);
    assert_eq!(report.decision, Decision::Defer, "{report:?}");
    assert!(String::from_utf8_lossy(&back).contains("§"));
}

#[test]
fn a_panic_in_the_pass_leaves_every_later_request_to_mc_s_pass() {
    // `g` meets a bug; `reference` gets the same calls, without it.
    let (g, reference) = (gate(), gate());
    let mut messages = conversation(6, 400);
    let first = request(&messages);
    for gate in [&g, &reference] {
        for session in ["s1", "s2"] {
            gate.send(session, &first, 30, T0);
        }
    }
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Found it."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "now fix it"}]}));
    let next = request(&messages);
    // Bad input first: not JSON, and the request cut halfway. Errors (the
    // server sends them untouched) that change nothing kept.
    let h = headers(None);
    for bad in [&b"{nope"[..], &next[..next.len() / 2]] {
        let c = call(Some("s1"), "/v1/messages?beta=true", &h, bad, T0 + MINUTE);
        assert!(g.pass.request(&c).is_err());
    }

    // The bug: the pass panics inside its transaction (which had deleted the
    // per-call record), holding the memory and the store. The server catches
    // it and sends the original bytes (`a_failing_or_panicking_pass_sends_the_original_bytes`).
    g.pass.arm_panic();
    let c = call(Some("s1"), "/v1/messages?beta=true", &h, &next, T0 + MINUTE);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.pass.request(&c)));
    assert!(outcome.is_err(), "the pass was to panic");
    assert!(g.pass.memory.is_poisoned() && g.pass.store.is_poisoned());
    let rows = |db: &std::path::Path| -> i64 {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(rows(&g.db), 2, "the panicked transaction was rolled back");

    // Claude Code's retry, and the other session: through mc's pass, as if
    // the panic had never been.
    for session in ["s1", "s2"] {
        let (sent, report) = g.send(session, &next, 30, T0 + MINUTE);
        let (expected, expected_report) = reference.send(session, &next, 30, T0 + MINUTE);
        assert_eq!(report.decision, expected_report.decision, "{session}");
        assert!(
            String::from_utf8_lossy(&sent).contains("§"),
            "{session}: no tags"
        );
        assert!(
            sent == expected,
            "{session}: not the bytes of a pass that never panicked"
        );
    }
    assert!(!g.pass.memory.is_poisoned() && !g.pass.store.is_poisoned());
    assert_eq!(rows(&g.db), rows(&reference.db));
}

/// A search that always finds one memory about the staging database.
#[derive(Debug)]
struct Staging;

impl crate::recall::Recall for Staging {
    fn find(
        &self,
        _conn: &rusqlite::Connection,
        _ask: &crate::recall::Ask<'_>,
    ) -> Result<Vec<crate::recall::Found>> {
        Ok(vec![crate::recall::Found {
            kind: crate::recall::Kind::Memory,
            name: "memory #3".into(),
            expand: None,
            text: "The staging database listens on port 5433.".into(),
        }])
    }
}

/// The text blocks of the last user message that has text.
fn prompt_texts(messages: &[Value], prompt: &str) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str().map(str::to_string))
        .filter(|t| t.contains(prompt))
        .collect()
}

#[test]
fn a_new_prompt_gets_its_recall_hint_through_the_gateway_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mc.db");
    // Claude Code's SessionStart hook names the session's project.
    let mut store = Store::open(&db, &StoreOptions::default()).unwrap();
    store
        .write(|tx| {
            mc_base::domain::sessions::create_session(tx, HARNESS, "s1", false, Some("dir:p"), T0)
                .map(|_| ())
        })
        .unwrap();
    let g = Gate {
        pass: TransformPass::open(
            &db,
            &StoreOptions::default(),
            TransformConfig {
                recall_hints: true,
                ..config()
            },
        )
        .unwrap()
        .with_recall(std::sync::Arc::new(Staging)),
        db,
        _dir: dir,
    };
    let prompt = "which port does the staging database listen on?";
    let mut messages = conversation(2, 400);
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Found it."}]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>reminded</system-reminder>"},
        {"type": "text", "text": prompt}]}));
    let (sent, report) = g.send("s1", &request(&messages), 30, T0);
    assert_eq!(report.recall, Some("hint"), "{report:?}");
    let shown = prompt_texts(&sent_messages(&sent), prompt);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0].contains("\n\n<ctx-search-hint>\n"), "{shown:?}");
    assert!(shown[0].contains("- memory #3: The staging database listens on port 5433."));

    // The turn goes on: the same hint, the same bytes.
    messages.push(json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {"file_path": "db.toml"}}]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "port = 5433"}]}));
    let (again, report) = g.send("s1", &request(&messages), 31, T0 + MINUTE / 2);
    assert_eq!(report.recall, None, "decided once");
    assert_eq!(report.bust, Bust::None);
    assert_eq!(prompt_texts(&sent_messages(&again), prompt), shown);
}

#[test]
fn each_call_gets_the_usage_of_its_own_answer_when_its_stream_ends() {
    let g = gate();
    let h = headers(None);
    let usage = |read: u64| Usage {
        input: 40,
        cache_read: read,
        cache_write: 3_000,
        output: 200,
    };
    let answered = |read: u64| Answer {
        status: 200,
        usage: Some(usage(read)),
        error_body: None,
    };
    // (cache read, output) of each recorded call, oldest first.
    let rows = || -> Vec<Option<(i64, i64)>> {
        let store = Store::open(&g.db, &StoreOptions::default()).unwrap();
        store
            .conn()
            .prepare("SELECT cache_read, output FROM calls ORDER BY id")
            .unwrap()
            .query_map([], |r| {
                Ok(match (r.get(0)?, r.get(1)?) {
                    (Some(read), Some(out)) => Some((read, out)),
                    _ => None,
                })
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    let body = |turns: usize| request(&conversation(turns, 300));
    let bodies: Vec<Vec<u8>> = (2..6).map(body).collect();
    let calls: Vec<Call<'_>> = bodies
        .iter()
        .enumerate()
        .map(|(k, b)| call(Some("s-own"), "/v1/messages", &h, b, T0 + k as i64 * MINUTE))
        .collect();
    for (k, read) in [0u64, 20_000, 23_000].into_iter().enumerate() {
        g.pass.run(&calls[k]).unwrap();
        assert_eq!(rows().last(), Some(&None), "call {k} before its answer");
        assert!(!g.pass.learn(&calls[k], &answered(read)).unwrap());
        // On its own row as soon as its answer ended: no next call needed.
        assert_eq!(
            rows().last(),
            Some(&Some((i64::try_from(read).unwrap(), 200))),
            "call {k} after its answer"
        );
    }
    // The next call brings the last answer's usage as its sample: nothing moves.
    g.pass.run(&calls[3]).unwrap();
    assert_eq!(
        rows(),
        [
            Some((0, 200)),
            Some((20_000, 200)),
            Some((23_000, 200)),
            None
        ]
    );
    // An answer that comes after a later call's pass still lands on its call.
    let late = body(7);
    let later = body(8);
    let late_call = call(Some("s-own"), "/v1/messages", &h, &late, T0 + 5 * MINUTE);
    let later_call = call(Some("s-own"), "/v1/messages", &h, &later, T0 + 6 * MINUTE);
    g.pass.run(&late_call).unwrap();
    g.pass.run(&later_call).unwrap();
    g.pass.learn(&late_call, &answered(26_000)).unwrap();
    let now = rows();
    assert_eq!(now[4], Some((26_000, 200)), "{now:?}");
    assert_eq!(now[5], None, "{now:?}");
    // A failed answer, or one without usage, writes nothing.
    let failed = Answer {
        status: 529,
        usage: None,
        error_body: Some(br#"{"type":"error","error":{"type":"overloaded_error"}}"#),
    };
    g.pass.learn(&later_call, &failed).unwrap();
    assert_eq!(rows()[5], None);
}
