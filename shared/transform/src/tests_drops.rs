//! Pass-level tests of smart drops, dropped calls' arguments and the todo
//! list: what the model sees after a busting pass, and the same bytes on
//! the defer passes after it.

use serde_json::{Value, json};

use mc_base::config::TransformConfig;
use mc_base::store::Store;

use super::report::{Decision, PassOutput};
use super::run_pass;
use super::tests::config;
use super::tests_head::{Fixture, snapshot};
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

    // Off: the same session keeps every edit whole.
    let mut plain = Store::open_in_memory().unwrap();
    let off = TransformConfig {
        smart_drops: false,
        tool_reclaim: false,
        ..config()
    };
    run(&mut plain, &messages, 30, &off);
    let out = run(&mut plain, &messages, 70, &off);
    assert!(output(&call(&out, "edit_0").unwrap()).ends_with("Edit applied successfully."));
    assert!(out.pass.dropped.is_empty(), "{:?}", out.pass.dropped);
}

/// An editing session of `turns` turns, then `quiet` turns without a todo
/// call (user, a read, an answer), so the last todo list leaves the
/// protected window.
pub(super) fn editing_then_quiet(turns: usize, quiet: usize) -> Vec<Value> {
    let mut messages = editing_session(turns);
    for q in 0..quiet {
        let at = T0 + (turns + q) as i64 * 60_000;
        messages.push(user(&format!("msg_{:03}_u", 100 + q), "go on", at));
        let body = format!("quiet {q}: fn example() {{}}\n").repeat(40);
        messages.push(tool_step(
            &format!("msg_{:03}_r", 100 + q),
            &format!("quiet_{q}"),
            "read",
            &body,
            at + 1000,
        ));
        messages.push(answer(&format!("msg_{:03}_z", 100 + q), "ok", at + 2000));
    }
    messages
}

/// The output's synthetic todo message (right after the head), if any.
fn synthetic_todo(out: &PassOutput) -> Option<Value> {
    let third = out.messages.get(2)?;
    (third["info"]["syntheticTodo"] == true).then(|| third.clone())
}

#[test]
fn a_dropped_todo_list_comes_back_after_the_head_and_replays_until_the_next_bust() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = editing_then_quiet(8, 7);
    let first = run(&mut store, &messages, 30, &config());
    assert!(synthetic_todo(&first).is_none(), "the list is on the wire");
    // The agent drops the newest todo call (tag 38, todo_7).
    let todo_tag = 7 * 5 + 3;
    assert_eq!(
        super::tests::queue(&mut store, &[todo_tag]).queued,
        vec![todo_tag]
    );
    let out = run(&mut store, &messages, 70, &config());
    assert_eq!(out.pass.dropped, vec![todo_tag]);
    let todo = synthetic_todo(&out).expect("re-injected after the head");
    let part = &todo["parts"][0];
    assert!(
        part["callID"]
            .as_str()
            .unwrap()
            .starts_with("mc_synthetic_todo_")
    );
    assert_eq!(part["tool"], "todowrite");
    assert_eq!(part["state"]["input"]["todos"][7]["content"], "step 7");
    assert_eq!(part["state"]["input"]["todos"][7]["status"], "in_progress");
    snapshot!(
        "todo_synthetic_call_after_a_drop",
        "The synthetic todowrite call and result a busting pass puts right after \
         the head when the newest todo call left the wire.",
        serde_json::to_string_pretty(&todo).unwrap()
    );
    // Defer passes replay it byte for byte, also once a new list arrives
    // (it waits for the next bust).
    let again = run(&mut store, &messages, 30, &config());
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
    let mut grown = messages.clone();
    let at = warm_now(&messages);
    grown.push(user("msg_200_u", "next", at));
    let list = json!({"todos": [{"content": "all new", "status": "pending", "priority": "high"}]});
    grown.push(call_step(
        "msg_200_t",
        "todo_new",
        "todowrite",
        &list,
        "[]",
        at + 1000,
    ));
    grown.push(answer("msg_200_z", "listed", at + 2000));
    let later = run(&mut store, &grown, 30, &config());
    assert_eq!(later.pass.decision, Decision::Defer);
    assert_eq!(
        bytes(&later.messages[..out.messages.len()]),
        bytes(&out.messages)
    );
    // The next bust sees the new list on the wire: the synthetic call goes.
    let bust = run(&mut store, &grown, 70, &config());
    assert_eq!(bust.pass.decision, Decision::Execute);
    assert!(
        synthetic_todo(&bust).is_none(),
        "{:?}",
        bust.messages.get(2)
    );
}

