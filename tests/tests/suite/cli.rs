//! The mc-transform binary as a harness adapter runs it: JSON on stdin, JSON
//! on stdout, exit codes, global flags, and failing open.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use mc_tests::TestEnv;
use mc_tests::env::seal;
use serde_json::{Value, json};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/opencode-session.json"
);

const BIN: &str = "mc-transform";

fn example() -> String {
    std::fs::read_to_string(EXAMPLE).unwrap()
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 1, "exactly one compact JSON document");
    serde_json::from_str(&text).unwrap()
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn input_messages() -> Value {
    serde_json::from_str::<Value>(&example()).unwrap()["messages"].clone()
}

#[test]
fn the_example_session_runs_and_defers() {
    let env = TestEnv::new();
    let db = env.db();
    let out = env.run(BIN, &["--db", db.to_str().unwrap()], &example());
    let doc = stdout_json(&out);
    // The first pass of a session renders the head (m[0], m[1]) for the first time.
    assert_eq!(doc["pass"]["decision"], "execute");
    assert_eq!(doc["pass"]["materialize_reason"], "first_render");
    assert_eq!(doc["pass"]["bust"], "hard");
    assert_eq!(
        doc["messages"][0]["parts"][0]["text"],
        "<session-history></session-history>"
    );
    let first = &doc["messages"][2]["parts"][0]["text"];
    assert!(
        first
            .as_str()
            .unwrap()
            .starts_with("§1§ The pending() count"),
        "{first}"
    );
    snapshot!(
        "pass_report_first_pass",
        "the pass report of the example session's first pass",
        pretty(&doc["pass"])
    );
    // Same input again: a defer pass with byte-identical messages.
    let again = stdout_json(&env.run(BIN, &["--db", db.to_str().unwrap()], &example()));
    snapshot!(
        "pass_report_defer",
        "the pass report of the same input again",
        pretty(&again["pass"])
    );
    assert_eq!(again["pass"]["decision"], "defer");
    assert_eq!(again["pass"]["bust"], "none");
    assert_eq!(
        serde_json::to_string(&again["messages"]).unwrap(),
        serde_json::to_string(&doc["messages"]).unwrap()
    );
}

#[test]
fn default_database_follows_xdg_data_home() {
    let env = TestEnv::new();
    let out = env.run(BIN, &[], &example());
    stdout_json(&out);
    assert!(env.data_home().join("mc/context.db").exists());
    // MC_DB overrides it.
    let custom = env.path("custom.db");
    let out = mc_tests::pipe(
        env.command(BIN, &[]).env("MC_DB", &custom),
        example().as_bytes(),
    )
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(custom.exists());
}

#[test]
fn global_flags_go_before_or_after_the_subcommand() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    stdout_json(&env.run(BIN, &["pass", "--db", db], &example()));
    let before = env.run(
        BIN,
        &["--db", db, "status", "--session", "ses_example0001"],
        "",
    );
    let after = env.run(
        BIN,
        &["status", "--session", "ses_example0001", "--db", db],
        "",
    );
    assert_eq!(stdout_json(&before), stdout_json(&after));
    assert_eq!(stdout_json(&before)["passes"]["execute"], 1);
}

