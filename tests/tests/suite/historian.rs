//! mc-historian as adapters and users run it: real processes, a fake LLM
//! server on 127.0.0.1, temp databases and a fixed clock. Also the LLM client
//! in-process against the same fake server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use mc_base::config::{HistorianConfig, ProviderConfig, ProviderKind};
use mc_base::store::{Store, StoreOptions};
use mc_llm::{self as llm, CallFailure, Client, Model, Options, Prompt, ProxyEnv, Sleeper};
use mc_tests::fake_llm::{ANY_MODEL, FakeLlm, Reply, user_text};
use mc_tests::fake_opencode::FakeOpenCode;
use mc_tests::relay::Relay;
use mc_tests::{TestEnv, bin_path, pipe};

const NOW: i64 = 1_796_000_000_000;
const KEY: &str = "sk-test-not-a-real-key-123";
/// 30 turns of this many words are ~18k tokens, against a 20k window whose
/// protected live tail is 8k: about 10k tokens are eligible.
const WORDS: usize = 300;

// ---------------------------------------------------------------------------
// Helpers

/// The sealed [`TestEnv`] (with the key the default config names), a project
/// folder, and a fake LLM server.
struct Env {
    env: TestEnv,
    fake: FakeLlm,
}

impl std::ops::Deref for Env {
    type Target = TestEnv;

    fn deref(&self) -> &TestEnv {
        &self.env
    }
}

impl Env {
    fn new() -> Env {
        let env = Env {
            env: TestEnv::new().with_var("MC_TEST_KEY", KEY),
            fake: FakeLlm::start(),
        };
        std::fs::create_dir_all(env.project()).unwrap();
        env.user_config(env.default_config());
        env
    }

    fn project(&self) -> PathBuf {
        self.path("project")
    }

    /// Anthropic-format `cloud` with a key, OpenAI-format `local` without one.
    fn default_config(&self) -> Value {
        json!({
            "providers": {
                "cloud": {"kind": "anthropic", "base_url": self.fake.url(), "api_key_env": "MC_TEST_KEY"},
                "local": {"kind": "openai", "base_url": format!("{}/v1", self.fake.url())},
            },
            "historian": {"model": "cloud/big", "fallback_models": ["local/small"],
                          "retries": 1, "retry_backoff_ms": 0, "timeout_ms": 10_000},
        })
    }

    fn user_config(&self, config: Value) {
        self.env
            .user_config(&format!("// test config\n{config:#}\n"));
    }

    /// `mc-historian ARGS` with `stdin`: its exit code, JSON and stderr.
    fn historian(&self, args: &[&str], stdin: &str) -> (i32, Value, String) {
        let out = self.run_db("mc-historian", args, stdin);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "no JSON on stdout ({e}): {}\nstderr: {stderr}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        (out.status.code().unwrap_or(-1), json, stderr)
    }

    fn transform(&self, args: &[&str], stdin: &str) -> Value {
        let out = self.run_db("mc-transform", args, stdin);
        assert!(
            out.status.success(),
            "mc-transform {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn status(&self, harness: &str, session: &str) -> Value {
        self.transform(&["status", "--session", session, "--harness", harness], "")
    }

    fn compartments(&self) -> i64 {
        let store = Store::open(&self.db(), &StoreOptions::default()).unwrap();
        store
            .conn()
            .query_row("SELECT count(*) FROM compartments", [], |r| r.get(0))
            .unwrap()
    }

    /// An envelope of `turns` user/assistant turns at `usage` prompt tokens.
    fn envelope(&self, session: &str, turns: usize, usage: u64, now: i64) -> String {
        json!({
            "harness": "opencode", "session_id": session,
            "project_dir": self.project(),
            "model": {"provider": "p", "id": "m", "context_limit": 20_000},
            "usage": {"input": usage}, "now_ms": now,
            "messages": messages(session, turns),
        })
        .to_string()
    }
}

fn messages(session: &str, turns: usize) -> Vec<Value> {
    messages_of(session, turns, WORDS)
}

/// `turns` user/assistant turns of about `words` words each.
fn messages_of(session: &str, turns: usize, words: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for t in 0..turns {
        let at = NOW - 10_000_000 + t as i64 * 60_000;
        let filler = format!("{} ", ["alpha", "beta", "gamma", "delta"][t % 4]).repeat(words);
        out.push(json!({"info": {"id": format!("msg_{t:04}_u"), "sessionID": session, "role": "user",
                                 "time": {"created": at}},
                        "parts": [{"id": format!("prt_{t:04}_u"), "type": "text", "text": format!("Task {t}: {filler}")}]}));
        out.push(json!({"info": {"id": format!("msg_{t:04}_a"), "sessionID": session, "role": "assistant",
                                 "finish": "stop", "time": {"created": at + 1_000, "completed": at + 5_000}},
                        "parts": [{"id": format!("prt_{t:04}_a"), "type": "text", "text": format!("Did task {t}. {filler}")},
                                  {"id": format!("prt_{t:04}_t"), "type": "tool", "callID": format!("call_{t}"), "tool": "read",
                                   "state": {"status": "completed", "input": {"filePath": format!("src/f{t}.rs")},
                                             "output": "fn x() {}"}}]}));
    }
    out
}

/// `first` and `last` of the prompt's `<messages>` element.
fn chunk_range(user: &str) -> (i64, i64) {
    let attr = |name: &str| -> i64 {
        let key = format!("{name}=\"");
        let at = user.find("<messages first=").expect("a <messages> element");
        let rest = &user[at..];
        let rest = &rest[rest.find(&key).unwrap() + key.len()..];
        rest[..rest.find('"').unwrap()].parse().unwrap()
    };
    (attr("first"), attr("last"))
}

fn compartment(start: i64, end: i64, importance: u8) -> String {
    format!(
        "<compartment start=\"{start}\" end=\"{end}\" importance=\"{importance}\" episode=\"feature\">\n\
         <title>Work {start}-{end}</title>\n<p1>Everything about messages {start} to {end}: paths, \
         commands & code like Vec<String>.</p1>\n<p2>Messages {start}-{end}, shorter.</p2>\n\
         <p3>Work on {start}-{end}.</p3>\n<p4>Work {start}-{end}</p4>\n</compartment>\n"
    )
}

const FACT: &str =
    "<fact category=\"CONSTRAINTS\">Tests never touch the real home directory.</fact>";

/// A valid answer folding the request's chunk in two compartments.
fn fold(body: &Value, facts: &str) -> String {
    fold_user(&user_text(body), facts)
}

/// A valid answer folding the chunk of this user message in two compartments.
fn fold_user(user: &str, facts: &str) -> String {
    let (first, last) = chunk_range(user);
    let mid = (first + last) / 2;
    format!(
        "<history>\n{}{}<facts>\n{facts}\n</facts>\n<unprocessed_from>{}</unprocessed_from>\n</history>",
        compartment(first, mid, 70),
        compartment(mid + 1, last, 40),
        last + 1
    )
}

fn folding(facts: &'static str) -> Reply {
    Reply::with(move |body| Reply::text(fold(body, facts)))
}

// ---------------------------------------------------------------------------
// Runs against the fake server

#[test]
fn prompt_shows_the_exact_request_and_run_publishes() {
    let env = Env::new();
    env.fake.always("big", folding(FACT));
    let envelope = env.envelope("ses_clean", 30, 5_000, NOW);

    let (code, prompt, stderr) = env.historian(&["prompt"], &envelope);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(prompt["status"], "ready");
    assert_eq!(prompt["model"], "cloud/big");
    let request = &prompt["request"];
    assert_eq!(request["url"], format!("{}/v1/messages", env.fake.url()));
    assert_eq!(
        request["headers"]["x-api-key"], "<$MC_TEST_KEY>",
        "never the key itself"
    );
    assert_eq!(request["headers"]["anthropic-version"], "2023-06-01");
    assert!(!prompt.to_string().contains(KEY));
    assert!(env.fake.requests().is_empty(), "prompt calls nothing");
    assert_eq!(env.compartments(), 0, "prompt writes nothing");

    let (code, report, stderr) = env.historian(&["run"], &envelope);
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(
        stderr, "",
        "no progress on a pipe, and nothing to warn about"
    );
    assert_eq!(report["status"], "published");
    assert_eq!(report["model"], "cloud/big");
    let written = report["compartments"].as_array().unwrap();
    assert!(!written.is_empty());
    let first = &written[0];
    assert_eq!(first["sequence"], 1);
    assert_eq!(first["start"], 1);
    assert_eq!(first["importance"], 70);
    assert_eq!(first["episode"], "feature");
    assert!(first["title"].as_str().unwrap().starts_with("Work 1-"));
    assert_eq!(report["facts_promoted"], 1);
    assert!(report["tokens"]["input"].as_u64().unwrap() > 1_000);
    assert!(report["tokens"]["output"].as_u64().unwrap() > 10);

    // Exactly the request prompt showed, with the real key.
    let requests = env.fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].body, request["body"]);
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    assert!(
        requests[0].body["system"]
            .as_str()
            .unwrap()
            .contains("<unprocessed_from>")
    );
    assert!(user_text(&requests[0].body).contains("\n[1] U: Task 0: alpha"));

    // mc-transform status shows the run.
    let status = env.status("opencode", "ses_clean");
    assert_eq!(status["historian"]["last_run"]["status"], "published");
    assert_eq!(status["historian"]["last_failure"], Value::Null);
    assert_eq!(status["historian"]["lease"], Value::Null, "released");
}

