//! End to end against the real Claude Code (npm `@anthropic-ai/claude-code`,
//! pinned in `tests/e2e/package.json`; `scripts/test` installs it) as the MCP
//! client of `mc-search mcp`: Claude Code runs in print mode against a fake
//! Anthropic provider of ours on 127.0.0.1, the provider scripts a `tool_use`
//! of one of mc's tools, and the tests assert what Claude Code sends back in
//! the next request and what mc's database holds. One binary for every
//! real-Claude-Code test; a test is skipped (with a note) only where the
//! binary is not installed, never under CI.

use mc_base::identity::project_identity;
use mc_base::store::{Store, StoreOptions};
use mc_history::store::memory_project;
use mc_tests::claude::{ClaudeCode, Options};
use mc_tests::fake_provider::{Recorded, Reply, ToolResult};
use serde_json::{Value, json};

fn tool(name: &str, input: Value) -> Reply {
    Reply::Tool {
        name: name.into(),
        input,
    }
}

/// The newest tool result `request` carries, which must answer its newest
/// `tool_use` (the call the provider scripted in the answer before).
fn result_of(request: &Recorded) -> ToolResult {
    let results = request.tool_results();
    let last = results
        .last()
        .unwrap_or_else(|| panic!("no tool_result in the request: {}", request.body));
    let uses = request.tool_uses();
    let (id, _, _) = uses.last().expect("the tool_use is replayed");
    assert_eq!(&last.tool_use_id, id, "the result answers the call");
    last.clone()
}

#[test]
fn a_memory_written_over_mcp_reaches_the_model_and_the_project_s_memory() {
    let Some(cc) = ClaudeCode::start(
        "a_memory_written_over_mcp_reaches_the_model_and_the_project_s_memory",
        Options::default(),
    ) else {
        return;
    };
    cc.provider.push(
        tool(
            "mcp__mc__ctx_memory",
            json!({"action": "write", "category": "CONSTRAINTS",
                   "content": "Tests never touch the real home folder."}),
        ),
        None,
    );
    cc.provider.push(Reply::Text("Noted.".into()), None);
    let result = cc.prompt("Remember that tests never touch the real home folder.");
    assert_eq!(result["result"], "Noted.", "{result}");

    let requests = cc.provider.agent_requests();
    assert_eq!(requests.len(), 2, "one call, one answer");
    // Claude Code offers all five tools under its MCP names, with our schemas.
    let offered: Vec<&Value> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("mcp__mc__"))
        })
        .collect();
    let mut names: Vec<&str> = offered
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "mcp__mc__ctx_expand",
            "mcp__mc__ctx_memory",
            "mcp__mc__ctx_note",
            "mcp__mc__ctx_reduce",
            "mcp__mc__ctx_search"
        ]
    );
    let memory = offered
        .iter()
        .find(|t| t["name"] == "mcp__mc__ctx_memory")
        .unwrap();
    assert_eq!(memory["input_schema"]["required"], json!(["action"]));
    assert!(
        memory["input_schema"]["properties"]["category"]["enum"]
            .to_string()
            .contains("CONSTRAINTS")
    );

    let answer = result_of(&requests[1]);
    assert!(!answer.is_error, "{answer:?}");
    assert_eq!(
        answer.text,
        "Saved memory #1 in CONSTRAINTS. It joins your context at the next rebuild."
    );

    // The memory belongs to the project of the session's folder, and only to it.
    let store = Store::open(&cc.db, &StoreOptions::default()).unwrap();
    assert_eq!(
        memory_project(store.conn(), 1).unwrap(),
        Some(project_identity(&cc.project))
    );
    assert!(project_identity(&cc.project).starts_with("git:"));
    let listed = cc.mc_search_json(&["memory", "list"]);
    assert_eq!(
        listed["memories"][0]["content"], "Tests never touch the real home folder.",
        "{listed}"
    );
    assert_eq!(listed["memories"][0]["source"], "agent");
}