#[test]
fn status_shows_the_newest_calls_with_the_cause_of_a_bust() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    let mut envelope: Value = serde_json::from_str(&example()).unwrap();
    let now = envelope["now_ms"].as_i64().unwrap();
    // Three calls a few seconds apart; the third came back with its cache
    // read fallen though neither mc nor the harness changed anything.
    for (k, (read, write)) in [(12_600, 90), (12_600, 800), (0, 13_500)]
        .iter()
        .enumerate()
    {
        envelope["now_ms"] = json!(now + 5_000 * k as i64);
        envelope["usage"] =
            json!({"input": 80, "cache_read": read, "cache_write": write, "output": 25});
        stdout_json(&env.run(BIN, &["--db", db], &envelope.to_string()));
    }
    envelope["now_ms"] = json!(now + 5_000 * 3);
    envelope["usage"] = json!({"input": 80, "cache_read": 13_400, "cache_write": 10, "output": 25});
    stdout_json(&env.run(BIN, &["--db", db], &envelope.to_string()));
    let status = stdout_json(&env.run(
        BIN,
        &[
            "--db",
            db,
            "status",
            "--session",
            "ses_example0001",
            "--calls",
            "3",
        ],
        "",
    ));
    let calls = status["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{}", pretty(&status["calls"]));
    let states: Vec<&str> = calls
        .iter()
        .map(|c| c["cache"]["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["full", "stable", "not_reported"]);
    assert_eq!(calls[0]["cache"]["cause"], "unknown");
    assert_eq!(calls[0]["usage"]["cache_write"], 13_500);
    assert_eq!(calls[0]["decision"], "defer");
    assert!(calls[0]["sources"]["conversation"].as_i64().unwrap() > 0);
    // `--calls 0` leaves them out.
    let status = stdout_json(&env.run(
        BIN,
        &[
            "--db",
            db,
            "status",
            "--session",
            "ses_example0001",
            "--calls",
            "0",
        ],
        "",
    ));
    assert_eq!(status["calls"], json!([]));
}

#[test]
fn input_that_is_not_json_or_has_no_messages_exits_2() {
    let env = TestEnv::new();
    for (input, expected) in [
        ("{not json", "input is not JSON"),
        ("{}", "no \"messages\""),
        ("[]", "JSON object"),
    ] {
        let out = env.run(BIN, &["--db", env.db().to_str().unwrap()], input);
        assert_eq!(out.status.code(), Some(2), "{input}");
        assert!(out.stdout.is_empty());
        let err = stderr(&out);
        assert!(err.starts_with("mc-transform: error: "), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(expected), "{err}");
    }
}

fn assert_passthrough(out: &Output, warning: &str) {
    let doc = stdout_json(out);
    assert_eq!(doc["pass"]["decision"], "passthrough");
    assert_eq!(doc["messages"], input_messages(), "messages unchanged");
    let warnings = doc["pass"]["warnings"].to_string();
    assert!(warnings.contains(warning), "{warnings}");
    assert!(stderr(out).contains("passthrough"), "logged to stderr");
}

/// With nothing held (a one-shot process) and the pass unable to run, the
/// raw history goes out only if it fits the usable window; else its oldest
/// turns are left out, whole, behind one marker, and the report says so.
#[test]
fn a_one_shot_passthrough_cuts_a_history_larger_than_the_window_and_says_so() {
    use mc_tests::generate::{self, SessionSpec};
    let env = TestEnv::new();
    let db = env.root().join("corrupt.db");
    std::fs::write(
        &db,
        b"this is not a sqlite database, just text that is long enough",
    )
    .unwrap();
    let spec = SessionSpec::new(5, 16, 60_000);
    let messages = generate::session(&spec);
    let mut envelope = generate::envelope(&messages, &spec.session_id, 1_000, 1_796_000_000_000);
    let run = |envelope: &Value| {
        stdout_json(&env.run(BIN, &["--db", db.to_str().unwrap()], &envelope.to_string()))
    };

    // The generated model's window holds the whole session: unchanged.
    let fits = run(&envelope);
    assert_eq!(fits["pass"]["decision"], "passthrough");
    assert_eq!(fits["pass"]["fallback"]["shape"], "raw");
    assert_eq!(fits["messages"], envelope["messages"]);

    // A model with a quarter of that window: the newest turns that fit.
    envelope["model"] = json!({"provider": "p", "id": "small", "context_limit": 16_000});
    let cut = run(&envelope);
    let fallback = &cut["pass"]["fallback"];
    assert_eq!(fallback["shape"], "cut", "{}", cut["pass"]);
    let left_out = fallback["left_out"].as_u64().unwrap() as usize;
    assert!(left_out > 0);
    assert!(fallback["tokens"].as_u64().unwrap() <= fallback["window"].as_u64().unwrap());
    let out = cut["messages"].as_array().unwrap();
    assert_eq!(
        out[1..],
        messages[left_out..],
        "the newest messages as sent"
    );
    assert_eq!(out[1]["info"]["role"], "user", "whole turns");
    let marker = out[0]["parts"][0]["text"].as_str().unwrap();
    assert!(
        marker.contains(&format!("the {left_out} oldest messages")),
        "{marker}"
    );
}

#[test]
fn an_unreadable_database_gives_a_passthrough() {
    let env = TestEnv::new();
    let db = env.db();
    std::fs::write(
        &db,
        b"this is not a sqlite database, just text that is long enough",
    )
    .unwrap();
    let out = env.run(BIN, &["--db", db.to_str().unwrap()], &example());
    assert_passthrough(&out, "database");
    // A folder where the file should be.
    let dir_db = env.root().join("folder.db");
    std::fs::create_dir(&dir_db).unwrap();
    assert_passthrough(
        &env.run(BIN, &["--db", dir_db.to_str().unwrap()], &example()),
        "database",
    );
}

#[test]
fn a_locked_database_gives_a_passthrough_within_the_hook_wait() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    // A long wait for background commands must not reach the per-call hooks.
    env.user_config(r#"{"sqlite": {"busy_timeout_ms": 60000}}"#);
    stdout_json(&env.run(BIN, &["--db", db], &example()));
    // The holder lets go after 30 s: a command that waited the 60 s busy
    // timeout would then get the lock and succeed, so each outcome below
    // (a passthrough, a "locked" warning, reduce failing) shows that it gave up
    // within its hook wait, while the lock was still held.
    let mut holder = env.lock_database(Path::new(db));
    let out = env.run(BIN, &["--db", db], &example());
    // The hook's own wait (1 s by default) at most once: before, a pass waited
    // the busy timeout twice (write, then the record).
    assert_passthrough(&out, "locked");
    let warnings = stdout_json(&out)["pass"]["warnings"].to_string();
    assert!(warnings.contains("passthrough not recorded"), "{warnings}");

    // The system hook fails open within the same wait; reduce gives up with a clear error.
    let request = json!({"session_id": "ses_example0001", "system": ["You are an agent."]});
    let system = stdout_json(&env.run(BIN, &["--db", db, "system"], &request.to_string()));
    assert_eq!(system["system"], request["system"]);
    assert!(
        system["warnings"].to_string().contains("locked"),
        "{system}"
    );
    let reduce = env.run(
        BIN,
        &[
            "--db",
            db,
            "reduce",
            "--session",
            "ses_example0001",
            "--drop",
            "1",
        ],
        "",
    );
    assert_eq!(reduce.status.code(), Some(1));
    assert!(stderr(&reduce).contains("locked"), "{}", stderr(&reduce));
    // Said once (not once per source in the chain), then which setting raises the wait.
    let err = stderr(&reduce);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(lines[0].matches("locked").count(), 1, "{err}");
    assert!(
        lines[1].starts_with("mc-transform: hint: ")
            && lines[1].contains("sqlite.hook_busy_timeout_ms"),
        "{err}"
    );
    assert!(
        holder.holding(),
        "the lock holder let go before the commands were done: the outcomes above prove nothing"
    );
}

#[test]
fn a_lone_surrogate_is_read_as_a_replacement_character_and_replays() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    // What JavaScript's JSON.stringify writes for a string cut mid-character.
    let cut = example().replacen(
        "The pending() count",
        "The pending() count \\ud83d cut \\ud83d",
        1,
    );
    let cut = cut.replace("\\\\ud83d", "\\ud83d");
    assert!(cut.contains("count \\ud83d cut"), "the fixture changed");
    let first = stdout_json(&env.run(BIN, &["--db", db], &cut));
    assert_ne!(
        first["pass"]["decision"], "passthrough",
        "{}",
        first["pass"]
    );
    let text = first["messages"][2]["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("count \u{fffd} cut"), "{text}");
    let again = stdout_json(&env.run(BIN, &["--db", db], &cut));
    assert_eq!(again["pass"]["decision"], "defer");
    assert_eq!(again["messages"], first["messages"]);
}

#[test]
fn every_subcommand_reads_the_config_of_the_project_the_session_started_in() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    let project = env.root().join("proj");
    env.project_config(
        &project,
        r#"{"transform": {"system_prompt_guidance": false, "protected_tags": 1}}"#,
    );
    let mut envelope: Value = serde_json::from_str(&example()).unwrap();
    envelope["project_dir"] = json!(project);
    stdout_json(&env.run(BIN, &["--db", db], &envelope.to_string()));
    // The plugin's other calls run in another folder (here: the temp home,
    // which has no project config) and name no project.
    let request = json!({"session_id": "ses_example0001",
                         "system": ["You are an agent.\nToday's date: Mon Nov 30 2026"]});
    let system = stdout_json(&env.run(BIN, &["--db", db, "system"], &request.to_string()));
    assert_eq!(system["known_session"], true);
    assert_eq!(
        system["guidance"], false,
        "the project turned guidance off: {system}"
    );
    assert_eq!(system["system"], request["system"]);
    // protected_tags 1: only the newest tag is protected, so tag 1 is queued, not deferred.
    let reduce = stdout_json(&env.run(
        BIN,
        &[
            "--db",
            db,
            "reduce",
            "--session",
            "ses_example0001",
            "--drop",
            "1",
        ],
        "",
    ));
    assert_eq!(reduce["queued"], json!([1]), "{reduce}");
    assert_eq!(reduce["protected"], json!([]), "{reduce}");
    // A later pass without project_dir keeps to the recorded project too.
    let bare = stdout_json(&env.run(BIN, &["--db", db], &example()));
    assert_ne!(bare["pass"]["decision"], "passthrough");
    let status = stdout_json(&env.run(
        BIN,
        &["--db", db, "status", "--session", "ses_example0001"],
        "",
    ));
    assert_eq!(status["project_dir"], json!(project), "{status}");
}

