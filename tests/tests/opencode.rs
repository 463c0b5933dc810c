//! End to end against the real `opencode` binary (npm `opencode-ai`, pinned in
//! `tests/e2e/package.json`; `scripts/test` installs it): OpenCode runs with
//! mc's plugin and talks to a fake Anthropic provider of ours on 127.0.0.1;
//! the tests assert on the request bytes the provider receives.

use mc_tests::fake_provider::Reply;
use mc_tests::opencode::*;
use serde_json::json;

/// OpenCode with mc's plugin, in a temp folder that lives as long as the test.
fn with_mc(mc_config: Option<&str>) -> Option<(OpenCode, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ctx.db");
    let oc = OpenCode::start(
        dir.path(),
        Options {
            db: Some(db),
            with_plugin: true,
            mc_config: mc_config.map(str::to_string),
            timing_log: None,
            transform_bin: None,
            context: None,
            historian_bin: None,
            env: Vec::new(),
            project: None,
        },
    )?;
    Some((oc, dir))
}

#[test]
fn tags_reach_the_provider_and_turns_below_the_threshold_keep_the_prefix() {
    let Some((oc, _dir)) = with_mc(None) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    oc.provider.push(
        Reply::Tool {
            name: "read".into(),
            input: json!({"filePath": "src/lib.rs"}),
        },
        None,
    );
    for turn in 0..4 {
        oc.prompt(&session, &format!("turn {turn}: look at the code"));
    }
    let requests = oc.provider.agent_requests();
    assert!(requests.len() >= 5, "{} agent requests", requests.len());
    let text = all_text(requests.last().unwrap());
    assert!(
        text.contains("§1§ turn 0: look at the code"),
        "{}",
        &text[..text.len().min(600)]
    );
    assert!(
        text.contains("<session-history></session-history>"),
        "the head is in the request"
    );
    let results = tool_results(requests.last().unwrap());
    assert!(
        results
            .iter()
            .any(|(_, t)| t.starts_with('§') && t.contains("pub fn answer")),
        "{results:?}"
    );
    // The system hook adds mc's guidance once, after OpenCode's own prompt
    // with its date line; it is part of the cache key checked below.
    for request in &requests {
        let system = request.body["system"].to_string();
        assert_eq!(
            system.matches("## Context management (mc)").count(),
            1,
            "{system}"
        );
        assert!(system.contains("ctx_reduce") && system.contains("Today's date:"));
    }
    // Cache stability on the wire: every request repeats the previous one's bytes.
    for pair in requests.windows(2) {
        let (before, after) = (cache_key(&pair[0]), cache_key(&pair[1]));
        assert!(after.len() >= before.len());
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert_eq!(
                a, b,
                "cache key element {i} changed between consecutive requests"
            );
        }
    }
}

#[test]
fn without_a_usable_database_the_session_keeps_working_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: None,
            with_plugin: true,
            mc_config: None,
            timing_log: None,
            transform_bin: None,
            context: None,
            historian_bin: None,
            env: Vec::new(),
            project: None,
        },
    ) else {
        return;
    };
    let session = oc.new_session();
    oc.provider.push(Reply::Text("still here".into()), None);
    let reply = oc.prompt(&session, "hello");
    assert_eq!(
        reply["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "text")
            .unwrap()["text"],
        "still here"
    );
    let requests = oc.provider.agent_requests();
    let text = all_text(requests.last().unwrap());
    assert!(
        text.contains("hello") && !text.contains('§'),
        "passthrough: no tags, no head: {text}"
    );
    let system = requests.last().unwrap().body["system"].to_string();
    assert!(!system.contains("Context management (mc)"), "{system}");
}

#[test]
fn ctx_reduce_then_a_busting_turn_drops_the_output_and_later_requests_keep_it() {
    let Some((oc, _dir)) = with_mc(Some(r#"{"transform": {"protected_tags": 2}}"#)) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    // Turn 1: the agent reads a file.
    oc.provider.push(
        Reply::Tool {
            name: "read".into(),
            input: json!({"filePath": "src/lib.rs"}),
        },
        None,
    );
    oc.prompt(&session, "read the library");
    let seen = oc.provider.agent_requests();
    let (_, output) = tool_results(seen.last().unwrap())
        .pop()
        .expect("the read result reached the provider");
    let tag = leading_tag(&output).expect("the read output is tagged");
    // Turn 2: the agent drops it with ctx_reduce; the answer reports usage over the threshold.
    oc.provider.push(
        Reply::Tool {
            name: "ctx_reduce".into(),
            input: json!({"drop": tag.to_string()}),
        },
        None,
    );
    oc.provider
        .push(Reply::Text("dropped it".into()), Some(usage_at(70)));
    oc.prompt(&session, "you can drop that output now");
    let reduce_result = tool_results(oc.provider.agent_requests().last().unwrap())
        .into_iter()
        .find(|(_, t)| t.contains("queued"))
        .expect("ctx_reduce answered");
    assert!(
        reduce_result.1.contains(&format!("§{tag}§")),
        "{reduce_result:?}"
    );
    // Turn 3: the first request after crossing the threshold applies the drop.
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "continue");
    oc.prompt(&session, "and once more");
    let requests = oc.provider.agent_requests();
    let placeholder = format!("[dropped §{tag}§]");
    let n = requests.len();
    let applied = requests
        .iter()
        .position(|r| tool_results(r).iter().any(|(_, t)| t == &placeholder));
    let applied = applied.unwrap_or_else(|| panic!("no request carries {placeholder}"));
    assert!(
        !tool_results(&requests[applied])
            .iter()
            .any(|(_, t)| t.contains("pub fn answer"))
    );
    // Every later request keeps the dropped form, and the prefix, byte for byte.
    for pair in requests[applied..n].windows(2) {
        let (before, after) = (cache_key(&pair[0]), cache_key(&pair[1]));
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert_eq!(a, b, "element {i} changed after the drop was applied");
        }
    }
}

/// mc config in which the fake provider also plays the historian model;
/// `extra` is spliced in as more top-level keys.
fn historian_config(extra: &str) -> String {
    format!(
        r#"{{ {extra}
            "providers": {{"fake": {{"kind": "anthropic", "base_url": "{{provider}}"}}}},
            "historian": {{"model": "fake/mock-historian", "retries": 0, "timeout_ms": 30000}} }}"#
    )
}

/// OpenCode with mc and a historian, after four turns that each read a file of
/// `lines` lines (about 17 tokens a line) at 20 % usage.
fn reading_a_big_file(
    lines: usize,
    extra_config: &str,
) -> Option<(OpenCode, tempfile::TempDir, String)> {
    let (oc, dir) = with_mc(Some(&historian_config(extra_config)))?;
    oc.provider.play_historian("mock-historian");
    let session = read_a_big_file_four_times(&oc, lines);
    Some((oc, dir, session))
}

/// A new session after four turns that each read a file of `lines` lines at 20 % usage.
fn read_a_big_file_four_times(oc: &OpenCode, lines: usize) -> String {
    let big = "pub fn helper(x: u64) -> u64 { x.wrapping_mul(2_654_435_761) % 97 }\n".repeat(lines);
    std::fs::write(oc.project.join("src/big.rs"), big).unwrap();
    let session = oc.new_session();
    read_the_big_file(oc, &session, 0..4);
    session
}

/// Turns `passes` of `session` at 20 % usage, each reading `src/big.rs`.
fn read_the_big_file(oc: &OpenCode, session: &str, passes: std::ops::Range<usize>) {
    oc.provider.set_usage(usage_at(20));
    for turn in passes {
        let read = Reply::Tool {
            name: "read".into(),
            input: json!({"filePath": "src/big.rs"}),
        };
        oc.provider.push(read, None);
        oc.prompt(session, &format!("read the big file, pass {turn}"));
    }
}

#[test]
fn after_a_historian_run_the_next_busting_request_carries_compartments_not_covered_messages() {
    let Some((oc, _dir, session)) = reading_a_big_file(180, "") else {
        return;
    };
    fold(&oc, &session);
    // Nothing changes until a pass busts anyway; then the compartment is at the head.
    oc.prompt(&session, "quiet turn");
    let quiet = oc.provider.agent_requests().last().unwrap().clone();
    assert!(
        all_text(&quiet).contains("read the big file, pass 0"),
        "still raw before the bust"
    );
    assert!(!all_text(&quiet).contains("Folded messages"));
    oc.provider.set_usage(usage_at(70));
    oc.prompt(&session, "turn that reports high usage");
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "next turn");
    let busted = oc.provider.agent_requests().last().unwrap().clone();
    let text = all_text(&busted);
    assert!(
        text.contains("Folded messages"),
        "the compartment is at the head: {}",
        &text[..text.len().min(800)]
    );
    assert!(
        !text.contains("read the big file, pass 0"),
        "the covered raw message left the wire"
    );
}

