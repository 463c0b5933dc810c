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
