use super::*;

/// The real Codex's request after a reasoning item, a function call and its
/// output (tests/testdata/codex).
const CALL_OUTPUT: &[u8] =
    include_bytes!("../../../../../tests/testdata/codex/02-call-output.body.json");
const FOLLOW_UP: &[u8] =
    include_bytes!("../../../../../tests/testdata/codex/03-follow-up.body.json");

fn body(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

fn decoded(req: &Request<'_>) -> Vec<Message> {
    req.message_ids()
        .iter()
        .enumerate()
        .map(|(g, id)| req.decode(g, id, "s", Some(5)))
        .collect()
}

/// Items of every kind the module names, with unknown fields and kinds.
fn mixed() -> Value {
    json!({
        "model": "gpt-5",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"type": "message", "role": "user", "id": "m1", "content": [{"type": "input_text", "text": "fix it"}]},
            {"type": "reasoning", "id": "rs1", "summary": [], "encrypted_content": "gAAA+/==", "zz": 1},
            {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "local_shell_call", "id": "ls1", "call_id": "c2", "action": {"type": "exec", "command": ["ls"]}},
            {"type": "custom_tool_call", "id": "ct1", "call_id": "c3", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "function_call_output", "call_id": "c1", "output": "a\nb\n"},
            {"type": "local_shell_call_output", "call_id": "c2", "output": "a\nb\n"},
            {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done!"},
            {"type": "future_item", "id": "f1", "blob": [1, 2]},
            {"type": "message", "role": "assistant", "id": "m2", "content": [{"type": "output_text", "text": "Fixed."}]},
            {"type": "message", "role": "user", "id": "m3", "content": [{"type": "input_text", "text": "thanks"}]}
        ],
        "tools": [{"type": "function", "name": "exec_command"}],
        "store": false,
        "stream": true
    })
}

#[test]
fn items_group_into_messages_the_way_the_rollout_codec_groups_them() {
    let b = body(&mixed());
    let req = Request::parse(&b).unwrap();
    let sides: Vec<(Side, usize)> = req
        .groups
        .iter()
        .map(|g| (g.side, g.end - g.start))
        .collect();
    assert_eq!(
        sides,
        [
            (Side::Other, 1),
            (Side::User, 1),
            (Side::Model, 4),
            (Side::Outputs, 3),
            (Side::Other, 1),
            (Side::Model, 1),
            (Side::User, 1)
        ]
    );
    let messages = decoded(&req);
    let kinds = |m: &Message| -> Vec<PartKind> { m.parts.iter().map(|p| p.kind).collect() };
    // The model's calls and reasoning are never tagged; outputs are tool parts
    // that know their call's name and input.
    assert!(
        messages[2]
            .parts
            .iter()
            .all(|p| p.raw()["type"] == OPAQUE_PART)
    );
    assert_eq!(messages[2].finish(), Some("tool-calls"));
    assert_eq!(kinds(&messages[3]), [PartKind::Tool; 3]);
    let tools: Vec<(&str, &str)> = messages[3]
        .parts
        .iter()
        .map(|p| (p.call_id().unwrap(), p.tool_name().unwrap()))
        .collect();
    assert_eq!(
        tools,
        [
            ("c1", "exec_command"),
            ("c2", "shell"),
            ("c3", "apply_patch")
        ]
    );
    assert_eq!(messages[3].parts[0].tool_input().unwrap()["cmd"], "ls");
    assert_eq!(messages[1].parts[0].text(), Some("fix it"));
    assert_eq!(messages[5].parts[0].text(), Some("Fixed."));
    assert_eq!(messages[0].parts[0].raw()["type"], OPAQUE_PART);
    assert_eq!(messages[4].parts[0].raw()["type"], OPAQUE_PART);
}

#[test]
fn a_real_codex_request_goes_back_byte_for_byte() {
    for bytes in [CALL_OUTPUT, FOLLOW_UP] {
        let req = Request::parse(bytes).unwrap();
        assert!(req.groups.len() >= 5, "{}", req.groups.len());
        let messages = decoded(&req);
        let encoded: Vec<Vec<u8>> = messages
            .iter()
            .enumerate()
            .map(|(g, m)| req.encode(g, m))
            .collect();
        for (g, e) in encoded.iter().enumerate() {
            assert_eq!(e.as_slice(), req.group_bytes(g), "message {g}");
        }
        let pieces: Vec<Piece<'_>> = encoded.iter().map(|e| Piece::Bytes(e)).collect();
        assert_eq!(req.assemble(&pieces), bytes);
        let originals: Vec<Piece<'_>> = (0..req.groups.len()).map(Piece::Original).collect();
        assert_eq!(req.assemble(&originals), bytes);
    }
}

#[test]
fn the_environment_and_instructions_codex_writes_are_never_tagged() {
    let req = Request::parse(CALL_OUTPUT).unwrap();
    let messages = decoded(&req);
    let texts: Vec<&str> = messages
        .iter()
        .flat_map(|m| m.parts.iter().filter_map(Part::text))
        .collect();
    assert!(texts.contains(&"RUN echo"), "{texts:?}");
    assert!(
        texts
            .iter()
            .all(|t| !t.starts_with("<environment_context>")),
        "{texts:?}"
    );
}