/// What OpenCode handed the messages hook, per call: (count, first id).
fn hook_inputs(log: &std::path::Path) -> Vec<(usize, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut words = l.strip_prefix("input ")?.split(' ');
            Some((words.next()?.parse().ok()?, words.next()?.to_string()))
        })
        .collect()
}

#[test]
fn after_a_fold_mcs_compaction_boundary_stops_opencode_loading_the_covered_messages() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hook.log");
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            mc_config: Some(historian_config("")),
            timing_log: Some(log.clone()),
            ..Options::default()
        },
    ) else {
        return;
    };
    oc.provider.play_historian("mock-historian");
    let session = read_a_big_file_four_times(&oc, 180);
    // Pin the first message: the fold covers it, the head carries it.
    let messages = oc.get(&format!("/session/{session}/message"));
    let first = messages[0]["info"]["id"].as_str().unwrap().to_string();
    let pinned = oc.mc(
        "mc-pin",
        &[
            "pin",
            "--harness",
            "opencode",
            "--session",
            &session,
            "--message",
            &first,
            "--opencode-url",
            &oc.url,
        ],
        b"",
    );
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    fold(&oc, &session);
    let before = hook_inputs(&log).last().unwrap().0;
    oc.provider.set_usage(usage_at(70));
    oc.prompt(&session, "turn that reports high usage");
    oc.provider.set_usage(usage_at(30));
    // This turn's first pass busts (70 %): the head takes the covered messages
    // off the wire, and the plugin writes the boundary after the call.
    oc.prompt(&session, "turn that busts");
    let busted = oc.provider.agent_requests().last().unwrap().clone();
    assert!(all_text(&busted).contains("Folded messages"));
    assert!(
        all_text(&busted).contains("read the big file, pass 0"),
        "the pin is in the head"
    );
    oc.prompt(&session, "turn after the boundary");
    let after = oc.provider.agent_requests().last().unwrap().clone();

    // OpenCode now loads the boundary and what follows it, not the covered messages.
    let inputs = hook_inputs(&log);
    let (count, first_id) = inputs.last().unwrap().clone();
    assert!(
        first_id.ends_with("mcb0"),
        "the hook's first message is mc's boundary: {inputs:?}"
    );
    let previous = inputs[inputs.len() - 2].0;
    assert!(
        count + 4 <= previous,
        "the covered messages stopped arriving (a turn later, fewer messages): {inputs:?}"
    );
    assert!(previous > before, "{inputs:?}");
    let ids = message_ids(&oc, &session);
    assert_eq!(
        ids.iter().filter(|id| id.ends_with("mcb0")).count(),
        1,
        "{ids:?}"
    );
    assert!(ids.contains(&first), "nothing is deleted: {ids:?}");

    // The call after the boundary moved is a defer pass: the provider sees the
    // busting request's bytes again, then the new turn (tags unchanged).
    assert_defers_on(&busted, &after, "across the boundary");
    let text = all_text(&after);
    assert!(text.contains("read the big file, pass 0"), "the pin holds");
    assert!(text.contains("Folded messages"));
    assert!(
        !text.contains("What did we do so far"),
        "mc's boundary never reaches the model"
    );
    assert!(!text.contains("[mc: the conversation before this point"));

    // A later rebuild of m[0] (pressure) renders the pin from mc's own copy.
    oc.provider.set_usage(usage_at(92));
    oc.prompt(&session, "turn that reports very high usage");
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "turn after the rebuild");
    let rebuilt = oc.provider.agent_requests().last().unwrap().clone();
    let text = all_text(&rebuilt);
    assert!(
        text.contains("read the big file, pass 0"),
        "the pin survives a rebuild behind the boundary"
    );
    assert!(!text.contains("What did we do so far"));
    let status = status(&oc, &session);
    assert!(status.is_object(), "{status}");
}

/// `later` repeats the bytes of `busted` (a busting request whose last message
/// carried its turn's prompt): tools, system and every message before that.
fn assert_defers_on(
    busted: &mc_tests::fake_provider::Recorded,
    later: &mc_tests::fake_provider::Recorded,
    what: &str,
) {
    let (a, b) = (cache_key(busted), cache_key(later));
    assert_eq!(a[..2], b[..2], "tools and system {what}");
    let prefix = a.len() - 1;
    assert_eq!(
        a[..prefix],
        b[..prefix],
        "a defer pass {what}: byte-identical prefix"
    );
}

