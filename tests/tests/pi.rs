//! End to end against the real Pi (npm `@mariozechner/pi-coding-agent`, pinned
//! in `tests/e2e/package.json`; `scripts/test` installs it) with mc's extension
//! (`adapters/pi/mc.ts`): Pi runs offline against a fake
//! Anthropic provider of ours on 127.0.0.1 that records every request body,
//! driven by `pi -p` (each prompt a process of its own on one session file:
//! every prompt after the first is a resume) and `pi --mode rpc`. One binary
//! for every real-Pi test; a test is skipped (with a note) only where Pi is
//! not installed, never under CI.

use mc_tests::fake_provider::{Recorded, Reply, Usage};
use mc_tests::pi::{Options, Pi};
use serde_json::{Value, json};

fn tool(name: &str, input: Value) -> Reply {
    Reply::Tool {
        name: name.into(),
        input,
    }
}

/// A request's messages with Pi's `cache_control` marks taken out (Pi moves
/// them to the newest user message on every call), as JSON text per message.
fn wire(request: &Recorded) -> Vec<String> {
    let mut messages = request.body["messages"].clone();
    for message in messages.as_array_mut().into_iter().flatten() {
        for block in message["content"].as_array_mut().into_iter().flatten() {
            if let Some(block) = block.as_object_mut() {
                block.remove("cache_control");
            }
        }
    }
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect()
}

/// Every request repeats the messages of the one before it, byte for byte.
fn assert_prefixes(requests: &[Recorded]) {
    for pair in requests.windows(2) {
        let (before, after) = (wire(&pair[0]), wire(&pair[1]));
        assert!(after.len() >= before.len(), "the conversation shrank");
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert_eq!(a, b, "message {i} changed between two requests");
        }
        assert_eq!(
            pair[0].body["system"], pair[1].body["system"],
            "the system prompt changed"
        );
    }
}

fn system_text(request: &Recorded) -> String {
    request.body["system"].to_string()
}

fn file_lines(n: usize) -> String {
    (1..=n)
        .map(|i| format!("line {i} of the big file: fn example_{i}() {{ return {i}; }}\n"))
        .collect()
}

#[test]
fn tags_reach_the_provider_and_every_call_repeats_the_one_before() {
    let Some(pi) = Pi::start(
        "tags_reach_the_provider_and_every_call_repeats_the_one_before",
        Options::default(),
    ) else {
        return;
    };
    std::fs::write(pi.project.join("big.txt"), file_lines(300)).unwrap();
    let session = pi.session("tags");
    pi.provider
        .push(tool("read", json!({"path": "big.txt"})), None);
    pi.provider.push(Reply::Text("Read it.".into()), None);
    pi.prompt(&session, "Read big.txt please.");
    // A second process on the same session file: a resume.
    pi.provider.push(Reply::Text("Sure.".into()), None);
    pi.prompt(&session, "Now summarise it.");

    let requests = pi.provider.agent_requests();
    assert_eq!(requests.len(), 3, "two calls, then one");
    let first = wire(&requests[0]);
    assert!(
        first.iter().any(|m| m.contains("§1§ Read big.txt please.")),
        "the prompt carries its tag: {first:?}"
    );
    let results = requests[1].tool_results();
    assert!(
        results[0].text.starts_with("§2§ line 1 of the big file"),
        "the tool output carries its tag: {:?}",
        &results[0].text[..40.min(results[0].text.len())]
    );
    assert!(system_text(&requests[0]).contains("## Context management (mc)"));
    assert!(system_text(&requests[0]).contains("ctx_reduce"));
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"ctx_reduce"), "{tools:?}");
    assert!(
        tools.contains(&"ctx_memory"),
        "mc-search's tools too: {tools:?}"
    );
    // Below the threshold every call repeats the previous one's bytes, across
    // the resume too (Pi's cache marks aside).
    assert_prefixes(&requests);
    // Pi's own record holds no tags: the transform is per call.
    let record = std::fs::read_to_string(&session).unwrap();
    assert!(!record.contains('§'), "the session file is untouched");
}