#[test]
fn the_server_serves_the_session_claude_code_names_in_its_environment() {
    let Some(cc) = ClaudeCode::start(
        "the_server_serves_the_session_claude_code_names_in_its_environment",
        Options::default(),
    ) else {
        return;
    };
    cc.provider.push(
        tool(
            "mcp__mc__ctx_note",
            json!({"action": "write", "content": "Run the lock test before finishing."}),
        ),
        None,
    );
    cc.provider.push(Reply::Text("Noted.".into()), None);
    let result = cc.prompt("Keep a note.");
    let session = result["session_id"].as_str().unwrap().to_string();
    let requests = cc.provider.agent_requests();
    let answer = result_of(&requests[1]);
    assert_eq!(answer.text, "Noted as #1.", "{answer:?}");
    // No hook ran: the session came from CLAUDE_CODE_SESSION_ID.
    let notes = cc.mc_search_json(&[
        "note",
        "list",
        "--harness",
        "claude-code",
        "--session",
        &session,
    ]);
    assert_eq!(
        notes["notes"][0]["content"], "Run the lock test before finishing.",
        "{notes}"
    );
}

#[test]
fn a_session_start_hook_tells_the_server_its_session() {
    // A Claude Code that does not name the session to its servers (the
    // variable blanked): the SessionStart hook's record is what the server reads.
    let Some(cc) = ClaudeCode::start(
        "a_session_start_hook_tells_the_server_its_session",
        Options {
            session_start_hook: true,
            server_env: vec![("CLAUDE_CODE_SESSION_ID".into(), String::new())],
            ..Options::default()
        },
    ) else {
        return;
    };
    cc.provider.push(
        tool(
            "mcp__mc__ctx_note",
            json!({"action": "write", "content": "The flaky test is in store::lock."}),
        ),
        None,
    );
    cc.provider.push(Reply::Text("Noted.".into()), None);
    let result = cc.prompt("Keep a note.");
    let session = result["session_id"].as_str().unwrap().to_string();
    let requests = cc.provider.agent_requests();
    let answer = result_of(&requests[1]);
    assert_eq!(answer.text, "Noted as #1.", "{answer:?}");
    let notes = cc.mc_search_json(&[
        "note",
        "list",
        "--harness",
        "claude-code",
        "--session",
        &session,
    ]);
    assert_eq!(
        notes["notes"][0]["content"], "The flaky test is in store::lock.",
        "{notes}"
    );
}

#[test]
fn a_tool_error_reaches_the_model_and_the_server_answers_the_next_call() {
    let Some(cc) = ClaudeCode::start(
        "a_tool_error_reaches_the_model_and_the_server_answers_the_next_call",
        Options::default(),
    ) else {
        return;
    };
    cc.provider.push(
        tool("mcp__mc__ctx_memory", json!({"action": "show", "id": 999})),
        None,
    );
    cc.provider.push(
        tool(
            "mcp__mc__ctx_memory",
            json!({"action": "write", "category": "NAMING", "content": "Binaries are named mc-<verb>."}),
        ),
        None,
    );
    cc.provider.push(Reply::Text("Done.".into()), None);
    let result = cc.prompt("Look up memory 999, then save a naming rule.");
    assert_eq!(result["result"], "Done.", "{result}");
    let requests = cc.provider.agent_requests();
    assert_eq!(requests.len(), 3);
    let failed = result_of(&requests[1]);
    assert!(failed.is_error, "{failed:?}");
    assert!(failed.text.contains("#999"), "{failed:?}");
    let saved = result_of(&requests[2]);
    assert!(!saved.is_error, "{saved:?}");
    assert!(
        saved.text.starts_with("Saved memory #1 in NAMING"),
        "{saved:?}"
    );
}

// ---------------------------------------------------------------------------
// Pins and mc's record through Claude Code's compactions

const ALPHA: &str = "PIN-ALPHA: always run the lock test before committing.";
const BRAVO: &str = "PIN-BRAVO: the parser lives in src/parse.rs.";
const CHARLIE: &str = "PIN-CHARLIE: keep the public API unchanged.";

/// Claude Code with `mc-pin restore` as its SessionStart hook (every source),
/// each hook input also appended to `hook-inputs.jsonl`.
fn with_restore_hook(test: &str) -> Option<ClaudeCode> {
    // The hook logs into the folder the test's Claude Code lives in, which
    // only exists once it is set up: `$HOME/..` is that folder.
    let command = format!(
        "tee -a \"$HOME/../hook-inputs.jsonl\" | {} restore --harness claude-code",
        mc_tests::claude::sh(&mc_tests::bin_path("mc-pin").display().to_string()),
    );
    let cc = ClaudeCode::start(
        test,
        Options {
            hooks: vec![("SessionStart".into(), None, command)],
            ..Options::default()
        },
    )?;
    Some(cc)
}

