//! mc-pin as harnesses run it: against a fake OpenCode server, as a Claude
//! Code SessionStart hook over transcript files written in the real JSONL
//! format, and together with mc-transform on one database.

use std::path::Path;
use std::process::{Command, Output};

use mc_tests::TestEnv;
use mc_tests::fake_opencode::FakeOpenCode;
use serde_json::{Value, json};

// ---------------------------------------------------------------- harness --

/// mc-pin's environment: the sealed [`TestEnv`] (no inherited `MC_*`,
/// `OPENCODE_URL` or `NO_PROXY`), with a proxy that does not exist: a loopback
/// server must never go through it.
fn pin_env() -> TestEnv {
    ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
        .into_iter()
        .fold(TestEnv::new(), |env, var| {
            env.with_var(var, "http://127.0.0.1:9")
        })
}

/// mc-pin on the environment's database.
trait PinEnv {
    fn pin(&self, args: &[&str], stdin: &str) -> Output;
    /// Run mc-pin, expect exit 0, parse stdout.
    fn pin_ok(&self, args: &[&str], stdin: &str) -> Value;
}

impl PinEnv for TestEnv {
    fn pin(&self, args: &[&str], stdin: &str) -> Output {
        self.run_db("mc-pin", args, stdin)
    }

    fn pin_ok(&self, args: &[&str], stdin: &str) -> Value {
        let out = self.pin(args, stdin);
        assert!(out.status.success(), "mc-pin {args:?}: {}", stderr(&out));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("mc-pin {args:?} printed no JSON ({e}): {}", stdout(&out)))
    }
}

/// Rounds of each race: enough that the old cursor-only code lost most of them.
const RACE_ROUNDS: usize = 6;

/// Run `count` mc-pin processes with the same arguments and input at once:
/// every one is started before any of them gets its input (`pipe_all`).
fn race(env: &TestEnv, args: &[&str], stdin: &str, count: usize) -> Vec<Output> {
    let mut commands: Vec<_> = (0..count).map(|_| env.db_command("mc-pin", args)).collect();
    mc_tests::pipe_all(&mut commands, stdin.as_bytes()).unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited")
}

/// Exactly one line `mc-pin: error: …`, followed by nothing but its
/// `mc-pin: hint: …` lines.
fn assert_one_error_line(out: &Output) {
    let err = stderr(out);
    let mut lines = err.lines();
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with("mc-pin: error: ")),
        "{err}"
    );
    assert!(lines.all(|l| l.starts_with("mc-pin: hint: ")), "{err}");
}

/// The `mc-pin: hint: …` lines of stderr.
fn hint_lines(out: &Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter_map(|l| l.strip_prefix("mc-pin: hint: "))
        .map(str::to_string)
        .collect()
}

// ------------------------------------------------------ OpenCode fixtures --

const SES: &str = "ses_2c41a7d1effe5kq0Xw3bM1uT9R";
const DIR: &str = "/home/dev/shop";

fn session(id: &str, metadata: Value) -> Value {
    json!({
        "id": id, "slug": "brave-otter", "projectID": "6f0e2a1c9b7d4e3f8a5b2c1d0e9f8a7b6c5d4e3f",
        "directory": DIR, "title": "Fix cart rounding", "version": "1.18.33",
        "time": {"created": 1_796_030_000_000i64, "updated": 1_796_030_600_000i64},
        "metadata": metadata,
    })
}

fn user_msg(id: &str, at: i64, text: &str) -> Value {
    json!({
        "info": {"id": id, "sessionID": SES, "role": "user", "time": {"created": at},
                 "summary": {"diffs": []}, "agent": "build",
                 "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}},
        "parts": [{"id": format!("prt_{id}"), "sessionID": SES, "messageID": id, "type": "text", "text": text}]
    })
}

fn assistant_msg(id: &str, parent: &str, at: i64, text: &str) -> Value {
    json!({
        "info": {"id": id, "sessionID": SES, "role": "assistant", "time": {"created": at, "completed": at + 900},
                 "parentID": parent, "modelID": "claude-sonnet-4-5", "providerID": "anthropic",
                 "mode": "build", "agent": "build", "path": {"cwd": DIR, "root": DIR},
                 "cost": 0.01, "tokens": {"total": 8100, "input": 7000, "output": 100, "reasoning": 0,
                                          "cache": {"read": 1000, "write": 0}}, "finish": "stop"},
        "parts": [
            {"id": format!("prt_{id}_s"), "sessionID": SES, "messageID": id, "type": "step-start"},
            {"id": format!("prt_{id}_r"), "sessionID": SES, "messageID": id, "type": "reasoning", "text": "thinking it over"},
            {"id": format!("prt_{id}_t"), "sessionID": SES, "messageID": id, "type": "text", "text": text},
            {"id": format!("prt_{id}_f"), "sessionID": SES, "messageID": id, "type": "step-finish", "reason": "stop"}
        ]
    })
}

fn tool_only_msg(id: &str, parent: &str, at: i64) -> Value {
    json!({
        "info": {"id": id, "sessionID": SES, "role": "assistant", "time": {"created": at, "completed": at + 500},
                 "parentID": parent, "modelID": "claude-sonnet-4-5", "providerID": "anthropic",
                 "mode": "build", "agent": "build", "finish": "tool-calls"},
        "parts": [{"id": format!("prt_{id}_t"), "sessionID": SES, "messageID": id, "type": "tool",
                   "callID": "toolu_01", "tool": "read",
                   "state": {"status": "completed", "input": {"filePath": "/home/dev/shop/src/cart.rs"},
                             "output": "pub fn total() {}", "title": "src/cart.rs", "metadata": {},
                             "time": {"start": at, "end": at + 40}}}]
    })
}

/// OpenCode's compaction pair: the user message with a `compaction` part and
/// the finished `summary: true` reply; then the synthetic continue.
fn compaction(user_id: &str, summary_id: &str, at: i64) -> Vec<Value> {
    vec![
        json!({"info": {"id": user_id, "sessionID": SES, "role": "user", "time": {"created": at},
                        "agent": "build", "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}},
               "parts": [{"id": format!("prt_{user_id}"), "sessionID": SES, "messageID": user_id,
                          "type": "compaction", "auto": true}]}),
        json!({"info": {"id": summary_id, "sessionID": SES, "role": "assistant", "parentID": user_id,
                        "summary": true, "mode": "compaction", "agent": "compaction",
                        "providerID": "anthropic", "modelID": "claude-sonnet-4-5",
                        "path": {"cwd": DIR, "root": DIR}, "cost": 0.02,
                        "tokens": {"input": 90000, "output": 1800, "reasoning": 0, "cache": {"read": 0, "write": 0}},
                        "time": {"created": at + 100, "completed": at + 30_000}, "finish": "stop"},
               "parts": [{"id": format!("prt_{summary_id}"), "sessionID": SES, "messageID": summary_id,
                          "type": "text", "text": "## Goal\nFix the cart rounding.\n\n## Accomplished\n- found the bug"}]}),
        json!({"info": {"id": format!("{user_id}_go"), "sessionID": SES, "role": "user",
                        "time": {"created": at + 30_500}, "agent": "build",
                        "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}},
               "parts": [{"id": format!("prt_{user_id}_go"), "sessionID": SES, "messageID": format!("{user_id}_go"),
                          "type": "text", "synthetic": true,
                          "text": "Continue if you have next steps, or stop and ask for clarification if you are unsure how to proceed."}]}),
    ]
}

fn pins_of(list: &[(&str, i64, &str)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(id, at, role)| json!({"id": id, "createdAt": at, "role": role}))
            .collect(),
    )
}

const T: i64 = 1_796_030_100_000;

/// A session with two pinnable messages (a user rule and an assistant plan),
/// other metadata, a finished compaction, and the given pins.
fn server_with(pins: &[(&str, i64, &str)]) -> FakeOpenCode {
    let server = FakeOpenCode::start();
    server.add_session(session(
        SES,
        json!({
            "openchamber": {"context_obligatory_messages": pins_of(pins),
                            "goal": {"id": "goal_1", "text": "ship the fix"},
                            "knowledge_context_delivered": "sig-4be1"},
            "other_app": {"kept": true}
        }),
    ));
    server.add_message(user_msg(
        "msg_u1",
        T,
        "First: always run `just check` before committing.",
    ));
    server.add_message(assistant_msg(
        "msg_a1",
        "msg_u1",
        T + 1_000,
        "Second: the plan is 1) split Cart 2) round half-even.",
    ));
    server.add_message(tool_only_msg("msg_a2", "msg_u1", T + 2_000));
    server.add_message(user_msg("msg_u2", T + 60_000, "Go ahead."));
    for m in compaction("msg_c1", "msg_sum1", T + 120_000) {
        server.add_message(m);
    }
    server
}

fn compacted_event() -> String {
    json!({"directory": DIR, "project": "6f0e2a1c",
           "payload": {"id": "evt_22bbe7d43001ZnRr", "type": "session.compacted",
                       "properties": {"sessionID": SES}}})
    .to_string()
}

fn restore(env: &TestEnv, server: &FakeOpenCode, extra: &[&str], event: &str) -> Output {
    let mut args = vec!["restore", "--opencode-url", server.url()];
    args.extend_from_slice(extra);
    env.pin(&args, event)
}

fn cursor(server: &FakeOpenCode) -> Value {
    server.metadata(SES)["openchamber"]["context_obligatory_last_compaction_message_id"].clone()
}

fn writes(server: &FakeOpenCode) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

// ------------------------------------------------------- OpenCode: pin --

#[test]
fn pinning_merges_the_metadata_and_keeps_unrelated_keys() {
    let env = pin_env();
    let server = server_with(&[]);
    let url = server.url().to_string();
    let pin = |args: &[&str]| {
        let mut all = vec![args[0], "--opencode-url", &url, "--session", SES];
        all.extend_from_slice(&args[1..]);
        env.pin_ok(&all, "")
    };

    // Role and created time come from the message itself, whatever the flags say.
    let answer = pin(&[
        "pin",
        "--message",
        "msg_a1",
        "--role",
        "user",
        "--created-at",
        "1",
    ]);
    let expected =
        json!({"pins": [{"id": "msg_a1", "created_at": T + 1_000, "role": "assistant"}]});
    assert_eq!(answer, expected);
    let meta = server.metadata(SES);
    assert_eq!(meta["other_app"], json!({"kept": true}));
    assert_eq!(
        meta["openchamber"]["goal"],
        json!({"id": "goal_1", "text": "ship the fix"})
    );
    assert_eq!(
        meta["openchamber"]["knowledge_context_delivered"],
        "sig-4be1"
    );
    assert_eq!(
        meta["openchamber"]["context_obligatory_messages"],
        json!([{"id": "msg_a1", "createdAt": T + 1_000, "role": "assistant"}])
    );
    // Every write is a fresh read: GET the session right before the PATCH.
    let reqs = server.requests();
    let patch = reqs.iter().position(|r| r.method == "PATCH").unwrap();
    assert_eq!(reqs[patch - 1].method, "GET");
    assert_eq!(reqs[patch - 1].path, format!("/session/{SES}"));

    // Someone else (OpenChamber's UI) adds a key meanwhile: it survives the next write.
    let mut meta = server.metadata(SES);
    meta["openchamber"]["review"] = json!({"state": "open"});
    server.set_metadata(SES, meta);
    // The newest user message with text of its own: not the synthetic continue
    // after the compaction, nor the compaction request.
    let answer = pin(&["pin", "--last", "user"]);
    assert_eq!(
        answer["pins"][1],
        json!({"id": "msg_u2", "created_at": T + 60_000, "role": "user"})
    );
    assert_eq!(answer["pins"].as_array().unwrap().len(), 2);
    assert_eq!(
        server.metadata(SES)["openchamber"]["review"],
        json!({"state": "open"})
    );

    // Pinning again changes nothing and sends no PATCH.
    server.clear_requests();
    assert_eq!(pin(&["pin", "--message", "msg_a1"]), answer);
    assert!(writes(&server).is_empty(), "{:?}", writes(&server));

    // The list is mirrored into mc's database (what the transform reads).
    let local = env.pin_ok(&["list", "--session", SES], "");
    assert_eq!(local, answer);

    // Unpin twice: the second is a no-op with the same answer; the key stays as a list.
    let after = pin(&["unpin", "--message", "msg_u2"]);
    assert_eq!(after, expected);
    server.clear_requests();
    assert_eq!(pin(&["unpin", "--message", "msg_u2"]), expected);
    assert!(writes(&server).is_empty());
    assert_eq!(pin(&["unpin", "--message", "msg_a1"]), json!({"pins": []}));
    assert_eq!(
        server.metadata(SES)["openchamber"]["context_obligatory_messages"],
        json!([])
    );
    assert_eq!(server.metadata(SES)["other_app"], json!({"kept": true}));
    assert_eq!(
        env.pin_ok(&["list", "--session", SES], ""),
        json!({"pins": []})
    );
}

#[test]
fn pin_reads_its_request_from_stdin_and_the_server_from_the_environment() {
    let env = pin_env();
    let server = server_with(&[]);
    let mut cmd = env.db_command("mc-pin", &["pin"]);
    cmd.env("OPENCODE_URL", server.url());
    let request =
        json!({"harness": "opencode", "session_id": SES, "message_id": "msg_u1", "directory": DIR});
    let out = mc_tests::pipe(&mut cmd, request.to_string().as_bytes()).unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer,
        json!({"pins": [{"id": "msg_u1", "created_at": T, "role": "user"}]})
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.query_param("directory").as_deref() == Some(DIR)),
        "{:?}",
        server.requests()
    );
}