/// Run one SQL statement on the database from outside mc (python3's sqlite3).
fn execute_sql(db: &Path, statement: &str) {
    let status = seal(&mut Command::new("python3"))
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit()"])
        .arg(db)
        .arg(statement)
        .status()
        .unwrap();
    assert!(status.success(), "{statement}");
}

#[test]
fn a_newer_schema_gives_a_loud_passthrough() {
    let env = TestEnv::new();
    let db = env.db();
    stdout_json(&env.run(BIN, &["--db", db.to_str().unwrap()], &example()));
    execute_sql(&db, "PRAGMA user_version = 999");
    let out = env.run(BIN, &["--db", db.to_str().unwrap()], &example());
    assert_passthrough(&out, "schema version 999");
    // What to do is a hint, after the warning.
    assert!(
        stderr(&out).contains("\nmc-transform: hint: upgrade mc, or point --db"),
        "{}",
        stderr(&out)
    );
    // A command that does not fail open: one error line, the hint, exit 1.
    let status = env.run(
        BIN,
        &[
            "--db",
            db.to_str().unwrap(),
            "status",
            "--session",
            "ses_example0001",
        ],
        "",
    );
    assert_eq!(status.status.code(), Some(1));
    let err = stderr(&status);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("mc-transform: error: ") && lines[0].contains("schema version 999"),
        "{err}"
    );
    assert!(
        lines[1].starts_with("mc-transform: hint: upgrade mc"),
        "{err}"
    );
}

