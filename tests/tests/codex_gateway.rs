//! The real Codex (npm `@openai/codex` 0.169.0, pinned in `tests/e2e`)
//! through `mc-transform gateway`: its provider's base URL is the gateway's
//! `/openai`, `gateway.openai_upstream` a strict fake Responses API of ours
//! on 127.0.0.1 (refuses unpaired calls and changed reasoning, reports
//! cached tokens by common prefix). A test is skipped (with a note) only
//! where the binary is not installed, never under CI.

use mc_base::codec::responses::Request;
use mc_tests::codex::{Codex, Options};
use mc_tests::fake_responses::{Recorded, Reply, Usage};
use serde_json::json;

fn start(test: &str, gateway_db: Option<std::path::PathBuf>) -> Option<Codex> {
    start_with(test, gateway_db, None)
}

fn start_with(
    test: &str,
    gateway_db: Option<std::path::PathBuf>,
    transform: Option<serde_json::Value>,
) -> Option<Codex> {
    let cx = Codex::start(
        test,
        Options {
            gateway: true,
            gateway_db,
            transform,
            // Codex's own compaction only where a test asks for it.
            auto_compact_limit: Some(10_000_000),
            ..Options::default()
        },
    )?;
    cx.provider.strict();
    Some(cx)
}

fn shell(cmd: &str) -> Reply {
    Reply::Call {
        namespace: None,
        name: "exec_command".into(),
        arguments: json!({ "cmd": cmd }),
    }
}

fn outputs(request: &Recorded) -> Vec<String> {
    request.call_outputs().into_iter().map(|(_, o)| o).collect()
}

fn item_bytes(raw: &[u8]) -> Vec<Vec<u8>> {
    let req = Request::parse(raw).unwrap();
    req.items
        .iter()
        .map(|i| req.bytes(i.span).to_vec())
        .collect()
}

fn assert_no_secret(cx: &Codex) {
    let stderr = cx.gateway.as_ref().unwrap().stderr();
    assert!(
        !stderr.contains("test-key"),
        "the key was printed: {stderr}"
    );
}

#[test]
fn codex_through_the_gateway_gets_tags_its_reasoning_back_and_its_key_upstream() {
    let Some(cx) = start(
        "codex_through_the_gateway_gets_tags_its_reasoning_back_and_its_key_upstream",
        None,
    ) else {
        return;
    };
    let p = &cx.provider;
    p.push(shell("echo first-output"), None);
    p.push(Reply::Text("It printed first-output.".into()), None);
    let thread = cx.exec(None, "Run echo.").thread_id;
    p.push(shell("echo second-output"), None);
    p.push(Reply::Text("Done again.".into()), None);
    cx.exec(Some(&thread), "Once more.");
    assert!(p.refusals().is_empty(), "{:?}", p.refusals());
    let turns = p.turns();
    assert_eq!(turns.len(), 4, "{turns:?}");
    // Tags on the wire: the tool output the model sees is tagged.
    let out = outputs(&turns[1]);
    assert!(
        out.iter()
            .any(|o| o.starts_with('§') && o.contains("first-output")),
        "{out:?}"
    );
    // The reasoning item Codex sent back reached the fake byte for byte
    // (the strict fake refuses anything else), and it is there.
    assert_eq!(turns[1].count("sealed/reasoning"), 1, "{}", turns[1].body);
    // Each request repeats the previous one's items byte for byte, then grows.
    for pair in turns.windows(2) {
        let (a, b) = (item_bytes(&pair[0].raw), item_bytes(&pair[1].raw));
        assert!(b.len() > a.len());
        assert_eq!(b[..a.len()], a[..], "an earlier item changed");
    }
    // Codex's key reached the provider as it sent it, and nowhere else.
    for turn in &turns {
        assert_eq!(turn.header("authorization"), Some("Bearer test-key"));
        assert_eq!(turn.path, "/v1/responses");
        assert_eq!(turn.header("session-id"), Some(thread.as_str()));
    }
    assert_no_secret(&cx);
    // The pass ran in Codex's own session, the one its hooks and MCP name.
    let db = rusqlite::Connection::open(&cx.db).unwrap();
    let sessions: Vec<(String, String)> = db
        .prepare("SELECT harness, session_id FROM sessions")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(sessions, [("codex".to_string(), thread.clone())]);
}