/// `mc-historian prompt`'s answer as a snapshot shows it: the JSON with the
/// prompt texts taken out (the request carries exactly them), then the texts
/// as the model reads them (the system text only `with_system`); the fake
/// server's address made stable.
fn prompt_snapshot(env: &Env, prompt: &Value, with_system: bool) -> String {
    let system = prompt["system"].as_str().expect("a system text");
    let user = prompt["user"].as_str().expect("a user text");
    let body = &prompt["request"]["body"];
    assert_eq!(body["system"], system);
    assert_eq!(user_text(body), user);
    let mut shape = prompt.clone();
    shape["system"] = json!("(below)");
    shape["user"] = json!("(below)");
    shape["request"]["body"]["system"] = json!("(the system text below)");
    shape["request"]["body"]["messages"][0]["content"] = json!("(the user text below)");
    let shape = serde_json::to_string_pretty(&shape)
        .unwrap()
        .replace(env.fake.url(), "http://[fake-llm]");
    let system = if with_system {
        format!("--- system ---\n{system}\n")
    } else {
        String::new()
    };
    format!("{shape}\n{system}--- user ---\n{user}\n")
}

#[test]
fn the_prompt_of_a_first_fold_and_of_the_next() {
    let env = Env::new();
    env.fake.always("big", folding(FACT));
    // A 1k window: everything but the newest turns is eligible.
    let envelope = |turns: usize| {
        json!({
            "harness": "opencode", "session_id": "ses_snap", "project_dir": env.project(),
            "model": {"provider": "p", "id": "m", "context_limit": 1_000},
            "usage": {"input": 250}, "now_ms": NOW,
            "messages": messages_of("ses_snap", turns, 20),
        })
        .to_string()
    };
    let (code, first, stderr) = env.historian(&["prompt"], &envelope(8));
    assert_eq!(code, 0, "{stderr}");
    snapshot!(
        "historian_prompt_first_fold",
        "mc-historian prompt: the first fold of an 8-turn session",
        prompt_snapshot(&env, &first, true)
    );
    let (code, report, stderr) = env.historian(&["run"], &envelope(8));
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["facts_promoted"], 1, "{report}");
    // Later: the earlier compartments and the promoted fact are context.
    let (code, next, stderr) = env.historian(&["prompt"], &envelope(14));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        next["system"], first["system"],
        "one contract for every fold"
    );
    snapshot!(
        "historian_prompt_next_fold",
        "mc-historian prompt: the next fold, with the earlier compartments and project memory",
        prompt_snapshot(&env, &next, false)
    );
}

#[test]
fn bad_answers_publish_nothing_and_status_shows_the_cause() {
    let env = Env::new();
    let overlapping = Reply::with(|body| {
        let (first, last) = chunk_range(&user_text(body));
        Reply::text(format!(
            "<history>{}{}<unprocessed_from>{}</unprocessed_from></history>",
            compartment(first, first + 5, 50),
            compartment(first + 3, last, 50),
            last + 1
        ))
    });
    let truncated = Reply::with(|body| {
        let full = fold(body, FACT);
        Reply::Truncated(full[..full.len() / 2].to_string())
    });
    let cases = [
        (
            "malformed",
            Reply::text("<history><compartment start=\"one\" end=\"2\"></compartment></history>"),
            "is not an integer",
        ),
        ("truncated", truncated, "output limit"),
        ("overlapping", overlapping, "overlaps compartment"),
        ("empty", Reply::text(""), "the answer is empty"),
    ];
    for (name, reply, cause) in cases {
        let session = format!("ses_{name}");
        env.fake.script("big", [reply.clone(), reply]);
        let before = env.fake.requests().len();
        let (code, report, stderr) =
            env.historian(&["run"], &env.envelope(&session, 30, 5_000, NOW));
        assert_eq!(code, 1, "{name}: {report}");
        assert_eq!(report["status"], "failed", "{name}");
        let error = report["error"].as_str().unwrap();
        assert!(error.contains(cause), "{name}: {error}");
        assert!(
            error.contains("rejected too"),
            "{name}: repaired once: {error}"
        );
        assert_eq!(
            env.fake.requests().len() - before,
            2,
            "{name}: one repair round"
        );
        assert_eq!(
            stderr
                .lines()
                .filter(|l| l.starts_with("mc-historian: error: "))
                .count(),
            1,
            "{name}: {stderr}"
        );
        assert!(report["compartments"].as_array().unwrap().is_empty());
        assert_eq!(env.compartments(), 0, "{name}: nothing published");
        // The failure is typed: its class in the report and the record, its hint on stderr.
        assert_eq!(report["error_class"], "answer_rejected", "{name}");
        assert!(
            stderr.contains("\nmc-historian: hint: the next run asks again"),
            "{name}: {stderr}"
        );
        let status = env.status("opencode", &session);
        let failure = &status["historian"]["last_failure"];
        assert_eq!(failure["status"], "failed", "{name}");
        assert_eq!(failure["error"], error, "{name}");
        assert_eq!(failure["error_class"], "answer_rejected", "{name}");
        assert_eq!(failure["error_hints"], report["error_hints"], "{name}");
        assert_eq!(status["historian"]["failures_since_success"], 1);
    }
}

#[test]
fn a_rejected_answer_is_repaired_once() {
    let env = Env::new();
    env.fake.script(
        "big",
        [
            Reply::text("<history>\n<compartment start=\"1\">oops</history>"),
            folding(""),
        ],
    );
    let (code, report, stderr) = env.historian(&["run"], &env.envelope("ses_r", 30, 5_000, NOW));
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["status"], "published");
    let requests = env.fake.requests();
    assert_eq!(requests.len(), 2);
    let repair = user_text(&requests[1].body);
    assert!(repair.contains("<rejected_answer>\n<history>\n<compartment start=\"1\">oops"));
    assert!(repair.contains("was rejected: "), "{repair}");
    assert!(
        repair.starts_with(&user_text(&requests[0].body)),
        "the same request, then the rejected answer"
    );
}

#[test]
fn falls_back_to_the_second_model_on_429_and_5xx() {
    for (code, body) in [
        (
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down, tester"}}"#,
        ),
        (
            503,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"try later, tester"}}"#,
        ),
    ] {
        let env = Env::new();
        env.fake.always(
            "big",
            Reply::Status {
                code,
                body: body.into(),
                retry_after: Some(0),
            },
        );
        env.fake.always("small", folding(""));
        let (exit, report, stderr) =
            env.historian(&["run"], &env.envelope("ses_fb", 30, 5_000, NOW));
        assert_eq!(exit, 0, "{report}\n{stderr}");
        assert_eq!(report["status"], "published");
        assert_eq!(report["model"], "local/small");
        // One retry of the first model (historian.retries = 1), then the fallback.
        assert_eq!(env.fake.models_asked(), ["big", "big", "small"]);
        let requests = env.fake.requests();
        assert_eq!(requests[2].path, "/v1/chat/completions");
        assert_eq!(
            requests[2].header("authorization"),
            None,
            "no api_key_env: no key"
        );
        assert_eq!(requests[2].body["messages"][0]["role"], "system");
        // The provider's error body is in the warning.
        let warning = report["warnings"][0].as_str().unwrap();
        assert!(warning.contains(&format!("HTTP {code}")), "{warning}");
        assert!(warning.contains("tester"), "{warning}");
        assert!(stderr.contains("tester"), "{stderr}");
    }
}

#[test]
fn timeouts_move_on_or_fail() {
    let env = Env::new();
    let mut config = env.default_config();
    config["historian"]["timeout_ms"] = json!(400);
    env.user_config(config.clone());
    env.fake
        .always("big", Reply::slow(Duration::from_secs(5), folding("")));
    env.fake.always("small", folding(""));
    // The slow answer would fold too: that the small model answered, after a
    // warning about the 400 ms, shows the call was cut off, not waited out.
    let (code, report, stderr) = env.historian(&["run"], &env.envelope("ses_t1", 30, 5_000, NOW));
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["model"], "local/small");
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .contains("within 400 ms")
    );
    assert_eq!(
        env.fake.models_asked(),
        ["big", "small"],
        "a timeout is not retried on the same model"
    );

    // With no fallback, the run fails with the timeout as its cause.
    config["historian"]["fallback_models"] = json!([]);
    env.user_config(config);
    let (code, report, stderr) = env.historian(&["run"], &env.envelope("ses_t2", 30, 5_000, NOW));
    assert_eq!(code, 1);
    assert_eq!(report["status"], "failed");
    assert!(
        report["error"].as_str().unwrap().contains("within 400 ms"),
        "{report}"
    );
    // Which setting to raise is a hint, not part of the message.
    assert_eq!(report["error_class"], "provider_timeout", "{report}");
    assert!(
        !report["error"]
            .as_str()
            .unwrap()
            .contains("historian.timeout_ms"),
        "{report}"
    );
    assert!(
        report["error_hints"][0]
            .as_str()
            .unwrap()
            .starts_with("raise historian.timeout_ms"),
        "{report}"
    );
    assert!(
        stderr.contains("\nmc-historian: hint: raise historian.timeout_ms"),
        "{stderr}"
    );
    let status = env.status("opencode", "ses_t2");
    assert!(
        status["historian"]["last_failure"]["error"]
            .as_str()
            .unwrap()
            .contains("timeout")
    );
    assert_eq!(
        status["historian"]["last_failure"]["error_class"],
        "provider_timeout"
    );
}