/// The historian folds what it can of `session` (a small window keeps the live tail short).
fn fold(oc: &OpenCode, session: &str) {
    let out = oc.mc(
        "mc-historian",
        &[
            "run",
            "--session",
            session,
            "--opencode-url",
            &oc.url,
            "--context-limit",
            "8000",
        ],
        b"",
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(
        report["status"],
        "published",
        "{report} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A turn that reports high usage, then one whose first pass busts.
fn bust(oc: &OpenCode, session: &str) {
    oc.provider.set_usage(usage_at(70));
    oc.prompt(session, "turn that reports high usage");
    oc.provider.set_usage(usage_at(30));
    oc.prompt(session, "turn that busts");
}

/// The ids of the session's messages, as OpenCode stores them, oldest first.
fn message_ids(oc: &OpenCode, session: &str) -> Vec<String> {
    oc.get(&format!("/session/{session}/message"))
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["info"]["id"].as_str())
        .map(str::to_string)
        .collect()
}

/// The ids of mc's boundary messages in the session.
fn boundaries(oc: &OpenCode, session: &str) -> Vec<String> {
    let mut ids = message_ids(oc, session);
    ids.retain(|id| id.ends_with("mcb0"));
    ids
}

#[test]
fn two_opencode_processes_on_one_database_continue_a_session_and_move_one_boundary_forward() {
    let dir = tempfile::tempdir().unwrap();
    let opencode_db = dir.path().join("opencode.db");
    let start = |name: &str, project: Option<std::path::PathBuf>| {
        let folder = dir.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let log = folder.join("hook.log");
        let oc = OpenCode::start(
            &folder,
            Options {
                db: Some(dir.path().join("ctx.db")),
                with_plugin: true,
                mc_config: Some(historian_config("")),
                timing_log: Some(log.clone()),
                env: vec![("OPENCODE_DB".into(), opencode_db.display().to_string())],
                project,
                ..Options::default()
            },
        )?;
        oc.provider.play_historian("mock-historian");
        Some((oc, log))
    };
    // Two OpenCode servers (two plugins, two resident processes) on one
    // OpenCode database, one project and one mc database.
    let Some((a, a_log)) = start("a", None) else {
        return;
    };
    let Some((b, b_log)) = start("b", Some(a.project.clone())) else {
        return;
    };

    let session = read_a_big_file_four_times(&a, 180);
    fold(&a, &session);
    bust(&a, &session);
    let first = boundaries(&a, &session);
    assert_eq!(first.len(), 1, "the first process wrote the boundary");
    let busted = a.provider.agent_requests().last().unwrap().clone();

    // The second process continues the session: OpenCode hands its hook the
    // boundary and what follows, and its pass defers on the state the first
    // left: the provider sees the first process's bytes again.
    b.provider.set_usage(usage_at(30));
    b.prompt(&session, "a turn through the second process");
    let inputs = hook_inputs(&b_log);
    assert!(
        inputs[0].1 == first[0],
        "the second process's hook starts at the boundary: {inputs:?}"
    );
    let continued = b.provider.agent_requests()[0].clone();
    assert_defers_on(&busted, &continued, "in the other process");

    // More history through the second process, folded, then a pass that
    // busts there: it moves the boundary forward, and the older pair is gone.
    read_the_big_file(&b, &session, 4..8);
    fold(&b, &session);
    bust(&b, &session);
    let second = boundaries(&b, &session);
    assert_eq!(second.len(), 1, "one boundary pair: {second:?}");
    assert_ne!(second, first, "the boundary moved");
    let ids = message_ids(&b, &session);
    let at = |id: &str| ids.iter().position(|i| *i == id).unwrap();
    let old_anchor = first[0].trim_end_matches("mcb0");
    assert!(
        at(&second[0]) > at(old_anchor),
        "forward, never back: {ids:?}"
    );
    let text = all_text(b.provider.agent_requests().last().unwrap());
    assert!(text.contains("Folded messages"));
    assert!(!text.contains("What did we do so far"));

    // And the first process's next call starts at the second's boundary.
    a.provider.set_usage(usage_at(30));
    a.prompt(&session, "back in the first process");
    let (_, id) = hook_inputs(&a_log).last().unwrap().clone();
    assert_eq!(id, second[0]);
    let text = all_text(a.provider.agent_requests().last().unwrap());
    assert!(text.contains("back in the first process"));
    assert!(!text.contains("What did we do so far"));
}

#[test]
fn a_pinned_message_comes_back_after_opencodes_own_compaction_once() {
    let Some((oc, _dir)) = with_mc(None) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    oc.prompt(&session, "Always answer in French from now on.");
    oc.prompt(&session, "What is two plus two?");
    let messages = oc.get(&format!("/session/{session}/message"));
    let first = messages[0]["info"]["id"].as_str().unwrap().to_string();
    let pinned = oc.mc(
        "mc-pin",
        &[
            "pin",
            "--harness",
            "opencode",
            "--session",
            &session,
            "--message",
            &first,
            "--opencode-url",
            &oc.url,
        ],
        b"",
    );
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    // OpenCode's own compaction; its session.compacted event reaches the plugin,
    // which pipes it into mc-pin restore.
    oc.post(
        &format!("/session/{session}/summarize"),
        json!({"providerID": "mock", "modelID": "mock-sonnet"}),
    );
    let restored = |oc: &OpenCode| -> usize {
        let messages = oc.get(&format!("/session/{session}/message"));
        messages
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["parts"].as_array().unwrap().iter())
            .filter(|p| {
                p["synthetic"] == true
                    && p["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("Always answer in French"))
            })
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while restored(&oc) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(
        restored(&oc),
        1,
        "the pinned text was restored once as a synthetic part"
    );
    oc.prompt(&session, "And three plus three?");
    let last = oc.provider.agent_requests().last().unwrap().clone();
    assert!(
        all_text(&last).contains("Always answer in French"),
        "the pinned text reached the provider"
    );
    // A replayed event adds nothing.
    let event = json!({"type": "session.compacted", "properties": {"sessionID": session}});
    let replay = oc.mc(
        "mc-pin",
        &["restore", "--opencode-url", &oc.url],
        event.to_string().as_bytes(),
    );
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_eq!(restored(&oc), 1);
}

#[test]
fn the_plugin_starts_the_historian_when_a_pass_says_it_is_due() {
    // ~44k tokens of tool output: more than the live tail the historian protects.
    let Some((oc, _dir, session)) = reading_a_big_file(
        600,
        r#""transform": {"relief_drop": false, "tool_reclaim": false},"#,
    ) else {
        return;
    };
    // Usage near the threshold: the next pass reports historian_due and the
    // plugin starts mc-historian in the background.
    oc.provider.set_usage(usage_at(70));
    oc.prompt(&session, "turn that reports high usage");
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "next turn");
    let asked = || {
        oc.provider
            .requests()
            .iter()
            .any(|r| r.body["model"] == "mock-historian")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !asked() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(asked(), "the plugin never ran the historian");
    // Its compartment lands at the head on a later busting pass.
    let published = || {
        let out = oc.mc("mc-transform", &["status", "--session", &session], b"");
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        status["historian"]["last_run"]["status"] == "published"
    };
    while !published() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(published(), "the background run did not publish");
    oc.provider.set_usage(usage_at(70));
    oc.prompt(&session, "another high-usage turn");
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "and one more");
    let text = all_text(oc.provider.agent_requests().last().unwrap());
    assert!(
        text.contains("Folded messages"),
        "the compartment is at the head"
    );
}

#[test]
fn without_mc_transform_the_messages_go_out_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            mc_config: None,
            timing_log: None,
            transform_bin: Some(dir.path().join("no-such-mc-transform")),
            context: None,
            historian_bin: None,
            env: Vec::new(),
            project: None,
        },
    ) else {
        return;
    };
    let session = oc.new_session();
    oc.provider.push(Reply::Text("fine".into()), None);
    oc.prompt(&session, "hello there");
    oc.prompt(&session, "still there?");
    let text = all_text(oc.provider.agent_requests().last().unwrap());
    assert!(
        text.contains("hello there") && !text.contains('§'),
        "{text}"
    );
    let system = oc.provider.agent_requests().last().unwrap().body["system"].to_string();
    assert!(!system.contains("Context management (mc)"), "{system}");
}

#[test]
fn at_the_blocking_band_the_plugin_waits_for_the_fold_before_sending() {
    // A wrapper around mc-transform logs each call and its decision.
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, calls) = logging_wrapper(dir.path(), "mc-transform");
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            mc_config: Some(historian_config("")),
            transform_bin: Some(wrapper),
            ..Options::default()
        },
    ) else {
        return;
    };
    oc.provider.play_historian("mock-historian");
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    // Long user messages: the emergency drop takes tool outputs, never these.
    let long = "Please keep this requirement in mind: ".to_string()
        + &"the parser must stay streaming. ".repeat(700);
    // ~53k tokens: well past the live tail the historian protects (40 % of 90k).
    for turn in 0..12 {
        oc.prompt(&session, &format!("part {turn}: {long}"));
    }
    oc.provider.set_usage(usage_at(96));
    oc.prompt(&session, "turn that reports 96 %");
    // This request's pass is blocking: the pass said so before writing
    // anything, the plugin ran the historian, then the one pass that went out,
    // so the compartment is already at the head.
    oc.provider.set_usage(usage_at(40));
    let before = std::fs::read_to_string(&calls).unwrap().lines().count();
    oc.prompt(&session, "next turn");
    let log = std::fs::read_to_string(&calls).unwrap();
    let passes: Vec<&str> = log
        .lines()
        .skip(before)
        .filter(|l| l.starts_with("pass "))
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(passes, ["wait", "execute"], "one full pass: {log}");
    let full_passes = log
        .lines()
        .filter(|l| l.starts_with("pass ") && !l.ends_with(" wait"))
        .count();
    let requests = oc.provider.agent_requests();
    assert_eq!(
        full_passes,
        requests.len(),
        "one full pass per request: {log}"
    );
    let text = all_text(requests.last().unwrap());
    let status = oc.mc("mc-transform", &["status", "--session", &session], b"");
    assert!(
        text.contains("Folded messages"),
        "the fold landed before this request was sent; status: {}",
        String::from_utf8_lossy(&status.stdout)
    );
    assert!(
        !text.contains("part 0: Please keep"),
        "the covered raw message left the wire"
    );
}

#[test]
fn a_subagent_session_gets_tags_but_no_head() {
    let Some((oc, _dir)) = with_mc(None) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    oc.provider.push(
        Reply::Tool {
            name: "task".into(),
            input: json!({"description": "look around", "prompt": "Summarise src/lib.rs for me",
                          "subagent_type": "general"}),
        },
        None,
    );
    oc.provider
        .push(Reply::Text("the subagent's summary".into()), None);
    oc.provider
        .push(Reply::Text("the parent's answer".into()), None);
    oc.prompt(&session, "delegate the summary");
    let requests = oc.provider.agent_requests();
    let (child, parent): (Vec<_>, Vec<_>) = requests
        .iter()
        .partition(|r| !all_text(r).contains("delegate the summary"));
    assert!(
        !child.is_empty() && parent.len() >= 2,
        "{} requests",
        requests.len()
    );
    let child_text = all_text(child[0]);
    assert!(
        child_text.contains("Summarise src/lib.rs for me"),
        "{child_text}"
    );
    assert!(!child_text.contains("<session-history"), "{child_text}");
    assert!(
        child_text.contains("§1§ Summarise src/lib.rs"),
        "tagged all the same: {child_text}"
    );
    assert!(all_text(parent[0]).contains("<session-history></session-history>"));
    // The store knows the child as a subagent.
    let sessions: Vec<String> = oc
        .get("/session")
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["parentID"] == session.as_str())
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions.len(), 1, "one child session");
    let status = oc.mc("mc-transform", &["status", "--session", &sessions[0]], b"");
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["subagent"], true, "{status}");
}