#[test]
fn a_corrupt_row_gives_a_passthrough_and_is_counted() {
    let env = TestEnv::new();
    let db = env.db();
    stdout_json(&env.run(BIN, &["--db", db.to_str().unwrap()], &example()));
    // Rewind the tag counter: the next new tag collides with an existing one.
    execute_sql(&db, "UPDATE sessions SET tag_counter = 1");
    let mut grown: Value = serde_json::from_str(&example()).unwrap();
    let mut extra = grown["messages"][0].clone();
    extra["info"]["id"] = json!("msg_ex9999");
    extra["parts"][0]["messageID"] = json!("msg_ex9999");
    grown["messages"].as_array_mut().unwrap().push(extra);
    let out = env.run(BIN, &["--db", db.to_str().unwrap()], &grown.to_string());
    let doc = stdout_json(&out);
    assert_eq!(doc["pass"]["decision"], "passthrough");
    assert_eq!(doc["messages"], grown["messages"]);
    let status = stdout_json(&env.run(
        BIN,
        &[
            "--db",
            db.to_str().unwrap(),
            "status",
            "--session",
            "ses_example0001",
        ],
        "",
    ));
    assert_eq!(status["passes"]["passthrough"], 1);
    assert!(
        status["last_error"].as_str().unwrap().contains("UNIQUE"),
        "{status}"
    );
}

