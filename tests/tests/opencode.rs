//! End to end against the real `opencode` binary (npm `opencode-ai`, pinned in
//! `tests/e2e/package.json`; `scripts/test` installs it): OpenCode runs with
//! mc's plugin and talks to a fake Anthropic provider of ours on 127.0.0.1;
//! the tests assert on the request bytes the provider receives.

use mc_tests::fake_provider::Reply;
use mc_tests::opencode::*;
use serde_json::json;

/// OpenCode with mc's plugin, in a temp folder that lives as long as the test.
fn with_mc(mc_config: Option<&str>) -> (OpenCode, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ctx.db");
    let oc = OpenCode::start(
        dir.path(),
        Options {
            db: Some(db),
            with_plugin: true,
            mc_config: mc_config.map(str::to_string),
            timing_log: None,
        },
    );
    (oc, dir)
}

#[test]
fn tags_reach_the_provider_and_turns_below_the_threshold_keep_the_prefix() {
    let (oc, _dir) = with_mc(None);
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
    let oc = OpenCode::start(
        dir.path(),
        Options {
            db: None,
            with_plugin: true,
            mc_config: None,
            timing_log: None,
        },
    );
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
}

#[test]
fn ctx_reduce_then_a_busting_turn_drops_the_output_and_later_requests_keep_it() {
    let (oc, _dir) = with_mc(Some(r#"{"transform": {"protected_tags": 2}}"#));
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