#[cfg(unix)]
fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[cfg(unix)]
#[test]
fn the_command_provider_runs_a_real_program() {
    let env = Env::new();
    let dir = env.root().display().to_string();
    let script = env.path("fake-claude");
    write_script(
        &script,
        &format!(
            "printf '%s\\n' \"$@\" > '{dir}/args.txt'\nprintf '%s' \"$MC_HISTORIAN_CHILD\" > '{dir}/child.txt'\ncat > '{dir}/stdin.txt'\ncat '{dir}/answer.xml'\n"
        ),
    );
    env.user_config(json!({
        "providers": {"cli": {"kind": "command", "command": [script, "--model", "{model}"]}},
        "historian": {"model": "cli/haiku"},
    }));
    let envelope = env.envelope("ses_cmd", 30, 5_000, NOW);
    let (_, prompt, _) = env.historian(&["prompt"], &envelope);
    let request = &prompt["request"];
    assert_eq!(request["kind"], "command");
    assert_eq!(request["argv"][2], "haiku");
    let (first, last) = (
        prompt["chunk"]["first"].as_i64().unwrap(),
        prompt["chunk"]["last"].as_i64().unwrap(),
    );
    let answer = format!(
        "<history>\n{}<unprocessed_from>{}</unprocessed_from>\n</history>\n",
        compartment(first, last, 60),
        last + 1
    );
    std::fs::write(env.path("answer.xml"), answer).unwrap();

    let (code, report, stderr) = env.historian(&["run"], &envelope);
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["status"], "published");
    assert_eq!(report["model"], "cli/haiku");
    assert_eq!(
        std::fs::read_to_string(env.path("args.txt")).unwrap(),
        "--model\nhaiku\n"
    );
    // Hooks of a harness run as the model see it and stay out of the way.
    assert_eq!(std::fs::read_to_string(env.path("child.txt")).unwrap(), "1");
    assert_eq!(
        std::fs::read_to_string(env.path("stdin.txt")).unwrap(),
        request["stdin"].as_str().unwrap(),
        "the program reads exactly the prompt shown"
    );
    assert!(report["tokens"]["input"].as_u64().unwrap() > 1_000);

    // A program that fails: its exit status and stderr are the cause.
    write_script(
        &script,
        "cat > /dev/null\necho 'login expired: run claude login' >&2\nexit 3\n",
    );
    let (code, report, _) = env.historian(&["run"], &env.envelope("ses_cmd2", 30, 5_000, NOW));
    assert_eq!(code, 1);
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("exited with status 3: login expired: run claude login"),
        "{error}"
    );
}

#[test]
fn concurrent_runs_on_one_session_one_wins() {
    let env = Env::new();
    env.fake.always(
        "big",
        Reply::slow(Duration::from_millis(2_500), folding("")),
    );
    let envelope = env.envelope("ses_both", 30, 5_000, NOW);
    let results: Vec<(i32, Value, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| env.historian(&["run"], &envelope)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let statuses: Vec<&str> = results
        .iter()
        .map(|(_, r, _)| r["status"].as_str().unwrap())
        .collect();
    let winner = results
        .iter()
        .find(|(_, r, _)| r["status"] == "published")
        .unwrap_or_else(|| panic!("{statuses:?}"));
    let loser = results
        .iter()
        .find(|(_, r, _)| r["status"] == "nothing_to_do")
        .unwrap_or_else(|| panic!("{statuses:?}"));
    assert_eq!(winner.0, 0);
    assert_eq!(loser.0, 0);
    assert_eq!(loser.1["reason"], "lease_held");
    let holder = loser.1["lease"]["holder"].as_str().unwrap();
    assert!(holder.starts_with("mc-historian pid "), "{holder}");
    assert_eq!(
        env.fake.requests().len(),
        1,
        "only the winner called the model"
    );
}

#[test]
fn a_pass_after_a_run_renders_the_new_compartments() {
    let env = Env::new();
    env.fake.always("big", folding(""));
    let pass = env.transform(&[], &env.envelope("ses_x", 30, 5_000, NOW));
    assert_eq!(pass["pass"]["decision"], "execute");
    assert!(pass.to_string().contains("Task 0: alpha"));

    let (code, report, _) = env.historian(&["run"], &env.envelope("ses_x", 30, 5_000, NOW));
    assert_eq!(code, 0);
    let written = report["compartments"].as_array().unwrap();
    let last_folded = written.last().unwrap()["end"].as_i64().unwrap();

    // The next pass that busts anyway (the cache expired) renders them.
    let later = NOW + 30 * 60_000;
    let pass = env.transform(&[], &env.envelope("ses_x", 30, 5_000, later));
    let text = pass.to_string();
    for c in written {
        assert!(
            text.contains(c["title"].as_str().unwrap()),
            "{}",
            c["title"]
        );
    }
    assert!(text.contains("<session-history>"));
    // The folded raw messages left the wire; the unfolded ones stay.
    let ids: Vec<&str> = pass["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["info"]["id"].as_str())
        .collect();
    assert!(!ids.contains(&"msg_0000_u"), "{ids:?}");
    let first_kept = format!(
        "msg_{:04}_{}",
        last_folded / 2,
        if last_folded % 2 == 0 { "u" } else { "a" }
    );
    assert!(
        ids.contains(&first_kept.as_str()),
        "{first_kept} in {ids:?}"
    );
    let status = env.status("opencode", "ses_x");
    assert_eq!(status["head"]["covered_through"], last_folded);
    assert_eq!(status["head"]["compartments"], written.len());
}

/// Pass decision, materialize reason and the rendered messages' bytes.
fn pass_of(pass: &Value) -> (&str, Option<&str>, String) {
    (
        pass["pass"]["decision"].as_str().unwrap(),
        pass["pass"]["materialize_reason"].as_str(),
        pass["messages"].to_string(),
    )
}

#[test]
fn wrapup_and_recomp_show_at_the_next_busting_pass_and_never_bust_by_themselves() {
    let env = Env::new();
    let mut config = env.default_config();
    config["historian"]["chunk_tokens"] = json!(6_000);
    env.user_config(config);
    env.fake.always("big", folding(FACT));
    let envelope = |now| env.envelope("ses_wr", 30, 5_000, now);
    let first = env.transform(&[], &envelope(NOW));
    assert_eq!(first["pass"]["decision"], "execute");

    // Wrap up all but the newest 8 messages, far past what a routine run may
    // fold (its protected live tail): token-capped chunks, all published.
    let (code, report, stderr) = env.historian(&["wrapup", "--keep", "8"], &envelope(NOW));
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(
        (report["status"].as_str(), report["job"].as_str()),
        (Some("published"), Some("wrapup"))
    );
    assert_eq!(report["keep"], 8);
    let written = report["compartments"].as_array().unwrap();
    assert_eq!(written.last().unwrap()["end"], 60 - 8, "{report}");
    assert!(report["chunks"].as_array().unwrap().len() > 1, "{report}");

    // The next pass within the cache's life defers: the same bytes, no bust.
    let deferred = env.transform(&[], &envelope(NOW + 60_000));
    let (decision, reason, bytes) = pass_of(&deferred);
    assert_eq!((decision, reason), ("defer", None));
    assert_eq!(
        bytes,
        pass_of(&first).2,
        "a wrap-up changes no byte by itself"
    );

    // The next pass that busts anyway (the cache expired) shows it: the
    // folded messages left the wire, the newest eight stay.
    let later = NOW + 30 * 60_000;
    let busted = env.transform(&[], &envelope(later));
    assert_eq!(busted["pass"]["decision"], "execute");
    let ids: Vec<&str> = busted["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["info"]["id"].as_str())
        .collect();
    assert!(!ids.contains(&"msg_0025_a"), "{ids:?}");
    assert!(ids.contains(&"msg_0026_u"), "{ids:?}");
    assert!(
        busted
            .to_string()
            .contains(written[0]["title"].as_str().unwrap())
    );

    // Recompute: new compartments over the same range, no new fact.
    env.fake.always(
        "big",
        Reply::with(|body| {
            let (first, last) = chunk_range(&user_text(body));
            Reply::text(format!(
                "<history>\n{}<facts>\n{FACT}\n</facts>\n<unprocessed_from>{}</unprocessed_from>\n</history>",
                compartment(first, last, 50).replace("<title>Work", "<title>Redone"),
                last + 1
            ))
        }),
    );
    let (code, report, stderr) = env.historian(&["recomp"], &envelope(later));
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(
        (report["status"].as_str(), report["job"].as_str()),
        (Some("published"), Some("recomp"))
    );
    assert_eq!(report["replaced"], written.len());
    assert_eq!(report["facts_promoted"], 0);
    let redone = report["compartments"].as_array().unwrap();
    assert_eq!(redone.last().unwrap()["end"], 60 - 8);
    assert!(
        redone
            .iter()
            .all(|c| c["title"].as_str().unwrap().starts_with("Redone"))
    );

    // Again no bust of its own: the next pass in the cache's life replays.
    let deferred = env.transform(&[], &envelope(later + 60_000));
    let (decision, reason, bytes) = pass_of(&deferred);
    assert_eq!((decision, reason), ("defer", None));
    assert_eq!(bytes, pass_of(&busted).2);
    assert!(!bytes.contains("Redone"));
    // The next busting pass rebuilds m[0] from the new compartments.
    let rebuilt = env.transform(&[], &envelope(later + 60 * 60_000));
    assert_eq!(rebuilt["pass"]["decision"], "execute");
    let text = rebuilt["messages"].to_string();
    assert!(
        text.contains(redone[0]["title"].as_str().unwrap()),
        "{text}"
    );
    assert!(!text.contains(written[0]["title"].as_str().unwrap()));
}

#[test]
fn check_agrees_with_the_pass() {
    let env = Env::new();
    for (i, (usage, due, reason)) in [
        (5_000, false, Value::Null),
        (13_000, true, json!("projected_headroom")),
        (18_000, true, json!("force_band")),
    ]
    .into_iter()
    .enumerate()
    {
        let session = format!("ses_check_{i}");
        let envelope = env.envelope(&session, 30, usage, NOW);
        let (code, before, stderr) = env.historian(&["check"], &envelope);
        assert_eq!(code, 0, "{stderr}");
        let pass = env.transform(&[], &envelope);
        let (_, after, _) = env.historian(&["check"], &envelope);
        for report in [&before, &after] {
            assert_eq!(report["due"], due, "{usage}: {report}");
            assert_eq!(report["reason"], reason, "{usage}: {report}");
        }
        assert_eq!(pass["pass"]["historian_due"], due, "{usage}");
        assert_eq!(
            pass["pass"]
                .get("historian_reason")
                .cloned()
                .unwrap_or(Value::Null),
            reason
        );
        assert_eq!(before["known_session"], false);
        assert_eq!(after["known_session"], true);
        assert_eq!(before["protected_tail"], 8_000);
        assert_eq!(before["trigger_budget"], 5_000);
        assert!(before["eligible_tokens"].as_u64().unwrap() > 2_000);
    }
    assert!(env.fake.requests().is_empty(), "check never calls a model");
}

#[test]
fn check_reads_the_config_of_the_project_the_session_started_in() {
    let env = Env::new();
    std::fs::create_dir_all(env.project().join(".mc")).unwrap();
    std::fs::write(
        env.project().join(".mc/config.jsonc"),
        r#"{"transform": {"execute_threshold_percentage": 80}}"#,
    )
    .unwrap();
    let envelope = env.envelope("ses_project", 10, 5_000, NOW);
    env.transform(&[], &envelope);
    // The same session later, from a hook that names no project and runs
    // elsewhere: the threshold is still the project's.
    let mut bare: Value = serde_json::from_str(&envelope).unwrap();
    bare.as_object_mut().unwrap().remove("project_dir");
    let (code, report, stderr) = env.historian(&["check"], &bare.to_string());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["threshold"], 80.0, "{report}");
}

/// Claude Code transcript lines in the real JSONL shape.
struct Transcript {
    session: String,
    cwd: String,
    lines: Vec<Value>,
    last: Option<String>,
    minute: u32,
}

impl Transcript {
    fn stamp(&mut self) -> String {
        self.minute += 1;
        format!(
            "2025-10-09T{:02}:{:02}:00.000Z",
            9 + self.minute / 60,
            self.minute % 60
        )
    }

    fn common(&mut self, kind: &str, uuid: &str) -> serde_json::Map<String, Value> {
        let line = json!({
            "parentUuid": self.last, "isSidechain": false, "type": kind, "uuid": uuid,
            "timestamp": self.stamp(), "userType": "external", "entrypoint": "cli",
            "cwd": self.cwd, "sessionId": self.session, "version": "2.1.210", "gitBranch": "main",
        });
        self.last = Some(uuid.to_string());
        line.as_object().unwrap().clone()
    }

    fn push(&mut self, line: serde_json::Map<String, Value>) {
        self.lines.push(Value::Object(line));
    }

    fn user(&mut self, uuid: &str, text: &str) {
        let mut line = self.common("user", uuid);
        line.insert("promptId".into(), json!(format!("p-{uuid}")));
        line.insert("message".into(), json!({"role": "user", "content": text}));
        self.push(line);
    }

    fn assistant(&mut self, uuid: &str, id: &str, content: Value, stop: &str) {
        let mut line = self.common("assistant", uuid);
        line.insert("requestId".into(), json!(format!("req_{uuid}")));
        line.insert(
            "message".into(),
            json!({"id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                   "content": content, "stop_reason": stop, "stop_sequence": null,
                   "usage": {"input_tokens": 12, "cache_creation_input_tokens": 300,
                             "cache_read_input_tokens": 1_000, "output_tokens": 40}}),
        );
        self.push(line);
    }

    fn tool_result(&mut self, uuid: &str, call: &str, output: &str) {
        let mut line = self.common("user", uuid);
        line.insert(
            "message".into(),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                                 "content": output, "is_error": false}]}),
        );
        line.insert(
            "toolUseResult".into(),
            json!({"stdout": output, "stderr": "", "interrupted": false, "isImage": false}),
        );
        self.push(line);
    }

    fn turn(&mut self, n: usize, words: usize) {
        let filler = format!("{} ", ["lock", "store", "lease", "chunk"][n % 4]).repeat(words);
        self.user(
            &format!("u-{n}"),
            &format!("Step {n}: please handle {filler}"),
        );
        let call = format!("toolu_{n:02}");
        self.assistant(
            &format!("a-{n}-1"),
            &format!("msg_{n:02}"),
            json!([{"type": "thinking", "thinking": "private reasoning", "signature": "sig"}]),
            "tool_use",
        );
        self.assistant(
            &format!("a-{n}-2"),
            &format!("msg_{n:02}"),
            json!([{"type": "tool_use", "id": call, "name": "Bash",
                    "input": {"command": format!("cargo test step_{n}"), "description": format!("Run step {n} tests")}}]),
            "tool_use",
        );
        self.tool_result(
            &format!("r-{n}"),
            &call,
            "test result: ok. TOOL OUTPUT NEVER SHOWN",
        );
        self.assistant(
            &format!("a-{n}-3"),
            &format!("msg_{n:02}b"),
            json!([{"type": "text", "text": format!("Step {n} is done: {filler}")}]),
            "end_turn",
        );
    }

    fn text(&self) -> String {
        self.lines.iter().map(|l| l.to_string() + "\n").collect()
    }
}