#[test]
fn a_dropped_output_keeps_its_call_and_the_reasoning_stays_byte_for_byte() {
    let b = body(&mixed());
    let req = Request::parse(&b).unwrap();
    let mut messages = decoded(&req);
    // The pass dropped the first output whole and shortened the second.
    messages[3].parts.remove(0);
    messages[3].parts[0].set_tool_output("[dropped §7§]".into());
    let out = req.encode(3, &messages[3]);
    let items: Vec<Value> = serde_json::from_slice(&[b"[", out.as_slice(), b"]"].concat()).unwrap();
    assert_eq!(items.len(), 3, "no output leaves while its call is sent");
    assert_eq!(
        items[0],
        json!({"type": "function_call_output", "call_id": "c1", "output": DROPPED_OUTPUT})
    );
    assert_eq!(items[1]["output"], "[dropped §7§]");
    assert_eq!(items[1]["call_id"], "c2");
    assert_eq!(items[2]["output"], "Done!");
    let model = req.encode(2, &messages[2]);
    assert_eq!(model.as_slice(), req.group_bytes(2));
    assert!(String::from_utf8_lossy(&model).contains(r#""encrypted_content":"gAAA+/==","zz":1"#));
    let pieces: Vec<Piece<'_>> = (0..req.groups.len())
        .map(|g| {
            if g == 3 {
                Piece::Bytes(&out)
            } else {
                Piece::Original(g)
            }
        })
        .collect();
    let whole: Value = serde_json::from_slice(&req.assemble(&pieces)).unwrap();
    assert_eq!(whole["input"].as_array().unwrap().len(), 12);
    assert_eq!(whole["input"][6]["output"], DROPPED_OUTPUT);
}

#[test]
fn changed_text_is_rewritten_in_its_item_and_added_messages_are_message_items() {
    let b = body(&mixed());
    let req = Request::parse(&b).unwrap();
    let mut messages = decoded(&req);
    messages[1].parts[0].set_text("[dropped §2§]".into());
    let out: Value = serde_json::from_slice(&req.encode(1, &messages[1])).unwrap();
    assert_eq!(
        out,
        json!({"type": "message", "role": "user", "id": "m1",
            "content": [{"type": "input_text", "text": "[dropped §2§]"}]})
    );
    let head = Message::new(
        serde_json::from_value(json!({"info": {"id": "h", "role": "user"}})).unwrap(),
        vec![part(json!({"id": "h/0", "type": "text", "text": "<head>"}))],
    );
    let added: Value = serde_json::from_slice(&added(&head)).unwrap();
    assert_eq!(
        added,
        json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "<head>"}]})
    );
}

#[test]
fn outputs_whose_calls_are_gone_can_be_taken_out() {
    let b = body(&mixed());
    let req = Request::parse(&b).unwrap();
    assert!(req.has_results(3) && !req.has_results(2));
    assert_eq!(
        Request::without_results(req.group_bytes(3)),
        Some(Vec::new())
    );
    assert_eq!(Request::without_results(req.group_bytes(2)), None);
    let pieces = [Piece::Original(0), Piece::Bytes(&[]), Piece::Original(6)];
    let whole: Value = serde_json::from_slice(&req.assemble(&pieces)).unwrap();
    assert_eq!(whole["input"].as_array().unwrap().len(), 2);
}

#[test]
fn identities_hold_while_codex_resends_the_same_items() {
    let first = Request::parse(CALL_OUTPUT).unwrap();
    let later = Request::parse(FOLLOW_UP).unwrap();
    let ids = |r: &Request<'_>| -> Vec<String> { r.message_ids() };
    let (a, b) = (ids(&first), ids(&later));
    // The developer message and the environment may be resent differently;
    // the conversation's items keep their ids.
    let shared = a.iter().filter(|id| b.contains(id)).count();
    assert!(shared >= a.len() - 2, "{a:?}\n{b:?}");
    let mut unique = b.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), b.len());
}