#[test]
fn a_reduce_then_a_busting_pass_drops_and_later_calls_replay_it() {
    let Some(pi) = Pi::start(
        "a_reduce_then_a_busting_pass_drops_and_later_calls_replay_it",
        Options {
            context_window: 20_000,
            reserve_tokens: 1_000,
            mc_config: Some(r#"{"transform": {"protected_tags": 1}}"#.into()),
            ..Options::default()
        },
    ) else {
        return;
    };
    std::fs::write(pi.project.join("big.txt"), file_lines(200)).unwrap();
    let session = pi.session("reduce");
    pi.provider
        .push(tool("read", json!({"path": "big.txt"})), None);
    pi.provider.push(Reply::Text("Read it.".into()), None);
    pi.prompt(&session, "Read big.txt please.");
    // The agent drops the read; its next calls are above the execute
    // threshold (69 % of the window less the output cap), below the band
    // where a pass may bust mid-turn (85 %).
    let high = Usage {
        input: 11_000,
        output: 10,
        ..Usage::default()
    };
    pi.provider
        .push(tool("ctx_reduce", json!({"drop": "2"})), Some(high));
    pi.provider.push(Reply::Text("Dropped.".into()), Some(high));
    pi.prompt(&session, "You can drop the file now.");
    pi.provider.push(Reply::Text("Fine.".into()), None);
    pi.prompt(&session, "Go on.");
    pi.provider.push(Reply::Text("Ok.".into()), None);
    pi.prompt(&session, "And on.");

    let requests = pi.provider.agent_requests();
    assert_eq!(requests.len(), 6);
    let answer = requests[3].tool_results().last().unwrap().text.clone();
    assert!(answer.contains("queued §2§"), "{answer}");
    // Mid-turn (right after the ctx_reduce call) nothing moves yet, even
    // above the threshold; the next prompt's call busts and drops; the one
    // after, below the threshold again, replays the drop.
    let whole = requests[3].tool_results()[0].text.clone();
    assert!(
        whole.starts_with("§2§ line 1"),
        "{}",
        &whole[..60.min(whole.len())]
    );
    for (i, request) in requests.iter().enumerate().skip(4) {
        let read = &request.tool_results()[0];
        assert_eq!(read.text, "[dropped §2§]", "request {i}");
    }
    // The call itself stays, with its result right after it.
    assert_eq!(requests[5].tool_uses()[0].1, "read");
    assert_prefixes(&requests[4..]);
}

#[test]
fn a_broken_database_leaves_pi_working() {
    let Some(pi) = Pi::start("a_broken_database_leaves_pi_working", Options::default()) else {
        return;
    };
    // The database path is a folder: every mc command fails.
    std::fs::create_dir_all(pi.file("not-a-db")).unwrap();
    let session = pi.session("broken");
    pi.provider.push(Reply::Text("Still here.".into()), None);
    let db = pi.file("not-a-db").display().to_string();
    let out = pi.prompt_env(&session, "Hello there.", &[("MC_DB", db.as_str())]);
    assert!(out.contains("Still here."), "{out}");
    let requests = pi.provider.agent_requests();
    assert_eq!(requests.len(), 1);
    let sent = requests[0].body["messages"].to_string();
    assert!(sent.contains("Hello there."), "{sent}");
    assert!(
        !sent.contains('§'),
        "the messages went out untouched: {sent}"
    );
}

/// `mc-pin args` in Pi's environment; must succeed; its JSON.
fn mc_pin(pi: &Pi, args: &[&str]) -> Value {
    let out = mc_tests::pipe(pi.command(mc_tests::bin_path("mc-pin")).args(args), b"").unwrap();
    assert!(
        out.status.success(),
        "mc-pin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The restorations mc stored in the session file (hidden custom messages).
fn restorations(session: &std::path::Path) -> usize {
    std::fs::read_to_string(session)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains(r#""type":"custom_message""#) && l.contains(r#""customType":"mc-pin""#)
        })
        .count()
}

fn wait_for_restorations(session: &std::path::Path, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while restorations(session) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "no restoration {n} in the session file after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The agent request that carries `prompt` as its newest user message.
fn request_for<'a>(requests: &'a [Recorded], prompt: &str) -> &'a Recorded {
    requests
        .iter()
        .find(|r| r.count(prompt) > 0)
        .unwrap_or_else(|| panic!("no request carries {prompt:?}"))
}

#[test]
fn a_pin_comes_back_exactly_once_after_a_manual_and_an_automatic_compaction() {
    // Pi compacts on its own above 100k - 40k tokens; mc's threshold
    // (65 % of the window less the output cap) is not reached at 62k.
    let Some(pi) = Pi::start(
        "a_pin_comes_back_exactly_once_after_a_manual_and_an_automatic_compaction",
        Options {
            context_window: 100_000,
            reserve_tokens: 40_000,
            keep_recent_tokens: 2_000,
            ..Options::default()
        },
    ) else {
        return;
    };
    const PINNED: &str = "Always run the migrations before the tests, pinned please.";
    let filler = |n: u32| format!("Step {n}: {}", "lorem ipsum dolor sit amet ".repeat(400));
    let session = pi.session("pins");
    let mut rpc = pi.rpc(&session);
    rpc.prompt(PINNED);
    let transcript = session.display().to_string();
    let pins = mc_pin(
        &pi,
        &[
            "pin",
            "--harness",
            "pi",
            "--transcript",
            &transcript,
            "--last",
            "user",
        ],
    );
    let id = pins["pins"][0]["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("pi-u"), "{pins}");
    rpc.prompt(&filler(1));
    rpc.prompt(&filler(2));
    // A manual compaction (Pi's /compact, here over RPC).
    let answer = rpc.compact();
    assert_eq!(answer["success"], true, "{answer}");
    wait_for_restorations(&session, 1);
    rpc.prompt("After the first compaction.");
    // An automatic one: the reply reports usage above Pi's threshold.
    pi.provider.push(
        Reply::Text("Big.".into()),
        Some(Usage {
            input: 62_000,
            output: 10,
            ..Usage::default()
        }),
    );
    rpc.prompt(&filler(3));
    let end = rpc.until(120, |e| e["type"] == "compaction_end");
    assert_eq!(end["reason"], "threshold", "{end}");
    assert!(end["result"].is_object(), "the compaction succeeded: {end}");
    wait_for_restorations(&session, 2);
    rpc.prompt("After the second compaction.");
    rpc.prompt("And later.");
    rpc.finish();

    let requests = pi.provider.agent_requests();
    // Before any compaction the pinned prompt is there as itself.
    assert_eq!(request_for(&requests, "Step 2:").count(PINNED), 1);
    // After each compaction it is summarised away and restored exactly once,
    // and stays once on the calls after.
    for prompt in [
        "After the first compaction.",
        "After the second compaction.",
        "And later.",
    ] {
        let request = request_for(&requests, prompt);
        assert_eq!(
            request.count(PINNED),
            1,
            "{prompt}: {}",
            request.body["messages"]
        );
        assert!(request.count("Pinned context, restored after compaction.") <= 1);
    }
    assert_eq!(restorations(&session), 2, "one restoration per compaction");
    // A replay of the compaction's hook restores nothing more.
    let replay = json!({"hook_event_name": "SessionStart", "source": "compact",
        "session_id": pi_session_id(&session), "transcript_path": transcript});
    let out = mc_tests::pipe(
        pi.command(mc_tests::bin_path("mc-pin")).args([
            "restore",
            "--harness",
            "pi",
            "--pins-only",
        ]),
        replay.to_string().as_bytes(),
    )
    .unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn pi_session_id(session: &std::path::Path) -> String {
    let text = std::fs::read_to_string(session).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["id"].as_str().unwrap().to_string()
}

#[test]
fn the_historian_folds_the_session_file_through_pi_and_the_next_busting_call_carries_the_head() {
    // No historian model in mc's config: the run folds through the harness's
    // own `pi -p` (on PATH), on the session's model, which the fake plays.
    let Some(pi) = Pi::start(
        "the_historian_folds_the_session_file_through_pi_and_the_next_busting_call_carries_the_head",
        Options {
            context_window: 20_000,
            reserve_tokens: 1_000,
            ..Options::default()
        },
    ) else {
        return;
    };
    let session = pi.session("historian");
    for i in 0..8 {
        // The last reply is above the execute threshold: the next call busts.
        let usage = (i == 7).then_some(Usage {
            input: 11_000,
            output: 10,
            ..Usage::default()
        });
        pi.provider.push(Reply::Text(format!("Answer {i}.")), usage);
        // ~2,000 tokens each: more than the historian's protected tail (40 %
        // of the window) to fold.
        let text = format!("Task number {i}: {}", "do the thing carefully ".repeat(500));
        pi.prompt(&session, &text);
    }
    let transcript = session.display().to_string();
    let out = mc_tests::pipe(
        pi.command(mc_tests::bin_path("mc-historian")).args([
            "run",
            "--harness",
            "pi",
            "--transcript",
            &transcript,
            "--context-limit",
            "20000",
        ]),
        b"",
    )
    .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success() && report["status"] == "published",
        "mc-historian run: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["model_source"], "harness_default", "{report}");
    // The historian's call through pi -p: no tools, none of mc's extension.
    let folds = pi.provider.historian_requests();
    assert!(!folds.is_empty(), "the fold went through the fake provider");
    for fold in &folds {
        assert!(
            !fold.body["system"]
                .to_string()
                .contains("Context management (mc)")
        );
        assert_eq!(
            fold.count("§"),
            0,
            "no pass ran inside the historian's call"
        );
    }
    pi.provider.push(Reply::Text("Next.".into()), None);
    pi.prompt(&session, "What is next?");
    let requests = pi.provider.agent_requests();
    let last = requests.last().unwrap();
    // The head: m[0] (the frozen baseline), m[1] (what changed since), where
    // a compartment published between two busting passes arrives.
    let head = format!("{}{}", last.body["messages"][0], last.body["messages"][1]);
    assert!(head.contains("<session-history>"), "{head}");
    assert!(
        head.contains("Folded messages"),
        "the compartment is in the head: {head}"
    );
    // What the compartment covers left the wire; the rest is there.
    assert_eq!(last.count("Task number 0:"), 0, "{}", last.body["messages"]);
    assert_eq!(last.count("Task number 7:"), 1);
    assert_eq!(last.count("What is next?"), 1);
}

#[test]
fn a_prompt_too_long_teaches_mc_the_limit_and_the_next_pass_recovers() {
    let Some(pi) = Pi::start(
        "a_prompt_too_long_teaches_mc_the_limit_and_the_next_pass_recovers",
        Options::default(),
    ) else {
        return;
    };
    let session = pi.session("overflow");
    pi.provider.push(Reply::Text("Fine.".into()), None);
    pi.prompt(&session, "First.");
    // The provider rejects the next call as too long; Pi compacts and retries.
    pi.provider
        .push(Reply::prompt_too_long(250_000, 180_000), None);
    pi.provider.push(Reply::Text("Recovered.".into()), None);
    let mut rpc = pi.rpc(&session);
    rpc.prompt("Second.");
    let end = rpc.until(120, |e| e["type"] == "compaction_end");
    assert_eq!(end["reason"], "overflow", "{end}");
    rpc.until(120, |e| e["type"] == "agent_end");
    rpc.finish();
    let requests = pi.provider.agent_requests();
    assert_eq!(
        requests.len(),
        3,
        "the first call, the rejected one, the retry"
    );
    let id = pi_session_id(&session);
    let out = mc_tests::pipe(
        pi.command(mc_tests::bin_path("mc-transform")).args([
            "status",
            "--harness",
            "pi",
            "--session",
            &id,
        ]),
        b"",
    )
    .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["learned_limit"]["context_limit"], 180_000,
        "the limit the error stated is mc's for this model: {status}"
    );
    assert_eq!(status["learned_limit"]["model"], "fake/mock-model");
    // The retried call's pass was the recovery.
    assert_eq!(status["overflow_pending"], false, "{status}");
    assert_eq!(status["context_window"], 180_000 - 4_096, "{status}");
}

/// The user's /mc-wrapup in Pi: the extension's command runs mc-historian
/// wrapup on the session file (the fold through `pi -p`, which the fake
/// plays), leaving the newest messages unfolded.
#[test]
fn the_mc_wrapup_command_folds_the_session_file() {
    let Some(pi) = Pi::start(
        "the_mc_wrapup_command_folds_the_session_file",
        Options {
            context_window: 200_000,
            ..Options::default()
        },
    ) else {
        return;
    };
    let session = pi.session("wrapup");
    for i in 0..6 {
        pi.provider.push(Reply::Text(format!("Answer {i}.")), None);
        let text = format!("Task number {i}: {}", "do the thing carefully ".repeat(300));
        pi.prompt(&session, &text);
    }
    assert!(
        pi.provider.historian_requests().is_empty(),
        "nothing due yet"
    );
    pi.prompt(&session, "/mc-wrapup 2");
    assert!(
        !pi.provider.historian_requests().is_empty(),
        "the command ran a fold"
    );
    let store = mc_base::store::Store::open(&pi.db, &Default::default()).unwrap();
    let covered: i64 = store
        .conn()
        .query_row(
            "SELECT coalesce(max(end_ordinal), 0) FROM compartments",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        covered >= 8,
        "six turns, all but the newest two messages: {covered}"
    );
}