#[test]
fn a_queued_drop_waits_for_a_busting_request_then_replays() {
    // Only the newest tag is protected, so a short session can drop one.
    let Some(cx) = start_with(
        "a_queued_drop_waits_for_a_busting_request_then_replays",
        None,
        Some(json!({"protected_tags": 1})),
    ) else {
        return;
    };
    let p = &cx.provider;
    let big = "x".repeat(3000);
    p.push(shell(&format!("echo {big}")), None);
    p.push(Reply::Text("Long output seen.".into()), None);
    let thread = cx.exec(None, "Print something long.").thread_id;
    let tagged = outputs(&p.turns()[1]);
    let tag: i64 = tagged
        .iter()
        .find(|o| o.contains(&big))
        .and_then(|o| o.strip_prefix('§'))
        .and_then(|o| o.split('§').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tagged output: {tagged:?}"));
    let reduce = cx.mc(
        "mc-transform",
        &["reduce"],
        &json!({"harness": "codex", "session_id": thread, "drop": [tag]}).to_string(),
    );
    assert!(
        reduce.status.success(),
        "{}",
        String::from_utf8_lossy(&reduce.stderr)
    );
    // A deferring request keeps the output; its answer puts the window over
    // mc's threshold (65 % of 272k) and under Codex's own compaction (90 % of 200k).
    let full = Usage {
        input: 179_000,
        cached: 0,
        output: 10,
    };
    p.push(Reply::Text("Noted.".into()), Some(full));
    cx.exec(Some(&thread), "Go on.");
    let deferred = p.turns().last().unwrap().clone();
    let holding = |r: &Recorded| outputs(r).iter().filter(|o| o.contains(&big)).count();
    assert_eq!(holding(&deferred), 1, "dropped on a deferring request");
    // The next request busts: the drop applies, the call keeps its output item.
    p.push(Reply::Text("Next.".into()), None);
    cx.exec(Some(&thread), "And now?");
    let busted = p.turns().last().unwrap().clone();
    // mc's head comes after Codex's developer message, never before.
    assert_eq!(
        busted.body["input"][0]["role"], "developer",
        "{}",
        busted.body
    );
    assert_eq!(holding(&busted), 0, "{}", busted.body);
    let kinds: Vec<String> = busted.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{} {} {}",
                i["type"],
                i["role"],
                i.to_string().chars().take(150).collect::<String>()
            )
        })
        .collect();
    assert!(
        outputs(&busted).iter().any(|o| o.starts_with("[dropped")),
        "{:#?}",
        kinds
    );
    // And replayed on the one after, byte for byte up to its new tail.
    p.push(Reply::Text("Again.".into()), None);
    cx.exec(Some(&thread), "Again?");
    let replayed = p.turns().last().unwrap().clone();
    let (a, b) = (item_bytes(&busted.raw), item_bytes(&replayed.raw));
    assert_eq!(b[..a.len()], a[..]);
    assert!(p.refusals().is_empty(), "{:?}", p.refusals());
}

#[test]
fn an_upstream_error_reaches_codex_unchanged() {
    let Some(cx) = start("an_upstream_error_reaches_codex_unchanged", None) else {
        return;
    };
    let body = json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}});
    cx.provider.push(
        Reply::Error {
            status: 400,
            body: body.to_string(),
        },
        None,
    );
    let out = cx.exec_output(None, "Hello.");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("exceeds the context window") || stdout.contains("context window"),
        "Codex did not show the provider's error: {stdout}"
    );
    assert_no_secret(&cx);
}

#[test]
fn a_broken_mc_database_leaves_codex_working_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // A folder where the database should be: the store cannot open.
    let Some(cx) = start(
        "a_broken_mc_database_leaves_codex_working_untouched",
        Some(dir.path().to_path_buf()),
    ) else {
        return;
    };
    cx.provider.push(shell("echo untouched"), None);
    cx.provider.push(Reply::Text("Fine.".into()), None);
    let exec = cx.exec(None, "Run it.");
    assert_eq!(exec.message, "Fine.");
    let turns = cx.provider.turns();
    assert_eq!(turns.len(), 2);
    let out = outputs(&turns[1]);
    assert!(out.iter().all(|o| !o.starts_with('§')), "{out:?}");
    let stderr = cx.gateway.as_ref().unwrap().stderr();
    assert!(
        stderr.contains("forwards every request untouched"),
        "{stderr}"
    );
}