#[test]
fn a_claude_code_transcript_is_imported_across_a_compaction() {
    let env = Env::new();
    env.fake.always("big", folding(FACT));
    let mut t = Transcript {
        session: "0b8a3c1e-5f7d-4d2a-9c6b-1e2f3a4b5c6d".into(),
        cwd: env.project().display().to_string(),
        lines: Vec::new(),
        last: None,
        minute: 0,
    };
    // Lines that are not conversation, as Claude Code writes them.
    t.lines.push(json!({"type": "queue-operation", "operation": "enqueue", "timestamp": "2025-10-09T09:00:00.000Z",
                        "sessionId": t.session, "content": "Step 0"}));
    t.lines
        .push(json!({"type": "mode", "mode": "default", "sessionId": t.session}));
    let mut meta = t.common("user", "meta-1");
    meta.insert("isMeta".into(), json!(true));
    meta.insert("message".into(), json!({"role": "user", "content": "<local-command-caveat>META LINE</local-command-caveat>"}));
    t.push(meta);
    for n in 0..10 {
        t.turn(n, 250);
    }
    // The compaction: a boundary that cuts the chain, then the summary.
    let pre = t.last.clone();
    let mut boundary = t.common("system", "cb-1");
    boundary.insert("parentUuid".into(), Value::Null);
    boundary.insert("logicalParentUuid".into(), json!(pre));
    boundary.insert("subtype".into(), json!("compact_boundary"));
    boundary.insert("content".into(), json!("Conversation compacted"));
    boundary.insert("level".into(), json!("info"));
    boundary.insert("isMeta".into(), json!(false));
    boundary.insert(
        "compactMetadata".into(),
        json!({"trigger": "auto", "preTokens": 166_909, "postTokens": 6_060}),
    );
    t.push(boundary);
    let mut summary = t.common("user", "s-1");
    summary.insert("isCompactSummary".into(), json!(true));
    summary.insert("isVisibleInTranscriptOnly".into(), json!(true));
    summary.insert(
        "message".into(),
        json!({"role": "user", "content": "This session is being continued from a previous conversation that ran out of context. SUMMARY TEXT"}),
    );
    t.push(summary);
    for n in 10..16 {
        t.turn(n, 250);
    }
    t.lines.push(json!({"type": "last-prompt", "lastPrompt": "Step 15", "leafUuid": t.last, "sessionId": t.session}));
    let file = env.path("session.jsonl");
    std::fs::write(&file, t.text()).unwrap();
    let file = file.display().to_string();
    let args = [
        "--transcript",
        file.as_str(),
        "--context-limit",
        "6000",
        "--now-ms",
        "1760000000000",
    ];

    let mut run_args = vec!["run"];
    run_args.extend(args);
    let (code, report, stderr) = env.historian(&run_args, "");
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["status"], "published", "{report}");
    assert_eq!(report["harness"], "claude-code");
    assert_eq!(report["session_id"], t.session);
    assert_eq!(report["facts_promoted"], 1);
    let prompt = env.fake.requests()[0].user_text();
    assert!(
        prompt.contains("\n[1] U: Step 0: please handle lock"),
        "{prompt}"
    );
    assert!(
        prompt.contains("A: TC: Bash: Run step 0 tests / Step 0 is done"),
        "{prompt}"
    );
    assert!(
        prompt.contains("Step 9: please handle"),
        "pre-compaction history is folded: {report}"
    );
    // The compaction's two records show nothing; their ordinals join the
    // next block, so the lines still cover every message.
    let after = prompt
        .lines()
        .find(|l| l.contains("U: Step 10: please handle"))
        .unwrap_or_else(|| panic!("{prompt}"));
    let range = &after[1..after.find(']').unwrap()];
    let (start, end) = range.split_once('-').expect("a range");
    assert_eq!(
        end.parse::<i64>().unwrap() - start.parse::<i64>().unwrap(),
        2,
        "{after:.60}"
    );
    for hidden in [
        "TOOL OUTPUT NEVER SHOWN",
        "private reasoning",
        "META LINE",
        "SUMMARY TEXT",
    ] {
        assert!(
            !prompt.contains(hidden),
            "{hidden} must not reach the model"
        );
    }
    let status = env.status("claude-code", &t.session);
    assert_eq!(status["historian"]["last_run"]["status"], "published");
    // Facts land in the memory of the transcript's project (its cwd).
    let project = mc_base::identity::project_identity(&env.project());
    let store = Store::open(&env.db(), &StoreOptions::default()).unwrap();
    let memories = mc_history::store::live_memories(store.conn(), &project, NOW).unwrap();
    assert_eq!(memories.len(), 1);

    // check reads the same transcript.
    let mut check_args = vec!["check"];
    check_args.extend(args);
    let (code, check, _) = env.historian(&check_args, "");
    assert_eq!(code, 0);
    assert_eq!(check["harness"], "claude-code");
    assert!(check["covered_through"].as_i64().unwrap() > 0);
}

