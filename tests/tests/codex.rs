//! End to end against the real Codex (npm `@openai/codex` 0.169.0 with its
//! native binary, pinned in `tests/e2e/package.json`; `scripts/test` installs
//! it): `codex exec` against a fake Responses API provider of ours on
//! 127.0.0.1, with mc's hooks and MCP server, asserting on the request bodies
//! Codex sends and on mc's database. One binary for every real-Codex test; a
//! test is skipped (with a note) only where the binary is not installed,
//! never under CI.

use mc_tests::codex::{Codex, Options};
use mc_tests::fake_responses::{Recorded, Reply, Usage};
use serde_json::Value;

const ALPHA: &str = "PIN-ALPHA: always run the lock test before committing.";
const BRAVO: &str = "PIN-BRAVO: the parser lives in src/parse.rs.";
const CHARLIE: &str = "PIN-CHARLIE: keep the public API unchanged.";

/// Usage over the automatic compaction limit the tests set (50,000).
fn over_the_limit() -> Option<Usage> {
    Some(Usage {
        input: 60_000,
        cached: 0,
        output: 10,
    })
}

/// `mc-pin restore` as Codex's SessionStart hook (every source), each hook
/// input also appended to `hook-inputs.jsonl`.
fn restore_hook() -> (String, Option<String>, String) {
    let command = format!(
        "tee -a \"$HOME/../hook-inputs.jsonl\" | '{}' restore --harness codex",
        mc_tests::bin_path("mc-pin").display()
    );
    ("SessionStart".into(), None, command)
}

fn hook_inputs(codex: &Codex) -> Vec<Value> {
    // Hook inputs may come without a final newline: read them as a stream.
    let text = std::fs::read_to_string(codex.file("hook-inputs.jsonl")).unwrap_or_default();
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|v| v.unwrap())
        .collect()
}

fn assert_once(request: &Recorded, texts: &[&str], when: &str) {
    for text in texts {
        assert_eq!(
            request.count(text),
            1,
            "{when}: {text:?} should be in the request exactly once:\n{}",
            request.body
        );
    }
}