fn hook_inputs(cc: &ClaudeCode) -> Vec<Value> {
    // Hook inputs may come without a final newline: read them as a stream.
    let text = std::fs::read_to_string(cc.file("hook-inputs.jsonl")).unwrap_or_default();
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|v| v.unwrap())
        .collect()
}

/// Each text occurs exactly once in the request.
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
    let Some(cc) = with_restore_hook(
        "pinned_messages_are_in_the_first_request_after_every_compaction_exactly_once",
    ) else {
        return;
    };
    pins_come_back_once_after_every_compaction(&cc);
}

#[test]
fn through_the_gateway_pins_come_back_once_and_claude_code_still_compacts() {
    let Some(cc) =
        with_restore_hook("through_the_gateway_pins_come_back_once_and_claude_code_still_compacts")
    else {
        return;
    };
    cc.provider.strict();
    let _gateway = cc.through_gateway();
    pins_come_back_once_after_every_compaction(&cc);
    // Every main call went through mc's pass (its tags), and Claude Code's
    // own compaction calls passed untouched.
    let agent = cc.provider.agent_requests();
    assert!(
        agent
            .iter()
            .all(|r| r.body["messages"].to_string().contains('§'))
    );
    let compactions: Vec<_> = cc
        .provider
        .requests()
        .into_iter()
        .filter(|r| r.is_compaction())
        .collect();
    assert!(!compactions.is_empty());
    assert!(
        compactions
            .iter()
            .all(|r| !r.body["messages"].to_string().contains('§'))
    );
}