/// A script in `dir` that runs the built `bin` and logs each call as a line
/// of the returned log file: its subcommand (`pass` when there is none), the
/// `session_id` of its stdin and the `decision` of its answer, when present
/// (e.g. `pass ses_… execute`, `system ses_…`, `run`). Resident
/// (`mc-transform serve`), it logs each request the same way, with its
/// `kind` as the subcommand, and `serve` once when it starts.
///
/// Beside it, [`modes_log`] says how each call came: `serve-start`,
/// `resident KIND whole|delta` (a pass whole or as an incremental delta) or
/// `oneshot KIND`. While the file [`die_flag`] exists, the resident process
/// dies at the next pass request, before answering it (and removes the flag);
/// while [`slow_flag`] exists, it answers the next pass request half a second
/// late (past the plugin's blocking wait; it removes that flag too).
fn logging_wrapper(dir: &std::path::Path, bin: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let log = dir.join(format!("{bin}-calls.log"));
    let wrapper = dir.join(format!("{bin}-wrapper"));
    let quoted =
        |path: &std::path::Path| serde_json::to_string(&path.display().to_string()).unwrap();
    std::fs::write(
        &wrapper,
        format!(
            r#"#!/usr/bin/env python3
import json, os, subprocess, sys, time
BIN, LOG, MODES, DIE, SLOW = {bin}, {log}, {modes}, {die}, {slow}
args = sys.argv[1:]

def field(text, *path):
    try:
        value = json.loads(text)
        for name in path:
            value = value.get(name) if isinstance(value, dict) else None
        return value if isinstance(value, str) else ""
    except ValueError:
        return ""

def append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")

def note(kind, request, answer):
    append(LOG, " ".join(w for w in [kind, field(request, "session_id"), field(answer, "pass", "decision")] if w))

if args[:1] == ["serve"]:
    append(LOG, "serve")
    append(MODES, "serve-start")
    child = subprocess.Popen([BIN] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for line in sys.stdin.buffer:
        text = line.decode("utf-8", "replace")
        kind = field(text, "kind") or "pass"
        if kind == "pass" and os.path.exists(DIE):
            os.remove(DIE)
            append(MODES, "resident pass died")
            child.kill()
            sys.exit(1)
        if kind == "pass" and os.path.exists(SLOW):
            os.remove(SLOW)
            append(MODES, "resident pass slow")
            time.sleep(0.5)
        mode = "delta" if field(text, "incremental", "base") else "whole"
        append(MODES, f"resident {{kind}} {{mode}}" if kind == "pass" else f"resident {{kind}}")
        child.stdin.write(line)
        child.stdin.flush()
        answer = child.stdout.readline()
        if not answer:
            sys.exit(1)
        note(kind, text, answer.decode("utf-8", "replace"))
        sys.stdout.buffer.write(answer)
        sys.stdout.flush()
    sys.exit(0)
append(MODES, "oneshot " + (args[0] if args else "pass"))
data = sys.stdin.buffer.read()
done = subprocess.run([BIN] + args, input=data, stdout=subprocess.PIPE)
note(args[0] if args else "pass", data.decode("utf-8", "replace"), done.stdout.decode("utf-8", "replace"))
sys.stdout.buffer.write(done.stdout)
sys.exit(done.returncode)
"#,
            bin = quoted(&mc_tests::bin_path(bin)),
            log = quoted(&log),
            modes = quoted(&modes_log(dir, bin)),
            die = quoted(&die_flag(dir, bin)),
            slow = quoted(&slow_flag(dir, bin)),
        ),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&wrapper, permissions).unwrap();
    (wrapper, log)
}

/// How each call of a [`logging_wrapper`] came (resident or one-shot).
fn modes_log(dir: &std::path::Path, bin: &str) -> std::path::PathBuf {
    dir.join(format!("{bin}-modes.log"))
}

/// While this file exists, the wrapped resident process dies at the next pass.
fn die_flag(dir: &std::path::Path, bin: &str) -> std::path::PathBuf {
    dir.join(format!("{bin}-die"))
}

/// While this file exists, the wrapped resident process answers the next pass late.
fn slow_flag(dir: &std::path::Path, bin: &str) -> std::path::PathBuf {
    dir.join(format!("{bin}-slow"))
}

#[test]
fn after_a_failed_historian_run_the_plugin_backs_off() {
    // No historian model: runs fold through OpenCode, where the model answers
    // in no known format, so every run fails. A wrapper counts the starts.
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, starts) = logging_wrapper(dir.path(), "mc-historian");
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            mc_config: Some(
                r#"{"transform": {"relief_drop": false, "tool_reclaim": false}}"#.into(),
            ),
            timing_log: None,
            transform_bin: None,
            context: None,
            historian_bin: Some(wrapper),
            env: Vec::new(),
            project: None,
        },
    ) else {
        return;
    };
    for _ in 0..8 {
        oc.provider
            .push_historian(Reply::Text("Here is a summary of the work so far.".into()));
    }
    let session = read_a_big_file_four_times(&oc, 600);
    // Every pass from here on says the historian is due; the first run fails.
    oc.provider.set_usage(usage_at(70));
    for turn in 0..4 {
        oc.prompt(&session, &format!("high usage, turn {turn}"));
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let failed = || status(&oc, &session)["historian"]["last_failure"]["error_class"].clone();
    while failed().is_null() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The answer and its repair were both rejected: nothing published.
    assert_eq!(failed(), "answer_rejected", "{:#}", status(&oc, &session));
    assert_eq!(
        oc.provider.historian_requests().len(),
        2,
        "the answer and one repair"
    );
    let run = &status(&oc, &session)["historian"]["last_run"];
    assert_eq!(
        (run["status"].as_str(), run["compartments"].as_i64()),
        (Some("failed"), Some(0))
    );
    for turn in 4..6 {
        oc.prompt(&session, &format!("high usage, turn {turn}"));
    }
    let count = std::fs::read_to_string(&starts)
        .unwrap_or_default()
        .lines()
        .count();
    assert_eq!(count, 1, "one failed run, then a back-off");
}

#[test]
fn while_passes_defer_the_system_prompt_is_rendered_once_and_reused() {
    // A wrapper around mc-transform logs each call's subcommand.
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, calls) = logging_wrapper(dir.path(), "mc-transform");
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            mc_config: None,
            timing_log: None,
            transform_bin: Some(wrapper),
            context: None,
            historian_bin: None,
            env: Vec::new(),
            project: None,
        },
    ) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    for turn in 0..6 {
        oc.prompt(&session, &format!("turn {turn}"));
    }
    let log = std::fs::read_to_string(&calls).unwrap();
    let count = |what: &str| {
        log.lines()
            .filter(|l| l.split(' ').next() == Some(what))
            .count()
    };
    let requests = oc.provider.agent_requests();
    assert_eq!(count("pass"), requests.len(), "{log}");
    // The first pass executes (first render); the rest defer: one render
    // serves them all (one more if the title request came after the first
    // pass), and every request still carries it, byte for byte.
    assert!((1..=2).contains(&count("system")), "{log}");
    let systems: Vec<String> = requests
        .iter()
        .map(|r| r.body["system"].to_string())
        .collect();
    assert!(systems[0].contains("## Context management (mc)"));
    assert!(systems.iter().all(|s| *s == systems[0]));
}

#[test]
fn a_tool_output_cut_mid_character_keeps_mc_on() {
    // OpenCode's read tool cuts lines longer than 2000 UTF-16 units; an emoji
    // astride the cut leaves a lone surrogate, which JSON.stringify in the
    // plugin writes as `\ud83d`. mc must read it, not switch off (exit 2).
    let Some((oc, _dir)) = with_mc(None) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let line = format!("{}\u{1F600} and more after the emoji\n", "a".repeat(1999));
    std::fs::write(oc.dir.join("project/src/wide.rs"), line).unwrap();
    let session = oc.new_session();
    oc.provider.push(
        Reply::Tool {
            name: "read".into(),
            input: json!({"filePath": "src/wide.rs"}),
        },
        None,
    );
    oc.prompt(&session, "read the wide file");
    oc.prompt(&session, "and now answer");
    let requests = oc.provider.agent_requests();
    let last = requests.last().unwrap();
    let results = tool_results(last);
    let (_, wide) = results
        .iter()
        .find(|(_, t)| t.contains("aaaa"))
        .unwrap_or_else(|| panic!("the read result is in the request: {results:?}"));
    assert!(
        leading_tag(wide).is_some(),
        "mc tagged the cut output: {wide:.80}"
    );
    assert!(
        all_text(last).contains("§1§ read the wide file"),
        "mc stayed on for the session"
    );
    let status = oc.mc("mc-transform", &["status", "--session", &session], b"");
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["passes"]["passthrough"], 0, "{status}");
}