#[test]
fn pin_errors_are_one_line_with_the_right_exit_code() {
    let env = pin_env();
    let server = server_with(&[]);
    // An unknown message: the caller's mistake.
    let out = env.pin(
        &[
            "pin",
            "--opencode-url",
            server.url(),
            "--session",
            SES,
            "--message",
            "msg_nope",
        ],
        "",
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_one_error_line(&out);
    assert!(stderr(&out).contains("msg_nope"));
    // A server error: exit 1, with the URL and the server's answer.
    server.fail(
        "PATCH",
        &format!("/session/{SES}"),
        500,
        r#"{"name":"UnknownError","data":{"message":"disk full"}}"#,
    );
    let out = env.pin(
        &[
            "pin",
            "--opencode-url",
            server.url(),
            "--session",
            SES,
            "--message",
            "msg_u1",
        ],
        "",
    );
    assert_eq!(code(&out), 1);
    assert_one_error_line(&out);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}/session/{SES}", server.url()))
            && err.contains("500")
            && err.contains("disk full"),
        "{err}"
    );
    assert!(
        hint_lines(&out).is_empty(),
        "a server error has nothing to add: {err}"
    );
    // Nothing answers: exit 1.
    let out = env.pin(
        &[
            "list",
            "--opencode-url",
            "http://127.0.0.1:9",
            "--session",
            SES,
        ],
        "",
    );
    assert_eq!(code(&out), 1);
    assert_one_error_line(&out);
    assert!(
        stderr(&out).contains("cannot reach OpenCode"),
        "{}",
        stderr(&out)
    );
    // What to check is a hint line of its own, naming the URL and where it comes from.
    let hints = hint_lines(&out);
    assert_eq!(hints.len(), 1, "{}", stderr(&out));
    assert!(
        hints[0].contains("http://127.0.0.1:9") && hints[0].contains("OPENCODE_URL"),
        "{hints:?}"
    );
    // Usage: no message to pin, not JSON on stdin.
    let out = env.pin(&["pin", "--session", SES], "");
    assert_eq!(code(&out), 2);
    let out = env.pin(&["pin"], "not json");
    assert_eq!(code(&out), 2);
    assert_one_error_line(&out);
}

// --------------------------------------------------- OpenCode: restore --