#[test]
fn what_is_not_a_responses_body_is_an_error_or_left_alone() {
    assert!(Request::parse(b"not json").is_err());
    assert!(Request::parse(br#"{"input": [1]}"#).is_err());
    let plain = Request::parse(br#"{"input": "hello", "model": "m"}"#).unwrap();
    assert!(plain.input.is_none() && plain.groups.is_empty());
    assert_eq!(plain.assemble(&[]), br#"{"input": "hello", "model": "m"}"#);
}

/// Codex's body after `turns` steps (a reasoning item, a call and its
/// output each), `tools` after `input` as Codex writes it.
fn grown(turns: usize, spaced: bool) -> Vec<u8> {
    let mut input = vec![
        json!({"type": "message", "role": "developer", "id": "d", "content": [{"type": "input_text", "text": "rules"}]}),
        json!({"type": "message", "role": "user", "id": "u", "content": [{"type": "input_text", "text": "fix it"}]}),
    ];
    for k in 0..turns {
        input.push(json!({"type": "reasoning", "id": format!("rs{k}"), "encrypted_content": format!("gA{k}==")}));
        input.push(
            json!({"type": "function_call", "id": format!("fc{k}"), "call_id": format!("c{k}"),
            "name": "exec_command", "arguments": format!("{{\"cmd\":\"cat f{k}\"}}")}),
        );
        input.push(json!({"type": "function_call_output", "call_id": format!("c{k}"), "output": format!("out {k}")}));
    }
    let value = json!({"model": "gpt-5", "instructions": "Be brief.", "input": input,
        "tools": [{"type": "function", "name": "exec_command"}], "store": false, "stream": true});
    if spaced {
        serde_json::to_vec_pretty(&value).unwrap()
    } else {
        body(&value)
    }
}

fn same_reading(a: &Request<'_>, b: &Request<'_>) {
    assert_eq!(format!("{:?}", a.layout()), format!("{:?}", b.layout()));
    assert_eq!(
        (a.model.as_deref(), a.tools, a.instructions, a.tools_span),
        (b.model.as_deref(), b.tools, b.instructions, b.tools_span)
    );
    let ids = a.message_ids();
    assert_eq!(ids, b.message_ids());
    for (g, id) in ids.iter().enumerate() {
        assert_eq!(
            a.decode(g, id, "s", None).encode(),
            b.decode(g, id, "s", None).encode()
        );
    }
}

#[test]
fn a_request_that_grows_at_the_tail_is_read_from_where_it_stops_repeating() {
    let first = grown(2, false);
    let second = grown(3, false);
    let layout = Request::parse(&first).unwrap().layout();
    let (read, repeated) = Request::parse_after(&second, &first, &layout).unwrap();
    same_reading(&read, &Request::parse(&second).unwrap());
    // The developer message, the prompt, two steps' calls; the second
    // step's outputs are no longer the last item, but their bytes are the
    // same at the same place.
    assert_eq!(read.groups.len(), 2 + 2 * 3);
    assert_eq!(repeated, 2 + 2 * 2);
    // An output keeps its call's name and arguments from the items reused.
    for g in [3, 7] {
        let output = read.decode(g, "x", "s", None);
        assert_eq!(output.parts[0].tool_name(), Some("exec_command"));
        assert_eq!(
            output.parts[0].raw()["state"]["input"]["cmd"],
            format!("cat f{}", g / 2 - 1)
        );
    }
    // Another start, spaces, a key given twice: read whole, nothing repeated.
    let (read, repeated) = Request::parse_after(&second, b"{}", &layout).unwrap();
    assert_eq!(repeated, 0);
    same_reading(&read, &Request::parse(&second).unwrap());
    let spaced = grown(3, true);
    let (read, _) = Request::parse_after(&spaced, &first, &layout).unwrap();
    same_reading(&read, &Request::parse(&spaced).unwrap());
    let mut twice = second.clone();
    twice.pop();
    twice.extend_from_slice(br#","model":"gpt-6"}"#);
    let (read, repeated) = Request::parse_after(&twice, &first, &layout).unwrap();
    assert_eq!(repeated, 0);
    assert_eq!(read.model.as_deref(), Some("gpt-6"));
    same_reading(&read, &Request::parse(&twice).unwrap());
    // A history rewritten after the prompt (Codex's compaction) shares
    // only its first items; a shorter one too.
    let longer = Request::parse(&second).unwrap().layout();
    let (read, repeated) = Request::parse_after(&first, &second, &longer).unwrap();
    same_reading(&read, &Request::parse(&first).unwrap());
    assert!(repeated <= 2 + 2 * 2);
    let mut rewritten = String::from_utf8(second.clone()).unwrap();
    rewritten = rewritten.replace("\"fix it\"", "\"summary\"");
    let (read, repeated) = Request::parse_after(rewritten.as_bytes(), &second, &longer).unwrap();
    same_reading(&read, &Request::parse(rewritten.as_bytes()).unwrap());
    assert_eq!(repeated, 1);
    // A body that is not JSON after the repeated part is refused as whole.
    let mut cut = second.clone();
    cut.truncate(second.len() - 3);
    assert!(Request::parse_after(&cut, &first, &layout).is_err());
}

#[test]
fn a_changed_item_or_tool_set_after_the_input_is_read_again() {
    let first = grown(2, false);
    let layout = Request::parse(&first).unwrap().layout();
    // The second step's output changed in place, and the tools after `input`.
    let text = String::from_utf8(grown(3, false)).unwrap();
    let second = text
        .replace("out 1", "out one")
        .replace(
            r#""name":"exec_command"}]"#,
            r#""name":"exec_command"},{"type":"function","name":"apply_patch"}]"#,
        )
        .into_bytes();
    let (read, repeated) = Request::parse_after(&second, &first, &layout).unwrap();
    let whole = Request::parse(&second).unwrap();
    same_reading(&read, &whole);
    assert_eq!(read.tools, 2);
    assert!(repeated < 2 + 2 * 2, "{repeated}");
}