#[test]
fn reduce_by_flags_and_by_stdin_then_an_execute_pass_drops() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    stdout_json(&env.run(BIN, &["--db", db], &example()));
    let by_flags = stdout_json(&env.run(
        BIN,
        &[
            "--db",
            db,
            "reduce",
            "--session",
            "ses_example0001",
            "--drop",
            "§3§,99",
        ],
        "",
    ));
    assert_eq!(
        by_flags,
        json!({"queued": [], "protected": [3], "unknown": [99], "already": []})
    );
    let by_stdin = stdout_json(&env.run(
        BIN,
        &["--db", db, "reduce"],
        r#"{"harness": "opencode", "session_id": "ses_example0001", "drop": "3"}"#,
    ));
    assert_eq!(by_stdin["already"], json!([3]));
    let bad = env.run(
        BIN,
        &[
            "--db",
            db,
            "reduce",
            "--session",
            "ses_example0001",
            "--drop",
            "9-2",
        ],
        "",
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("reversed"));
    let half = env.run(BIN, &["--db", db, "reduce", "--session", "x"], "");
    assert_eq!(half.status.code(), Some(2));

    // With a smaller protected window tag 3 (the read output) is queued, and a
    // pass over the threshold applies it as a skeleton; smart drops (on by
    // default) make tag 4, the first edit of a file edited again, a marker.
    let config = env.root().join("small-window.jsonc");
    std::fs::write(&config, r#"{"transform": {"protected_tags": 2}}"#).unwrap();
    let config = config.to_str().unwrap();
    let queued = stdout_json(&env.run(
        BIN,
        &[
            "--db",
            db,
            "--config",
            config,
            "reduce",
            "--session",
            "ses_example0001",
            "--drop",
            "2-3",
        ],
        "",
    ));
    assert_eq!(
        queued,
        json!({"queued": [2], "protected": [], "unknown": [], "already": [3]})
    );
    let mut hot: Value = serde_json::from_str(&example()).unwrap();
    hot["usage"] = json!({"input": 120000, "cache_read": 0, "cache_write": 0, "output": 1});
    let doc = stdout_json(&env.run(BIN, &["--db", db, "--config", config], &hot.to_string()));
    snapshot!(
        "pass_report_execute_with_drops",
        "the pass report of a pass over the execute threshold that applies queued drops",
        pretty(&doc["pass"])
    );
    assert_eq!(doc["pass"]["decision"], "execute");
    assert_eq!(doc["pass"]["dropped"], json!([2, 3, 4]), "{}", doc["pass"]);
    let parts = doc["messages"][3]["parts"].as_array().unwrap();
    assert!(parts.iter().any(|p| p["text"] == "[dropped §2§]"));
    assert!(
        parts
            .iter()
            .any(|p| p["type"] == "tool" && p["state"]["output"] == "[dropped §3§]")
    );
    let marker = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap())
        .find(|p| p["state"]["output"] == "[dropped §4§]")
        .expect("the superseded edit stays as a marker");
    assert_eq!(marker["tool"], "edit");
    assert_eq!(
        marker["state"]["input"]["filePath"],
        "/home/user/todo-app/src/list.rs"
    );
}