/// Two pins, five compactions (manual, two in a row, automatic): after each,
/// the first request holds each pinned text exactly once.
fn pins_come_back_once_after_every_compaction(cc: &ClaudeCode) {
    let p = &cc.provider;
    let pin = |session: &str, last: &str| {
        // No --transcript: mc-pin finds it where Claude Code keeps it.
        cc.mc_pin_json(&[
            "pin",
            "--harness",
            "claude-code",
            "--session",
            session,
            "--last",
            last,
        ])
    };
    p.push(Reply::Text("Understood.".into()), None);
    let first = cc.prompt(ALPHA);
    let s = first["session_id"].as_str().unwrap().to_string();
    let s = s.as_str();
    pin(s, "user");
    p.push(Reply::Text(BRAVO.into()), None);
    cc.prompt_in(Some(s), "Write the parser.", &[]);
    let pins = pin(s, "assistant");
    assert_eq!(pins["pins"].as_array().unwrap().len(), 2, "{pins}");

    // 1: a manual compaction right after the pinned reply, which Claude Code keeps itself.
    cc.prompt_in(Some(s), "/compact", &[]);
    let n = p.agent_requests().len();
    p.push(Reply::Text(CHARLIE.into()), None);
    cc.prompt_in(Some(s), "Carry on.", &[]);
    assert_once(
        &p.agent_requests()[n],
        &[ALPHA, BRAVO],
        "after compaction 1",
    );
    pin(s, "assistant");

    // 2
    cc.prompt_in(Some(s), "/compact", &[]);
    let n = p.agent_requests().len();
    p.push(Reply::Text("Next step done.".into()), None);
    cc.prompt_in(Some(s), "Next step.", &[]);
    assert_once(
        &p.agent_requests()[n],
        &[ALPHA, BRAVO, CHARLIE],
        "after compaction 2",
    );

    // 3 and 4: two compactions with no turn between.
    cc.prompt_in(Some(s), "/compact", &[]);
    cc.prompt_in(Some(s), "/compact", &[]);
    // Claude Code's stand-in reply after resuming into a command is no pin.
    let transcript = std::fs::read_to_string(cc.transcript(s)).unwrap();
    let synthetic: Vec<Value> = transcript
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.pointer("/message/model") == Some(&json!("<synthetic>")))
        .collect();
    assert!(!synthetic.is_empty(), "Claude Code wrote no stand-in reply");
    let dry = cc.mc_pin_json(&[
        "pin",
        "--harness",
        "claude-code",
        "--session",
        s,
        "--last",
        "assistant",
        "--dry-run",
    ]);
    for stand_in in &synthetic {
        assert!(
            !dry.to_string().contains(stand_in["uuid"].as_str().unwrap()),
            "pinned Claude Code's stand-in reply: {dry}"
        );
    }
    let n = p.agent_requests().len();
    // The reply reports a context near the window, for the automatic compaction below.
    p.push(
        Reply::Text("Fifth done.".into()),
        Some(mc_tests::fake_provider::Usage {
            input: 190_000,
            output: 10,
            ..Default::default()
        }),
    );
    cc.prompt_in(Some(s), "Fifth.", &[]);
    assert_once(
        &p.agent_requests()[n],
        &[ALPHA, BRAVO, CHARLIE],
        "after compactions 3 and 4",
    );

    // 5: an automatic compaction before the next request.
    let compactions = p.requests().iter().filter(|r| r.is_compaction()).count();
    let n = p.agent_requests().len();
    p.push(Reply::Text("Sixth done.".into()), None);
    cc.prompt_in(
        Some(s),
        "Sixth.",
        &[("CLAUDE_CODE_AUTO_COMPACT_WINDOW", "100000")],
    );
    assert_eq!(
        p.requests().iter().filter(|r| r.is_compaction()).count(),
        compactions + 1,
        "the context over the window compacts automatically"
    );
    assert_once(
        &p.agent_requests()[n],
        &[ALPHA, BRAVO, CHARLIE],
        "after the automatic compaction",
    );

    // Every compaction ran the hook with its own prompt id; a replay adds nothing.
    let compact: Vec<Value> = hook_inputs(cc)
        .into_iter()
        .filter(|i| i["source"] == "compact")
        .collect();
    assert_eq!(compact.len(), 5, "{compact:?}");
    let mut ids: Vec<&str> = compact
        .iter()
        .map(|i| i["prompt_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 5, "each compaction has its own prompt id");
    for input in &compact {
        let out = cc.mc_pin(&["restore", "--harness", "claude-code"], &input.to_string());
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

const MEMORY: &str = "MEM-ONE: tests never touch the real home folder.";

/// The historian's run records, for a failure message.
fn historian_runs(db: &std::path::Path) -> String {
    let store = Store::open(db, &StoreOptions::default()).unwrap();
    let mut stmt = store
        .conn()
        .prepare("SELECT started_ms, finished_ms, status, error FROM historian_runs ORDER BY id")
        .unwrap();
    let rows: Vec<String> = stmt
        .query_map([], |r| {
            Ok(format!(
                "{:?} {:?} {:?} {:?}",
                r.get::<_, i64>(0)?,
                r.get::<_, Option<i64>>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?
            ))
        })
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    format!("{rows:?}")
}

/// The compartments mc holds for a session.
fn compartments(cc: &ClaudeCode, session: &str) -> i64 {
    let store = Store::open(&cc.db, &StoreOptions::default()).unwrap();
    store
        .conn()
        .query_row(
            "SELECT count(*) FROM compartments c JOIN sessions s ON s.id = c.session
             WHERE s.harness = 'claude-code' AND s.session_id = ?1",
            [session],
            |r| r.get(0),
        )
        .unwrap_or(0)
}

#[test]
fn the_historian_folds_the_transcript_and_mc_s_record_comes_back_once_after_a_compaction() {
    historian_record_once(
        "the_historian_folds_the_transcript_and_mc_s_record_comes_back_once_after_a_compaction",
        false,
    );
}

#[test]
fn through_the_gateway_the_memory_and_the_fold_ride_in_the_head_once() {
    historian_record_once(
        "through_the_gateway_the_memory_and_the_fold_ride_in_the_head_once",
        true,
    );
}

/// The historian folds a session (Stop hook), then `/compact`: the fold and
/// the memory are in each request once — both in the hook's record without
/// a gateway; with one, both in the head (the first call after Claude
/// Code's compaction brings the fold in) and the record empty — and mc's
/// store holds each message once (the historian folds the gateway's record).
fn historian_record_once(test: &str, gateway: bool) {
    // SessionStart: mc-pin restore; Stop: mc-historian hook, in the background.
    let restore = format!(
        "{} restore --harness claude-code",
        mc_tests::claude::sh(&mc_tests::bin_path("mc-pin").display().to_string())
    );
    let fold = format!(
        "{} hook --harness claude-code --context-limit 8000",
        mc_tests::claude::sh(&mc_tests::bin_path("mc-historian").display().to_string())
    );
    let Some(cc) = ClaudeCode::start(
        test,
        Options {
            hooks: vec![
                ("SessionStart".into(), None, restore),
                ("Stop".into(), None, fold),
            ],
            ..Options::default()
        },
    ) else {
        return;
    };
    let _gateway = gateway.then(|| cc.through_gateway());
    let p = &cc.provider;
    p.play_historian("mock-historian");
    let out = cc.mc_search(&[
        "memory",
        "write",
        "--category",
        "CONSTRAINTS",
        "--content",
        MEMORY,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A session of long replies; the last one reports a context near the
    // 8,000-token window the Stop hook measures against.
    let reply = |i: usize| {
        format!(
            "Step {i} done. {}",
            "The module reads its input line by line. ".repeat(150)
        )
    };
    p.push(Reply::Text(reply(0)), None);
    let s = cc.prompt("Start the work.")["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let s = s.as_str();
    // At startup mc had the project's memory: the first request carries it
    // once — in mc's record, or through the gateway in the head, the record
    // then having nothing to say yet.
    let first = &p.agent_requests()[0];
    assert_eq!(
        first.count("<mc-history>"),
        usize::from(!gateway),
        "{}",
        first.body
    );
    assert_eq!(first.count(MEMORY), 1, "{}", first.body);
    if gateway {
        assert!(
            first.body["messages"][0].to_string().contains(MEMORY),
            "{}",
            first.body
        );
    }
    for i in 1..6 {
        // From the third turn on (the transcript may lag the Stop hook by a
        // line, so not only the last one).
        let usage = (i >= 3).then_some(mc_tests::fake_provider::Usage {
            input: 7_000,
            output: 10,
            ..Default::default()
        });
        p.push(Reply::Text(reply(i)), usage);
        cc.prompt_in(Some(s), &format!("Go on with step {i}."), &[]);
    }
    // The Stop hook started the historian in the background; it publishes soon.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while compartments(&cc, s) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        compartments(&cc, s) > 0,
        "the historian folded nothing; its runs: {}",
        historian_runs(&cc.db)
    );
    // Resuming before any compaction adds no second copy of mc's record
    // (through the gateway the record has nothing to say: the head does).
    let n = p.agent_requests().len();
    p.push(Reply::Text("Resumed.".into()), None);
    cc.prompt_in(Some(s), "Still there?", &[]);
    assert_eq!(
        p.agent_requests()[n].count("<mc-history>"),
        usize::from(!gateway)
    );
    assert_each_message_once(&cc, s, gateway);

    cc.prompt_in(Some(s), "/compact", &[]);
    for turn in 0..3 {
        let n = p.agent_requests().len();
        p.push(Reply::Text(format!("After compaction, turn {turn}.")), None);
        cc.prompt_in(Some(s), &format!("After compaction {turn}."), &[]);
        let request = &p.agent_requests()[n];
        // After the compaction the folded history and the memory are in the
        // request once: in mc's record, or through the gateway in the head
        // (the first call after Claude Code's compaction brings the fold in)
        // and not in the record.
        assert_eq!(
            request.count("<mc-history>"),
            usize::from(!gateway),
            "turn {turn}: {}",
            request.body
        );
        assert_eq!(request.count(MEMORY), 1, "turn {turn}");
        assert_fold_once(request, turn);
        if gateway {
            // mc's head: m[0] and, while the fold is newer than it, m[1].
            let head: String = request.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .take(2)
                .map(Value::to_string)
                .collect();
            assert!(
                head.contains("Folded messages"),
                "the fold rides in the head: {}",
                request.body
            );
        }
    }
    assert_each_message_once(&cc, s, gateway);
}

/// Each compartment of the fold is in `request` exactly once.
fn assert_fold_once(request: &Recorded, turn: usize) {
    let text = request.body.to_string();
    const TITLE: &str = "Folded messages ";
    // Each title with its range ("Folded messages 3-9").
    let titles: Vec<&str> = text
        .match_indices(TITLE)
        .map(|(at, _)| {
            let range = &text[at + TITLE.len()..];
            let end = range
                .find(|c: char| !c.is_ascii_digit() && c != '-')
                .unwrap_or(range.len());
            &text[at..at + TITLE.len() + end]
        })
        .collect();
    assert!(!titles.is_empty(), "turn {turn}: no fold: {}", request.body);
    for title in &titles {
        assert_eq!(
            text.matches(title).count(),
            1,
            "turn {turn}: {title} shown more than once: {}",
            request.body
        );
    }
}

/// mc's store holds the session's conversation once: one kind of message
/// row (the gateway's, else the transcript's), each reply and prompt in
/// one kept part, and every compartment bounded by ordinals of those rows.
fn assert_each_message_once(cc: &ClaudeCode, session: &str, gateway: bool) {
    let store = Store::open(&cc.db, &StoreOptions::default()).unwrap();
    let conn = store.conn();
    let id: i64 = conn
        .query_row(
            "SELECT id FROM sessions WHERE harness = 'claude-code' AND session_id = ?1",
            [session],
            |r| r.get(0),
        )
        .unwrap();
    let ids: Vec<String> = conn
        .prepare("SELECT message_id FROM messages WHERE session = ?1 ORDER BY ordinal")
        .unwrap()
        .query_map([id], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let from_gateway = ids.iter().filter(|m| m.starts_with("cc-")).count();
    assert_eq!(
        from_gateway,
        if gateway { ids.len() } else { 0 },
        "one record of the session's messages: {ids:?}"
    );
    let kept = |needle: &str| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM raw_parts WHERE session = ?1 AND instr(content, ?2) > 0",
            rusqlite::params![id, needle],
            |r| r.get(0),
        )
        .unwrap()
    };
    // The gateway keeps each part as its call passes; without it the
    // historian's runs keep what the transcript had when they started.
    let once = |n: i64, what: &str| {
        if gateway {
            assert_eq!(n, 1, "{what} kept {n} times");
        } else {
            assert!(n <= 1, "{what} kept {n} times");
        }
    };
    for i in 0..6 {
        once(kept(&format!("Step {i} done.")), &format!("reply {i}"));
    }
    for i in 1..6 {
        once(
            kept(&format!("Go on with step {i}.")),
            &format!("prompt {i}"),
        );
    }
    let unbound: i64 = conn
        .query_row(
            "SELECT count(*) FROM compartments c WHERE c.session = ?1 AND
               (NOT EXISTS (SELECT 1 FROM messages m WHERE m.session = c.session AND m.ordinal = c.start_ordinal)
                OR NOT EXISTS (SELECT 1 FROM messages m WHERE m.session = c.session AND m.ordinal = c.end_ordinal))",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unbound, 0, "a compartment names an ordinal of no message");
}

#[test]
fn a_pin_made_from_inside_the_session_finds_its_session_and_transcript() {
    let Some(cc) = ClaudeCode::start(
        "a_pin_made_from_inside_the_session_finds_its_session_and_transcript",
        Options::default(),
    ) else {
        return;
    };
    // The agent runs what a user would type as `!mc-pin pin --last user`:
    // no session, no transcript, no harness named.
    cc.provider.push(
        tool(
            "Bash",
            json!({"command": "mc-pin pin --last user", "description": "Pin the rule"}),
        ),
        None,
    );
    cc.provider.push(Reply::Text("Pinned.".into()), None);
    let result = cc.prompt(ALPHA);
    let session = result["session_id"].as_str().unwrap();
    let requests = cc.provider.agent_requests();
    let answer = result_of(&requests[1]);
    assert!(!answer.is_error, "{answer:?}");
    let pins: Value = serde_json::from_str(answer.text.trim())
        .unwrap_or_else(|e| panic!("mc-pin printed no JSON ({e}): {}", answer.text));
    assert_eq!(pins["pins"].as_array().unwrap().len(), 1, "{pins}");
    assert_eq!(pins["pins"][0]["role"], "user");
    // In mc's database, under the session Claude Code runs, and it is the rule.
    let listed = cc.mc_pin_json(&["list", "--harness", "claude-code", "--session", session]);
    assert_eq!(listed["pins"], pins["pins"]);
    let transcript = std::fs::read_to_string(cc.transcript(session)).unwrap();
    let pinned = pins["pins"][0]["id"].as_str().unwrap();
    let line = transcript
        .lines()
        .find(|l| l.contains(&format!("\"uuid\":\"{pinned}\"")))
        .expect("the pinned line is in the transcript");
    assert!(line.contains(ALPHA), "{line}");
}