/// A Claude Code session of `turns` turns in `cwd`.
fn cc_session(cwd: &Path, turns: usize) -> Transcript {
    let mut t = Transcript {
        session: "5e1d2c3b-4a59-4687-9b0a-1c2d3e4f5a6b".into(),
        cwd: cwd.display().to_string(),
        lines: Vec::new(),
        last: None,
        minute: 0,
    };
    for n in 0..turns {
        t.turn(n, 250);
    }
    t
}

/// Wrap-up and recompute from a Claude Code transcript, as a user runs them
/// on a session with no transform pass (the fake server as the model).
#[test]
fn wrapup_and_recomp_work_on_a_claude_code_transcript() {
    let env = Env::new();
    env.fake.always("big", folding(FACT));
    let t = cc_session(&env.project(), 12);
    let file = env.path("session.jsonl");
    std::fs::write(&file, t.text()).unwrap();
    let file = file.display().to_string();
    let source = ["--transcript", file.as_str(), "--context-limit", "200000"];
    // A large window: a routine run folds nothing yet.
    let (code, routine, _) = env.historian(&[&["run"][..], &source].concat(), "");
    assert_eq!(
        (code, routine["status"].as_str()),
        (0, Some("nothing_to_do")),
        "{routine}"
    );

    let (code, wrapped, stderr) =
        env.historian(&[&["wrapup", "--keep", "4"][..], &source].concat(), "");
    assert_eq!(code, 0, "{wrapped}\n{stderr}");
    assert_eq!(wrapped["status"], "published", "{wrapped}");
    assert_eq!(wrapped["harness"], "claude-code");
    let end = wrapped["compartments"].as_array().unwrap().last().unwrap()["end"].clone();
    assert!(end.as_i64().unwrap() > 10, "{wrapped}");

    let (code, redone, stderr) = env.historian(&[&["recomp"][..], &source].concat(), "");
    assert_eq!(code, 0, "{redone}\n{stderr}");
    assert_eq!(redone["status"], "published", "{redone}");
    assert_eq!(
        redone["replaced"],
        wrapped["compartments"].as_array().unwrap().len()
    );
    assert_eq!(
        redone["compartments"].as_array().unwrap().last().unwrap()["end"],
        end
    );
    assert_eq!(redone["facts_promoted"], 0);
}

/// The historian with a deadline: a process that would read its input
/// forever is killed and the test fails instead of hanging.
fn historian_within(env: &Env, args: &[&str]) -> Output {
    env.run_db_within("mc-historian", args, "", Duration::from_secs(20))
}

#[cfg(unix)]
#[test]
fn transcripts_that_are_no_regular_file_or_too_big_are_refused_at_once() {
    let env = Env::new();
    let fifo = env.path("fifo.jsonl");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let folder = env.path("folder.jsonl");
    std::fs::create_dir(&folder).unwrap();
    let cases = [
        (fifo.display().to_string(), "a FIFO"),
        (folder.display().to_string(), "a directory"),
        ("/dev/zero".to_string(), "a character device"),
    ];
    for (bad, what) in &cases {
        for command in ["check", "prompt", "run"] {
            let out = historian_within(&env, &[command, "--transcript", bad]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {bad}: {stderr}");
            assert!(out.stdout.is_empty());
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.starts_with("mc-historian: error: ")
                    && stderr.contains(what)
                    && stderr.contains("not a regular file"),
                "{stderr}"
            );
        }
    }
    // Over the size cap of the user config (the project may not raise it).
    let mut config = env.default_config();
    config["transcript"] = json!({"max_bytes": 1_048_576});
    env.user_config(config);
    let file = env.path("session.jsonl");
    std::fs::write(&file, cc_session(&env.project(), 300).text()).unwrap();
    assert!(std::fs::metadata(&file).unwrap().len() > 1 << 20);
    std::fs::create_dir_all(env.project().join(".mc")).unwrap();
    std::fs::write(
        env.project().join(".mc").join("config.jsonc"),
        r#"{"transcript": {"max_bytes": 4294967296}}"#,
    )
    .unwrap();
    for command in ["check", "prompt", "run"] {
        let out = historian_within(
            &env,
            &[command, "--transcript", &file.display().to_string()],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains("larger than 1048576 bytes") && stderr.contains("transcript.max_bytes"),
            "{stderr}"
        );
    }
    assert!(env.fake.requests().is_empty());
}

#[test]
fn a_bad_byte_costs_one_line_and_odd_timestamps_cost_nothing() {
    let env = Env::new();
    let mut t = cc_session(&env.project(), 12);
    // Timestamps whose byte slicing used to panic.
    t.lines[3]["timestamp"] = json!("2025-10-09T09:04:00+0é:0");
    t.lines[8]["timestamp"] = json!("2025-10-09T09:09:00é0:00");
    let mut text = t.text().into_bytes();
    // A byte that is not UTF-8 in the first user message, then a torn line.
    let at = text.windows(7).position(|w| w == b"Step 0:").unwrap();
    text[at + 1] = 0xff;
    text.extend_from_slice(b"{\"type\": \"assistant\", \"uuid\": \xff\n");
    let file = env.path("session.jsonl");
    std::fs::write(&file, &text).unwrap();
    let path = file.display().to_string();
    let args = |command| {
        [
            command,
            "--transcript",
            path.as_str(),
            "--context-limit",
            "6000",
            "--now-ms",
            "1760000000000",
        ]
    };
    let (code, check, stderr) = env.historian(&args("check"), "");
    assert_eq!(code, 0, "{check}\n{stderr}");
    assert_eq!(check["harness"], "claude-code");
    assert!(
        stderr.contains("invalid UTF-8") && stderr.contains("skipped it"),
        "{stderr}"
    );
    let (code, prompt, stderr) = env.historian(&args("prompt"), "");
    assert_eq!(code, 0, "{prompt}\n{stderr}");
    let user = user_text(&prompt["request"]["body"]);
    assert!(
        user.contains("[1] U: S\u{fffd}ep 0: please handle"),
        "{user}"
    );
    assert!(user.contains("Step 1: please handle"), "{user}");
}

#[test]
fn an_opencode_server_session_is_fetched_and_folded() {
    let env = Env::new();
    env.fake.always("big", folding(""));
    let opencode = FakeOpenCode::start();
    opencode.add_session(json!({"id": "ses_oc", "title": "t", "directory": env.project()}));
    for message in messages("ses_oc", 30) {
        opencode.add_message(message);
    }
    let (code, report, stderr) = env.historian(
        &[
            "run",
            "--opencode-url",
            opencode.url(),
            "--session",
            "ses_oc",
            "--context-limit",
            "20000",
        ],
        "",
    );
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["status"], "published");
    assert_eq!(report["harness"], "opencode");
    assert!(
        opencode
            .requests()
            .iter()
            .any(|r| r.method == "GET" && r.path == "/session/ses_oc/message")
    );
    // The same session through an envelope is the same session (one ordinal space).
    let (_, check, _) = env.historian(&["check"], &env.envelope("ses_oc", 30, 5_000, NOW));
    assert_eq!(check["known_session"], true);
    assert_eq!(
        check["covered_through"],
        report["compartments"].as_array().unwrap().last().unwrap()["end"]
    );
}

#[test]
fn only_the_user_config_may_configure_the_historian() {
    let env = Env::new();
    env.user_config(json!({}));
    // A cloned repository's config tries to name providers and models.
    let project_config = env.project().join(".mc").join("config.jsonc");
    std::fs::create_dir_all(project_config.parent().unwrap()).unwrap();
    std::fs::create_dir_all(env.project().join(".git")).unwrap();
    std::fs::write(
        &project_config,
        json!({
            "providers": {"evil": {"kind": "command", "command": ["sh", "-c", "touch PWNED"]}},
            "historian": {"model": "evil/x"},
        })
        .to_string(),
    )
    .unwrap();
    let out = env.run_db(
        "mc-historian",
        &["run"],
        &env.envelope("ses_p", 30, 5_000, NOW),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("providers may not be set by a project config"),
        "{stderr}"
    );
    assert!(
        stderr.contains("historian.model may not be set by a project config"),
        "{stderr}"
    );
    // The error says what is missing and why no default applies; the hint
    // line, what to write.
    assert!(
        stderr.contains(
            "mc-historian: error: no historian.model configured, and no OpenCode server to \
             fold through"
        ) && stderr.contains("mc-historian: hint: set historian.model to \"provider/model\""),
        "{stderr}"
    );
    assert!(!env.root().join("PWNED").exists());
    assert!(!env.project().join("PWNED").exists());
    // Bad input exits 2 too.
    let out = env.run_db("mc-historian", &["run"], "not json");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("mc-historian: error: input is not JSON")
    );
}

#[test]
fn without_a_model_a_run_fails_before_fetching_from_opencode() {
    let env = Env::new();
    // No model, and the harness's own turned off.
    env.user_config(json!({"historian": {"harness_model": false}}));
    // Nothing listens here: a fetch would fail with "cannot reach OpenCode".
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = env.run_db(
        "mc-historian",
        &["run", "--opencode-url", &url, "--session", "ses_x"],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no historian.model configured, and historian.harness_model is false"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot reach OpenCode"), "{stderr}");
}