/// `mc-transform status` of a session, as JSON.
fn status(oc: &OpenCode, session: &str) -> serde_json::Value {
    let out = oc.mc("mc-transform", &["status", "--session", session], b"");
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

#[test]
fn a_prompt_rejected_as_too_long_teaches_the_limit_and_the_next_request_recovers() {
    // OpenCode's catalog says 250k tokens; the provider's own limit is 200k.
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, calls) = logging_wrapper(dir.path(), "mc-transform");
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            mc_config: Some(r#"{"transform": {"protected_tags": 2}}"#.into()),
            transform_bin: Some(wrapper),
            context: Some(250_000),
            ..Options::default()
        },
    ) else {
        return;
    };
    // Four reads at low usage: every pass defers, nothing is dropped.
    let session = read_a_big_file_four_times(&oc, 200);
    // The provider rejects the next request with Anthropic's real answer.
    oc.provider
        .push(Reply::prompt_too_long(210_000, 200_000), None);
    let failed = oc.prompt(&session, "one more question");
    assert_eq!(
        failed["info"]["error"]["name"], "ContextOverflowError",
        "{failed}"
    );
    let rejected = oc.provider.agent_requests().last().unwrap().clone();
    assert!(all_text(&rejected).contains("one more question"));
    // OpenCode's session.error event reaches the plugin, which hands it to
    // `mc-transform overflow`: the limit is stored and the session armed.
    // The wrapper logs the call after mc-transform exits, so wait for both.
    let logged = || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .any(|l| l == format!("overflow {session}"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while (status(&oc, &session)["overflow_pending"] != true || !logged())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let armed = status(&oc, &session);
    assert_eq!(armed["overflow_pending"], true, "{armed}");
    assert_eq!(armed["learned_limit"]["context_limit"], 200_000, "{armed}");
    assert_eq!(armed["learned_limit"]["model"], "mock/mock-sonnet");
    assert_eq!(armed["learned_limit"]["source"], "anthropic");
    assert!(logged(), "the plugin called mc-transform overflow");
    // The next request went through the emergency path: old reads dropped,
    // smaller than the rejected one, against the learned window.
    oc.prompt(&session, "try again");
    let recovered = oc.provider.agent_requests().last().unwrap().clone();
    assert!(all_text(&recovered).contains("try again"));
    let dropped = tool_results(&recovered)
        .iter()
        .filter(|(_, t)| t.starts_with("[dropped §"))
        .count();
    assert!(dropped >= 2, "{:?}", tool_results(&recovered));
    assert!(
        recovered.raw.len() < rejected.raw.len() * 2 / 3,
        "{} bytes after, {} before",
        recovered.raw.len(),
        rejected.raw.len()
    );
    let after = status(&oc, &session);
    assert_eq!(after["last_reason"], "overflow", "{after}");
    assert_eq!(after["overflow_pending"], false);
    assert_eq!(
        after["context_window"], 190_000,
        "200k less the 10k output reserve, not 250k"
    );
}

#[test]
fn the_plugin_forgets_deleted_sessions_and_remembers_at_most_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, calls) = logging_wrapper(dir.path(), "mc-transform");
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            transform_bin: Some(wrapper),
            env: vec![("MC_OPENCODE_SESSIONS".into(), "2".into())],
            ..Options::default()
        },
    ) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    // A session's first prompt, and its title settled (the title call renders
    // a system prompt of its own).
    let start = |name: &str| {
        let session = oc.new_session();
        oc.prompt(&session, &format!("{name}: hello"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while oc.get(&format!("/session/{session}"))["title"] != "Test session"
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        session
    };
    // `system` processes a deferring prompt of `session` costs.
    let renders = |session: &str, text: &str| {
        let before = std::fs::read_to_string(&calls).unwrap().lines().count();
        oc.prompt(session, text);
        let log = std::fs::read_to_string(&calls).unwrap();
        let pass = format!("pass {session} defer");
        assert!(log.lines().skip(before).any(|l| l == pass), "{log}");
        let system = format!("system {session}");
        log.lines().skip(before).filter(|l| *l == system).count()
    };
    let a = start("a");
    assert_eq!(
        renders(&a, "a again"),
        0,
        "remembered: the render is reused"
    );
    let b = start("b");
    // Deleting b frees its place: c does not push a out.
    let response = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .build()
        .new_agent()
        .delete(&format!("{}/session/{b}", oc.url))
        .call()
        .unwrap();
    assert!(response.status().is_success());
    let c = start("c");
    assert_eq!(renders(&a, "a once more"), 0, "a is still remembered");
    // A third live session pushes out the least recently used one (c).
    start("d");
    assert_eq!(
        renders(&c, "c again"),
        1,
        "c was forgotten: one render more"
    );
}

#[test]
fn the_agent_writes_a_memory_and_expands_a_dropped_output_with_mc_search_tools() {
    let Some((oc, _dir)) = with_mc(Some(r#"{"transform": {"protected_tags": 2}}"#)) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    // The agent has all five tools, described by mc-search.
    let first_tools = {
        oc.provider.push(Reply::Text("hello".into()), None);
        oc.prompt(&session, "hi");
        oc.provider.agent_requests().last().unwrap().body["tools"].clone()
    };
    let names: Vec<&str> = first_tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in [
        "ctx_search",
        "ctx_memory",
        "ctx_note",
        "ctx_expand",
        "ctx_reduce",
    ] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    // Turn 1: read a file; turn 2: drop its output; a busting answer applies it.
    let tag = read_then_drop(&oc, &session);
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "continue");
    let placeholder = format!("[dropped §{tag}§]");
    assert!(
        tool_results(oc.provider.agent_requests().last().unwrap())
            .iter()
            .any(|(_, t)| t == &placeholder),
        "the drop applied"
    );

    // Turn 4: a memory write and an expand of the dropped tag, then an answer
    // that reports usage over the threshold (the next pass busts anyway).
    let fact = "Answers are computed by answer() in src/lib.rs";
    oc.provider.push(
        Reply::Tool {
            name: "ctx_memory".into(),
            input: json!({"action": "write", "category": "ARCHITECTURE", "content": fact}),
        },
        None,
    );
    oc.provider.push(
        Reply::Tool {
            name: "ctx_expand".into(),
            input: json!({"target": format!("§{tag}§")}),
        },
        None,
    );
    oc.provider
        .push(Reply::Text("noted".into()), Some(usage_at(70)));
    let before = oc.provider.agent_requests().len();
    oc.prompt(
        &session,
        "remember where answers come from, and show me that file again",
    );
    let turn: Vec<_> = oc.provider.agent_requests()[before..].to_vec();
    assert_eq!(turn.len(), 3, "memory call, expand call, answer");
    let results = tool_results(turn.last().unwrap());
    let saved = results
        .iter()
        .find(|(_, t)| t.contains("Saved memory #"))
        .unwrap_or_else(|| panic!("the memory result reached the provider: {results:?}"));
    assert!(saved.1.contains("ARCHITECTURE"), "{saved:?}");
    let expanded = results
        .iter()
        .find(|(_, t)| t.contains(&format!("Original of §{tag}§ (tool read")))
        .unwrap_or_else(|| panic!("the expand result reached the provider: {results:?}"));
    assert!(
        expanded.1.contains("pub fn answer() -> u32"),
        "the original output came back: {expanded:?}"
    );
    // Cache-neutral: within the turn (defer passes), no request shows the memory
    // as context; only its tool call and result mention it.
    for r in &turn {
        assert!(
            !all_text(r).contains("<new-memories>"),
            "a memory write must not bust the cache by itself"
        );
    }
    // The memory is in mc's database under this project.
    let listed = oc.mc(
        "mc-search",
        &[
            "memory",
            "list",
            "--project-dir",
            oc.dir.join("project").to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(String::from_utf8_lossy(&listed.stdout).contains(fact));

    // The next request (a busting pass) carries it in m[1].
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "go on");
    let last = oc.provider.agent_requests().last().unwrap().clone();
    let text = all_text(&last);
    assert!(
        text.contains("<new-memories>") && text.contains(fact),
        "the memory reached m[1] on the busting pass"
    );
}

/// A session of twelve long user messages (~53k tokens, well past the live
/// tail the historian protects) at 20 % usage.
fn twelve_long_messages(oc: &OpenCode) -> String {
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    // Long user messages: the emergency drop takes tool outputs, never these.
    let long = "Please keep this requirement in mind: ".to_string()
        + &"the parser must stay streaming. ".repeat(700);
    for turn in 0..12 {
        oc.prompt(&session, &format!("part {turn}: {long}"));
    }
    session
}

#[test]
fn with_no_mc_config_the_historian_folds_through_opencode_itself() {
    // No mc config at all: no provider, no key, no historian model.
    let Some((oc, _dir)) = with_mc(None) else {
        return;
    };
    let session = twelve_long_messages(&oc);
    // A blocking fold: the plugin runs mc-historian and waits for it; with no
    // model configured, it folds through this very server.
    oc.provider.set_usage(usage_at(96));
    oc.prompt(&session, "turn that reports 96 %");
    oc.provider.set_usage(usage_at(40));
    oc.prompt(&session, "next turn");
    let status = status(&oc, &session);
    let run = &status["historian"]["last_run"];
    assert_eq!(run["status"], "published", "{status:#}");
    // On the session's own model, through OpenCode's login for it.
    assert_eq!(run["model"], "opencode/mock/mock-sonnet", "{run}");
    assert!(run["tokens_in"].as_u64().unwrap() > 0, "{run}");
    assert_eq!(status["historian_model"]["model_source"], "harness_default");
    let asked = oc.provider.historian_requests();
    assert!(
        !asked.is_empty(),
        "the fake provider never saw the historian's prompt"
    );
    for request in &asked {
        assert_eq!(request.body["model"], "mock-sonnet");
        assert!(request.body["tools"].as_array().is_none_or(Vec::is_empty));
        let system = request.body["system"].to_string();
        assert!(
            system.contains("<history>"),
            "the historian's contract is the system prompt"
        );
        // mc's plugin left the child session's prompt alone: no tags, no head.
        assert!(!all_text(request).contains('§'), "{}", all_text(request));
        assert!(!system.contains("Context management (mc)"));
    }
    // The compartment is at the head of the request that went out.
    let text = all_text(oc.provider.agent_requests().last().unwrap());
    assert!(
        text.contains("Folded messages"),
        "the fold landed before the request"
    );
    assert!(
        !text.contains("part 0: Please keep"),
        "the covered raw message left the wire"
    );
    // The child session is gone: not among the session's children, not in the list.
    assert_eq!(oc.get(&format!("/session/{session}/children")), json!([]));
    let listed = oc.get("/session");
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [session.as_str()],
        "only the user's own session: {listed}"
    );
}

#[test]
fn a_child_session_that_errs_fails_the_run_and_publishes_nothing() {
    // The plugin's own historian runs are no-ops here: only the test's run.
    // No model is configured, only the answer's cap.
    let dir = tempfile::tempdir().unwrap();
    let Some(oc) = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            mc_config: Some(r#"{"historian": {"max_output_tokens": 2000}}"#.into()),
            historian_bin: Some("true".into()),
            ..Options::default()
        },
    ) else {
        return;
    };
    let session = twelve_long_messages(&oc);
    let run = || {
        let out = oc.mc(
            "mc-historian",
            &["run", "--session", &session, "--opencode-url", &oc.url],
            b"",
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        (
            out.status.code(),
            report,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The provider rejects the historian's request: OpenCode's child session
    // ends with an APIError, which is the run's reason.
    oc.provider.push_historian(Reply::Error {
        status: 400,
        body: json!({"type": "error", "error": {"type": "invalid_request_error",
                     "message": "this model does not take that request"}}),
    });
    let (code, report, stderr) = run();
    assert_eq!(code, Some(1), "{report} {stderr}");
    assert_eq!(report["status"], "failed");
    assert_eq!(report["error_class"], "provider_status", "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("this model does not take that request"),
        "{report}"
    );
    assert_eq!(report["compartments"], json!([]));
    assert_eq!(oc.get(&format!("/session/{session}/children")), json!([]));
    // The next run folds.
    let (code, report, stderr) = run();
    assert_eq!(code, Some(0), "{report} {stderr}");
    assert_eq!(report["status"], "published");
    assert_eq!(report["model"], "opencode/mock/mock-sonnet");
    assert_eq!(report["model_source"], "harness_default");
    assert!(report["tokens"]["input"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(oc.get(&format!("/session/{session}/children")), json!([]));
    // The plugin held the answer to historian.max_output_tokens (the model
    // would allow 10 000).
    for request in oc.provider.historian_requests() {
        assert_eq!(request.body["max_tokens"], 2000);
    }
}

/// Provider requests as a cache keys them, with what differs between two
/// OpenCode servers made equal: their temp folder and the fake provider's
/// tool call ids (numbered by arrival, title calls included).
fn comparable(oc: &OpenCode) -> Vec<String> {
    let dir = oc.dir.display().to_string();
    oc.provider
        .agent_requests()
        .iter()
        .map(|request| {
            let key = cache_key(request).concat().replace(&dir, "<dir>");
            let mut out = String::with_capacity(key.len());
            let mut rest = key.as_str();
            while let Some(at) = rest.find("toolu_fake_") {
                out.push_str(&rest[..at]);
                out.push_str("toolu_fake_#");
                rest = rest[at + "toolu_fake_".len()..]
                    .trim_start_matches(|c: char| c.is_ascii_digit());
            }
            out.push_str(rest);
            out
        })
        .collect()
}

/// One scripted session through OpenCode with mc, resident (`serve`) or
/// with every call a one-shot process (`MC_TRANSFORM_SERVE=0`): reads,
/// a ctx_reduce, a turn at 70 % that applies it, turns that defer. Returns
/// the comparable requests and the wrapper's modes log.
fn scripted_session(resident: bool) -> Option<(Vec<String>, String)> {
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, _calls) = logging_wrapper(dir.path(), "mc-transform");
    let env = if resident {
        Vec::new()
    } else {
        vec![("MC_TRANSFORM_SERVE".to_string(), "0".to_string())]
    };
    let oc = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            transform_bin: Some(wrapper),
            // Few tags: let the reduce apply at the busting turn.
            mc_config: Some(r#"{"transform": {"protected_tags": 2}}"#.into()),
            env,
            ..Options::default()
        },
    )?;
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    for turn in 0..6 {
        if turn == 3 {
            oc.provider.push(
                Reply::Tool {
                    name: "ctx_reduce".into(),
                    input: json!({"drop": "2"}),
                },
                None,
            );
        }
        if turn == 4 {
            oc.provider.set_usage(usage_at(70));
        }
        if turn == 5 {
            oc.provider.set_usage(usage_at(30));
        }
        oc.provider.push(
            Reply::Tool {
                name: "read".into(),
                input: json!({"filePath": "src/lib.rs"}),
            },
            None,
        );
        oc.prompt(&session, &format!("turn {turn}: read the code again"));
    }
    let modes = std::fs::read_to_string(modes_log(dir.path(), "mc-transform")).unwrap();
    Some((comparable(&oc), modes))
}

#[test]
fn the_resident_process_takes_every_call_and_the_provider_sees_the_one_shot_bytes() {
    let Some((resident, modes)) = scripted_session(true) else {
        return;
    };
    let Some((one_shot, one_shot_modes)) = scripted_session(false) else {
        return;
    };
    assert_eq!(resident.len(), one_shot.len());
    for (i, (a, b)) in resident.iter().zip(&one_shot).enumerate() {
        assert!(a == b, "request {i} differs between serve and one-shot");
    }
    // The tags and the applied drop are there: this is mc's output.
    let last = resident.last().unwrap();
    assert!(
        last.contains("§1§ turn 0"),
        "{}",
        &last[..last.len().min(400)]
    );
    assert!(last.contains("[dropped §2§]"), "the reduce was applied");
    // One resident process took every pass (whole once, then deltas), the
    // reduce and system renders; without it, every call was a process.
    let lines: Vec<&str> = modes.lines().collect();
    let count = |line: &str| lines.iter().filter(|l| **l == line).count();
    assert_eq!(count("serve-start"), 1, "{modes}");
    assert_eq!(count("oneshot pass"), 0, "{modes}");
    assert_eq!(count("resident pass whole"), 1, "{modes}");
    assert_eq!(count("resident pass delta"), resident.len() - 1, "{modes}");
    assert_eq!(count("resident reduce"), 1, "{modes}");
    assert!(count("resident system") >= 1, "{modes}");
    assert!(
        one_shot_modes.lines().all(|l| l.starts_with("oneshot ")),
        "{one_shot_modes}"
    );
    assert_eq!(
        one_shot_modes
            .lines()
            .filter(|l| *l == "oneshot pass")
            .count(),
        one_shot.len()
    );
}

/// OpenCode with mc whose mc-transform is a [`logging_wrapper`], and a new
/// session at 20 % usage.
fn through_a_logging_wrapper() -> Option<(OpenCode, tempfile::TempDir, String)> {
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, _calls) = logging_wrapper(dir.path(), "mc-transform");
    let oc = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: true,
            transform_bin: Some(wrapper),
            ..Options::default()
        },
    )?;
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    Some((oc, dir, session))
}

#[test]
fn a_resident_answer_later_than_the_blocking_wait_still_reaches_the_call() {
    let Some((oc, dir, session)) = through_a_logging_wrapper() else {
        return;
    };
    oc.prompt(&session, "turn 0");
    oc.prompt(&session, "turn 1");
    // The next pass is answered after the plugin stopped blocking for it: the
    // call waits on without blocking and goes out with mc's answer.
    std::fs::write(slow_flag(dir.path(), "mc-transform"), "").unwrap();
    oc.prompt(&session, "turn 2: a slow answer");
    oc.prompt(&session, "turn 3");
    let texts: Vec<String> = oc.provider.agent_requests().iter().map(all_text).collect();
    assert_eq!(texts.len(), 4, "one request per turn");
    for (i, text) in texts.iter().enumerate().skip(1) {
        assert!(text.contains("<session-history>"), "request {i}: {text}");
        assert!(text.contains("§1§ turn 0"), "request {i}: {text}");
    }
    let modes = std::fs::read_to_string(modes_log(dir.path(), "mc-transform")).unwrap();
    let lines: Vec<&str> = modes.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| **l == "resident pass slow").count(),
        1,
        "{modes}"
    );
    assert_eq!(
        lines.iter().filter(|l| **l == "serve-start").count(),
        1,
        "{modes}"
    );
    assert!(!modes.contains("oneshot pass"), "{modes}");
    // The slow answer kept the session's baseline: the next call is a delta.
    let passes: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("resident pass"))
        .collect();
    assert_eq!(passes.last(), Some(&&"resident pass delta"), "{modes}");
}

