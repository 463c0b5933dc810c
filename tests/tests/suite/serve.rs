//! `mc-transform serve`: the commands resident. Every answer is the one-shot
//! command's stdout byte for byte (the same sessions through both); several
//! processes on one database stay correct; the incremental envelope rebuilds
//! the same answers and falls back to the whole envelope on every doubt; and
//! faults (garbage, an oversized line, a crash, the parent leaving) leave it
//! answering or gone, never wrong.

use std::process::Output;
use std::time::{Duration, Instant};

use mc_tests::TestEnv;
use mc_tests::generate::{self, SessionSpec};
use mc_tests::serve::{Incremental, Served, request_line};
use serde_json::{Value, json};

const BIN: &str = "mc-transform";

/// A change to a delta's `incremental` object that injects a doubt.
type Tamper = Box<dyn Fn(&mut serde_json::Map<String, Value>)>;

/// One request of a script: its kind and its input.
type Request = (&'static str, Value);

/// Two generated sessions, interleaved: passes over a growing prefix at
/// rising usage (defer, execute, the force and emergency bands, an idle
/// cache), a reduce, system renders, status, an overflow and the passes that
/// recover from it, a recount, and a request that fails.
fn script() -> Vec<Request> {
    let sessions: Vec<(String, Vec<Value>)> = [11u64, 12]
        .iter()
        .map(|&seed| {
            let spec = SessionSpec::new(seed, 12, 40_000);
            let messages = generate::session(&spec);
            (spec.session_id, messages)
        })
        .collect();
    let plan: [(usize, f64, i64); 8] = [
        (3, 20.0, 60_000),
        (5, 40.0, 60_000),
        (6, 40.0, 60_000),
        (7, 70.0, 60_000),
        (8, 88.0, 60_000),
        (9, 96.0, 60_000),
        (10, 50.0, 600_000),
        (10, 60.0, 60_000),
    ];
    let mut requests = Vec::new();
    for (step, &(tenths, percent, idle)) in plan.iter().enumerate() {
        for (session, messages) in &sessions {
            let cut = (messages.len() * tenths / 10).max(1);
            let prefix = &messages[..cut];
            let now = generate::last_time_ms(prefix) + idle;
            let envelope =
                generate::envelope(prefix, session, generate::usage_at_percent(percent), now);
            requests.push(("pass", envelope));
            requests.push((
                "system",
                json!({"session_id": session, "system": ["You are an agent.\nToday's date: Mon Nov 30 2026"]}),
            ));
            if step == 1 {
                requests.push((
                    "reduce",
                    json!({"harness": "opencode", "session_id": session, "drop": "1-6,9"}),
                ));
            }
            if step == 4 {
                requests.push((
                    "overflow",
                    json!({"session_id": session,
                           "model": {"provider": generate::PROVIDER_ID, "id": generate::MODEL_ID},
                           "error": "prompt is too long: 390000 tokens > 368000 maximum"}),
                ));
            }
            requests.push(("status", json!({"session_id": session})));
        }
    }
    let (session, messages) = &sessions[0];
    requests.push((
        "recount",
        generate::envelope(&messages[..8], session, 1000, 1_796_000_000_000),
    ));
    // Failures: an unknown session, a request the command refuses.
    requests.push(("status", json!({"session_id": "ses_nobody"})));
    requests.push(("system", json!({"session_id": "s"})));
    requests
}

/// The one-shot command for a request, with its input on stdin.
fn one_shot(env: &TestEnv, (kind, value): &Request) -> Output {
    let args: Vec<String> = match *kind {
        "pass" => Vec::new(),
        "status" => vec![
            "status".into(),
            "--session".into(),
            value["session_id"].as_str().unwrap().into(),
        ],
        other => vec![other.to_string()],
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdin = if *kind == "status" {
        String::new()
    } else {
        value.to_string()
    };
    env.run_db(BIN, &args, &stdin)
}

/// What the one-shot command printed, as a serve answer would say it: its
/// stdout line, or the error line of its exit code and error message.
fn as_answer(out: &Output) -> String {
    if out.status.success() {
        let text = String::from_utf8(out.stdout.clone()).unwrap();
        assert!(text.ends_with('\n') && text.lines().count() == 1, "{text}");
        return text.trim_end_matches('\n').to_string();
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let message = stderr
        .lines()
        .find_map(|l| l.strip_prefix("mc-transform: error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    format!("exit {:?}: {message}", out.status.code())
}

/// A serve answer in the terms of [`as_answer`].
fn normalise(answer: &str) -> String {
    let value: Value = serde_json::from_str(answer).unwrap();
    match value.get("error") {
        Some(error) => format!(
            "exit {:?}: {}",
            error["exit"].as_u64().map(|c| c as i32),
            error["message"].as_str().unwrap()
        ),
        None => answer.to_string(),
    }
}

fn remove_db(env: &TestEnv) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", env.db().display()));
    }
}

/// The script through one-shot processes on a fresh database.
fn one_shot_answers(env: &TestEnv, script: &[Request]) -> Vec<String> {
    remove_db(env);
    let answers = script
        .iter()
        .map(|request| as_answer(&one_shot(env, request)))
        .collect();
    remove_db(env);
    answers
}

fn serve(env: &TestEnv, extra: &[&str]) -> Served {
    let mut args = vec!["serve"];
    args.extend_from_slice(extra);
    Served::start(&mut env.db_command(BIN, &args))
}

#[test]
fn every_answer_is_the_one_shot_commands_byte_for_byte() {
    let env = TestEnv::new();
    let script = script();
    let expected = one_shot_answers(&env, &script);
    // The script exercises what it should.
    let decisions: Vec<String> = expected
        .iter()
        .filter_map(|a| serde_json::from_str::<Value>(a).ok())
        .filter_map(|v| v["pass"]["decision"].as_str().map(str::to_string))
        .collect();
    for decision in ["execute", "defer"] {
        assert!(decisions.iter().any(|d| d == decision), "{decisions:?}");
    }
    assert!(expected.iter().any(|a| a.contains("\"queued\"")));
    assert!(expected.iter().any(|a| a.contains("\"recognised\":true")));
    assert!(expected.iter().any(|a| a.starts_with("exit Some(1)")));
    assert!(expected.iter().any(|a| a.starts_with("exit Some(2)")));

    let mut served = serve(&env, &[]);
    for ((kind, value), want) in script.iter().zip(&expected) {
        let got = normalise(&served.call(kind, value));
        assert_eq!(&got, want, "{kind} {}", value["session_id"]);
    }
    assert!(
        served.close().success(),
        "serve exits 0 at the end of stdin"
    );
}

#[test]
fn serve_processes_and_one_shots_on_one_database_give_the_same_answers() {
    // Two OpenCode processes on one database, each with its serve process,
    // plus a hook or a shell running the one-shot command: the requests go
    // round-robin and every answer is the single process's.
    let env = TestEnv::new();
    let script = script();
    let expected = one_shot_answers(&env, &script);
    let mut first = serve(&env, &[]);
    let mut second = serve(&env, &[]);
    for (i, (request, want)) in script.iter().zip(&expected).enumerate() {
        let got = match i % 3 {
            0 => normalise(&first.call(request.0, &request.1)),
            1 => normalise(&second.call(request.0, &request.1)),
            _ => as_answer(&one_shot(&env, request)),
        };
        assert_eq!(&got, want, "request {i}: {}", request.0);
    }
    // A database deleted under a resident process is created anew, as a new
    // process would: the next pass is a first one again.
    let pass = script.iter().find(|r| r.0 == "pass").unwrap();
    remove_db(&env);
    let fresh = as_answer(&one_shot(&env, pass));
    remove_db(&env);
    assert_eq!(normalise(&first.call(pass.0, &pass.1)), fresh);
}

#[test]
fn the_incremental_envelope_rebuilds_the_one_shot_answers_from_deltas() {
    let env = TestEnv::new();
    let script = script();
    let expected = one_shot_answers(&env, &script);
    let mut served = serve(&env, &[]);
    let mut clients: std::collections::BTreeMap<String, Incremental> = Default::default();
    let mut deltas = 0;
    let mut smaller = 0;
    for ((kind, value), want) in script.iter().zip(&expected) {
        if *kind != "pass" {
            assert_eq!(&normalise(&served.call(kind, value)), want);
            continue;
        }
        let client = clients
            .entry(value["session_id"].as_str().unwrap().to_string())
            .or_default();
        let line = client.line(value, |_| {});
        let delta = client.last_sent_delta;
        let answer = served.request(&line);
        let key = serde_json::from_str::<Value>(&line).unwrap()["incremental"]["key"]
            .as_str()
            .unwrap()
            .to_string();
        if delta {
            deltas += 1;
            // Unchanged messages went out as indices, and came back as indices.
            assert!(line.len() < value.to_string().len(), "the request shrank");
            if answer.len() < want.len() {
                smaller += 1;
            }
        }
        let rebuilt = client.settle(value, &answer, key, delta).unwrap();
        assert_eq!(&rebuilt, want, "pass of {}", value["session_id"]);
    }
    assert!(deltas >= 10, "{deltas} passes went as deltas");
    assert!(
        smaller >= deltas / 2,
        "{smaller} of {deltas} answers shrank"
    );
}

#[test]
fn every_doubt_sends_the_whole_envelope_and_the_answer_stays_right() {
    let env = TestEnv::new();
    let script: Vec<Request> = script().into_iter().filter(|r| r.0 == "pass").collect();
    let session = script[0].1["session_id"].clone();
    let script: Vec<Request> = script
        .into_iter()
        .filter(|r| r.1["session_id"] == session)
        .collect();
    let expected = one_shot_answers(&env, &script);
    let mut served = serve(&env, &["--sessions", "1"]);
    let mut client = Incremental::default();
    let resync = |answer: &str| -> Option<String> {
        serde_json::from_str::<Value>(answer).unwrap()["resync"]
            .as_str()
            .map(str::to_string)
    };

    // The first call has no baseline: sent whole, answered as the one-shot.
    assert_eq!(client.pass(&mut served, &script[0].1).unwrap(), expected[0]);
    assert!(!client.last_sent_delta);
    // The next goes as a delta.
    assert_eq!(client.pass(&mut served, &script[1].1).unwrap(), expected[1]);
    assert!(client.last_sent_delta && client.last_resync.is_none());

    // Each doubt, injected into the next delta: a resync, after which the
    // same delta is refused too (the baseline is gone) and the whole
    // envelope goes; the answers never change.
    let doubts: Vec<(&str, Tamper)> = vec![
        (
            "stale_base",
            Box::new(|i| {
                i.insert("base".into(), json!("k-lost"));
            }),
        ),
        (
            "base_length",
            Box::new(|i| {
                let n = i["base_len"].as_u64().unwrap();
                i.insert("base_len".into(), json!(n + 1));
            }),
        ),
        (
            "bad_reference",
            Box::new(|i| {
                let messages = i["messages"].as_array_mut().unwrap();
                messages[0] = json!(100_000);
            }),
        ),
    ];
    let mut at = 2;
    for (reason, tamper) in &doubts {
        let envelope = &script[at].1;
        let line = client.line(envelope, tamper);
        assert!(client.last_sent_delta);
        let answer = served.request(&line);
        assert_eq!(resync(&answer).as_deref(), Some(*reason), "{answer}");
        let again = served.request(&client.line(envelope, |_| {}));
        assert_eq!(resync(&again).as_deref(), Some("unknown_session"));
        client.reset();
        assert_eq!(client.pass(&mut served, envelope).unwrap(), expected[at]);
        assert!(!client.last_sent_delta, "sent whole after the {reason}");
        at += 1;
    }

    // A restarted server (or a session dropped for another): unknown.
    served.kill();
    let mut served = serve(&env, &["--sessions", "1"]);
    assert_eq!(
        client.pass(&mut served, &script[at].1).unwrap(),
        expected[at]
    );
    assert_eq!(client.last_resync.as_deref(), Some("unknown_session"));
    at += 1;
    // A delta for a session whose baseline another session pushed out.
    let mut other = Incremental::default();
    let mut stranger = script[0].1.clone();
    stranger["session_id"] = json!("ses_stranger");
    other.pass(&mut served, &stranger).unwrap();
    assert_eq!(
        client.pass(&mut served, &script[at].1).unwrap(),
        expected[at]
    );
    assert_eq!(client.last_resync.as_deref(), Some("unknown_session"));
    at += 1;
    // A malformed incremental object is refused as input, and the session
    // starts over whole.
    let bad = request_line(
        "pass",
        &json!({"session_id": session, "messages": [], "incremental": {"base": "x"}}),
    );
    let answer: Value = serde_json::from_str(&served.request(&bad)).unwrap();
    assert_eq!(answer["error"]["exit"], 2, "{answer}");
    client.reset();
    assert_eq!(
        client.pass(&mut served, &script[at].1).unwrap(),
        expected[at]
    );
    assert!(!client.last_sent_delta);
}

#[test]
fn garbage_and_oversized_lines_get_error_lines_and_the_process_stays_up() {
    let env = TestEnv::new();
    let mut served = serve(&env, &["--max-request-bytes", "16384"]);
    let error = |answer: String| -> Value {
        let value: Value = serde_json::from_str(&answer).unwrap();
        assert!(value.get("error").is_some(), "{answer}");
        value["error"].clone()
    };
    assert_eq!(error(served.request("not json at all"))["code"], -32700);
    assert_eq!(error(served.request("[1, 2]"))["code"], -32600);
    assert_eq!(error(served.request(r#"{"kind": 7}"#))["code"], -32600);
    assert_eq!(
        error(served.request(r#"{"kind": "dance"}"#))["code"],
        -32601
    );
    served.send(b"\xff\xfe not text\n");
    assert_eq!(error(served.answer())["code"], -32700);
    // Blank lines are no requests and get no answer.
    served.send(b"\n   \n");
    // A line over the cap is skipped unread and answered, the cap named.
    let big = format!(
        r#"{{"kind": "pass", "messages": [], "pad": "{}"}}"#,
        "x".repeat(20_000)
    );
    let too_large = error(served.request(&big));
    assert_eq!(too_large["code"], -32600);
    assert!(
        too_large["message"].as_str().unwrap().contains("16384"),
        "{too_large}"
    );
    // A bad envelope is the pass's input error, as the one-shot's exit 2.
    let bad = error(served.request(r#"{"kind": "pass", "messages": 3}"#));
    assert_eq!(
        (bad["code"].clone(), bad["exit"].clone()),
        (json!(-32602), json!(2))
    );
    // Still up, and right.
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/opencode-session.json"
    ))
    .unwrap();
    let example: Value = serde_json::from_str(&example).unwrap();
    let answer: Value = serde_json::from_str(&served.call("pass", &example)).unwrap();
    assert_eq!(answer["pass"]["decision"], "execute", "{answer}");
    assert!(served.close().success());
}

#[cfg(unix)]
#[test]
fn serve_leaves_when_its_parent_does_even_with_stdin_open() {
    let env = TestEnv::new();
    // A shell starts serve in the background on the shell's own stdin and
    // stdout (which this test keeps open), says its pid, and waits; once
    // serve has answered, the shell is killed.
    let script = format!(
        "exec 3<&0; '{}' --db '{}' serve 0<&3 3<&- 2>/dev/null & echo $!; wait",
        mc_tests::bin_path(BIN).display(),
        env.db().display()
    );
    let mut shell = Served::start(env.program("sh").args(["-c", &script]));
    let pid: u32 = shell.answer().trim().parse().unwrap();
    assert!(shell.request("hello?").contains("-32700"));
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    };
    assert!(alive(pid), "serve runs");
    let stdin_holder = shell.id();
    // Kill the shell, not its group: serve keeps stdin open.
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &stdin_holder.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let guard = Instant::now() + Duration::from_secs(60);
    while alive(pid) && Instant::now() < guard {
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone = !alive(pid);
    if !gone {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(gone, "serve is still running after its parent was killed");
}

/// The failure without regression, resident: a pass that cannot run (the
/// database locked past the hook's wait) answers mc's last shape of the
/// session — the previous answer byte for byte, drops and head included —
/// then the new messages; the raw history never goes out. Once the lock
/// goes, passes are mc's again.
#[test]
fn a_pass_that_cannot_run_answers_the_last_shape_and_the_new_tail() {
    let env = TestEnv::new();
    let spec = SessionSpec::new(21, 14, 60_000);
    let messages = generate::session(&spec);
    let session = spec.session_id.as_str();
    let envelope = |tenths: usize, percent: f64| {
        let prefix = &messages[..messages.len() * tenths / 10];
        let now = generate::last_time_ms(prefix) + 60_000;
        generate::envelope(prefix, session, generate::usage_at_percent(percent), now)
    };
    let mut served = serve(&env, &[]);
    let mut client = Incremental::default();
    let mut before = Value::Null;
    for (tenths, percent) in [(3, 20.0), (5, 50.0), (6, 75.0), (7, 80.0)] {
        before = client
            .pass_value(&mut served, &envelope(tenths, percent))
            .unwrap();
        assert_ne!(
            before["pass"]["decision"], "passthrough",
            "{}",
            before["pass"]
        );
    }
    let shape = before["messages"].as_array().unwrap().clone();

    let holder = env.lock_database(&env.db());
    let grown = envelope(8, 82.0);
    let after = client.pass_value(&mut served, &grown).unwrap();
    assert!(client.last_sent_delta, "the call went as a delta");
    assert_eq!(
        after["pass"]["decision"], "passthrough",
        "{}",
        after["pass"]
    );
    assert_eq!(after["pass"]["fallback"]["shape"], "last_shape");
    let out = after["messages"].as_array().unwrap();
    let input = grown["messages"].as_array().unwrap();
    let new_tail = &input[messages.len() * 7 / 10..];
    // The prefix is the previous answer; then exactly the new messages.
    assert_eq!(out[..shape.len()], shape[..], "the cached prefix holds");
    assert_eq!(out[shape.len()..], new_tail[..]);
    let bytes = |m: &[Value]| serde_json::to_string(m).unwrap().len();
    assert!(bytes(out) <= bytes(&shape) + bytes(new_tail));
    // What the raw history would have been: larger (mc's drops and head held).
    assert!(
        bytes(input) > bytes(out),
        "{} <= {}",
        bytes(input),
        bytes(out)
    );

    // The lock gone, the next pass is mc's own again.
    drop(holder);
    let next = client.pass_value(&mut served, &envelope(9, 84.0)).unwrap();
    assert_ne!(next["pass"]["decision"], "passthrough", "{}", next["pass"]);
    assert!(next["pass"].get("fallback").is_none());
    served.close();
}