// ---------------------------------------------------------------------------
// The harness's own model (no historian model configured)

/// The session's messages as an OpenCode server lists them: user messages
/// name the model they were sent to (`p/m`).
fn opencode_session(opencode: &FakeOpenCode, env: &Env, session: &str) {
    opencode.add_session(json!({"id": session, "title": "t", "directory": env.project()}));
    for mut message in messages(session, 30) {
        if message["info"]["role"] == "user" {
            message["info"]["model"] = json!({"providerID": "p", "modelID": "m"});
        }
        opencode.add_message(message);
    }
}

/// OpenCode's answer to a prompt: the assistant message with `text`.
fn opencode_answer(text: &str) -> Value {
    json!({
        "info": {"role": "assistant", "providerID": "p", "modelID": "m", "finish": "stop",
                 "tokens": {"input": 1_200, "output": 300, "reasoning": 0, "cache": {"read": 300, "write": 0}}},
        "parts": [{"type": "step-start"}, {"type": "text", "text": text}, {"type": "step-finish"}],
    })
}

/// OpenCode folds every prompt's chunk (the prompt is its one text part).
fn opencode_folding(opencode: &FakeOpenCode) {
    opencode.answer_prompts(|body| {
        opencode_answer(&fold_user(
            body["parts"][0]["text"].as_str().unwrap_or(""),
            "",
        ))
    });
}

/// No model configured, and quick to give up.
fn no_model(env: &Env) {
    env.user_config(json!({"historian": {"retries": 0, "timeout_ms": 10_000}}));
}

fn opencode_run(env: &Env, url: &str, command: &str) -> (i32, Value, String) {
    env.historian(
        &[
            command,
            "--opencode-url",
            url,
            "--session",
            "ses_oc",
            "--context-limit",
            "20000",
            "--project-dir",
            env.project().to_str().unwrap(),
        ],
        "",
    )
}

#[test]
fn with_no_model_an_opencode_session_folds_through_its_own_server() {
    let env = Env::new();
    no_model(&env);
    let opencode = FakeOpenCode::start();
    opencode_session(&opencode, &env, "ses_oc");
    opencode_folding(&opencode);
    // A child a killed run left behind, and a task subagent's child.
    opencode.add_session(json!({"id": "ses_left", "parentID": "ses_oc",
                                "metadata": {"mc": {"historian": true}}}));
    opencode.add_session(json!({"id": "ses_task", "parentID": "ses_oc"}));

    // check says which model a run would use, and why.
    let (code, check, stderr) = opencode_run(&env, opencode.url(), "check");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(check["model"], "opencode/p/m");
    assert_eq!(check["model_source"], "harness_default");
    let reason = check["model_reason"].as_str().unwrap();
    assert!(
        reason.contains(opencode.url()) && reason.contains("the session's model p/m"),
        "{reason}"
    );

    let (code, report, stderr) = opencode_run(&env, opencode.url(), "run");
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["status"], "published", "{report}");
    assert_eq!(report["model"], "opencode/p/m");
    assert_eq!(report["model_source"], "harness_default");
    // OpenCode's counts, cache reads included.
    assert_eq!(report["tokens"], json!({"input": 1_500, "output": 300}));
    assert!(env.compartments() > 0);

    let requests = opencode.requests();
    let created = requests
        .iter()
        .find(|r| r.method == "POST" && r.path == "/session")
        .expect("a child session");
    let body = created.body.as_ref().unwrap();
    assert_eq!(body["parentID"], "ses_oc", "a child of the folded session");
    assert_eq!(
        body["permission"],
        json!([{"permission": "*", "pattern": "*", "action": "deny"}])
    );
    assert_eq!(body["metadata"]["mc"]["historian"], true);
    assert_eq!(
        created.query_param("directory").as_deref(),
        env.project().to_str()
    );
    let prompt = requests
        .iter()
        .find(|r| r.method == "POST" && r.path == "/session/ses_child_0001/message")
        .expect("the prompt");
    let body = prompt.body.as_ref().unwrap();
    assert_eq!(body["agent"], "compaction");
    assert_eq!(body["tools"], json!({"*": false}));
    assert_eq!(body["model"], json!({"providerID": "p", "modelID": "m"}));
    assert!(body["system"].as_str().unwrap().contains("<history>"));
    assert!(
        body["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("<messages first=")
    );
    // The child is deleted after its answer, and so is the one a killed run
    // left: the user's session and its task child are all that is left.
    assert!(
        requests
            .iter()
            .any(|r| r.method == "DELETE" && r.path == "/session/ses_child_0001")
    );
    assert_eq!(opencode.session_ids(), ["ses_oc", "ses_task"]);
    let status = env.status("opencode", "ses_oc");
    assert_eq!(status["historian"]["last_run"]["model"], "opencode/p/m");
    assert_eq!(status["historian_model"]["model_source"], "harness_default");

    // prompt shows the requests a run would make.
    let (code, prompt, _) = opencode_run(&env, opencode.url(), "prompt");
    assert_eq!(code, 0);
    assert_eq!(prompt["model_source"], "harness_default");
    if prompt["status"] == "ready" {
        assert_eq!(prompt["request"]["kind"], "opencode");
        assert_eq!(
            prompt["request"]["requests"][1]["body"]["agent"],
            "compaction"
        );
    }
}

#[test]
fn opencodes_small_model_is_used_only_when_it_costs_no_more() {
    let env = Env::new();
    no_model(&env);
    let opencode = FakeOpenCode::start();
    opencode_session(&opencode, &env, "ses_oc");
    opencode_folding(&opencode);
    opencode.set_providers(json!({"providers": [{"id": "p", "models": {
        "m": {"cost": {"input": 3.0, "output": 15.0}},
        "small": {"cost": {"input": 1.0, "output": 5.0}},
        "dear": {"cost": {"input": 15.0, "output": 75.0}},
    }}]}));
    opencode.set_config(json!({"model": "p/dear", "small_model": "p/small"}));
    let (_, check, stderr) = opencode_run(&env, opencode.url(), "check");
    assert_eq!(check["model"], "opencode/p/small", "{check} {stderr}");
    assert!(
        check["model_reason"]
            .as_str()
            .unwrap()
            .contains("small_model p/small, which costs no more than the session's model p/m"),
        "{check}"
    );
    let (code, report, stderr) = opencode_run(&env, opencode.url(), "run");
    assert_eq!(code, 0, "{report} {stderr}");
    assert_eq!(report["model"], "opencode/p/small");
    let prompt = opencode
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/message"))
        .unwrap();
    assert_eq!(
        prompt.body.unwrap()["model"],
        json!({"providerID": "p", "modelID": "small"})
    );
    // A small model dearer than the session's is never used.
    opencode.set_config(json!({"small_model": "p/dear"}));
    let (_, check, _) = opencode_run(&env, opencode.url(), "check");
    assert_eq!(check["model"], "opencode/p/m", "{check}");
    assert!(
        check["model_reason"]
            .as_str()
            .unwrap()
            .contains("costs more")
    );
    // A configured model always wins.
    env.user_config(json!({
        "providers": {"cloud": {"kind": "anthropic", "base_url": env.fake.url()}},
        "historian": {"model": "cloud/big"},
    }));
    let (_, check, _) = opencode_run(&env, opencode.url(), "check");
    assert_eq!(check["model"], "cloud/big");
    assert_eq!(check["model_source"], "configured");
}

#[test]
fn an_opencode_fold_that_fails_publishes_nothing_and_says_why() {
    let env = Env::new();
    no_model(&env);
    let opencode = FakeOpenCode::start();
    opencode_session(&opencode, &env, "ses_oc");

    // The child session errs (OpenCode could not call the model).
    opencode.answer_prompts(|_| {
        let mut answer = opencode_answer("");
        answer["info"]["error"] = json!({"name": "ProviderAuthError",
            "data": {"providerID": "p", "message": "no credentials for p"}});
        answer
    });
    let (code, report, stderr) = opencode_run(&env, opencode.url(), "run");
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["status"], "failed");
    assert_eq!(report["error_class"], "provider_harness", "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("no credentials for p")
    );
    assert!(stderr.contains("hint: log in to p in OpenCode"), "{stderr}");
    assert_eq!(env.compartments(), 0);
    assert_eq!(
        opencode.session_ids(),
        ["ses_oc"],
        "the child is deleted anyway"
    );

    // An answer that is not the format, twice (the answer and its repair).
    opencode.answer_prompts(|_| opencode_answer("Here is a summary of the session."));
    let (code, report, _) = opencode_run(&env, opencode.url(), "run");
    assert_eq!(code, 1);
    assert_eq!(report["error_class"], "answer_rejected", "{report}");
    assert_eq!(env.compartments(), 0);
    assert_eq!(opencode.session_ids(), ["ses_oc"]);

    // The server goes away while the model works on the prompt.
    opencode_folding(&opencode);
    let relay = Relay::start(opencode.url(), "POST", "/message");
    let (code, report, stderr) = opencode_run(&env, relay.url(), "run");
    assert!(relay.is_gone());
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["status"], "failed");
    assert_eq!(report["error_class"], "provider_unreachable", "{report}");
    assert!(
        stderr.contains(&format!(
            "hint: is OpenCode still running and serving {}",
            relay.url()
        )),
        "{stderr}"
    );
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .contains("could not delete OpenCode's child session"),
        "{report}"
    );
    assert_eq!(env.compartments(), 0);
    // Every failure is recorded with its cause.
    let status = env.status("opencode", "ses_oc");
    assert_eq!(
        status["historian"]["last_failure"]["error_class"],
        "provider_unreachable"
    );
    assert_eq!(status["historian"]["failures_since_success"], 3);
}