#[test]
fn a_resident_process_that_dies_mid_call_leaves_that_call_untouched_and_the_next_restarts_it() {
    let Some((oc, dir, session)) = through_a_logging_wrapper() else {
        return;
    };
    for turn in 0..3 {
        oc.prompt(&session, &format!("turn {turn}"));
    }
    // The resident process dies at the next pass, before answering.
    std::fs::write(die_flag(dir.path(), "mc-transform"), "").unwrap();
    oc.prompt(&session, "turn 3: the process dies");
    // Past the first back-off (1 s): the next call starts a new process.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    oc.prompt(&session, "turn 4: a new process");
    oc.prompt(&session, "turn 5");
    let requests = oc.provider.agent_requests();
    let texts: Vec<String> = requests.iter().map(all_text).collect();
    let n = texts.len();
    assert_eq!(n, 6, "one request per turn");
    // The call in flight went out as OpenCode built it: no head, no tags.
    assert!(!texts[3].contains("<session-history>"), "{}", texts[3]);
    assert!(!texts[3].contains('§'), "{}", texts[3]);
    assert!(texts[3].contains("turn 3: the process dies"));
    // Before and after, mc's output: the head and the tags.
    for i in [2, 4, 5] {
        assert!(texts[i].contains("<session-history>"), "request {i}");
        assert!(texts[i].contains("§1§ turn 0"), "request {i}");
    }
    let modes = std::fs::read_to_string(modes_log(dir.path(), "mc-transform")).unwrap();
    let lines: Vec<&str> = modes.lines().collect();
    let count = |line: &str| lines.iter().filter(|l| **l == line).count();
    assert_eq!(count("serve-start"), 2, "{modes}");
    assert_eq!(count("resident pass died"), 1, "{modes}");
    // The new process has no baseline: its first pass goes whole, then deltas.
    let after: Vec<&&str> = lines
        .iter()
        .skip_while(|l| **l != "resident pass died")
        .filter(|l| l.starts_with("resident pass"))
        .collect();
    assert_eq!(
        after,
        [
            &"resident pass died",
            &"resident pass whole",
            &"resident pass delta"
        ],
        "{modes}"
    );
}