#[test]
fn status_of_an_unknown_session_is_an_error() {
    let env = TestEnv::new();
    let out = env.run(
        BIN,
        &[
            "--db",
            env.db().to_str().unwrap(),
            "status",
            "--session",
            "nope",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no pass has seen it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_closed_stdout_exits_quietly() {
    let env = TestEnv::new();
    let mut child = env
        .db_command(BIN, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away before any output
    let input = example();
    // From a thread, so a child that stopped reading cannot block the test.
    let writer = std::thread::spawn({
        let mut stdin = child.stdin.take().unwrap();
        move || stdin.write_all(input.as_bytes())
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("error"), "{}", stderr(&out));
}

#[test]
fn config_layers_are_read_and_bad_leaves_warn() {
    let env = TestEnv::new();
    let db = env.db();
    let config = env.root().join("override.jsonc");
    std::fs::write(
        &config,
        "{\n // comments are fine\n \"transform\": {\"protected_tags\": 500,},\n}\n",
    )
    .unwrap();
    let out = env.run(
        BIN,
        &[
            "--db",
            db.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &example(),
    );
    let doc = stdout_json(&out);
    let warnings = doc["pass"]["warnings"].to_string();
    assert!(warnings.contains("protected_tags"), "{warnings}");
    assert!(stderr(&out).contains("protected_tags"));
    // A project config may not lower the execute threshold.
    let project = env.root().join("proj");
    env.project_config(
        &project,
        r#"{"transform": {"execute_threshold_percentage": 20}}"#,
    );
    let mut envelope: Value = serde_json::from_str(&example()).unwrap();
    envelope["project_dir"] = json!(project);
    // 20 % usage would execute under a threshold of 20. (A new database: a
    // session keeps the project its first pass saw.)
    envelope["usage"] = json!({"input": 40000, "cache_read": 0, "cache_write": 0, "output": 1});
    let db = env.root().join("other.db");
    let mut first = envelope.clone();
    first["usage"] = json!({"input": 1000, "cache_read": 0, "cache_write": 0, "output": 1});
    stdout_json(&env.run(BIN, &["--db", db.to_str().unwrap()], &first.to_string()));
    let doc = stdout_json(&env.run(BIN, &["--db", db.to_str().unwrap()], &envelope.to_string()));
    assert_eq!(doc["pass"]["decision"], "defer", "{}", doc["pass"]);
    assert!(
        doc["pass"]["warnings"]
            .to_string()
            .contains("execute_threshold_percentage")
    );
}

#[test]
fn help_explains_the_commands() {
    let out = TestEnv::new().run(BIN, &["--help"], "");
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "reduce",
        "status",
        "recount",
        "system",
        "overflow",
        "--db",
        "--config",
        "passthrough",
    ] {
        assert!(text.contains(needle), "--help lacks {needle}");
    }
}

#[test]
fn system_renders_the_guidance_for_a_known_session_and_fails_open() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    let request = json!({"session_id": "ses_example0001",
                         "system": ["You are an agent.\nToday's date: Mon Nov 30 2026"]});
    // No pass has seen the session yet: the parts come back unchanged.
    let unknown = stdout_json(&env.run(BIN, &["--db", db, "system"], &request.to_string()));
    assert_eq!(unknown["known_session"], false);
    assert_eq!(unknown["system"], request["system"]);
    stdout_json(&env.run(BIN, &["--db", db], &example()));
    let known = stdout_json(&env.run(BIN, &["--db", db, "system"], &request.to_string()));
    assert_eq!(known["known_session"], true);
    let text = known["system"][0].as_str().unwrap();
    assert!(
        text.starts_with(
            "You are an agent.\nToday's date: Mon Nov 30 2026\n\n## Context management (mc)"
        ),
        "{text}"
    );
    assert!(text.contains("ctx_reduce"), "{text}");
    assert_eq!(known["today"], "Today's date: Mon Nov 30 2026");
    // Bad input exits 2; an unusable database gives the parts back unchanged.
    let bad = env.run(BIN, &["--db", db, "system"], r#"{"session_id": "s"}"#);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("\"system\""), "{}", stderr(&bad));
    let folder = env.root().join("folder.db");
    std::fs::create_dir(&folder).unwrap();
    let out = env.run(
        BIN,
        &["--db", folder.to_str().unwrap(), "system"],
        &request.to_string(),
    );
    let doc = stdout_json(&out);
    assert_eq!(doc["system"], request["system"]);
    assert!(doc["warnings"].to_string().contains("database"), "{doc}");
    assert!(stderr(&out).contains("system left unchanged"));
}

#[test]
fn overflow_learns_from_a_rejection_and_answers_false_for_anything_else() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    stdout_json(&env.run(BIN, &["--db", db], &example()));
    // OpenCode's session.error event for the example session.
    let request = json!({"harness": "opencode", "session_id": "ses_example0001",
        "model": {"provider": "anthropic", "id": "claude-sonnet-4-5"},
        "error": {"name": "APIError", "data": {"message": "Bad Request", "statusCode": 400, "isRetryable": false,
            "responseBody": "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 210000 tokens > 200000 maximum\"}}"}}});
    let out = env.run(BIN, &["--db", db, "overflow"], &request.to_string());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let answer = stdout_json(&out);
    assert_eq!(
        answer,
        json!({"recognised": true, "source": "anthropic", "limit": 200000, "tokens": 210000,
               "message": "prompt is too long: 210000 tokens > 200000 maximum",
               "model": "anthropic/claude-sonnet-4-5", "limit_stored": true, "emergency_next_pass": true})
    );
    let status = stdout_json(&env.run(
        BIN,
        &["--db", db, "status", "--session", "ses_example0001"],
        "",
    ));
    assert_eq!(status["overflow_pending"], true);
    // Anything else: exit 0, {"recognised": false}; bad input exits 2.
    let other = json!({"session_id": "ses_example0001", "error": {"name": "MessageAbortedError", "data": {"message": "aborted"}}});
    let out = env.run(BIN, &["--db", db, "overflow"], &other.to_string());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout_json(&out), json!({"recognised": false}));
    let bad = env.run(BIN, &["--db", db, "overflow"], r#"{"session_id": "s"}"#);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("\"error\""), "{}", stderr(&bad));
}

#[test]
fn commands_without_a_time_in_their_input_read_the_fixed_clock() {
    let env = TestEnv::new();
    let db = env.db();
    let db = db.to_str().unwrap();
    let config = env.path("small-window.jsonc");
    std::fs::write(&config, r#"{"transform": {"protected_tags": 1}}"#).unwrap();
    let config = config.to_str().unwrap();
    stdout_json(&env.run(BIN, &["--db", db], &example()));
    let reduce = |tag: &str, now: Option<&str>| {
        let mut command = env.command(
            BIN,
            &[
                "--db",
                db,
                "--config",
                config,
                "reduce",
                "--session",
                "ses_example0001",
                "--drop",
                tag,
            ],
        );
        if let Some(now) = now {
            command.env("MC_NOW_MS", now);
        }
        stdout_json(&mc_tests::pipe(&mut command, b"").unwrap())
    };
    assert_eq!(reduce("1", None)["queued"], json!([1]));
    assert_eq!(reduce("2", Some("1800000000000"))["queued"], json!([2]));
    // reduce has no envelope: the time it queues a drop at is MC_NOW_MS.
    let store = mc_base::store::Store::open(Path::new(db), &Default::default()).unwrap();
    let queued: Vec<i64> = store
        .conn()
        .prepare("SELECT queued_ms FROM pending_drops ORDER BY queued_ms")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(queued, [TestEnv::NOW_MS, 1_800_000_000_000]);
}
