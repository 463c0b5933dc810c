//! Pass-level tests of smart drops, dropped calls' arguments and the todo
//! list: what the model sees after a busting pass, and the same bytes on
//! the defer passes after it.

use serde_json::{Value, json};

use mc_base::config::TransformConfig;
use mc_base::store::Store;

use super::report::{Decision, PassOutput};
use super::run_pass;
use super::tests::config;
use super::tests_head::snapshot;
use crate::testkit::*;

fn smart() -> TransformConfig {
    TransformConfig {
        smart_drops: true,
        tool_reclaim: false,
        ..config()
    }
}

fn run(
    store: &mut Store,
    messages: &[Value],
    percent: u64,
    config: &TransformConfig,
) -> PassOutput {
    let now = warm_now(messages);
    run_pass(store, envelope(messages, percent, now), config, now).unwrap()
}

/// The tool part of call `call` in the output, if it is still there.
fn call(out: &PassOutput, call: &str) -> Option<Value> {
    out.messages
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().iter())
        .find(|p| p["callID"] == call)
        .cloned()
}

fn output(part: &Value) -> &str {
    part["state"]["output"].as_str().unwrap_or_default()
}

#[test]
fn superseded_edits_become_markers_and_older_todo_lists_go_then_replay() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = editing_session(12);
    run(&mut store, &messages, 30, &smart());
    let out = run(&mut store, &messages, 70, &smart());
    assert_eq!(out.pass.decision, Decision::Execute);
    // edit_0 (src/f0.rs) was edited again by edit_2: a marker.
    let marker = call(&out, "edit_0").expect("a marker keeps the call");
    let state = &marker["state"];
    assert!(
        state["output"].as_str().unwrap().starts_with("[dropped §"),
        "{marker}"
    );
    assert_eq!(state["input"]["filePath"], "src/f0.rs");
    assert_eq!(
        state["input"]["oldString"],
        json!("fn step_0() { old(); }\nfn step_0() { old…")
    );
    // The newest edit of each file, and anything in the protected window,
    // stays whole.
    for newest in ["edit_10", "edit_11"] {
        let part = call(&out, newest).unwrap();
        assert!(
            output(&part).ends_with("Edit applied successfully."),
            "{part}"
        );
    }
    // Older todo lists went (whole or as a skeleton); the newest stays.
    let todo_0 = call(&out, "todo_0");
    assert!(
        todo_0.is_none_or(|p| p["state"]["output"]
            .as_str()
            .unwrap()
            .starts_with("[dropped")),
        "the oldest todo list went"
    );
    let newest = call(&out, "todo_11").unwrap();
    assert!(
        newest["state"]["output"]
            .as_str()
            .unwrap()
            .contains("step 11")
    );
    // Reads are not control-plane: untouched by smart drops.
    assert!(
        call(&out, "read_0").unwrap()["state"]["output"]
            .as_str()
            .unwrap()
            .contains("fn example()")
    );

    snapshot!(
        "smart_drops_edit_marker_and_spent_todo",
        "What the model sees of a superseded edit (a marker) and of a spent \
         todo list (a skeleton keeping its real arguments) after a busting pass.",
        serde_json::to_string_pretty(&json!([
            marker,
            call(&out, "todo_7").expect("a recent spent list keeps its call")
        ]))
        .unwrap()
    );

    // Defer passes replay the same bytes, also as the input grows.
    let again = run(&mut store, &messages, 30, &smart());
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
    let mut grown = messages.clone();
    grown.push(user("msg_900_u", "one more", warm_now(&messages)));
    let later = run(&mut store, &grown, 30, &smart());
    assert_eq!(later.pass.decision, Decision::Defer);
    assert_eq!(
        bytes(&later.messages[..out.messages.len()]),
        bytes(&out.messages)
    );

    // Off (the default): the same session keeps every edit whole.
    let mut plain = Store::open_in_memory().unwrap();
    let off = TransformConfig {
        tool_reclaim: false,
        ..config()
    };
    run(&mut plain, &messages, 30, &off);
    let out = run(&mut plain, &messages, 70, &off);
    assert!(output(&call(&out, "edit_0").unwrap()).ends_with("Edit applied successfully."));
    assert!(out.pass.dropped.is_empty(), "{:?}", out.pass.dropped);
}