/// Failure without regression, with the real OpenCode and the resident
/// process: a fault in the middle of a session (the database locked past
/// the hook's wait) costs neither the cache nor mc's reductions. The
/// request after the fault is the one before it, element for element, plus
/// its new tail; the dropped output stays dropped. Then mc takes over again.
#[test]
fn a_fault_mid_session_keeps_mcs_shape_and_the_cached_prefix() {
    let Some((oc, _dir)) = with_mc(Some(r#"{"transform": {"protected_tags": 2}}"#)) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    let tag = read_then_drop(&oc, &session);
    oc.provider.set_usage(usage_at(30));
    for turn in 0..3 {
        oc.prompt(&session, &format!("keep going, step {turn}"));
    }
    let placeholder = format!("[dropped §{tag}§]");
    let before = oc.provider.agent_requests().last().unwrap().clone();
    assert!(tool_results(&before).iter().any(|(_, t)| t == &placeholder));

    // The fault: another process holds the database past the hook's wait.
    let holder = mc_tests::env::lock_database_with(std::process::Command::new("python3"), &oc.db);
    oc.prompt(&session, "one step while mc is stuck");
    let after = oc.provider.agent_requests().last().unwrap().clone();
    drop(holder);

    let (was, now) = (cache_key(&before), cache_key(&after));
    assert!(now.len() > was.len(), "the new tail arrived");
    for (i, (a, b)) in was.iter().zip(&now).enumerate() {
        assert_eq!(
            a, b,
            "element {i} of the cached prefix changed at the fault"
        );
    }
    let bytes = |key: &[String]| key.iter().map(String::len).sum::<usize>();
    assert!(bytes(&now) <= bytes(&was) + bytes(&now[was.len()..]));
    assert!(tool_results(&after).iter().any(|(_, t)| t == &placeholder));
    assert!(
        !all_text(&after).contains("pub fn answer"),
        "the dropped output did not come back"
    );
    assert!(all_text(&after).contains("one step while mc is stuck"));

    // The lock gone, mc's pass runs again: the new prompt is tagged.
    oc.prompt(&session, "and now mc is back");
    let back = all_text(oc.provider.agent_requests().last().unwrap());
    assert!(back.contains("§") && back.contains("and now mc is back"));
    assert!(
        regex_lite_tagged(&back, "and now mc is back"),
        "the prompt after the fault is tagged again"
    );
}

/// Whether `text` holds `§N§ ` right before `needle`.
fn regex_lite_tagged(text: &str, needle: &str) -> bool {
    text.find(needle)
        .is_some_and(|at| text[..at].ends_with("§ "))
}

/// Two turns of `session`: the agent reads `src/lib.rs`, then drops that
/// output with ctx_reduce, and the answer reports usage over the threshold
/// (the next pass applies the drop). Returns the output's tag.
fn read_then_drop(oc: &OpenCode, session: &str) -> u64 {
    oc.provider.push(
        Reply::Tool {
            name: "read".into(),
            input: json!({"filePath": "src/lib.rs"}),
        },
        None,
    );
    oc.prompt(session, "read the library");
    let (_, output) = tool_results(oc.provider.agent_requests().last().unwrap())
        .pop()
        .expect("the read result reached the provider");
    let tag = leading_tag(&output).expect("the read output is tagged");
    oc.provider.push(
        Reply::Tool {
            name: "ctx_reduce".into(),
            input: json!({"drop": tag.to_string()}),
        },
        None,
    );
    oc.provider
        .push(Reply::Text("dropped".into()), Some(usage_at(70)));
    oc.prompt(session, "drop that output");
    tag
}

/// The user's /mc-wrapup in OpenCode: the plugin adds the command to
/// OpenCode's list, runs mc-historian wrapup on the session when it is
/// invoked, and the prompt the command sends tells the agent what it did.
#[test]
fn the_mc_wrapup_command_folds_the_session_and_says_so() {
    let Some((oc, _dir, session)) = reading_a_big_file(60, "") else {
        return;
    };
    let commands = oc.get("/command").to_string();
    assert!(
        commands.contains("mc-wrapup") && commands.contains("mc-recomp"),
        "{commands}"
    );
    oc.provider.push(Reply::Text("noted".into()), None);
    oc.post(
        &format!("/session/{session}/command"),
        json!({"command": "mc-wrapup", "arguments": "2"}),
    );
    let request = oc.provider.agent_requests().last().unwrap().clone();
    let text = all_text(&request);
    assert!(
        text.contains("mc wrap-up: ") && text.contains("compartments through message"),
        "{}",
        &text[text.len().saturating_sub(600)..]
    );
    let store = mc_base::store::Store::open(&oc.db, &Default::default()).unwrap();
    let covered: i64 = store
        .conn()
        .query_row(
            "SELECT coalesce(max(end_ordinal), 0) FROM compartments",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        covered >= 6,
        "four turns of a read each, all but two messages: {covered}"
    );
}

#[test]
fn an_edited_file_becomes_a_marker_and_a_dropped_todo_list_comes_back_on_the_wire() {
    let Some((oc, _dir)) = with_mc(Some(
        r#"{"transform": {"protected_tags": 2, "smart_drops": true}}"#,
    )) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    let notes = oc.project.join("notes.md");
    let path = notes.to_str().unwrap().to_string();
    let body = format!(
        "# Notes\n{}",
        "- an old line of the notes file\n".repeat(30)
    );
    let tool = |name: &str, input: serde_json::Value| Reply::Tool {
        name: name.into(),
        input,
    };
    // The agent writes the file and keeps a todo list, then edits the file twice.
    oc.provider.push(
        tool("write", json!({"filePath": path, "content": body})),
        None,
    );
    oc.provider.push(
        tool(
            "todowrite",
            json!({"todos": [
                {"content": "write the notes", "status": "completed", "priority": "high"},
                {"content": "edit the notes twice", "status": "in_progress", "priority": "high"}]}),
        ),
        None,
    );
    oc.prompt(&session, "write the notes and plan the work");
    oc.provider
        .push(tool("read", json!({"filePath": path})), None);
    oc.provider.push(
        tool(
            "edit",
            json!({"filePath": path, "oldString": "# Notes\n- an old line", "newString": "# Notes\n- a new line"}),
        ),
        None,
    );
    oc.prompt(&session, "edit the notes");
    oc.provider.push(
        tool(
            "edit",
            json!({"filePath": path, "oldString": "# Notes\n", "newString": "# Notes, edited twice\n"}),
        ),
        None,
    );
    oc.prompt(&session, "edit them again");
    assert!(
        std::fs::read_to_string(&notes)
            .unwrap()
            .starts_with("# Notes, edited twice\n- a new line"),
        "OpenCode ran both edits"
    );
    // The agent drops its todo list's output; the answer is over the threshold.
    let (_, listed) = tool_results(oc.provider.agent_requests().last().unwrap())
        .into_iter()
        .find(|(_, t)| t.contains("edit the notes twice"))
        .expect("the todo list reached the provider");
    let tag = leading_tag(&listed).expect("the todo output is tagged");
    oc.provider
        .push(tool("ctx_reduce", json!({"drop": tag.to_string()})), None);
    oc.provider
        .push(Reply::Text("dropped it".into()), Some(usage_at(70)));
    oc.prompt(&session, "drop the todo output");
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "continue");
    oc.prompt(&session, "and once more");

    let requests = oc.provider.agent_requests();
    let synthetic = |r: &mc_tests::fake_provider::Recorded| {
        r.tool_uses()
            .into_iter()
            .find(|(id, _, _)| id.starts_with("mc_synthetic_todo_"))
    };
    let bust = requests
        .iter()
        .position(|r| synthetic(r).is_some())
        .expect("a busting request carries the synthetic todo call");
    let request = &requests[bust];
    // The todo list, back as a call and its result.
    let (id, name, input) = synthetic(request).unwrap();
    assert_eq!(name, "todowrite");
    assert_eq!(input["todos"][1]["content"], "edit the notes twice");
    let results = tool_results(request);
    assert!(
        results
            .iter()
            .any(|(call, text)| call == &id && text.contains("edit the notes twice")),
        "{results:?}"
    );
    // The write and the first edit are markers: path kept, a region hint,
    // the placeholder as the result; the newest edit is whole.
    let edits: Vec<(String, String, serde_json::Value)> = request
        .tool_uses()
        .into_iter()
        .filter(|(_, name, _)| name == "write" || name == "edit")
        .collect();
    assert_eq!(edits.len(), 3, "{edits:?}");
    let result_of = |id: &str| {
        results
            .iter()
            .find(|(call, _)| call == id)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    assert_eq!(edits[0].2["filePath"], json!(path));
    assert_eq!(
        edits[0].2["content"],
        json!(format!("{}…", &body[..40])),
        "the first 40 characters of what it wrote"
    );
    assert!(
        result_of(&edits[0].0).starts_with("[dropped §"),
        "{}",
        result_of(&edits[0].0)
    );
    assert_eq!(edits[1].2["filePath"], json!(path));
    assert!(result_of(&edits[1].0).starts_with("[dropped §"));
    assert_eq!(edits[2].2["newString"], "# Notes, edited twice\n");
    assert!(!result_of(&edits[2].0).starts_with("[dropped"));
    // The next requests defer: the same bytes again, the todo call included.
    assert!(bust + 1 < requests.len(), "a request after the bust");
    for pair in requests[bust..].windows(2) {
        let (before, after) = (cache_key(&pair[0]), cache_key(&pair[1]));
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert_eq!(a, b, "element {i} changed after the busting request");
        }
    }
}

/// The user text blocks of `request` that contain `prompt`.
fn prompt_blocks(request: &mc_tests::fake_provider::Recorded, prompt: &str) -> Vec<String> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| b["text"].as_str().map(str::to_string))
        .filter(|t| t.contains(prompt))
        .collect()
}