/// A `claude` that records its arguments and folds the chunk of its stdin
/// into one compartment.
#[cfg(unix)]
fn fake_claude(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    write_script(
        &dir.join("claude"),
        &format!(
            "printf '%s\\n' \"$@\" > '{args}'\n\
             input=$(cat)\n\
             first=$(printf '%s' \"$input\" | sed -n 's/.*<messages first=\"\\([0-9]*\\)\".*/\\1/p' | head -n 1)\n\
             last=$(printf '%s' \"$input\" | sed -n 's/.*<messages first=\"[0-9]*\" last=\"\\([0-9]*\\)\".*/\\1/p' | head -n 1)\n\
             printf '<history>\\n<compartment start=\"%s\" end=\"%s\" importance=\"50\" episode=\"feature\">\\n\
             <title>Steps</title>\\n<p1>Long.</p1>\\n<p2>Medium.</p2>\\n<p3>Short.</p3>\\n<p4>Steps</p4>\\n\
             </compartment>\\n<facts>\\n</facts>\\n<unprocessed_from>%s</unprocessed_from>\\n</history>\\n' \
             \"$first\" \"$last\" $((last + 1))\n",
            args = dir.join("args").display()
        ),
    );
}

#[cfg(unix)]
#[test]
fn a_claude_code_session_folds_through_claude_on_path() {
    let bin = tempfile::tempdir().unwrap();
    fake_claude(bin.path());
    let path = std::env::join_paths(std::iter::once(bin.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let env = Env {
        env: TestEnv::new().with_var("PATH", &path),
        fake: FakeLlm::start(),
    };
    std::fs::create_dir_all(env.project()).unwrap();
    no_model(&env);
    let t = cc_session(&env.project(), 12);
    let file = env.path("session.jsonl");
    std::fs::write(&file, t.text()).unwrap();
    let file = file.display().to_string();
    let args = ["--transcript", file.as_str(), "--context-limit", "6000"];

    let (code, check, _) = env.historian(&[&["check"][..], &args].concat(), "");
    assert_eq!(code, 0);
    assert_eq!(check["model"], "claude/claude-sonnet-4-5", "{check}");
    assert_eq!(check["model_source"], "harness_default");
    let (code, report, stderr) = env.historian(&[&["run"][..], &args].concat(), "");
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["status"], "published", "{report}");
    assert_eq!(report["model"], "claude/claude-sonnet-4-5");
    // claude -p on the session's model, with no tools.
    let argv = std::fs::read_to_string(bin.path().join("args")).unwrap();
    assert_eq!(argv, "-p\n--model\nclaude-sonnet-4-5\n--tools\n\n");
    assert!(
        env.fake.requests().is_empty(),
        "no configured provider was asked"
    );

    // Without claude on PATH there is no model, and check and run say why.
    let empty = tempfile::tempdir().unwrap();
    let env = Env {
        env: TestEnv::new().with_var("PATH", empty.path()),
        fake: FakeLlm::start(),
    };
    no_model(&env);
    std::fs::write(env.path("session.jsonl"), t.text()).unwrap();
    let file = env.path("session.jsonl").display().to_string();
    let args = ["--transcript", file.as_str(), "--context-limit", "6000"];
    let (_, check, _) = env.historian(&[&["check"][..], &args].concat(), "");
    assert_eq!(check["model_source"], "none");
    assert!(check["model"].is_null());
    assert!(
        check["model_reason"]
            .as_str()
            .unwrap()
            .contains("claude is not on PATH"),
        "{check}"
    );
    let out = env.run_db("mc-historian", &[&["run"][..], &args].concat(), "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("claude is not on PATH"));
}

#[cfg(unix)]
#[test]
fn progress_shows_only_on_a_terminal() {
    // On a pipe (every other test): stderr stays empty. On a terminal
    // (`script` gives the run a pseudo-terminal), progress is drawn.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to make a pseudo-terminal");
        return;
    }
    let env = Env::new();
    env.fake.always("big", folding(""));
    let envelope = env.path("envelope.json");
    std::fs::write(&envelope, env.envelope("ses_tty", 30, 5_000, NOW)).unwrap();
    let shell = format!(
        "'{}' --db '{}' run < '{}'",
        bin_path("mc-historian").display(),
        env.db().display(),
        envelope.display()
    );
    let mut script = env.program("script");
    script
        .args(["-qec", &shell, "/dev/null"])
        .env("TERM", "xterm-256color");
    let out = pipe(&mut script, b"").unwrap();
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{terminal}");
    assert!(terminal.contains("\"status\":\"published\""), "{terminal}");
    assert!(terminal.contains("published 1 compartment"), "{terminal}");
}

// ---------------------------------------------------------------------------
// The client in-process

fn provider(kind: ProviderKind, url: String, key_env: Option<&str>) -> ProviderConfig {
    ProviderConfig {
        kind,
        base_url: Some(url),
        api_key_env: key_env.map(str::to_string),
        command: None,
    }
}

/// The default options, with retry waits that return at once.
fn quick_options() -> Options {
    Options::from_config(
        &HistorianConfig::default(),
        ProxyEnv::default(),
        Sleeper::new(|_| {}),
    )
}

/// A sleeper that records each delay instead of waiting it.
fn recorder() -> (Sleeper, Arc<Mutex<Vec<Duration>>>) {
    let slept = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&slept);
    (
        Sleeper::new(move |delay| log.lock().unwrap().push(delay)),
        slept,
    )
}

/// The delays of the `Retrying` events, in order.
fn retry_delays(events: &[llm::Event]) -> Vec<Duration> {
    events
        .iter()
        .filter_map(|e| match e {
            llm::Event::Retrying { delay, .. } => Some(*delay),
            _ => None,
        })
        .collect()
}

fn client(
    fake: &FakeLlm,
    chain: &[&str],
    keys: &[(&str, &str)],
    tweak: impl Fn(&mut Options),
) -> Client {
    let providers = BTreeMap::from([
        (
            "a".to_string(),
            provider(ProviderKind::Anthropic, fake.url().into(), Some("A_KEY")),
        ),
        (
            "o".to_string(),
            provider(ProviderKind::Openai, format!("{}/v1", fake.url()), None),
        ),
        (
            "k".to_string(),
            provider(
                ProviderKind::Openai,
                format!("{}/v1", fake.url()),
                Some("K_KEY"),
            ),
        ),
    ]);
    let keys = keys
        .iter()
        .map(|(p, k)| (p.to_string(), k.to_string()))
        .collect();
    let mut options = quick_options();
    options.backoff = Duration::from_millis(1);
    options.timeout = Duration::from_secs(5);
    tweak(&mut options);
    let chain: Vec<String> = chain.iter().map(|s| s.to_string()).collect();
    Client::new(&providers, &chain, &keys, options).unwrap()
}

fn ask(client: &Client) -> (Result<llm::Completion, llm::LlmError>, Vec<llm::Event>) {
    let prompt = Prompt {
        system: "sys".into(),
        user: "user".into(),
        max_tokens: 100,
    };
    let mut events = Vec::new();
    let result = client.complete(&prompt, &mut |e| events.push(e));
    (result, events)
}

#[test]
fn client_reads_both_formats_and_flags_truncation() {
    let fake = FakeLlm::start();
    fake.script(
        "m",
        [
            Reply::text("anthropic answer"),
            Reply::Truncated("cut sh".into()),
        ],
    );
    let c = client(&fake, &["a/m"], &[("a", KEY)], |_| {});
    let (answer, _) = ask(&c);
    let answer = answer.unwrap();
    assert_eq!(answer.text, "anthropic answer");
    assert!(!answer.truncated);
    assert!(answer.tokens_in > 0 && answer.tokens_out > 0);
    assert!(ask(&c).0.unwrap().truncated);
    let request = &fake.requests()[0];
    assert_eq!(request.body["max_tokens"], 100);
    assert_eq!(request.body["system"], "sys");
    assert_eq!(request.header("x-api-key"), Some(KEY));

    fake.script("n", [Reply::text("openai answer")]);
    let c = client(&fake, &["k/n"], &[("k", KEY)], |_| {});
    assert_eq!(ask(&c).0.unwrap().text, "openai answer");
    let request = fake.requests().pop().unwrap();
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(request.body["max_tokens"], 100);
}

#[test]
fn client_error_bodies_are_shown_with_keys_redacted_and_4xx_stops_the_chain() {
    let fake = FakeLlm::start();
    fake.always(
        "m",
        Reply::status(
            401,
            format!("{{\"error\":{{\"message\":\"invalid x-api-key {KEY}\"}}}}"),
        ),
    );
    fake.always(ANY_MODEL, Reply::text("never asked"));
    let c = client(&fake, &["a/m", "o/other"], &[("a", KEY)], |_| {});
    let (result, events) = ask(&c);
    let error = result.unwrap_err();
    assert_eq!(error.kind, CallFailure::Status(401));
    let text = error.to_string();
    assert!(
        text.starts_with("a/m: HTTP 401 Unauthorized: {\"error\":"),
        "{text}"
    );
    assert!(text.contains("invalid x-api-key [redacted]"), "{text}");
    assert!(!text.contains(KEY));
    assert!(
        events
            .iter()
            .all(|e| matches!(e, llm::Event::Calling { .. }))
    );
    assert_eq!(fake.models_asked(), ["m"], "not retried, no fallback");
}