#[test]
fn pinned_messages_are_in_the_first_request_after_every_compaction_exactly_once() {
    let Some(cx) = Codex::start(
        "pinned_messages_are_in_the_first_request_after_every_compaction_exactly_once",
        Options {
            hooks: vec![restore_hook()],
            auto_compact_limit: Some(50_000),
            ..Options::default()
        },
    ) else {
        return;
    };
    let p = &cx.provider;
    let pin = |thread: &str, last: &str| {
        // No --transcript: mc-pin finds the rollout in CODEX_HOME.
        cx.mc_json(
            "mc-pin",
            &[
                "pin",
                "--harness",
                "codex",
                "--session",
                thread,
                "--last",
                last,
            ],
        )
    };
    p.push(Reply::Text("Understood.".into()), None);
    let t = cx.exec(None, ALPHA).thread_id;
    let t = t.as_str();
    let pins = pin(t, "user");
    assert_eq!(pins["pins"].as_array().unwrap().len(), 1, "{pins}");
    p.push(Reply::Text(BRAVO.into()), over_the_limit());
    cx.exec(Some(t), "Write the parser.");
    pin(t, "assistant");

    // 1: Codex compacts before the next turn; it keeps the user's messages itself.
    let n = p.turns().len();
    p.push(Reply::Text(CHARLIE.into()), over_the_limit());
    cx.exec(Some(t), "Carry on.");
    assert_eq!(p.compactions(), 1);
    assert_once(&p.turns()[n], &[ALPHA, BRAVO], "after compaction 1");
    pin(t, "assistant");

    // 2
    let n = p.turns().len();
    p.push(Reply::Text("Next step done.".into()), over_the_limit());
    cx.exec(Some(t), "Next step.");
    assert_eq!(p.compactions(), 2);
    assert_once(
        &p.turns()[n],
        &[ALPHA, BRAVO, CHARLIE],
        "after compaction 2",
    );

    // 3
    let n = p.turns().len();
    p.push(Reply::Text("Third done.".into()), None);
    cx.exec(Some(t), "Third.");
    assert_eq!(p.compactions(), 3);
    assert_once(
        &p.turns()[n],
        &[ALPHA, BRAVO, CHARLIE],
        "after compaction 3",
    );
    // A turn without a compaction adds nothing: the restoration is already in the context.
    let n = p.turns().len();
    cx.exec(Some(t), "Fourth.");
    assert_once(&p.turns()[n], &[ALPHA, BRAVO, CHARLIE], "a turn later");

    // Each compaction ran the compact hook; a replay of any SessionStart adds nothing.
    let inputs = hook_inputs(&cx);
    assert_eq!(
        inputs.iter().filter(|i| i["source"] == "compact").count(),
        3,
        "{inputs:?}"
    );
    for input in inputs.iter().filter(|i| i["source"] != "startup") {
        let out = cx.mc(
            "mc-pin",
            &["restore", "--harness", "codex"],
            &input.to_string(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout.is_empty(),
            "a replayed SessionStart printed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

fn call(tool: &str, arguments: Value) -> Reply {
    Reply::Call {
        namespace: Some("mcp__mc".into()),
        name: tool.into(),
        arguments,
    }
}

/// The output the request carries for the newest function call.
fn last_output(request: &Recorded) -> String {
    request
        .call_outputs()
        .pop()
        .unwrap_or_else(|| panic!("no function_call_output: {}", request.body))
        .1
}

#[test]
fn mc_s_tools_round_trip_over_mcp_with_the_session_codex_names() {
    let Some(cx) = Codex::start(
        "mc_s_tools_round_trip_over_mcp_with_the_session_codex_names",
        Options {
            mcp: true,
            ..Options::default()
        },
    ) else {
        return;
    };
    let p = &cx.provider;
    p.push(
        call(
            "ctx_note",
            serde_json::json!({"action": "write", "content": "Run the lock test before finishing."}),
        ),
        None,
    );
    p.push(
        call(
            "ctx_memory",
            serde_json::json!({"action": "write", "category": "NAMING",
                               "content": "Binaries are named mc-<verb>."}),
        ),
        None,
    );
    p.push(Reply::Text("Noted.".into()), None);
    let run = cx.exec(None, "Keep a note and remember the naming rule.");
    assert_eq!(run.message, "Noted.");
    let turns = p.turns();
    assert_eq!(turns.len(), 3, "two calls, one answer");
    // Codex offers mc's tools in the mcp__mc namespace.
    let offered = turns[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__mc")
        .unwrap_or_else(|| panic!("no mcp__mc namespace: {}", turns[0].body["tools"]));
    let mut names: Vec<&str> = offered["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "ctx_expand",
            "ctx_memory",
            "ctx_note",
            "ctx_reduce",
            "ctx_search"
        ]
    );
    assert!(
        last_output(&turns[1]).contains("Noted as #1."),
        "{}",
        turns[1].body
    );
    assert!(
        last_output(&turns[2]).contains("Saved memory #1 in NAMING"),
        "{}",
        turns[2].body
    );
    // The note went to the session Codex named in the call.
    let notes = cx.mc_json(
        "mc-search",
        &[
            "note",
            "list",
            "--harness",
            "codex",
            "--session",
            &run.thread_id,
        ],
    );
    assert_eq!(
        notes["notes"][0]["content"], "Run the lock test before finishing.",
        "{notes}"
    );
    let memories = cx.mc_json("mc-search", &["memory", "list"]);
    assert_eq!(
        memories["memories"][0]["content"],
        "Binaries are named mc-<verb>."
    );
}

const MEMORY: &str = "MEM-ONE: tests never touch the real home folder.";

/// The compartments mc holds for a Codex session.
fn compartments(cx: &Codex, thread: &str) -> i64 {
    let store =
        mc_base::store::Store::open(&cx.db, &mc_base::store::StoreOptions::default()).unwrap();
    store
        .conn()
        .query_row(
            "SELECT count(*) FROM compartments c JOIN sessions s ON s.id = c.session
             WHERE s.harness = 'codex' AND s.session_id = ?1",
            [thread],
            |r| r.get(0),
        )
        .unwrap_or(0)
}

#[test]
fn the_historian_folds_a_rollout_and_mc_s_record_comes_back_once_after_a_compaction() {
    let restore = restore_hook();
    let fold = format!(
        "'{}' hook --harness codex --context-limit 8000",
        mc_tests::bin_path("mc-historian").display()
    );
    let Some(cx) = Codex::start(
        "the_historian_folds_a_rollout_and_mc_s_record_comes_back_once_after_a_compaction",
        Options {
            hooks: vec![restore, ("Stop".into(), None, fold)],
            mcp: true,
            auto_compact_limit: Some(50_000),
            ..Options::default()
        },
    ) else {
        return;
    };
    let p = &cx.provider;
    let out = cx.mc(
        "mc-search",
        &[
            "memory",
            "write",
            "--category",
            "CONSTRAINTS",
            "--content",
            MEMORY,
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply = |i: usize| {
        format!(
            "Step {i} done. {}",
            "The module reads its input line by line. ".repeat(150)
        )
    };
    p.push(Reply::Text(reply(0)), None);
    let t = cx.exec(None, "Start the work.").thread_id;
    let t = t.as_str();
    // At startup mc had the project's memory.
    assert_eq!(p.turns()[0].count("<mc-history>"), 1);
    assert_eq!(p.turns()[0].count(MEMORY), 1);
    for i in 1..6 {
        let usage = (i >= 3).then_some(Usage {
            input: 7_000,
            cached: 0,
            output: 10,
        });
        p.push(Reply::Text(reply(i)), usage);
        cx.exec(Some(t), &format!("Go on with step {i}."));
        // Resuming adds no second copy of mc's record.
        assert_eq!(p.turns().last().unwrap().count("<mc-history>"), 1);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while compartments(&cx, t) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(compartments(&cx, t) > 0, "the historian folded nothing");

    // The next turn reports a context over Codex's limit: it compacts before the one after.
    p.push(Reply::Text("Big step done.".into()), over_the_limit());
    cx.exec(Some(t), "One big step.");
    // The model expands the first compartment: the raw text the historian kept.
    p.push(
        call("ctx_expand", serde_json::json!({"target": "c1"})),
        None,
    );
    p.push(Reply::Text("Expanded.".into()), None);
    let n = p.turns().len();
    cx.exec(Some(t), "Look at what was folded.");
    assert_eq!(p.compactions(), 1);
    let after = &p.turns()[n];
    assert_eq!(after.count("<mc-history>"), 1, "{}", after.body);
    assert_eq!(after.count(MEMORY), 1);
    assert!(after.count("Folded messages") >= 1, "{}", after.body);
    let expanded = last_output(&p.turns()[n + 1]);
    assert!(
        expanded.contains("Step 0 done. The module reads its input line by line."),
        "{expanded}"
    );
    // A turn later, still once.
    cx.exec(Some(t), "And now?");
    assert_eq!(p.turns().last().unwrap().count("<mc-history>"), 1);
}

#[test]
fn a_pin_made_from_inside_the_session_finds_its_session_and_rollout() {
    let Some(cx) = Codex::start(
        "a_pin_made_from_inside_the_session_finds_its_session_and_rollout",
        Options::default(),
    ) else {
        return;
    };
    let p = &cx.provider;
    p.push(
        Reply::Call {
            namespace: None,
            name: "exec_command".into(),
            // Codex runs commands in a login shell, whose PATH comes from the
            // profile: the full path stands for one where mc is installed.
            arguments: serde_json::json!({"cmd": format!("'{}' pin --last user",
                mc_tests::bin_path("mc-pin").display())}),
        },
        None,
    );
    p.push(Reply::Text("Pinned.".into()), None);
    let run = cx.exec(None, ALPHA);
    let output = last_output(&p.turns()[1]);
    assert!(output.contains("\"pins\""), "{output}");
    let listed = cx.mc_json(
        "mc-pin",
        &["list", "--harness", "codex", "--session", &run.thread_id],
    );
    let pins = listed["pins"].as_array().unwrap();
    assert_eq!(pins.len(), 1, "{listed}");
    assert_eq!(pins[0]["role"], "user");
    let rollout = std::fs::read_to_string(cx.rollout(&run.thread_id)).unwrap();
    let id = pins[0]["id"].as_str().unwrap();
    let line = rollout
        .lines()
        .find(|l| l.contains(&format!("\"id\":\"{id}\"")))
        .expect("the pinned item is in the rollout");
    assert!(line.contains(ALPHA), "{line}");
}
