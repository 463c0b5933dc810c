use super::*;

/// A request shaped like Claude Code's: three system blocks, a tool, a
/// thinking turn with a tool call and its result, breakpoints on system[1],
/// system[2] and the last message.
pub(crate) fn claude_like() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "user", "content": "find the bug"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "look at main", "signature": "c2ln+/=="},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "src/main.rs"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn main() {}\n", "zz_future": 1},
                {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}
            ]}
        ],
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "text", "text": "Long instructions.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ],
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
        "metadata": {"user_id": "u"},
        "max_tokens": 32000,
        "thinking": {"type": "adaptive"},
        "stream": true
    })
}

fn body(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

fn decoded(req: &Request<'_>) -> Vec<Message> {
    (0..req.items.len())
        .map(|i| req.decode(i, &req.message_id(i), "s", Some(5)))
        .collect()
}

#[test]
fn parses_messages_and_blocks_as_spans() {
    let b = body(&claude_like());
    let req = Request::parse(&b).unwrap();
    assert_eq!(req.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(req.tools, 1);
    assert_eq!(req.items.len(), 3);
    assert!(req.items[0].text_content);
    assert_eq!(req.items[1].blocks.len(), 3);
    let thinking = req.bytes(req.items[1].blocks[0]);
    assert!(thinking.starts_with(br#"{"type":"thinking""#));
}

#[test]
fn the_model_maps_text_tools_and_opaque_blocks() {
    let b = body(&claude_like());
    let req = Request::parse(&b).unwrap();
    let msgs = decoded(&req);
    assert_eq!(msgs[0].parts[0].text(), Some("find the bug"));
    assert_eq!(msgs[1].finish(), Some("tool-calls"));
    assert_eq!(msgs[1].completed_ms(), Some(5));
    assert_eq!(msgs[0].created_ms(), None);
    assert_eq!(msgs[1].parts[0].kind, PartKind::Other);
    assert_eq!(msgs[1].parts[1].text(), Some("Reading."));
    let tool = &msgs[2].parts[0];
    assert_eq!(tool.kind, PartKind::Tool);
    assert_eq!(tool.call_id(), Some("toolu_1"));
    assert_eq!(tool.tool_name(), Some("Read"));
    assert_eq!(tool.tool_output(), Some("fn main() {}\n"));
    assert_eq!(
        tool.tool_input(),
        Some(&json!({"file_path": "src/main.rs"}))
    );
}

#[test]
fn an_unchanged_request_assembles_to_its_own_bytes() {
    // Whitespace and key order of a hand-written body survive too.
    let b = b"{ \"model\": \"m\", \"messages\": [ {\"content\": \"hi\",  \"role\": \"user\"} ] }";
    let req = Request::parse(b).unwrap();
    let msgs = decoded(&req);
    let bytes: Vec<Vec<u8>> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| req.encode(i, m))
        .collect();
    assert_eq!(bytes[0], req.item_bytes(0));
    assert_eq!(req.assemble(&[Piece::Original(0)]), b.to_vec());
}

#[test]
fn a_changed_text_rewrites_only_its_block() {
    let b = body(&claude_like());
    let req = Request::parse(&b).unwrap();
    let mut msgs = decoded(&req);
    msgs[1].parts[1].set_text("§3§ Reading.".into());
    let out = req.encode(1, &msgs[1]);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(r#""text":"§3§ Reading.""#), "{text}");
    // The thinking block and the tool call are the input's bytes.
    for k in [0, 2] {
        let raw = std::str::from_utf8(req.bytes(req.items[1].blocks[k])).unwrap();
        assert!(text.contains(raw), "block {k} re-serialised: {text}");
    }
}

#[test]
fn a_dropped_result_keeps_its_skeleton_and_unknown_fields() {
    let b = body(&claude_like());
    let req = Request::parse(&b).unwrap();
    let mut msgs = decoded(&req);
    // Removed whole: the pair's skeleton stays.
    let tool = msgs[2].parts.remove(0);
    let out: Value = serde_json::from_slice(&req.encode(2, &msgs[2])).unwrap();
    assert_eq!(out["content"][0]["tool_use_id"], "toolu_1");
    assert_eq!(out["content"][0]["content"], DROPPED_RESULT);
    assert_eq!(out["content"][0]["zz_future"], 1);
    // Replaced by a placeholder.
    let mut tool = tool;
    tool.set_tool_output("[dropped §4§]".into());
    msgs[2].parts.insert(0, tool);
    let out: Value = serde_json::from_slice(&req.encode(2, &msgs[2])).unwrap();
    assert_eq!(out["content"][0]["content"], "[dropped §4§]");
    assert_eq!(
        out["content"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[test]
fn identity_ignores_breakpoints_and_cleared_results() {
    let mut v = claude_like();
    let b1 = body(&v);
    let r1 = Request::parse(&b1).unwrap();
    let ids1: Vec<String> = (0..3).map(|i| r1.message_id(i)).collect();
    // Claude Code moves its breakpoint and clears the old result.
    v["messages"][2]["content"][1]
        .as_object_mut()
        .unwrap()
        .remove("cache_control");
    v["messages"][2]["content"][0]["content"] = json!("[Old tool result content cleared]");
    let b2 = body(&v);
    let r2 = Request::parse(&b2).unwrap();
    let ids2: Vec<String> = (0..3).map(|i| r2.message_id(i)).collect();
    assert_eq!(ids1, ids2);
    // A different text is another message.
    v["messages"][0]["content"] = json!("another task");
    let b3 = body(&v);
    let r3 = Request::parse(&b3).unwrap();
    assert_ne!(r3.message_id(0), ids1[0]);
    // All distinct.
    assert_ne!(ids1[0], ids1[1]);
}

#[test]
fn breakpoints_are_counted_and_the_head_follows_the_ttl_order() {
    let mut v = claude_like();
    let b = body(&v);
    let req = Request::parse(&b).unwrap();
    let points = req.breakpoints();
    assert_eq!(
        points.iter().map(|p| p.long).collect::<Vec<_>>(),
        [true, true, false]
    );
    // The next breakpoint after the head is 5 minutes: the head's too.
    assert_eq!(req.head_cache(), Some(json!({"type": "ephemeral"})));
    // With a 1-hour breakpoint on the last message, the head's is 1 hour.
    v["messages"][2]["content"][1]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    let b = body(&v);
    let req = Request::parse(&b).unwrap();
    assert_eq!(
        req.head_cache(),
        Some(json!({"type": "ephemeral", "ttl": "1h"}))
    );
    // Four already: none for mc.
    v["tools"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    let b = body(&v);
    let req = Request::parse(&b).unwrap();
    assert_eq!(req.head_cache(), None);
}

#[test]
fn results_come_out_with_their_calls() {
    let b = body(&claude_like());
    let req = Request::parse(&b).unwrap();
    assert!(req.has_results(2));
    let out: Value =
        serde_json::from_slice(&Request::without_results(req.item_bytes(2)).unwrap()).unwrap();
    assert_eq!(out["content"].as_array().unwrap().len(), 1);
    assert_eq!(out["content"][0]["text"], "go on");
}

#[test]
fn not_a_request_is_an_error() {
    assert!(Request::parse(b"[1]").is_err());
    assert!(Request::parse(b"{\"messages\": 3}").is_err());
    assert!(Request::parse(b"{\"messages\": [1]}").is_err());
    assert!(Request::parse(b"{}").unwrap().items.is_empty());
}

#[test]
fn every_block_kind_of_a_claude_code_request_survives_a_rewrite() {
    let b = include_bytes!("../../../testdata/anthropic/request.json");
    let req = Request::parse(b).unwrap();
    let mut msgs = decoded(&req);
    // Tag every text and tool output, as a pass does.
    for m in &mut msgs {
        for p in &mut m.parts {
            if let Some(text) = p.text().map(str::to_string) {
                p.set_text(format!("§1§ {text}"));
            }
            if let Some(out) = p.tool_output().map(str::to_string) {
                p.set_tool_output(format!("§2§ {out}"));
            }
        }
    }
    let out: Vec<Vec<u8>> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| req.encode(i, m))
        .collect();
    let pieces: Vec<Piece<'_>> = out.iter().map(|b| Piece::Bytes(b)).collect();
    let body = req.assemble(&pieces);
    let after: Value = serde_json::from_slice(&body).unwrap();
    for (i, item) in req.items.iter().enumerate() {
        for span in &item.blocks {
            let raw = req.bytes(*span);
            let kind = field(&serde_json::from_slice::<Value>(raw).unwrap(), "type").to_string();
            if !matches!(kind.as_str(), "text" | "tool_result") {
                assert!(contains(&body, raw), "message {i}: a {kind} block changed");
            }
        }
    }
    assert_eq!(
        after["messages"][0]["content"][1]["text"]
            .as_str()
            .unwrap()
            .get(..6),
        Some("§1§ ")
    );
    assert_eq!(
        after["messages"][2]["content"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .get(..6),
        Some("§2§ ")
    );
    // An error result's text is its error; its flag and the breakpoint stay.
    assert_eq!(after["messages"][2]["content"][1]["is_error"], true);
    assert_eq!(
        after["messages"][4]["content"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    // Everything outside `messages` is the input's bytes.
    let messages = req.messages.unwrap();
    assert!(body.starts_with(&b[..messages.start]));
    assert!(body.ends_with(&b[messages.end..]));
}

#[test]
fn a_system_message_is_carried_untouched() {
    let b =
        br#"{"messages":[{"role":"user","content":"hi"},{"role":"system","content":"skills: a, b"},
        {"role":null,"content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}"#;
    let req = Request::parse(b).unwrap();
    let msgs = decoded(&req);
    for i in [1, 2] {
        assert!(msgs[i].parts.is_empty());
        assert_eq!(req.encode(i, &msgs[i]), req.item_bytes(i));
    }
}