#[test]
fn a_prompt_that_matches_a_memory_gets_a_recall_hint_and_the_next_request_replays_it() {
    let Some((oc, _dir)) = with_mc(Some(r#"{"transform": {"recall_hints": true}}"#)) else {
        return;
    };
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    oc.provider.push(Reply::Text("hello".into()), None);
    oc.prompt(&session, "hi");
    // A memory written after the head was built: the head does not show it.
    let fact = "The staging database listens on port 5433, not the default 5432.";
    let project = oc.dir.join("project");
    let wrote = oc.mc(
        "mc-search",
        &[
            "memory",
            "write",
            "--category",
            "CONFIG_VALUES",
            "--content",
            fact,
            "--project-dir",
            project.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        wrote.status.success(),
        "{}",
        String::from_utf8_lossy(&wrote.stderr)
    );

    // A turn of two requests: a read, then the answer.
    oc.provider.push(
        Reply::Tool {
            name: "read".into(),
            input: json!({"filePath": "src/lib.rs"}),
        },
        None,
    );
    oc.provider.push(Reply::Text("It is 5433.".into()), None);
    let before = oc.provider.agent_requests().len();
    let prompt = "which port does the staging database listen on?";
    oc.prompt(&session, prompt);
    let turn: Vec<_> = oc.provider.agent_requests()[before..].to_vec();
    assert_eq!(turn.len(), 2, "the read, then the answer");
    let first = prompt_blocks(&turn[0], prompt);
    assert_eq!(first.len(), 1, "{first:?}");
    let shown = &first[0];
    let hint = shown
        .find("\n\n<ctx-search-hint>\n")
        .map(|at| &shown[at..])
        .unwrap_or_else(|| panic!("the hint rides on the prompt: {shown:?}"));
    assert!(hint.ends_with("</ctx-search-hint>"), "{hint:?}");
    assert!(
        hint.contains("- memory #1: The staging database listens on port 5433"),
        "{hint:?}"
    );
    assert!(hint.len() <= 400, "{} bytes", hint.len());
    // The next request of the turn carries the same bytes (a defer pass replays it).
    assert_eq!(prompt_blocks(&turn[1], prompt), first);
    // Nowhere else: the earlier prompt is untouched.
    assert!(
        !prompt_blocks(&turn[1], "hi")
            .iter()
            .any(|t| t.contains("ctx-search-hint") && !t.contains(prompt))
    );
}