#[test]
fn client_retries_honour_retry_after_and_report_every_failure() {
    let fake = FakeLlm::start();
    fake.script(
        "m",
        [
            Reply::Status {
                code: 429,
                body: "{}".into(),
                retry_after: Some(1),
            },
            Reply::text("after waiting"),
        ],
    );
    let (sleeper, slept) = recorder();
    let c = client(&fake, &["a/m"], &[("a", KEY)], |o| {
        o.retries = 2;
        o.sleep = sleeper.clone();
    });
    let (result, events) = ask(&c);
    assert_eq!(result.unwrap().text, "after waiting");
    // Retry-After: 1 beats the 1 ms backoff (plus jitter), and the client
    // waits exactly the delay it reports.
    assert_eq!(retry_delays(&events), [Duration::from_secs(1)]);
    assert!(matches!(&events[1], llm::Event::Retrying { .. }));
    assert_eq!(*slept.lock().unwrap(), [Duration::from_secs(1)]);

    // Everything fails: the error names each model's failure.
    fake.always("x", Reply::status(500, "{\"e\":\"boom-x\"}"));
    fake.always("y", Reply::status(502, "{\"e\":\"boom-y\"}"));
    let c = client(&fake, &["a/x", "o/y"], &[("a", KEY)], |o| o.retries = 0);
    let error = ask(&c).0.unwrap_err().to_string();
    assert!(error.starts_with("o/y: HTTP 502 Bad Gateway"), "{error}");
    assert!(error.contains("after: a/x: HTTP 500"), "{error}");
}

#[test]
fn client_backoff_doubles_per_retry_and_is_slept_not_timed() {
    let fake = FakeLlm::start();
    fake.always("m", Reply::status(503, "{\"e\":\"busy\"}"));
    let (sleeper, slept) = recorder();
    let c = client(&fake, &["a/m"], &[("a", KEY)], |o| {
        o.retries = 3;
        o.backoff = Duration::from_millis(100);
        o.sleep = sleeper.clone();
    });
    let (result, events) = ask(&c);
    assert_eq!(result.unwrap_err().kind, CallFailure::Status(503));
    assert_eq!(fake.models_asked(), ["m"; 4], "one try and three retries");
    let delays = retry_delays(&events);
    assert_eq!(
        *slept.lock().unwrap(),
        delays,
        "each reported delay is slept"
    );
    // 100 ms doubled per retry, plus up to 50 % jitter.
    assert_eq!(delays.len(), 3);
    for (n, delay) in delays.iter().enumerate() {
        let base = Duration::from_millis(100 << n);
        assert!(
            *delay >= base && *delay < base.mul_f64(1.5),
            "retry {n}: {delay:?}"
        );
    }
}

#[test]
fn client_unset_keys_and_router_errors_fall_back() {
    let fake = FakeLlm::start();
    fake.always("m", Reply::text("from the second"));
    // k's key variable is unset: it is skipped without a request.
    let c = client(&fake, &["k/first", "o/m"], &[], |_| {});
    let (result, events) = ask(&c);
    assert_eq!(result.unwrap().text, "from the second");
    assert_eq!(fake.models_asked(), ["m"]);
    let fell = events
        .iter()
        .find_map(|e| match e {
            llm::Event::FallingBack { error, .. } => Some(error.to_string()),
            _ => None,
        })
        .unwrap();
    assert!(
        fell.contains("environment variable K_KEY is not set"),
        "{fell}"
    );

    // A router's 200 carrying an error object counts as that error.
    fake.script(
        "r",
        [Reply::Raw(
            r#"{"error":{"code":503,"message":"upstream down"}}"#.into(),
        )],
    );
    let c = client(&fake, &["o/r", "o/m"], &[], |o| o.retries = 0);
    assert_eq!(ask(&c).0.unwrap().text, "from the second");
    // An answer in no known format stops the chain (another model would not help).
    fake.script("bad", [Reply::Raw("<html>proxy error</html>".into())]);
    let c = client(&fake, &["o/bad", "o/m"], &[], |_| {});
    let error = ask(&c).0.unwrap_err();
    assert_eq!(error.kind, CallFailure::Protocol);
    assert!(error.to_string().contains("<html>proxy error</html>"));
}

#[test]
fn client_switches_to_max_completion_tokens_when_asked() {
    let fake = FakeLlm::start();
    fake.script(
        "reasoner",
        [
            Reply::status(
                400,
                r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."}}"#,
            ),
            Reply::text("ok"),
        ],
    );
    let c = client(&fake, &["o/reasoner"], &[], |_| {});
    assert_eq!(ask(&c).0.unwrap().text, "ok");
    let requests = fake.requests();
    assert_eq!(requests[1].body["max_completion_tokens"], 100);
    assert!(requests[1].body.get("max_tokens").is_none());
}

#[test]
fn client_connection_errors_are_retried_then_fall_back() {
    let fake = FakeLlm::start();
    fake.always("m", Reply::text("alive"));
    // A port nothing listens on.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let providers = BTreeMap::from([
        (
            "dead".to_string(),
            provider(
                ProviderKind::Openai,
                format!("http://127.0.0.1:{dead}/v1"),
                None,
            ),
        ),
        (
            "o".to_string(),
            provider(ProviderKind::Openai, format!("{}/v1", fake.url()), None),
        ),
    ]);
    let mut options = quick_options();
    options.backoff = Duration::from_millis(1);
    options.retries = 1;
    let chain = vec!["dead/x".to_string(), "o/m".to_string()];
    let c = Client::new(&providers, &chain, &BTreeMap::new(), options).unwrap();
    let (result, events) = ask(&c);
    assert_eq!(result.unwrap().text, "alive");
    let retried = events
        .iter()
        .filter(|e| matches!(e, llm::Event::Retrying { .. }))
        .count();
    assert_eq!(retried, 1);
}

#[cfg(unix)]
#[test]
fn client_command_timeout_kills_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let providers = BTreeMap::from([(
        "cli".to_string(),
        ProviderConfig {
            kind: ProviderKind::Command,
            base_url: None,
            api_key_env: None,
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                format!("echo $$ > '{}'; exec sleep 30", pid_file.display()),
            ]),
        },
    )]);
    let mut options = quick_options();
    options.timeout = Duration::from_millis(1_000);
    let c = Client::new(
        &providers,
        &["cli/x".to_string()],
        &BTreeMap::new(),
        options,
    )
    .unwrap();
    let error = ask(&c).0.unwrap_err();
    assert_eq!(error.kind, CallFailure::Timeout);
    assert!(
        error.to_string().contains("did not finish within 1000 ms"),
        "{error}"
    );
    // Killed and reaped: no process (not even a zombie) has its pid any more.
    let pid = std::fs::read_to_string(&pid_file).expect("the program started within 1 s");
    let alive = Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "the timed-out program {} still runs", pid.trim());
    // A program that is not there is unavailable (the next model would be tried).
    let providers = BTreeMap::from([(
        "cli".to_string(),
        ProviderConfig {
            kind: ProviderKind::Command,
            base_url: None,
            api_key_env: None,
            command: Some(vec!["/nonexistent/mc-test-program".into()]),
        },
    )]);
    let options = quick_options();
    let c = Client::new(
        &providers,
        &["cli/x".to_string()],
        &BTreeMap::new(),
        options,
    )
    .unwrap();
    assert_eq!(ask(&c).0.unwrap_err().kind, CallFailure::Unavailable);
}

// ---------------------------------------------------------------------------
// mc-search and the historian writing memories at once

#[test]
fn memory_writers_on_one_database_lose_no_write() {
    let env = Env::new();
    env.fake.always("big", folding(FACT));
    let project = env.project();
    let dir = project.to_str().unwrap().to_string();
    let writers = 3;
    let each = 12;
    let (historian, mcp, cli) = std::thread::scope(|s| {
        let historian = s.spawn(|| {
            let envelope = env.envelope("ses_mem", 30, 5_000, NOW);
            env.historian(&["run"], &envelope)
        });
        let mcp = s.spawn(|| {
            let mut lines = vec![
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {}}})
                .to_string(),
            ];
            for n in 0..each {
                lines.push(
                    json!({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
                       "params": {"name": "ctx_memory", "arguments": {
                           "action": "write", "category": "NAMING", "content": format!("mcp fact {n}")}}})
                    .to_string(),
                );
            }
            env.run_db(
                "mc-search",
                &["mcp", "--project-dir", &dir],
                &(lines.join("\n") + "\n"),
            )
        });
        let cli: Vec<_> = (0..writers)
            .map(|w| {
                let (env, dir) = (&env, &dir);
                s.spawn(move || {
                    (0..each)
                        .map(|n| {
                            env.run_db(
                                "mc-search",
                                &[
                                    "memory",
                                    "write",
                                    "--project-dir",
                                    dir,
                                    "--category",
                                    "CONSTRAINTS",
                                    "--content",
                                    &format!("writer {w} fact {n}"),
                                ],
                                "",
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        (
            historian.join().unwrap(),
            mcp.join().unwrap(),
            cli.into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect::<Vec<_>>(),
        )
    });
    assert_eq!(historian.0, 0, "{}", historian.2);
    assert_eq!(historian.1["status"], "published", "{:?}", historian.1);
    for out in &cli {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let answers: Vec<Value> = String::from_utf8_lossy(&mcp.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), each + 1);
    for a in &answers[1..] {
        assert_eq!(a["result"]["isError"], false, "{a}");
    }
    // Every write is there, once: the CLI's, the MCP server's and the historian's fact.
    let listed = env.run_db(
        "mc-search",
        &["memory", "list", "--project-dir", &dir, "--limit", "1000"],
        "",
    );
    let memories: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let contents: Vec<&str> = memories["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents.len(), writers * each + each + 1, "{contents:?}");
    assert!(contents.contains(&"Tests never touch the real home directory."));
    assert!(contents.contains(&"mcp fact 11") && contents.contains(&"writer 2 fact 11"));
}