#[test]
fn with_the_todo_rule_off_no_list_comes_back_and_defer_passes_replay() {
    let off = TransformConfig {
        todo: false,
        ..config()
    };
    let todo_tag = 7 * 5 + 3;
    // Off from the start: the busting pass that drops the newest todo call
    // re-injects nothing, and the defer pass after it sends the same bytes.
    let mut store = Store::open_in_memory().unwrap();
    let messages = editing_then_quiet(8, 7);
    run(&mut store, &messages, 30, &off);
    super::tests::queue(&mut store, &[todo_tag]);
    let out = run(&mut store, &messages, 70, &off);
    assert_eq!(out.pass.dropped, vec![todo_tag]);
    assert!(
        !out.messages
            .iter()
            .any(|m| m["info"]["syntheticTodo"] == true),
        "{:?}",
        out.messages.get(2)
    );
    let again = run(&mut store, &messages, 30, &off);
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
    // Turned off after a list came back: defer passes still replay it byte
    // for byte; the next bust takes it away.
    let mut store = Store::open_in_memory().unwrap();
    run(&mut store, &messages, 30, &config());
    super::tests::queue(&mut store, &[todo_tag]);
    let on = run(&mut store, &messages, 70, &config());
    assert!(synthetic_todo(&on).is_some(), "re-injected while on");
    let defer = run(&mut store, &messages, 30, &off);
    assert_eq!(defer.pass.decision, Decision::Defer);
    assert_eq!(bytes(&defer.messages), bytes(&on.messages));
    let bust = run(&mut store, &messages, 70, &off);
    assert_eq!(bust.pass.decision, Decision::Execute);
    assert!(
        synthetic_todo(&bust).is_none(),
        "{:?}",
        bust.messages.get(2)
    );
}

#[test]
fn the_todo_list_survives_a_fold_of_the_messages_that_wrote_it() {
    let mut f = Fixture::new(0);
    f.messages = editing_then_quiet(8, 1);
    f.warm();
    // The historian folds everything up to the first quiet turn: the last
    // todo call is covered by the head and leaves the wire.
    let last_todo = f
        .messages
        .iter()
        .position(|m| m["info"]["id"] == "msg_007_t")
        .unwrap();
    f.publish(1, last_todo as i64 + 2, "Edits and todos");
    let out = f.hot();
    assert!(
        !out.messages.iter().any(|m| m["info"]["id"] == "msg_007_t"),
        "the todo call is covered"
    );
    let todo = synthetic_todo(&out).expect("the list comes back after the head");
    assert_eq!(
        todo["parts"][0]["state"]["input"]["todos"][7]["content"],
        "step 7"
    );
    let again = f.warm();
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
}

#[test]
fn the_newest_todo_list_survives_the_emergency_drop_and_relief() {
    // The newest todo call (todo_7, tag 38) is outside the protected window.
    let todo_tag = 7 * 5 + 3;
    for (percent, relief_drop) in [(96, false), (70, true)] {
        let mut store = Store::open_in_memory().unwrap();
        let config = TransformConfig {
            relief_drop,
            tool_reclaim: false,
            ..config()
        };
        let messages = editing_then_quiet(8, 7);
        run(&mut store, &messages, 30, &config);
        let out = run(&mut store, &messages, percent, &config);
        assert_eq!(out.pass.decision, Decision::Execute, "{:?}", out.pass);
        let reads = (0..8)
            .filter(|t| out.pass.dropped.contains(&(t * 5 + 4)))
            .count();
        assert!(reads > 0, "at {percent} %: the drop ran: {:?}", out.pass);
        assert!(
            !out.pass.dropped.contains(&todo_tag),
            "at {percent} %: {:?}",
            out.pass.dropped
        );
        let todo = call(&out, "todo_7").expect("the newest list stays on the wire");
        assert!(
            !output(&todo).starts_with("[dropped"),
            "at {percent} %: {todo}"
        );
        assert!(synthetic_todo(&out).is_none(), "nothing to re-inject");
    }
}