#[test]
fn restore_sends_one_synthetic_message_in_chronological_order_then_the_cursor() {
    let env = pin_env();
    // Stored out of order: the assistant plan (newer) first.
    let server = server_with(&[("msg_a1", T + 1_000, "assistant"), ("msg_u1", T, "user")]);
    let out = restore(&env, &server, &[], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["action"], "restored");
    assert_eq!(report["compaction"], "msg_sum1");
    assert_eq!(report["restored"], json!(["msg_u1", "msg_a1"]));

    let prompts = server.prompts(SES);
    assert_eq!(prompts.len(), 1, "exactly one prompt_async");
    let body = &prompts[0];
    assert_eq!(body["parts"].as_array().unwrap().len(), 1);
    let part = &body["parts"][0];
    assert_eq!(
        (part["type"].as_str(), part["synthetic"].as_bool()),
        (Some("text"), Some(true))
    );
    assert_eq!(body["noReply"], true);
    assert_eq!(
        body["model"],
        json!({"providerID": "anthropic", "modelID": "claude-sonnet-4-5"})
    );
    assert_eq!(body["agent"], "build");
    let text = part["text"].as_str().unwrap();
    let (first, second) = (text.find("First:").unwrap(), text.find("Second:").unwrap());
    assert!(first < second, "chronological: {text}");
    for phrase in [
        "chronological order",
        "use them silently",
        "at most one short paragraph",
        "Only if no work remains",
    ] {
        assert!(text.contains(phrase), "{phrase}: {text}");
    }
    assert!(text.contains("## user — 2026-11-30T"), "{text}");
    assert!(
        !text.contains("pub fn total"),
        "tool output is not restored"
    );

    // The cursor was merged in after the send, from a fresh read; nothing else was lost.
    assert_eq!(cursor(&server), "msg_sum1");
    let meta = server.metadata(SES);
    assert_eq!(meta["other_app"], json!({"kept": true}));
    assert_eq!(meta["openchamber"]["goal"]["id"], "goal_1");
    assert_eq!(
        meta["openchamber"]["context_obligatory_messages"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let reqs = server.requests();
    let post = reqs.iter().position(|r| r.method == "POST").unwrap();
    let patch = reqs.iter().position(|r| r.method == "PATCH").unwrap();
    assert!(post < patch);
    assert_eq!(
        reqs[patch - 1].method,
        "GET",
        "fresh read before the cursor write"
    );
    let session_reads = reqs
        .iter()
        .filter(|r| r.method == "GET" && r.path == format!("/session/{SES}"))
        .count();
    assert_eq!(session_reads, 2);
    // Every call addressed the event's instance.
    assert!(
        reqs.iter()
            .all(|r| r.query_param("directory").as_deref() == Some(DIR)),
        "{reqs:?}"
    );
}

#[test]
fn restore_with_reply_lets_opencode_run_a_turn() {
    let env = pin_env();
    let server = server_with(&[("msg_u1", T, "user")]);
    let out = restore(&env, &server, &["--reply"], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.prompts(SES)[0]["noReply"], false);
}

#[test]
fn missing_pins_are_skipped_and_the_rest_is_sent() {
    let env = pin_env();
    let server = server_with(&[
        ("msg_u1", T, "user"),
        ("msg_gone", T + 500, "user"),
        ("msg_a2", T + 2_000, "assistant"), // tool output only: no text
        ("msg_a1", T + 1_000, "assistant"),
    ]);
    let out = restore(&env, &server, &[], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["restored"], json!(["msg_u1", "msg_a1"]));
    assert_eq!(report["missing"], json!(["msg_gone", "msg_a2"]));
    let prompts = server.prompts(SES);
    assert_eq!(prompts.len(), 1);
    let text = prompts[0]["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("First:") && text.contains("Second:"));
    assert_eq!(cursor(&server), "msg_sum1");
    // The stale entry stays in the list (OpenChamber's rule: skip the hole, keep the rest).
    assert_eq!(
        server.metadata(SES)["openchamber"]["context_obligatory_messages"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

#[test]
fn when_every_pin_is_missing_nothing_is_sent_and_the_cursor_stays() {
    let env = pin_env();
    let server = server_with(&[("msg_gone", T, "user")]);
    let out = restore(&env, &server, &[], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["action"].as_str(), report["reason"].as_str()),
        (Some("none"), Some("nothing_to_send"))
    );
    assert!(writes(&server).is_empty(), "{:?}", writes(&server));
    assert_eq!(cursor(&server), Value::Null);
}

#[test]
fn a_replayed_compaction_event_sends_nothing() {
    let env = pin_env();
    let server = server_with(&[("msg_u1", T, "user")]);
    let first = restore(&env, &server, &[], &compacted_event());
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(server.prompts(SES).len(), 1);
    server.clear_requests();
    // The same event again (an SSE reconnect), bare this time.
    let bare = json!({"id": "evt_22bbe7d43001ZnRr", "type": "session.compacted", "properties": {"sessionID": SES}});
    let again = restore(&env, &server, &[], &bare.to_string());
    assert!(again.status.success(), "{}", stderr(&again));
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(report["reason"], "already_restored");
    assert!(writes(&server).is_empty(), "{:?}", writes(&server));
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.path.contains("/message/")),
        "no pin was fetched: {:?}",
        server.requests()
    );
    // A new compaction has a new summary: restored again.
    for m in compaction("msg_c2", "msg_sum2", T + 600_000) {
        server.add_message(m);
    }
    let next = restore(&env, &server, &[], &compacted_event());
    assert!(next.status.success());
    assert_eq!(server.prompts(SES).len(), 1);
    assert_eq!(cursor(&server), "msg_sum2");
}

#[test]
fn racing_restorers_send_each_compaction_once() {
    for restorers in [2, 10] {
        let env = pin_env();
        let server = server_with(&[("msg_u1", T, "user"), ("msg_a1", T + 1_000, "assistant")]);
        let mut sent_per_round = Vec::new();
        for round in 1..=RACE_ROUNDS {
            if round > 1 {
                let at = T + 120_000 + (round as i64 - 1) * 600_000;
                for m in compaction(&format!("msg_c{round}"), &format!("msg_sum{round}"), at) {
                    server.add_message(m);
                }
            }
            let before = server.prompts(SES).len();
            let outs = race(
                &env,
                &["restore", "--opencode-url", server.url()],
                &compacted_event(),
                restorers,
            );
            let mut actions = Vec::new();
            for out in &outs {
                assert!(out.status.success(), "{}", stderr(out));
                let report: Value = serde_json::from_slice(&out.stdout).unwrap();
                actions.push(match report["action"].as_str() {
                    Some("restored") => "restored".to_string(),
                    _ => report["reason"].as_str().unwrap_or("?").to_string(),
                });
            }
            let sent = server.prompts(SES).len() - before;
            sent_per_round.push(sent);
            assert!(
                actions
                    .iter()
                    .all(|a| ["restored", "already_restored", "in_progress"].contains(&a.as_str())),
                "{actions:?}"
            );
            assert_eq!(cursor(&server), format!("msg_sum{round}"));
        }
        eprintln!(
            "{restorers} OpenCode restorers, prompt_async per compaction: {sent_per_round:?}"
        );
        assert!(
            sent_per_round.iter().all(|&n| n == 1),
            "{restorers} restorers racing: prompt_async per compaction {sent_per_round:?}, expected 1 each"
        );
    }
}

#[test]
fn idle_and_other_events_make_no_request_at_all() {
    let env = pin_env();
    let server = server_with(&[("msg_u1", T, "user")]);
    for event in [
        json!({"id": "evt_7", "type": "session.idle", "properties": {"sessionID": SES}}),
        json!({"directory": DIR, "payload": {"id": "evt_6", "type": "session.status",
               "properties": {"sessionID": SES, "status": {"type": "idle"}}}}),
        json!({"id": "evt_3", "type": "message.updated", "properties": {"sessionID": SES,
               "info": {"id": "msg_sum1", "role": "assistant", "summary": true}}}),
        json!({"id": "evt_1", "type": "server.connected", "properties": {}}),
    ] {
        let out = restore(&env, &server, &[], &event.to_string());
        assert!(out.status.success(), "{event}: {}", stderr(&out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["reason"], "not_a_compaction");
    }
    assert!(server.requests().is_empty(), "{:?}", server.requests());
}

#[test]
fn a_failed_prompt_async_leaves_the_cursor() {
    let env = pin_env();
    let server = server_with(&[("msg_u1", T, "user")]);
    server.fail(
        "POST",
        "/prompt_async",
        500,
        r#"{"name":"UnknownError","data":{"message":"session is busy"}}"#,
    );
    let out = restore(&env, &server, &[], &compacted_event());
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_one_error_line(&out);
    let err = stderr(&out);
    assert!(
        err.contains("prompt_async") && err.contains("500") && err.contains("session is busy"),
        "{err}"
    );
    assert_eq!(cursor(&server), Value::Null);
    assert!(!server.requests().iter().any(|r| r.method == "PATCH"));

    // A 200 with an HTML page (a web UI's fallback, not the API) is no success either.
    server.clear_failures();
    server.answer_html("POST", "/prompt_async");
    let out = restore(&env, &server, &[], &compacted_event());
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("not the OpenCode API"),
        "{}",
        stderr(&out)
    );
    assert_one_error_line(&out);
    assert!(
        hint_lines(&out)[0].contains(&format!(
            "is {} the URL of the OpenCode server",
            server.url()
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(cursor(&server), Value::Null);

    // Once the server works, the same compaction is restored.
    server.clear_failures();
    let out = restore(&env, &server, &[], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(cursor(&server), "msg_sum1");
}

#[test]
fn child_sessions_are_ignored() {
    let env = pin_env();
    let server = server_with(&[("msg_u1", T, "user")]);
    let mut child = server.session(SES);
    child["parentID"] = json!("ses_parent0000000000000000");
    server.add_session(child);
    let out = restore(&env, &server, &[], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["reason"], "child_session");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1, "only the session was read: {reqs:?}");
    assert_eq!(cursor(&server), Value::Null);
}

#[test]
fn an_unfinished_summary_is_not_answered() {
    let env = pin_env();
    let server = FakeOpenCode::start();
    server.add_session(session(
        SES,
        json!({"openchamber": {"context_obligatory_messages": pins_of(&[("msg_u1", T, "user")])}}),
    ));
    server.add_message(user_msg("msg_u1", T, "First"));
    let mut pair = compaction("msg_c1", "msg_sum1", T + 1_000);
    pair[1]["info"]["time"] = json!({"created": T + 1_100});
    server.add_message(pair[0].clone());
    server.add_message(pair[1].clone());
    let out = restore(&env, &server, &[], &compacted_event());
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["reason"], "summary_unfinished");
    assert!(writes(&server).is_empty());
}

#[test]
fn dry_run_prints_the_requests_and_sends_nothing() {
    let env = pin_env();
    let server = server_with(&[("msg_u1", T, "user")]);
    let out = restore(&env, &server, &["--dry-run"], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["action"], "dry_run");
    let requests = report["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["method"], "POST");
    assert!(
        requests[0]["url"]
            .as_str()
            .unwrap()
            .contains(&format!("/session/{SES}/prompt_async?directory="))
    );
    assert!(
        requests[0]["body"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("First:")
    );
    assert_eq!(requests[1]["method"], "PATCH");
    assert_eq!(
        requests[1]["body"]["metadata"]["openchamber"]["context_obligatory_last_compaction_message_id"],
        "msg_sum1"
    );
    assert_eq!(
        requests[1]["body"]["metadata"]["other_app"],
        json!({"kept": true})
    );
    assert!(writes(&server).is_empty(), "{:?}", writes(&server));
    assert_eq!(cursor(&server), Value::Null);

    // pin --dry-run shows the PATCH and changes nothing, here or in mc's database.
    let answer = env.pin_ok(
        &[
            "pin",
            "--dry-run",
            "--opencode-url",
            server.url(),
            "--session",
            SES,
            "--message",
            "msg_a1",
        ],
        "",
    );
    assert_eq!(answer["dry_run"], true);
    assert_eq!(answer["pins"].as_array().unwrap().len(), 2);
    assert_eq!(answer["requests"][0]["method"], "PATCH");
    assert!(writes(&server).is_empty());
    assert_eq!(
        server.metadata(SES)["openchamber"]["context_obligatory_messages"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn restore_errors_unreachable_server_and_malformed_events() {
    let env = pin_env();
    let out = env.pin(
        &["restore", "--opencode-url", "http://127.0.0.1:9"],
        &compacted_event(),
    );
    assert_eq!(code(&out), 1);
    assert_one_error_line(&out);
    assert!(stderr(&out).contains("127.0.0.1:9"), "{}", stderr(&out));
    for bad in [
        "not json",
        "[1,2]",
        r#"{"hello": "world"}"#,
        r#"{"type": "session.compacted", "properties": {}}"#,
    ] {
        let out = env.pin(&["restore", "--opencode-url", "http://127.0.0.1:9"], bad);
        assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
        assert_one_error_line(&out);
        assert!(out.stdout.is_empty());
    }
    // A compaction event without a server to talk to is a usage error.
    let out = env.pin(&["restore"], &compacted_event());
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("OPENCODE_URL"));
    assert_one_error_line(&out);
    assert_eq!(
        hint_lines(&out),
        ["pass --opencode-url URL or set OPENCODE_URL"]
    );
}

// --------------------------------------------- Claude Code transcripts --

const CC_SESSION: &str = "7d3c2b1a-5e4f-4a9b-8c7d-6e5f4a3b2c1d";
const CC_CWD: &str = "/home/dev/shop";

/// A transcript line with the fields Claude Code writes on every conversation line.
fn cc_line(kind: &str, uuid: &str, parent: Option<&str>, ts: &str, extra: Value) -> Value {
    let mut line = json!({
        "parentUuid": parent, "isSidechain": false, "type": kind, "uuid": uuid, "timestamp": ts,
        "userType": "external", "entrypoint": "cli", "cwd": CC_CWD, "sessionId": CC_SESSION,
        "version": "2.1.197", "gitBranch": "main",
    });
    for (k, v) in extra.as_object().unwrap() {
        line[k] = v.clone();
    }
    line
}

fn cc_user(uuid: &str, parent: Option<&str>, ts: &str, text: &str) -> Value {
    cc_line(
        "user",
        uuid,
        parent,
        ts,
        json!({"promptId": "p-1", "permissionMode": "default",
                                             "message": {"role": "user", "content": text}}),
    )
}

fn cc_assistant(
    uuid: &str,
    parent: &str,
    ts: &str,
    api_id: &str,
    block: Value,
    stop: Option<&str>,
) -> Value {
    cc_line(
        "assistant",
        uuid,
        Some(parent),
        ts,
        json!({"requestId": "req_011CW", "message": {
        "id": api_id, "type": "message", "role": "assistant", "model": "claude-opus-4-8",
        "content": [block], "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 80, "cache_read_input_tokens": 19000,
                  "output_tokens": 30, "service_tier": "standard"}}}),
    )
}

/// A session: a pinned rule, a multi-line reply with a tool call and its
/// result, a pinned plan, then an auto-compaction (boundary + summary).
fn cc_transcript(extra_pins: &[(String, String)]) -> Vec<Value> {
    let mut lines = vec![
        json!({"type": "queue-operation", "operation": "enqueue", "timestamp": "2026-11-30T09:00:00.000Z",
               "sessionId": CC_SESSION, "content": "Rules first."}),
        cc_user(
            "u-rule",
            None,
            "2026-11-30T09:00:00.100Z",
            "Rule: never edit files under migrations/.",
        ),
        cc_line(
            "user",
            "u-meta",
            Some("u-rule"),
            "2026-11-30T09:00:00.200Z",
            json!({"isMeta": true, "message": {"role": "user", "content": "<local-command-caveat>Caveat</local-command-caveat>"}}),
        ),
        cc_assistant(
            "a-1",
            "u-rule",
            "2026-11-30T09:00:03.000Z",
            "msg_01A",
            json!({"type": "text", "text": "Understood. Checking the schema."}),
            None,
        ),
        cc_assistant(
            "a-2",
            "a-1",
            "2026-11-30T09:00:03.200Z",
            "msg_01A",
            json!({"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls migrations"}}),
            Some("tool_use"),
        ),
        cc_line(
            "user",
            "r-1",
            Some("a-2"),
            "2026-11-30T09:00:04.000Z",
            json!({"message": {"role": "user", "content": [{"tool_use_id": "toolu_01", "type": "tool_result",
                       "content": "0001_init.sql", "is_error": false}]},
                       "toolUseResult": {"stdout": "0001_init.sql", "stderr": "", "interrupted": false, "isImage": false},
                       "sourceToolAssistantUUID": "a-2"}),
        ),
        cc_assistant(
            "a-3",
            "r-1",
            "2026-11-30T09:00:06.000Z",
            "msg_01B",
            json!({"type": "text", "text": "Plan: add 0002_rounding.sql; leave 0001 alone."}),
            Some("end_turn"),
        ),
    ];
    let mut parent = "a-3".to_string();
    for (i, (uuid, text)) in extra_pins.iter().enumerate() {
        let ts = format!("2026-11-30T09:{:02}:00.000Z", 10 + i);
        lines.push(cc_user(uuid, Some(&parent), &ts, text));
        parent = uuid.clone();
    }
    lines.extend([
        json!({"type": "last-prompt", "lastPrompt": "Rules first.", "leafUuid": parent, "sessionId": CC_SESSION}),
        cc_line("system", "cb-1", None, "2026-11-30T10:00:00.000Z",
                json!({"logicalParentUuid": parent, "subtype": "compact_boundary", "content": "Conversation compacted",
                       "isMeta": false, "level": "info",
                       "compactMetadata": {"trigger": "auto", "preTokens": 167000, "durationMs": 74}})),
        cc_line("user", "s-1", Some("cb-1"), "2026-11-30T10:00:00.500Z",
                json!({"isCompactSummary": true, "isVisibleInTranscriptOnly": true, "promptId": "p-2",
                       "message": {"role": "user", "content": "This session is being continued from a previous conversation that ran out of context. The summary below covers the earlier portion of the conversation.\n\nSummary:\n1. Primary Request and Intent: fix rounding."}})),
    ]);
    lines
}

fn write_jsonl(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

fn hook_input(transcript: &Path, source: &str) -> String {
    json!({"session_id": CC_SESSION, "transcript_path": transcript, "cwd": CC_CWD,
           "hook_event_name": "SessionStart", "source": source, "model": "claude-opus-4-8"})
    .to_string()
}

fn cc_pin(env: &TestEnv, transcript: &Path, target: &[&str]) -> Value {
    let mut args = vec![
        "pin",
        "--harness",
        "claude-code",
        "--session",
        CC_SESSION,
        "--transcript",
    ];
    let path = transcript.to_str().unwrap();
    args.push(path);
    args.extend_from_slice(target);
    env.pin_ok(&args, "")
}

fn hook(env: &TestEnv, input: &str) -> Output {
    env.pin(&["restore", "--harness", "claude-code"], input)
}

fn additional_context(out: &Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("hook output is not JSON ({e}): {}", stdout(out)));
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn claude_code_restore_prints_the_pins_from_the_transcript_once() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    write_jsonl(&transcript, &cc_transcript(&[]));
    // The rule by uuid; the plan as "the last assistant message".
    let answer = cc_pin(&env, &transcript, &["--message", "u-rule"]);
    assert_eq!(
        answer["pins"][0],
        json!({"id": "u-rule", "created_at": 1_796_029_200_100i64, "role": "user"})
    );
    // A line in the middle of a multi-line reply pins the whole reply (its first line's uuid).
    let answer = cc_pin(&env, &transcript, &["--message", "a-2"]);
    assert_eq!(answer["pins"][1]["id"], "a-1");
    let answer = cc_pin(&env, &transcript, &["--last", "assistant"]);
    let ids: Vec<&str> = answer["pins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["u-rule", "a-1", "a-3"]);

    let context = additional_context(&hook(&env, &hook_input(&transcript, "compact")));
    assert!(context.len() <= 10_000);
    let rule = context
        .find("Rule: never edit files under migrations/.")
        .unwrap();
    let reply = context.find("Understood. Checking the schema.").unwrap();
    let plan = context.find("Plan: add 0002_rounding.sql").unwrap();
    assert!(rule < reply && reply < plan, "{context}");
    assert!(
        context.contains("## user — 2026-11-30T09:00:00.100Z"),
        "{context}"
    );
    assert!(
        context.contains("use them silently") && context.contains("at most one short paragraph")
    );
    assert!(
        !context.contains("0001_init.sql"),
        "tool results are not restored"
    );
    assert!(!context.contains("Caveat"));

    // The cursor is the summary line: the same compaction is not restored twice.
    let again = hook(&env, &hook_input(&transcript, "compact"));
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(again.stdout.is_empty(), "{}", stdout(&again));
    let db = db_cursor(&env);
    assert_eq!(db.as_deref(), Some("s-1"));

    // A second compaction later in the same file is restored again.
    let mut lines = cc_transcript(&[]);
    lines.push(cc_line("system", "cb-2", None, "2026-11-30T12:00:00.000Z",
        json!({"logicalParentUuid": "s-1", "subtype": "compact_boundary", "content": "Conversation compacted",
               "isMeta": false, "level": "info", "compactMetadata": {"trigger": "manual", "preTokens": 120000}})));
    write_jsonl(&transcript, &lines);
    let context = additional_context(&hook(&env, &hook_input(&transcript, "compact")));
    assert!(context.contains("Rule: never edit"));
    assert_eq!(db_cursor(&env).as_deref(), Some("cb-2"));
}

/// `claude -p` / `codex exec` run as the historian's model fire the user's
/// hooks too; the variable the historian sets on them makes mc's hooks there
/// print nothing and record nothing.
#[test]
fn hooks_inside_the_historians_own_program_leave_no_trace() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    write_jsonl(&transcript, &cc_transcript(&[]));
    cc_pin(&env, &transcript, &["--message", "u-rule"]);
    let input = hook_input(&transcript, "compact");
    let current = |env: &TestEnv| -> i64 {
        let store = mc_base::store::Store::open(&env.db(), &Default::default()).unwrap();
        store
            .conn()
            .query_row("SELECT count(*) FROM current_sessions", [], |r| r.get(0))
            .unwrap()
    };
    let as_child = |bin: &str, args: &[&str]| {
        let mut command = env.db_command(bin, args);
        command.env("MC_HISTORIAN_CHILD", "1");
        mc_tests::pipe(&mut command, input.as_bytes()).unwrap()
    };

    let out = as_child("mc-pin", &["restore", "--harness", "claude-code"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    let out = as_child("mc-search", &["session-start", "--harness", "claude-code"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "{}");
    assert_eq!(
        current(&env),
        0,
        "the historian's call became the folder's session"
    );

    // The same input in the user's own session restores and records.
    let context = additional_context(&hook(&env, &input));
    assert!(context.contains("Rule: never edit"), "{context}");
    assert_eq!(current(&env), 1);
}

#[test]
fn racing_hooks_print_each_compaction_once() {
    let printed = |outs: &[Output]| {
        for out in outs {
            assert!(out.status.success(), "{}", stderr(out));
        }
        outs.iter().filter(|o| !o.stdout.is_empty()).count()
    };
    for restorers in [2, 10] {
        let env = pin_env();
        let transcript = env.path("session.jsonl");
        let mut lines = cc_transcript(&[]);
        write_jsonl(&transcript, &lines);
        cc_pin(&env, &transcript, &["--message", "u-rule"]);
        let mut printed_per_round = Vec::new();
        for round in 1..=RACE_ROUNDS {
            if round > 1 {
                let hour = 10 + round;
                lines.push(cc_line("system", &format!("cb-{round}"), None, &format!("2026-11-30T{hour}:00:00.000Z"),
                    json!({"subtype": "compact_boundary", "content": "Conversation compacted",
                           "isMeta": false, "level": "info", "compactMetadata": {"trigger": "auto", "preTokens": 160000}})));
                lines.push(cc_line("user", &format!("s-{round}"), Some(&format!("cb-{round}")),
                    &format!("2026-11-30T{hour}:00:00.500Z"),
                    json!({"isCompactSummary": true, "isVisibleInTranscriptOnly": true,
                           "message": {"role": "user", "content": "This session is being continued from a previous conversation."}})));
                write_jsonl(&transcript, &lines);
            }
            let outs = race(
                &env,
                &["restore", "--harness", "claude-code"],
                &hook_input(&transcript, "compact"),
                restorers,
            );
            printed_per_round.push(printed(&outs));
            assert_eq!(db_cursor(&env), Some(format!("s-{round}")));
        }
        eprintln!("{restorers} Claude Code hooks, outputs per compaction: {printed_per_round:?}");
        assert!(
            printed_per_round.iter().all(|&n| n == 1),
            "{restorers} hooks racing: hookSpecificOutput per compaction {printed_per_round:?}, expected 1 each"
        );
    }

    // The transcript lags the hook and shows no mark of the compaction yet:
    // the hooks still agree on one.
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    let mut lines = cc_transcript(&[]);
    lines.truncate(lines.len() - 2);
    write_jsonl(&transcript, &lines);
    cc_pin(&env, &transcript, &["--message", "u-rule"]);
    let outs = race(
        &env,
        &["restore", "--harness", "claude-code"],
        &hook_input(&transcript, "compact"),
        10,
    );
    assert_eq!(printed(&outs), 1, "10 hooks, no marks in the transcript");
}

/// mc-pin with a deadline: a process that would read (or wait on) its input
/// forever is killed and the test fails instead of hanging.
fn pin_within(env: &TestEnv, args: &[&str], stdin: &str) -> Output {
    env.run_db_within("mc-pin", args, stdin, std::time::Duration::from_secs(20))
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

#[cfg(unix)]
#[test]
fn transcripts_that_are_no_regular_file_are_refused_at_once() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    write_jsonl(&transcript, &cc_transcript(&[]));
    let fifo = env.path("fifo.jsonl");
    mkfifo(&fifo);
    let folder = env.path("folder.jsonl");
    std::fs::create_dir(&folder).unwrap();
    let cases = [
        (fifo.to_str().unwrap(), "a FIFO"),
        (folder.to_str().unwrap(), "a directory"),
        ("/dev/zero", "a character device"),
    ];
    for (bad, what) in cases {
        cc_pin(&env, &transcript, &["--message", "u-rule"]);
        let with = |action: &str, more: &[&str]| {
            let mut args = vec![
                action,
                "--harness",
                "claude-code",
                "--session",
                CC_SESSION,
                "--transcript",
                bad,
            ];
            args.extend_from_slice(more);
            pin_within(&env, &args, "")
        };
        // pin needs the transcript: refused, exit 2, one line saying what it is.
        let out = with("pin", &["--message", "a-3"]);
        assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
        assert_one_error_line(&out);
        assert!(
            stderr(&out).contains(what) && stderr(&out).contains("not a regular file"),
            "{}",
            stderr(&out)
        );
        // list never reads it; unpin of a pinned id does not either.
        let out = with("list", &[]);
        assert!(out.status.success(), "{bad}: {}", stderr(&out));
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listed["pins"][0]["id"], "u-rule");
        let out = with("unpin", &["--message", "u-rule"]);
        assert!(out.status.success(), "{bad}: {}", stderr(&out));
        // The hook: one error line, exit 1 (never 2), nothing on stdout.
        cc_pin(&env, &transcript, &["--message", "u-rule"]);
        let out = pin_within(
            &env,
            &["restore", "--harness", "claude-code"],
            &hook_input(Path::new(bad), "compact"),
        );
        assert_eq!(code(&out), 1, "{bad}: {}", stderr(&out));
        assert_one_error_line(&out);
        assert!(stderr(&out).contains(what), "{}", stderr(&out));
        assert!(out.stdout.is_empty());
        let out = with("unpin", &["--message", "u-rule"]);
        assert!(out.status.success(), "{bad}: {}", stderr(&out));
    }
}

/// Codex's hook reads Codex's `config.toml` to know whether its calls go
/// through mc's gateway: a FIFO there is not opened (opening it would wait
/// for a writer), the hook answers at once as if there were no config.
#[cfg(unix)]
#[test]
fn a_codex_config_that_is_no_regular_file_does_not_hold_the_hook() {
    let env = pin_env();
    let input = json!({"session_id": "019a0000-0000-7000-8000-00000000fifo", "cwd": env.root(),
        "hook_event_name": "SessionStart", "source": "startup", "model": "gpt-5"})
    .to_string();
    let restore = |env: &TestEnv| pin_within(env, &["restore", "--harness", "codex"], &input);
    let plain = restore(&env);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let codex_home = env.home().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    mkfifo(&codex_home.join("config.toml"));
    let fifo = restore(&env);
    assert!(fifo.status.success(), "{}", stderr(&fifo));
    assert_eq!(stdout(&fifo), stdout(&plain));
}

#[test]
fn transcripts_over_the_size_cap_are_refused() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    write_jsonl(&transcript, &cc_transcript(&[]));
    cc_pin(&env, &transcript, &["--message", "u-rule"]);
    // Past the default cap (256 MiB), sparse: refused before a byte is read.
    let huge = env.path("huge.jsonl");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(256 * 1024 * 1024 + 1)
        .unwrap();
    let pin_args = |path: &Path| {
        vec![
            "pin".to_string(),
            "--harness".into(),
            "claude-code".into(),
            "--session".into(),
            CC_SESSION.into(),
            "--transcript".into(),
            path.display().to_string(),
            "--message".into(),
            "a-3".into(),
        ]
    };
    let args = pin_args(&huge);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = pin_within(&env, &args, "");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_one_error_line(&out);
    assert!(
        stderr(&out).contains("larger than 268435456 bytes")
            && stderr(&out).contains("transcript.max_bytes"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        hint_lines(&out),
        [
            "raise transcript.max_bytes in the user config if this file is really the \
          session's transcript"
        ]
    );
    // A lower cap in the user config: a real transcript over it is refused,
    // by pin and by the hook alike.
    env.user_config(r#"{"transcript": {"max_bytes": 1048576}}"#);
    let big = env.path("big.jsonl");
    let padding: Vec<(String, String)> = (0..12)
        .map(|i| (format!("u-pad-{i}"), "x".repeat(100_000)))
        .collect();
    write_jsonl(&big, &cc_transcript(&padding));
    assert!(std::fs::metadata(&big).unwrap().len() > 1 << 20);
    let args = pin_args(&big);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = pin_within(&env, &args, "");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("larger than 1048576 bytes"),
        "{}",
        stderr(&out)
    );
    let out = hook(&env, &hook_input(&big, "compact"));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    // Within the cap, the same hook restores.
    assert!(additional_context(&hook(&env, &hook_input(&transcript, "compact"))).contains("Rule:"));
}

#[test]
fn an_invalid_byte_costs_at_most_its_line() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    let mut text: Vec<u8> = Vec::new();
    for line in cc_transcript(&[]) {
        text.extend_from_slice(line.to_string().as_bytes());
        text.push(b'\n');
    }
    // One byte that is not UTF-8, inside the plan's text, and one line that
    // is not JSON at all.
    let at = text.windows(5).position(|w| w == b"alone").unwrap();
    text[at] = 0xff;
    text.extend_from_slice(b"{\"type\": \"user\", \xff torn\n");
    std::fs::write(&transcript, &text).unwrap();

    cc_pin(&env, &transcript, &["--message", "u-rule"]);
    let answer = cc_pin(&env, &transcript, &["--last", "assistant"]);
    assert_eq!(answer["pins"][1]["id"], "a-3");
    let out = hook(&env, &hook_input(&transcript, "compact"));
    let context = additional_context(&out);
    assert!(context.contains("Rule: never edit files under migrations/."));
    assert!(
        context.contains("Plan: add 0002_rounding.sql; leave 0001 \u{fffd}lone."),
        "{context}"
    );
    let err = stderr(&out);
    assert!(
        err.contains("invalid UTF-8") && err.contains("skipped it"),
        "{err}"
    );
}

#[test]
fn non_ascii_timestamps_do_not_stop_a_restore() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    let mut lines = cc_transcript(&[]);
    // Byte slicing of these used to panic (exit 101) in pin and in the hook.
    for (line, ts) in lines.iter_mut().skip(3).zip([
        "2026-11-30T09:00:03+0é:0",
        "2026-11-30T09:00:03é0:00",
        "２０２６-11-30T09:00:04Z",
    ]) {
        line["timestamp"] = json!(ts);
    }
    let n = lines.len();
    lines[n - 2]["timestamp"] = json!("2026-11-30T10:00:00+0€:0");
    write_jsonl(&transcript, &lines);
    cc_pin(&env, &transcript, &["--message", "u-rule"]);
    let out = hook(&env, &hook_input(&transcript, "compact"));
    assert!(additional_context(&out).contains("Rule: never edit"));
    assert_eq!(db_cursor(&env).as_deref(), Some("s-1"));
}

/// The Claude Code cursor in mc's database, read through the public store API.
fn db_cursor(env: &TestEnv) -> Option<String> {
    let store = mc_base::store::Store::open(&env.db(), &Default::default()).unwrap();
    let row = mc_pin_core::local::session_row(store.conn(), "claude-code", CC_SESSION)
        .unwrap()
        .unwrap();
    mc_pin_core::local::cursor(store.conn(), row).unwrap()
}

#[test]
fn claude_code_restore_stays_within_ten_thousand_characters() {
    let env = pin_env();
    let transcript = env.path("big.jsonl");
    let big: Vec<(String, String)> = (0..6)
        .map(|i| {
            (
                format!("u-big-{i}"),
                format!("Pinned note {i}: {}", "é".repeat(2_600)),
            )
        })
        .collect();
    write_jsonl(&transcript, &cc_transcript(&big));
    for (uuid, _) in &big {
        cc_pin(&env, &transcript, &["--message", uuid]);
    }
    let out = hook(&env, &hook_input(&transcript, "compact"));
    let context = additional_context(&out);
    assert!(
        context.encode_utf16().count() <= 10_000,
        "{}",
        context.encode_utf16().count()
    );
    // The newest pins are whole, the oldest were left out, and the text says which.
    for kept in 3..6 {
        assert!(
            context.contains(&format!("Pinned note {kept}: {}", "é".repeat(2_600))),
            "note {kept}"
        );
    }
    assert!(!context.contains("Pinned note 0"));
    assert!(
        context.contains("left out: u-big-0, u-big-1, u-big-2"),
        "{}",
        &context[..1500]
    );
    assert!(stderr(&out).contains("left out"), "{}", stderr(&out));
}

#[test]
fn non_compact_sources_and_other_hooks_produce_nothing() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    write_jsonl(&transcript, &cc_transcript(&[]));
    cc_pin(&env, &transcript, &["--message", "u-rule"]);
    // No history or memory for the project, and no compaction to answer.
    for source in ["startup", "clear", "fork"] {
        let out = hook(&env, &hook_input(&transcript, source));
        assert!(out.status.success(), "{source}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{source}: {}", stdout(&out));
    }
    for input in [
        json!({"session_id": CC_SESSION, "transcript_path": transcript, "cwd": CC_CWD,
               "hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": null}),
        json!({"session_id": CC_SESSION, "transcript_path": transcript, "cwd": CC_CWD,
               "hook_event_name": "PostCompact", "trigger": "auto", "compact_summary": "Summary"}),
        json!({"session_id": CC_SESSION, "transcript_path": transcript, "cwd": CC_CWD, "permission_mode": "default",
               "hook_event_name": "Stop", "stop_hook_active": false, "last_assistant_message": "Done."}),
    ] {
        let out = env.pin(&["restore"], &input.to_string());
        assert!(out.status.success(), "{input}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{input}: {}", stdout(&out));
    }
    assert_eq!(db_cursor(&env), None, "no cursor was recorded");
    // A resume finds the transcript's compaction answered by no hook (the
    // hook was not set up then) and answers it; the compact hook of that
    // compaction, and the next resume, then add nothing.
    assert!(additional_context(&hook(&env, &hook_input(&transcript, "resume"))).contains("Rule:"));
    for source in ["compact", "resume"] {
        let out = hook(&env, &hook_input(&transcript, source));
        assert!(out.status.success(), "{source}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{source}: {}", stdout(&out));
    }
}

#[test]
fn claude_code_hook_never_exits_2_and_dry_run_advances_no_cursor() {
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    write_jsonl(&transcript, &cc_transcript(&[]));
    cc_pin(&env, &transcript, &["--message", "u-rule"]);

    // Dry run: the same output, no cursor; the real run afterwards still restores.
    let dry = env.pin(
        &["restore", "--harness", "claude-code", "--dry-run"],
        &hook_input(&transcript, "compact"),
    );
    assert!(additional_context(&dry).contains("Rule:"));
    assert_eq!(db_cursor(&env), None);
    assert!(additional_context(&hook(&env, &hook_input(&transcript, "compact"))).contains("Rule:"));

    // Broken inputs: one error line, exit 1, never 2 (which a SessionStart hook only shows as an error).
    let missing = hook_input(&env.path("no-such.jsonl"), "compact");
    for input in [
        "not json",
        r#"{"hook_event_name": "SessionStart", "source": "compact"}"#,
        missing.as_str(),
    ] {
        let out = hook(&env, input);
        assert_eq!(code(&out), 1, "{input}: {}", stderr(&out));
        assert_one_error_line(&out);
        assert!(out.stdout.is_empty());
    }
    // Without --harness, a hook input is still recognised and never answered with 2.
    let out = env.pin(
        &["restore"],
        r#"{"hook_event_name": "SessionStart", "source": "compact"}"#,
    );
    assert_eq!(code(&out), 1);
    // A session with no pins and no transcript yet: nothing, exit 0.
    let other = hook_input(&env.path("other.jsonl"), "compact")
        .replace(CC_SESSION, "00000000-0000-0000-0000-000000000000");
    let out = hook(&env, &other);
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        stderr(&out)
    );
    // Another session's transcript is refused, naming both (exit 1, not 2).
    let foreign = hook_input(&transcript, "compact")
        .replace(CC_SESSION, "00000000-0000-0000-0000-000000000000");
    let out = hook(&env, &foreign);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_one_error_line(&out);
    assert!(
        stderr(&out).contains(&format!("belongs to session {CC_SESSION}, not 00000000-")),
        "{}",
        stderr(&out)
    );
}

// ------------------------------------------------------- with transform --

const TX_SESSION: &str = "ses_pin_transform";
const T0: i64 = 1_800_000_000_000;

fn tx_user(id: &str, text: &str, at: i64) -> Value {
    json!({"info": {"id": id, "sessionID": TX_SESSION, "role": "user", "time": {"created": at},
                    "agent": "build", "model": {"providerID": "anthropic", "modelID": "m"}},
           "parts": [{"id": format!("prt_{id}"), "sessionID": TX_SESSION, "messageID": id, "type": "text", "text": text}]})
}

fn tx_tool_step(id: &str, call: &str, tool: &str, output: &str, at: i64) -> Value {
    json!({"info": {"id": id, "sessionID": TX_SESSION, "role": "assistant", "finish": "tool-calls",
                    "time": {"created": at, "completed": at + 500}, "providerID": "anthropic", "modelID": "m"},
           "parts": [
               {"id": format!("{id}_a"), "type": "step-start"},
               {"id": format!("{id}_t"), "type": "text", "text": format!("running {call}")},
               {"id": format!("{id}_b"), "type": "tool", "callID": call, "tool": tool,
                "state": {"status": "completed", "input": {"command": format!("step {call}")},
                          "output": output, "title": call, "metadata": {}, "time": {"start": at, "end": at + 100}}},
               {"id": format!("{id}_c"), "type": "step-finish", "reason": "tool-calls"}]})
}

fn tx_answer(id: &str, text: &str, at: i64) -> Value {
    json!({"info": {"id": id, "sessionID": TX_SESSION, "role": "assistant", "finish": "stop",
                    "time": {"created": at, "completed": at + 500}, "providerID": "anthropic", "modelID": "m"},
           "parts": [{"id": format!("{id}_t"), "type": "text", "text": text}]})
}

/// Turns of: user, two bash steps with ~400-token outputs, an answer.
fn tx_session(turns: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for t in 0..turns {
        let at = T0 + t as i64 * 60_000;
        out.push(tx_user(
            &format!("msg_{t:02}_u"),
            &format!("please do step {t}"),
            at,
        ));
        for s in 0..2 {
            let body = format!("line {t}.{s}: cargo build output for the cart module\n").repeat(40);
            out.push(tx_tool_step(
                &format!("msg_{t:02}_s{s}"),
                &format!("call_{t}_{s}"),
                "bash",
                &body,
                at + 1_000 + s as i64 * 1_000,
            ));
        }
        out.push(tx_answer(
            &format!("msg_{t:02}_z"),
            &format!("done with {t}"),
            at + 5_000,
        ));
    }
    out
}

fn transform(env: &TestEnv, messages: &[Value], percent: u64) -> Value {
    let now = T0 + 60 * 60_000;
    let envelope = json!({
        "harness": "opencode", "session_id": TX_SESSION, "project_dir": env.root(),
        "model": {"provider": "anthropic", "id": "m", "context_limit": 100_000, "output_limit": 0},
        "usage": {"input": percent * 1000, "cache_read": 0, "cache_write": 0, "output": 10},
        "now_ms": now, "messages": messages,
    });
    // Age-based reclaim off: this test is about the agent's drops and the emergency's.
    let config = env.path("no-reclaim.jsonc");
    std::fs::write(&config, r#"{"transform": {"tool_reclaim": false}}"#).unwrap();
    let out = env.run_db(
        "mc-transform",
        &["--config", config.to_str().unwrap()],
        &envelope.to_string(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ne!(v["pass"]["decision"], "passthrough", "{}", v["pass"]);
    v
}

/// The tool output of `call` in a pass's output (`None` once a full drop removed the part).
fn tool_output(pass: &Value, call: &str) -> Option<String> {
    pass["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .find(|p| p["callID"] == call)
        .and_then(|p| p["state"]["output"].as_str())
        .map(str::to_string)
}

fn dropped_tags(pass: &Value) -> Vec<i64> {
    pass["pass"]["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_i64().unwrap())
        .collect()
}

/// Gone from the wire: removed whole, or its output replaced by the placeholder.
fn assert_dropped(pass: &Value, call: &str, tag: i64) {
    match tool_output(pass, call) {
        None => {}
        Some(output) => assert_eq!(output, format!("[dropped §{tag}§]")),
    }
}

fn assert_intact(pass: &Value, call: &str, tag: i64, start: &str) {
    let output = tool_output(pass, call).unwrap_or_else(|| panic!("{call} is gone"));
    assert!(output.starts_with(&format!("§{tag}§ {start}")), "{output}");
}

/// The `§N§` tag number an output starts with.
fn tag_of(output: &str) -> i64 {
    let rest = output.strip_prefix('§').expect("a tagged output");
    rest[..rest.find('§').unwrap()].parse().unwrap()
}

#[test]
fn a_pinned_message_survives_a_ctx_reduce_drop_and_an_emergency_drop() {
    let env = pin_env();
    let messages = tx_session(12);
    let first = transform(&env, &messages, 30);
    let tag = |call: &str| tag_of(&tool_output(&first, call).unwrap());
    let (pinned_tag, neighbour_tag, older_tag) =
        (tag("call_0_1"), tag("call_0_0"), tag("call_1_0"));

    // Pin the oldest bash step without a server: role and time come from what the transform saw.
    let answer = env.pin_ok(
        &[
            "pin",
            "--harness",
            "opencode",
            "--session",
            TX_SESSION,
            "--message",
            "msg_00_s1",
        ],
        "",
    );
    assert_eq!(
        answer,
        json!({"pins": [{"id": "msg_00_s1", "created_at": T0 + 2_000, "role": "assistant"}]})
    );

    // The agent asks to drop both; only the unpinned one goes, on the next busting pass.
    let drop = format!("{neighbour_tag},{pinned_tag}");
    let reduce = env.run_db(
        "mc-transform",
        &["reduce", "--session", TX_SESSION, "--drop", &drop],
        "",
    );
    assert!(reduce.status.success(), "{}", stderr(&reduce));
    let executed = transform(&env, &messages, 70);
    assert_eq!(
        executed["pass"]["decision"], "execute",
        "{}",
        executed["pass"]
    );
    assert!(
        dropped_tags(&executed).contains(&neighbour_tag),
        "{}",
        executed["pass"]
    );
    assert!(
        !dropped_tags(&executed).contains(&pinned_tag),
        "{}",
        executed["pass"]
    );
    assert_dropped(&executed, "call_0_0", neighbour_tag);
    assert_intact(&executed, "call_0_1", pinned_tag, "line 0.1");

    // The emergency band evicts old bash outputs oldest first — but never the pinned one.
    let emergency = transform(&env, &messages, 96);
    assert_eq!(
        emergency["pass"]["reason"], "emergency",
        "{}",
        emergency["pass"]
    );
    // (At 70 % the relief drop may already have taken it: either pass counts.)
    let mut dropped = dropped_tags(&executed);
    dropped.extend(dropped_tags(&emergency));
    assert!(
        dropped.contains(&older_tag),
        "the oldest unpinned bash output went: {dropped:?}"
    );
    assert!(!dropped.contains(&pinned_tag), "{dropped:?}");
    assert_dropped(&emergency, "call_1_0", older_tag);
    assert_intact(&emergency, "call_0_1", pinned_tag, "line 0.1");

    // Unpinned, it is fair game again: the agent's drop goes through on the next busting pass.
    let answer = env.pin_ok(
        &["unpin", "--session", TX_SESSION, "--message", "msg_00_s1"],
        "",
    );
    assert_eq!(answer, json!({"pins": []}));
    let pinned = pinned_tag.to_string();
    let reduce = env.run_db(
        "mc-transform",
        &["reduce", "--session", TX_SESSION, "--drop", &pinned],
        "",
    );
    assert!(reduce.status.success(), "{}", stderr(&reduce));
    let after = transform(&env, &messages, 70);
    assert!(
        dropped_tags(&after).contains(&pinned_tag),
        "{}",
        after["pass"]
    );
    assert_dropped(&after, "call_0_1", pinned_tag);
}

#[test]
fn claude_code_pins_refuse_what_the_harness_wrote_and_find_the_transcript_themselves() {
    let env = pin_env();
    // Where Claude Code keeps it: ~/.claude/projects/<folder>/<session>.jsonl.
    let folder = env.home().join(".claude/projects/-home-dev-shop");
    std::fs::create_dir_all(&folder).unwrap();
    let transcript = folder.join(format!("{CC_SESSION}.jsonl"));
    let mut lines = cc_transcript(&[]);
    // After resuming into a /compact, Claude Code writes a stand-in reply.
    lines.push(cc_line(
        "assistant",
        "a-synthetic",
        Some("s-1"),
        "2026-11-30T10:05:00.000Z",
        json!({"message": {"id": "msg_syn", "role": "assistant", "model": "<synthetic>",
               "content": [{"type": "text", "text": "No response requested."}]}}),
    ));
    write_jsonl(&transcript, &lines);
    let base = ["--harness", "claude-code", "--session", CC_SESSION];
    let args = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    for (id, what) in [
        ("s-1", "compaction summary"),
        ("cb-1", "compaction mark"),
        ("a-synthetic", "wrote itself"),
    ] {
        let out = env.pin(&[&["pin"][..], &args(&["--message"]), &[id]].concat(), "");
        assert_eq!(code(&out), 2, "{id}: {}", stderr(&out));
        assert!(stderr(&out).contains(what), "{id}: {}", stderr(&out));
    }
    // No --transcript: found by the session id; the stand-in reply is skipped.
    let answer = env.pin_ok(
        &[&["pin"][..], &args(&["--last", "assistant"])].concat(),
        "",
    );
    assert_eq!(answer["pins"][0]["id"], "a-3", "{answer}");
    let answer = env.pin_ok(&[&["pin"][..], &args(&["--message", "a-2"])].concat(), "");
    assert_eq!(answer["pins"][0]["id"], "a-1", "{answer}");
    // Unpinning by a line of the reply other than its first finds the reply.
    let answer = env.pin_ok(&[&["unpin"][..], &args(&["--message", "a-2"])].concat(), "");
    let ids: Vec<&str> = answer["pins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a-3"]);
    // An id no pin has changes nothing, and says so.
    let out = env.pin(
        &[&["unpin"][..], &args(&["--message", "nope"])].concat(),
        "",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no pin of session"),
        "{}",
        stderr(&out)
    );
    // Another session's transcript is refused.
    let path = transcript.display().to_string();
    let out = env.pin(
        &[
            "pin",
            "--harness",
            "claude-code",
            "--session",
            "00000000-0000-0000-0000-000000000000",
            "--last",
            "user",
            "--transcript",
            &path,
        ],
        "",
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("belongs to session"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn mcs_own_compaction_boundary_is_never_taken_for_opencodes_compaction() {
    let env = pin_env();
    let server = server_with(&[("msg_u1", T, "user")]);
    // mc's boundary after OpenCode's compaction (a later fold of mc's): the
    // pins answer OpenCode's compaction, and its summary is the cursor.
    for m in compaction("msg_u2mcb0", "msg_u2mcb1", T + 200_000)
        .into_iter()
        .take(2)
    {
        server.add_message(m);
    }
    let out = restore(&env, &server, &[], &compacted_event());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["compaction"], "msg_sum1", "{report}");
    assert_eq!(server.prompts(SES).len(), 1);
    assert_eq!(cursor(&server), "msg_sum1");
    // The same event again: already restored, though mc's summary is newer.
    let again = restore(&env, &server, &[], &compacted_event());
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(report["reason"], "already_restored", "{report}");
}

/// A Claude Code compaction with pins while another process holds the
/// database's write lock past the hook's wait: the pins are printed at once
/// (read without the write lock), once — a replay or racing hooks print
/// nothing more — and the claim, kept beside the database meanwhile, is in
/// the database after the lock goes. Before, the hook waited the 5 s busy
/// timeout and exited 1 ("database is locked"): the pins missed that compaction.
#[test]
fn a_held_write_lock_does_not_cost_a_compaction_its_pins() {
    let printed = |outs: &[Output]| {
        for out in outs {
            assert!(out.status.success(), "{}", stderr(out));
        }
        outs.iter().filter(|o| !o.stdout.is_empty()).count()
    };
    let env = pin_env();
    let transcript = env.path("session.jsonl");
    let mut lines = cc_transcript(&[]);
    write_jsonl(&transcript, &lines);
    cc_pin(&env, &transcript, &["--message", "u-rule"]);
    let mut holder = env.lock_database(&env.db());

    let out = hook(&env, &hook_input(&transcript, "compact"));
    let context = additional_context(&out);
    assert!(context.contains("Rule: never edit"), "{context}");
    assert!(stderr(&out).contains("locked"), "{}", stderr(&out));
    // The same compaction again, and a crowd of hooks for it: nothing more.
    let outs = race(
        &env,
        &["restore", "--harness", "claude-code"],
        &hook_input(&transcript, "compact"),
        4,
    );
    assert_eq!(printed(&outs), 0, "the compaction was printed twice");
    // The next compaction, hooks racing under the lock: one prints.
    lines.push(cc_line("system", "cb-2", None, "2026-11-30T12:00:00.000Z",
        json!({"subtype": "compact_boundary", "content": "Conversation compacted",
               "isMeta": false, "level": "info", "compactMetadata": {"trigger": "auto", "preTokens": 160000}})));
    write_jsonl(&transcript, &lines);
    let outs = race(
        &env,
        &["restore", "--harness", "claude-code"],
        &hook_input(&transcript, "compact"),
        4,
    );
    assert_eq!(printed(&outs), 1, "4 hooks under a held lock");
    assert!(
        holder.holding(),
        "the lock holder let go before the hooks were done: the outcomes above prove nothing"
    );
    assert_eq!(
        db_cursor(&env).as_deref(),
        None,
        "nothing could be written yet"
    );

    // The lock goes: the next restorer moves the kept claims into the
    // database and prints nothing for a compaction already answered.
    drop(holder);
    let again = hook(&env, &hook_input(&transcript, "compact"));
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(again.stdout.is_empty(), "{}", stdout(&again));
    assert_eq!(db_cursor(&env).as_deref(), Some("cb-2"));
    let kept = env.db().with_extension("db.restore-claims");
    assert!(!kept.exists(), "{} left behind", kept.display());
    // The first compaction's claim is in the database too: replayed, it prints nothing.
    write_jsonl(&transcript, &cc_transcript(&[]));
    let replay = hook(&env, &hook_input(&transcript, "compact"));
    assert!(replay.stdout.is_empty(), "{}", stdout(&replay));
}
