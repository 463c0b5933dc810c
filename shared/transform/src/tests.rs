//! Pass-level tests: tagging, scheduling, drops, replay, one per invariant of
//! ARCHITECTURE.md that can be checked in-process. Fixed clock, in-memory store.

use serde_json::{Value, json};

use mc_base::config::{CacheTtl, TransformConfig};
use mc_base::store::Store;

use super::reduce::{ReduceRequest, reduce};
use super::report::{Bust, Decision, PassOutput};
use super::{run_pass, status};
use mc_base::domain::envelope::Envelope;

pub(crate) use crate::testkit::*;

/// Defaults, less the relief drop: these tests pin down which tags one
/// mechanism drops, and relief would add its own (it has its own test).
pub(super) fn config() -> TransformConfig {
    TransformConfig {
        relief_drop: false,
        ..TransformConfig::default()
    }
}

pub(super) fn pass(store: &mut Store, messages: &[Value], percent: u64, now_ms: i64) -> PassOutput {
    run_pass(
        store,
        envelope(messages, percent, now_ms),
        &config(),
        now_ms,
    )
    .unwrap()
}

pub(super) fn defer(store: &mut Store, messages: &[Value]) -> PassOutput {
    let out = pass(store, messages, 30, warm_now(messages));
    assert_eq!(out.pass.decision, Decision::Defer, "{:?}", out.pass);
    out
}

/// The first pass of a session: it renders the head for the first time.
pub(super) fn start(store: &mut Store, messages: &[Value]) -> PassOutput {
    let out = pass(store, messages, 30, warm_now(messages));
    assert_eq!(
        out.pass.materialize_reason,
        Some("first_render"),
        "{:?}",
        out.pass
    );
    assert_eq!(out.pass.bust, Bust::Hard);
    out
}

pub(super) fn execute(store: &mut Store, messages: &[Value]) -> PassOutput {
    let out = pass(store, messages, 70, warm_now(messages));
    assert_eq!(out.pass.decision, Decision::Execute, "{:?}", out.pass);
    out
}

pub(super) fn queue(store: &mut Store, drop: &[i64]) -> super::ReduceResult {
    let request = ReduceRequest {
        harness: "opencode".into(),
        session_id: SESSION.into(),
        drop: drop.to_vec(),
    };
    reduce(store, &request, &config(), T0).unwrap()
}

/// Every text and tool output of the output, flattened, for assertions.
pub(super) fn texts(out: &PassOutput) -> Vec<String> {
    body(out)
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().iter())
        .filter(|p| p["type"] != "reasoning")
        .cloned()
        .collect::<Vec<_>>()
        .iter()
        .filter_map(|p| p["text"].as_str().or(p["state"]["output"].as_str()))
        .map(str::to_string)
        .collect()
}

pub(super) fn tool_parts(out: &PassOutput, call: &str) -> Vec<Value> {
    out.messages
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().iter())
        .filter(|p| p["callID"] == call)
        .cloned()
        .collect()
}

#[test]
fn tags_text_and_tool_outputs_with_stable_prefixes() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(2);
    let first = start(&mut store, &messages);
    let t = texts(&first);
    assert!(t[0].starts_with("§1§ please do step 0"), "{t:?}");
    assert!(
        t[1].starts_with("§2§ line 0.0"),
        "tool output is prefixed: {}",
        &t[1][..20]
    );
    assert!(t.iter().all(|s| s.starts_with('§')), "{t:?}");
    // Numbers are stable: a second pass over the grown session keeps them.
    let mut grown = messages.clone();
    grown.push(user("msg_new", "more", T0 + 10_000_000));
    let second = pass(&mut store, &grown, 30, T0 + 10_000_100);
    assert_eq!(texts(&second)[..t.len()], t[..]);
    // After a long gap the user message carries a temporal marker after its tag.
    assert!(
        texts(&second)
            .last()
            .unwrap()
            .starts_with("§9§ <!-- +2h 45m -->\nmore"),
        "{:?}",
        texts(&second).last()
    );
    assert_eq!(second.pass.tags, 9);
}

#[test]
fn reused_call_ids_get_distinct_tags() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = vec![
        user("msg_1", "go", T0),
        tool_step("msg_2", "read:0", "read", "first output", T0 + 10),
        user("msg_3", "again", T0 + 20),
        tool_step("msg_4", "read:0", "read", "second output", T0 + 30),
    ];
    let out = start(&mut store, &messages);
    let outputs: Vec<String> = tool_parts(&out, "read:0")
        .iter()
        .map(|p| p["state"]["output"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outputs, ["§2§ first output", "§4§ second output"]);
}

#[test]
fn every_message_gets_a_stable_ordinal() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(1);
    start(&mut store, &messages);
    let mut grown = messages.clone();
    grown.push(user("msg_late", "x", T0 + 100_000));
    // Passing only the tail later (the harness compacted the head) keeps ordinals.
    defer(&mut store, &grown[2..]);
    let ordinals: Vec<(String, i64)> = store
        .conn()
        .prepare("SELECT message_id, ordinal FROM messages ORDER BY ordinal")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let ids: Vec<&str> = ordinals.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "msg_000_u",
            "msg_000_s0",
            "msg_000_s1",
            "msg_000_z",
            "msg_late"
        ]
    );
    assert_eq!(
        ordinals.iter().map(|(_, o)| *o).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
}

#[test]
fn no_prefixes_when_ctx_reduce_is_not_callable_and_the_verdict_is_frozen() {
    let mut store = Store::open_in_memory().unwrap();
    let mut messages = session(1);
    messages[0]["info"]["tools"] = json!({"ctx_reduce": false});
    let out = start(&mut store, &messages);
    assert_eq!(texts(&out)[0], "please do step 0");
    // A later input whose first user message allows it does not flip the verdict.
    messages[0]["info"]["tools"] = json!({});
    let out = defer(&mut store, &messages);
    assert_eq!(texts(&out)[0], "please do step 0");
}

#[test]
fn defer_pass_is_byte_identical_and_grows_only_at_the_tail() {
    // Invariant 1.
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(3);
    let a = start(&mut store, &messages);
    let b = defer(&mut store, &messages);
    assert_eq!(bytes(&a.messages), bytes(&b.messages));
    let mut grown = messages.clone();
    grown.extend(session(4).split_off(messages.len()));
    let c = defer(&mut store, &grown);
    assert_eq!(
        bytes(&c.messages)[..a.messages.len()],
        bytes(&a.messages)[..]
    );
    assert_eq!(c.pass.bust, Bust::None);
}

#[test]
fn queued_drops_wait_for_a_busting_pass_then_replay_forever() {
    // Invariants 2 and 3.
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(12); // 12 turns × 4 tags = 48 tags
    let before = start(&mut store, &messages);
    let result = queue(&mut store, &[2, 3]);
    assert_eq!(result.queued, vec![2, 3]);
    // A defer pass changes nothing.
    let deferred = defer(&mut store, &messages);
    assert_eq!(bytes(&deferred.messages), bytes(&before.messages));
    assert!(deferred.pass.dropped.is_empty());
    // The execute pass applies them.
    let executed = execute(&mut store, &messages);
    assert_eq!(executed.pass.dropped, vec![2, 3]);
    assert_eq!(executed.pass.bust, Bust::Soft);
    // Tag 2 is an old tool call: gone entirely, call and result together (invariant 4),
    // and with it the step wrapper that held nothing else.
    assert!(tool_parts(&executed, "call_0_0").is_empty());
    assert!(
        !executed
            .messages
            .iter()
            .any(|m| m["info"]["id"] == "msg_000_s0")
    );
    // Later defer passes replay the same bytes, also with a grown tail.
    let replay = defer(&mut store, &messages);
    assert_eq!(bytes(&replay.messages), bytes(&executed.messages));
    let mut grown = messages.clone();
    grown.push(user("msg_tail", "next", warm_now(&messages)));
    let tail = pass(&mut store, &grown, 30, warm_now(&messages) + 10);
    assert_eq!(tail.pass.decision, Decision::Defer);
    assert_eq!(
        bytes(&tail.messages)[..executed.messages.len()],
        bytes(&executed.messages)[..]
    );
}

#[test]
fn recent_dropped_tool_calls_keep_a_skeleton() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(12);
    start(&mut store, &messages);
    // Tag 26 is a tool output within the newest 20 tool tags (from 10 on) but
    // outside the newest 20 tags overall (from 29 on).
    let tag = 26;
    let queued = queue(&mut store, &[tag]);
    assert_eq!(queued.queued, vec![tag], "{queued:?}");
    let out = execute(&mut store, &messages);
    assert_eq!(out.pass.dropped, vec![tag]);
    let skeleton = out
        .messages
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().iter())
        .find(|p| p["state"]["output"] == format!("[dropped §{tag}§]"))
        .expect("the call stays with the placeholder as its output");
    assert_eq!(skeleton["type"], "tool");
    assert!(
        skeleton["state"]["input"]["filePath"].is_string(),
        "short input kept as is"
    );
}

#[test]
fn protected_tags_are_never_dropped_until_they_leave_the_window() {
    // Invariant 5.
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(6); // 24 tags; the newest 20 are 5..=24
    start(&mut store, &messages);
    let result = queue(&mut store, &[4, 5, 24]);
    assert_eq!((result.queued, result.protected), (vec![4], vec![5, 24]));
    let out = execute(&mut store, &messages);
    assert_eq!(out.pass.dropped, vec![4]);
    assert!(texts(&out).iter().any(|t| t.starts_with("§5§ ")));
    // Eight more tags push 5 out of the window; the queued drop then applies.
    let mut grown = messages.clone();
    grown.extend(session(8).split_off(messages.len()));
    let now = warm_now(&grown);
    let later = pass(&mut store, &grown, 70, now);
    assert!(later.pass.dropped.contains(&5), "{:?}", later.pass);
    assert!(!later.pass.dropped.contains(&24));
    let later_status = status(&store, "opencode", SESSION).unwrap().unwrap();
    assert_eq!(later_status.pending_drops, vec![24]);
}

#[test]
fn dropped_user_text_keeps_a_placeholder_shell() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(8);
    start(&mut store, &messages);
    queue(&mut store, &[1]);
    let out = execute(&mut store, &messages);
    assert_eq!(body(&out)[0]["info"]["id"], "msg_000_u");
    assert_eq!(body(&out)[0]["parts"][0]["text"], "[dropped §1§]");
}

#[test]
fn open_tool_calls_are_never_dropped() {
    let mut store = Store::open_in_memory().unwrap();
    let mut messages = session(8);
    start(&mut store, &messages);
    // The harness shows tag 2's call as still running (e.g. a retried step).
    let state = &mut messages[1]["parts"][2]["state"];
    state["status"] = json!("running");
    state.as_object_mut().unwrap().remove("output");
    queue(&mut store, &[2]);
    let out = execute(&mut store, &messages);
    assert!(out.pass.dropped.is_empty(), "{:?}", out.pass);
    assert_eq!(tool_parts(&out, "call_0_0").len(), 1);
    assert_eq!(
        status(&store, "opencode", SESSION)
            .unwrap()
            .unwrap()
            .pending_drops,
        vec![2]
    );
}

#[test]
fn age_reclaim_drops_old_tool_outputs_one_execute_later_and_keeps_tiny_ones() {
    let mut store = Store::open_in_memory().unwrap();
    let mut messages = session(10); // 40 tags
    // Make one old tool output tiny: it must survive.
    messages[5]["parts"][2]["state"]["output"] = json!("ok");
    let first = execute(&mut store, &messages);
    assert!(
        first.pass.dropped.is_empty(),
        "nothing is older than the watermark yet"
    );
    let mut grown = messages.clone();
    grown.push(user("msg_next", "continue", warm_now(&messages) + 1));
    let second = execute(&mut store, &grown);
    // Tool tags (2,3, 6,7, ...) up to the protected window (newest 20 tags: 22..=41).
    let expected: Vec<i64> = (0..5)
        .flat_map(|t| [4 * t + 2, 4 * t + 3])
        .filter(|&n| n != 6)
        .collect();
    assert_eq!(second.pass.dropped, expected);
    assert_eq!(
        tool_parts(&second, "call_1_0")[0]["state"]["output"],
        "§6§ ok"
    );
}

#[test]
fn heuristics_run_once_per_user_turn() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(10);
    execute(&mut store, &messages); // sets the watermark
    // Same turn: another execute does no heuristic cleanup.
    let again = execute(&mut store, &messages);
    assert!(again.pass.dropped.is_empty(), "{:?}", again.pass);
    // A new user turn: cleanup runs.
    let mut grown = messages.clone();
    grown.push(user("msg_next", "continue", warm_now(&messages) + 1));
    assert!(!execute(&mut store, &grown).pass.dropped.is_empty());
}

#[test]
fn reasoning_is_cleared_by_age_and_replayed() {
    let mut store = Store::open_in_memory().unwrap();
    let config = TransformConfig {
        clear_reasoning_age: 10,
        tool_reclaim: false,
        ..TransformConfig::default()
    };
    let messages = session(6); // 24 tags; cutoff 14
    let now = warm_now(&messages);
    let out = run_pass(&mut store, envelope(&messages, 70, now), &config, now).unwrap();
    let reasoning_left: Vec<&str> = out
        .messages
        .iter()
        .filter(|m| {
            m["parts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["type"] == "reasoning")
        })
        .map(|m| m["info"]["id"].as_str().unwrap())
        .collect();
    // Messages whose newest tag is ≤ 14 lost their reasoning; newer ones kept it.
    assert_eq!(
        reasoning_left,
        [
            "msg_003_s1",
            "msg_004_s0",
            "msg_004_s1",
            "msg_005_s0",
            "msg_005_s1"
        ]
    );
    assert_eq!(
        out.pass.bust,
        Bust::Hard,
        "the session's first pass also renders the head"
    );
    let replay = run_pass(&mut store, envelope(&messages, 30, now), &config, now).unwrap();
    assert_eq!(replay.pass.decision, Decision::Defer);
    assert_eq!(bytes(&replay.messages), bytes(&out.messages));
}

/// The ids of the output's messages that still carry reasoning.
fn with_reasoning(out: &PassOutput) -> Vec<String> {
    out.messages
        .iter()
        .filter(|m| {
            m["parts"]
                .as_array()
                .is_some_and(|parts| parts.iter().any(|p| p["type"] == "reasoning"))
        })
        .map(|m| m["info"]["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn reasoning_beyond_the_token_budget_is_cleared_and_replayed() {
    let mut store = Store::open_in_memory().unwrap();
    let config = TransformConfig {
        clear_reasoning_age: 100_000, // the age rule never reaches
        keep_reasoning_tokens: 1_600,
        tool_reclaim: false,
        ..config()
    };
    // Each tool step thinks for 500 tokens: the last turn's two steps (1,000)
    // and the step before them (1,500) fit the budget, older ones do not.
    let mut messages = session(6);
    for m in messages.iter_mut() {
        if m["parts"][1]["type"] == "reasoning" {
            m["parts"][1]["text"] = json!("t".repeat(2_000));
        }
    }
    let now = warm_now(&messages);
    let out = run_pass(&mut store, envelope(&messages, 70, now), &config, now).unwrap();
    assert_eq!(out.pass.decision, Decision::Execute);
    assert_eq!(
        with_reasoning(&out),
        ["msg_004_s1", "msg_005_s0", "msg_005_s1"]
    );
    let replay = run_pass(&mut store, envelope(&messages, 30, now), &config, now).unwrap();
    assert_eq!(replay.pass.decision, Decision::Defer);
    assert_eq!(bytes(&replay.messages), bytes(&out.messages));
    // With the default budget (10,000 tokens) all of it stays.
    let mut fresh = Store::open_in_memory().unwrap();
    let roomy = TransformConfig {
        keep_reasoning_tokens: TransformConfig::default().keep_reasoning_tokens,
        ..config
    };
    let out = run_pass(&mut fresh, envelope(&messages, 70, now), &roomy, now).unwrap();
    assert_eq!(with_reasoning(&out).len(), 12);
}

#[test]
fn mid_turn_execute_is_deferred_then_owed() {
    let mut store = Store::open_in_memory().unwrap();
    let mut messages = session(8);
    messages.pop(); // the turn ends on a tool step: mid-turn
    start(&mut store, &messages);
    queue(&mut store, &[2]);
    let out = pass(&mut store, &messages, 70, warm_now(&messages));
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Defer, "mid_turn")
    );
    assert!(out.pass.dropped.is_empty());
    assert!(
        status(&store, "opencode", SESSION)
            .unwrap()
            .unwrap()
            .execute_owed
    );
    // The turn ends: the owed execute runs even though usage fell back.
    let mut done = messages.clone();
    done.push(answer("msg_end", "finished", warm_now(&messages)));
    let out = pass(&mut store, &done, 40, warm_now(&done));
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Execute, "deferred_execute")
    );
    assert_eq!(out.pass.dropped, vec![2]);
}

#[test]
fn ttl_expiry_executes_and_the_next_pass_of_the_window_defers() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(8);
    start(&mut store, &messages);
    queue(&mut store, &[2]);
    let idle = warm_now(&messages) + 6 * 60_000;
    let out = pass(&mut store, &messages, 30, idle);
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Execute, "ttl_expired")
    );
    // The cache is cold: the queued drop applies, and the head is rebuilt for
    // free, which also runs the once-per-turn cleanup of old tool outputs.
    assert_eq!(out.pass.materialize_reason, Some("ttl_idle"));
    assert!(out.pass.dropped.contains(&2), "{:?}", out.pass.dropped);
    let next = pass(&mut store, &messages, 30, idle + 1000);
    assert_eq!(next.pass.decision, Decision::Defer);
}

#[test]
fn cache_ttl_never_does_not_execute_on_idle() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(2);
    let config = TransformConfig {
        cache_ttl: CacheTtl::Never,
        ..TransformConfig::default()
    };
    let warm = warm_now(&messages);
    run_pass(&mut store, envelope(&messages, 30, warm), &config, warm).unwrap();
    let idle = warm + 24 * 3_600_000;
    let out = run_pass(&mut store, envelope(&messages, 30, idle), &config, idle).unwrap();
    assert_eq!(out.pass.decision, Decision::Defer);
}

#[test]
fn a_model_change_executes() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(2);
    start(&mut store, &messages);
    let mut env = envelope(&messages, 30, warm_now(&messages));
    env.model.id = Some("other".into());
    let out = run_pass(&mut store, env, &config(), warm_now(&messages)).unwrap();
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Execute, "model_change")
    );
}

#[test]
fn unknown_fields_and_order_survive_the_pass() {
    let mut store = Store::open_in_memory().unwrap();
    let mut messages = session(1);
    messages[0]["zz_top"] = json!({"b": 1, "a": 2});
    messages[0]["info"]["custom"] = json!([3, 2, 1]);
    messages[0]["parts"][0]["future"] = json!("kept");
    let out = start(&mut store, &messages);
    let text = serde_json::to_string(&body(&out)[0]).unwrap();
    assert!(text.ends_with(r#","zz_top":{"b":1,"a":2}}"#), "{text}");
    assert!(text.contains(r#""custom":[3,2,1]"#));
    assert!(
        text.contains(r#""text":"§1§ please do step 0","future":"kept""#),
        "{text}"
    );
}

#[test]
fn messages_without_a_session_pass_through() {
    let mut store = Store::open_in_memory().unwrap();
    let env = Envelope::from_value(json!({"messages": [{"info": {"role": "user"}, "parts": []}]}))
        .unwrap();
    let out = run_pass(&mut store, env, &config(), T0).unwrap();
    assert_eq!(out.pass.decision, Decision::Passthrough);
    assert_eq!(
        out.messages,
        vec![json!({"info": {"role": "user"}, "parts": []})]
    );
}

#[test]
fn status_reports_counts_tokens_and_passes() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(8);
    start(&mut store, &messages);
    queue(&mut store, &[2, 30]);
    execute(&mut store, &messages);
    let report = status(&store, "opencode", SESSION).unwrap().unwrap();
    assert_eq!(
        (report.tags.total, report.tags.active, report.tags.dropped),
        (32, 31, 1)
    );
    // The first pass rendered the head (an execute), then the scheduled execute.
    assert_eq!((report.passes.defer, report.passes.execute), (0, 2));
    assert_eq!(report.pending_drops, vec![30]);
    assert_eq!(report.last_decision.as_deref(), Some("execute"));
    assert_eq!(
        report.last_bust.as_ref().map(|b| b.bust.as_str()),
        Some("soft")
    );
    assert!(report.tokens["tool"].dropped > 0 && report.tokens["tool"].active > 0);
    assert!(report.tokens["message"].active > 0);
    assert_eq!(report.usage_percent, 70.0);
}

#[test]
fn recount_replaces_estimates_with_exact_counts_once() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(2);
    start(&mut store, &messages);
    let before = status(&store, "opencode", SESSION).unwrap().unwrap();
    assert_eq!(before.exact_share, 0.0, "a pass only estimates");
    let result = super::recount::recount(&mut store, envelope(&messages, 30, T0)).unwrap();
    assert_eq!((result.recounted, result.exact, result.untagged), (8, 0, 0));
    let after = status(&store, "opencode", SESSION).unwrap().unwrap();
    assert_eq!(after.exact_share, 1.0);
    // The stored count of the first user text is now exactly the tokenizer's.
    let tokens: i64 = store
        .conn()
        .query_row("SELECT tokens FROM tags WHERE number = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        tokens,
        i64::from(mc_base::tokens::exact("please do step 0"))
    );
    // A second recount finds nothing left to do.
    let again = super::recount::recount(&mut store, envelope(&messages, 30, T0)).unwrap();
    assert_eq!((again.recounted, again.exact), (0, 8));
    // And a pass never touches the exact counts again.
    defer(&mut store, &messages);
    assert_eq!(
        status(&store, "opencode", SESSION).unwrap().unwrap().tokens,
        after.tokens
    );
}

#[test]
fn the_emergency_band_executes_mid_turn_and_warns() {
    let mut store = Store::open_in_memory().unwrap();
    let mut messages = session(12);
    messages.pop(); // mid-turn
    start(&mut store, &messages);
    queue(&mut store, &[2]);
    let out = pass(&mut store, &messages, 96, warm_now(&messages));
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Execute, "emergency")
    );
    // The queued drop, plus the tiered emergency drop of old tool outputs.
    assert!(
        out.pass.dropped.contains(&2) && out.pass.dropped.len() > 1,
        "{:?}",
        out.pass.dropped
    );
    assert!(
        out.pass.warnings.iter().any(|w| w.contains("emergency")),
        "{:?}",
        out.pass.warnings
    );
    let forced = pass(&mut store, &messages, 86, warm_now(&messages));
    assert_eq!(
        (forced.pass.decision, forced.pass.reason),
        (Decision::Execute, "force_band")
    );
    assert!(forced.pass.warnings.is_empty());
}

#[test]
fn an_emergency_drop_that_would_give_back_under_2k_tokens_is_skipped() {
    let mut store = Store::open_in_memory().unwrap();
    // Twenty tool outputs of ~50 tokens each: all of them together are
    // about 1,000 tokens, under the minimum saving.
    let mut messages = session(10);
    for m in messages.iter_mut() {
        if m["parts"][2]["type"] == "tool" {
            m["parts"][2]["state"]["output"] = json!("short output line ".repeat(10));
        }
    }
    start(&mut store, &messages);
    let before = defer(&mut store, &messages);
    let out = pass(&mut store, &messages, 96, warm_now(&messages));
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Execute, "emergency")
    );
    assert!(out.pass.dropped.is_empty(), "{:?}", out.pass.dropped);
    assert_eq!(out.pass.bust, Bust::None, "nothing changed, nothing busted");
    assert_eq!(bytes(&out.messages), bytes(&before.messages));
}

#[test]
fn at_the_threshold_a_busting_pass_buys_headroom() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(20); // 80 tags, 40 tool outputs of ~400 tokens
    start(&mut store, &messages);
    let with_relief = TransformConfig::default();
    let now = warm_now(&messages);
    // 70 % of a 100k window while the tagged content is ~17k tokens: relief
    // reclaims every tool output outside the window it keeps.
    let out = run_pass(&mut store, envelope(&messages, 70, now), &with_relief, now).unwrap();
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Execute, "threshold")
    );
    let dropped = out.pass.dropped.clone();
    assert!(!dropped.is_empty(), "relief dropped nothing");
    // Only tool outputs, none of the newest eight (within 5 % of the ceiling).
    assert_eq!(dropped, relief_drops_of_session_20());
    // The same usage sample again drops nothing more (latched), and a pass
    // below the threshold defers.
    let again = run_pass(
        &mut store,
        envelope(&messages, 70, now + 10),
        &with_relief,
        now + 10,
    )
    .unwrap();
    assert!(again.pass.dropped.is_empty(), "{:?}", again.pass.dropped);
    let calm = run_pass(
        &mut store,
        envelope(&messages, 40, now + 20),
        &with_relief,
        now + 20,
    )
    .unwrap();
    assert_eq!(calm.pass.decision, Decision::Defer);
}

#[test]
fn new_render_rules_bust_once_and_say_so() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(6);
    start(&mut store, &messages);
    defer(&mut store, &messages);
    // The session was last rendered by a release with other render rules.
    store
        .conn()
        .execute(
            "UPDATE sessions SET render_version = ?1",
            [super::render::RENDER_VERSION - 1],
        )
        .unwrap();
    let upgraded = pass(&mut store, &messages, 30, warm_now(&messages));
    assert_eq!(
        upgraded.pass.decision,
        Decision::Execute,
        "{:?}",
        upgraded.pass
    );
    assert_eq!(upgraded.pass.reason, "render_version");
    assert_eq!(upgraded.pass.materialize_reason, Some("render_version"));
    assert_ne!(upgraded.pass.bust, Bust::None);
    // Once: the next pass defers and replays what the new rules rendered.
    let after = defer(&mut store, &messages);
    assert_eq!(bytes(&after.messages), bytes(&upgraded.messages));
    let status = status(&store, "opencode", SESSION).unwrap().unwrap();
    assert_eq!(status.render_version, super::render::RENDER_VERSION);
}

/// What the render rules touch, in one session: tag prefixes, placeholders,
/// full and skeleton drops (arguments cut at the cap), edit markers, cleared
/// reasoning, gap markers, caveman and the head. If this fingerprint moves, the bytes a provider
/// has cached would move under `bust: none`: bump `RENDER_VERSION` and pin
/// the new fingerprint with it.
#[test]
fn render_fingerprint_is_pinned_to_the_version() {
    use sha2::{Digest, Sha256};
    let mut store = Store::open_in_memory().unwrap();
    let config = TransformConfig {
        caveman: true,
        caveman_min_chars: 100,
        clear_reasoning_age: 10,
        smart_drops: true,
        ..config()
    };
    let mut messages = session(14);
    // Two edits of one file (the older becomes a marker), and a recent call
    // with arguments over the cap (its skeleton cuts them).
    for (index, text) in [(6, "old text of the first edit "), (10, "second edit ")] {
        messages[index]["parts"][2]["tool"] = json!("edit");
        messages[index]["parts"][2]["state"]["input"] =
            json!({"filePath": "src/same.rs", "oldString": text.repeat(4), "newString": "x"});
    }
    messages[17]["parts"][2]["state"]["input"]["content"] = json!("long argument ".repeat(200));
    // An old long prose answer for caveman, and a two-hour gap for a marker.
    messages[11]["parts"][1]["text"] =
        json!("The store keeps every tag in one table and the pass reads it once. ".repeat(8));
    messages.push(user(
        "msg_101_u",
        "back after lunch",
        T0 + 13 * 60_000 + 5_500 + 7_200_000,
    ));
    // With a system prompt: the guidance and the frozen date are rendered bytes too.
    let run = |store: &mut Store, messages: &[Value], percent: u64| {
        let now = warm_now(messages);
        let mut input = envelope(messages, percent, now);
        input.system = Some(json!(["Agent.\nToday's date: Mon Nov 30 2026"]));
        run_pass(store, input, &config, now).unwrap()
    };
    let mut digest = Sha256::new();
    let mut passes = Vec::new();
    passes.push(run(&mut store, &messages, 30));
    // A user message (placeholder), old tool calls (gone whole), a recent one (skeleton).
    queue(&mut store, &[1, 2, 3, 18]);
    passes.push(run(&mut store, &messages, 70));
    passes.push(run(&mut store, &messages, 30));
    for out in &passes {
        digest.update(serde_json::to_string(&out.messages).unwrap());
        digest.update(serde_json::to_string(&out.system).unwrap());
    }
    let fingerprint: String = digest
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let rendered = passes
        .iter()
        .map(|o| serde_json::to_string(&o.messages).unwrap())
        .collect::<String>();
    // The session exercises what the fingerprint claims to cover.
    for needle in [
        "[dropped §1§]",
        "[dropped §18§]",
        "bytes cut]",
        "[dropped §7§]",
        "old text of the first edit old text of t…",
        "§12§",
        "<!-- +2h -->",
        "<session-history>",
    ] {
        assert!(rendered.contains(needle), "the scenario lost {needle}");
    }
    let system = passes[0]
        .system
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(system.contains("## Context management (mc)"), "{system}");
    let last = serde_json::to_string(&passes[2].messages).unwrap();
    assert!(!last.contains("call_0_0"), "an old dropped call goes whole");
    assert!(
        !rendered.contains(
            "The store keeps every tag in one table and the pass reads it once. The store"
        ),
        "caveman rewrote the long answer"
    );
    assert_eq!(
        (super::render::RENDER_VERSION, fingerprint.as_str()),
        (
            3,
            "2576fb1ccefa0bacf2e494b2d857e2092ecd25814e77ebd2ec9843322d6a5f4c"
        ),
        "the rendered bytes changed: bump RENDER_VERSION and pin the new fingerprint"
    );
}

fn report_overflow(store: &mut Store, session: &str, error: Value) -> Value {
    let request = super::OverflowRequest::from_value(json!({
        "harness": "opencode", "session_id": session,
        "model": {"provider": "anthropic", "id": "m"}, "error": error,
    }))
    .unwrap();
    super::overflow::report(store, &request, T0)
        .unwrap()
        .into_value()
}

#[test]
fn a_reported_overflow_makes_the_next_pass_an_emergency_once() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(8);
    start(&mut store, &messages);
    defer(&mut store, &messages);
    // OpenCode's session.error event for Anthropic's answer.
    let answer = report_overflow(
        &mut store,
        SESSION,
        json!({"name": "ContextOverflowError", "data": {
            "message": "prompt is too long: 90000 tokens > 80000 maximum",
            "responseBody": "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 90000 tokens > 80000 maximum\"}}"}}),
    );
    assert_eq!(answer["recognised"], true, "{answer}");
    assert_eq!(
        (&answer["limit"], &answer["tokens"], &answer["model"]),
        (&json!(80_000), &json!(90_000), &json!("anthropic/m"))
    );
    assert_eq!(
        (&answer["limit_stored"], &answer["emergency_next_pass"]),
        (&json!(true), &json!(true))
    );
    let before = status(&store, "opencode", SESSION).unwrap().unwrap();
    assert!(before.overflow_pending);
    assert_eq!(before.learned_limit.unwrap().context_limit, 80_000);

    // The same usage sample that deferred a moment ago now recovers: the
    // prompt is taken at the rejected size, over the learned window.
    let now = warm_now(&messages) + 10;
    let out = pass(&mut store, &messages, 30, now);
    assert_eq!(
        (out.pass.decision, out.pass.reason),
        (Decision::Execute, "overflow")
    );
    assert_eq!(out.pass.usage_percent, 112.5, "90k over the 80k window");
    assert!(!out.pass.dropped.is_empty(), "the emergency drop ran");
    assert!(
        out.pass
            .warnings
            .iter()
            .any(|w| w.contains("rejected") && w.contains("80000 tokens the provider stated")),
        "{:?}",
        out.pass.warnings
    );
    let after = status(&store, "opencode", SESSION).unwrap().unwrap();
    assert!(!after.overflow_pending, "recovered once");
    assert_eq!(after.context_window, 80_000, "the learned limit caps 100k");
    // The next pass on the same sample is an ordinary one again.
    let calm = pass(&mut store, &messages, 30, now + 10);
    assert_eq!(calm.pass.decision, Decision::Defer, "{:?}", calm.pass);
}

#[test]
fn a_learned_limit_caps_every_session_on_the_model() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(2);
    start(&mut store, &messages);
    // Copilot's wording, reported for this session; no size, no session of its own.
    let answer = report_overflow(
        &mut store,
        SESSION,
        json!({"error": {"message": "prompt token count of 93854 exceeds the limit of 60000", "code": "model_max_prompt_tokens_exceeded"}}),
    );
    assert_eq!(answer["source"], "copilot", "{answer}");
    // Another session on the same model: capped, yet no emergency of its own.
    let other = "ses_other";
    let now = warm_now(&messages);
    let envelope = Envelope::from_value(json!({
        "harness": "opencode", "session_id": other,
        "model": {"provider": "anthropic", "id": "m", "context_limit": 100_000, "output_limit": 0},
        "usage": {"input": 30_000, "output": 10}, "now_ms": now, "messages": messages,
    }))
    .unwrap();
    let out = run_pass(&mut store, envelope, &config(), now).unwrap();
    assert_eq!(out.pass.usage_percent, 50.0, "30k of the learned 60k");
    assert_ne!(out.pass.reason, "overflow");
    let status = status(&store, "opencode", other).unwrap().unwrap();
    assert_eq!(status.context_window, 60_000);
    assert!(!status.overflow_pending);
    // An unknown session learns the limit but arms nothing.
    let answer = report_overflow(
        &mut store,
        "ses_unknown",
        json!("prompt is too long: 70000 tokens > 50000 maximum"),
    );
    assert_eq!(
        (&answer["limit_stored"], &answer["emergency_next_pass"]),
        (&json!(true), &json!(false))
    );
}

#[test]
fn an_overflow_drops_again_on_a_sample_the_emergency_latch_has_seen() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(12);
    start(&mut store, &messages);
    let now = warm_now(&messages);
    let first = pass(&mut store, &messages, 96, now);
    assert_eq!(first.pass.reason, "emergency");
    let again = pass(&mut store, &messages, 96, now + 10);
    assert!(
        again.pass.dropped.is_empty(),
        "latched: {:?}",
        again.pass.dropped
    );
    // The request at 96 % was still too long (no numbers in Bedrock's wording).
    report_overflow(
        &mut store,
        SESSION,
        json!("Input is too long for requested model."),
    );
    let out = pass(&mut store, &messages, 96, now + 20);
    assert_eq!(out.pass.reason, "overflow");
    assert!(!out.pass.dropped.is_empty(), "{:?}", out.pass);
}

/// A Pi session (its `context` event's messages) of `turns` turns: prompt,
/// a read with its result, an answer.
fn pi_session(turns: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for t in 0..turns as i64 {
        let at = T0 + t * 60_000;
        out.push(
            json!({"role": "user", "content": format!("please do step {t}"), "timestamp": at}),
        );
        out.push(json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("reading {t}")},
                {"type": "toolCall", "id": format!("toolu_{t}"), "name": "read", "arguments": {"path": format!("src/{t}.rs")}}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "m",
            "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": "toolUse", "timestamp": at + 1000}));
        out.push(
            json!({"role": "toolResult", "toolCallId": format!("toolu_{t}"), "toolName": "read",
            "content": [{"type": "text", "text": format!("fn f{t}() {{}}\n").repeat(200)}],
            "details": {"n": t}, "isError": false, "timestamp": at + 1500}),
        );
        out.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("done {t}")}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "m",
            "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": "stop", "timestamp": at + 2000}));
    }
    out
}

fn pi_pass(store: &mut Store, messages: &[Value], percent: u64, now_ms: i64) -> PassOutput {
    let mut envelope = envelope(messages, percent, now_ms);
    envelope.harness = "pi".into();
    run_pass(store, envelope, &config(), now_ms).unwrap()
}

#[test]
fn pi_messages_are_tagged_replayed_and_dropped_in_their_own_shape() {
    let mut store = Store::open_in_memory().unwrap();
    // Eight turns: 32 tags, so the first read is older than the protected 20.
    let messages = pi_session(8);
    let now = T0 + 8 * 60_000;
    let first = pi_pass(&mut store, &messages, 30, now);
    // Tags in Pi's own fields; the roles Pi sends; the results after their calls.
    let out = &first.messages;
    let roles: Vec<_> = out.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        &roles[roles.len() - 4..],
        ["user", "assistant", "toolResult", "assistant"]
    );
    let prompt = out.iter().find(|m| m["content"] == "§1§ please do step 0");
    assert!(prompt.is_some(), "{out:#?}");
    let result = out.iter().find(|m| m["toolCallId"] == "toolu_0").unwrap();
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("§3§ fn f0()"), "{text}");
    assert_eq!(result["details"], json!({"n": 0}));
    // Deferred passes repeat every byte.
    let again = pi_pass(&mut store, &messages, 30, now + 1000);
    assert_eq!(bytes(&again.messages), bytes(&first.messages));
    assert_eq!(again.pass.bust, Bust::None);
    // A queued drop waits for a busting pass, then stays.
    let tag: i64 = 3;
    let request = ReduceRequest {
        harness: "pi".into(),
        session_id: SESSION.into(),
        drop: vec![tag],
    };
    reduce(&mut store, &request, &config(), T0).unwrap();
    let deferred = pi_pass(&mut store, &messages, 30, now + 2000);
    assert_eq!(bytes(&deferred.messages), bytes(&first.messages));
    let executed = pi_pass(&mut store, &messages, 70, now + 3000);
    assert_eq!(
        executed.pass.decision,
        Decision::Execute,
        "{:?}",
        executed.pass
    );
    let result = executed
        .messages
        .iter()
        .find(|m| m["toolCallId"] == "toolu_0")
        .unwrap();
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "[dropped §3§]"}])
    );
    let replay = pi_pass(&mut store, &messages, 30, now + 4000);
    assert_eq!(bytes(&replay.messages), bytes(&executed.messages));
    // Every toolCall still has its result right after it.
    for (i, m) in replay.messages.iter().enumerate() {
        for call in m["content"].as_array().into_iter().flatten() {
            if call["type"] == "toolCall" {
                assert_eq!(replay.messages[i + 1]["toolCallId"], call["id"]);
            }
        }
    }
}

/// A Pi session of `turns` turns, each editing `src/f{t % 2}.rs` with Pi's
/// `edit {path, edits: [{oldText, newText}]}`.
fn pi_editing_session(turns: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for t in 0..turns as i64 {
        let at = T0 + t * 60_000;
        out.push(
            json!({"role": "user", "content": format!("please do step {t}"), "timestamp": at}),
        );
        let edit = json!({"path": format!("src/f{}.rs", t % 2), "edits": [{
            "oldText": format!("fn step_{t}() {{ old(); }}\n").repeat(24),
            "newText": format!("fn step_{t}() {{ new(); }}\n").repeat(24)}]});
        out.push(json!({"role": "assistant", "content": [
                {"type": "toolCall", "id": format!("toolu_{t}"), "name": "edit", "arguments": edit}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "m",
            "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": "toolUse", "timestamp": at + 1000}));
        out.push(
            json!({"role": "toolResult", "toolCallId": format!("toolu_{t}"), "toolName": "edit",
            "content": [{"type": "text", "text": format!("Edited src/f{}.rs\n", t % 2).repeat(30)}],
            "isError": false, "timestamp": at + 1500}),
        );
        out.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("done {t}")}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "m",
            "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": "stop", "timestamp": at + 2000}));
    }
    out
}

#[test]
fn pi_edits_become_markers_in_pis_own_shape_and_replay() {
    let mut store = Store::open_in_memory().unwrap();
    let config = TransformConfig {
        smart_drops: true,
        tool_reclaim: false,
        ..config()
    };
    let messages = pi_editing_session(10);
    let now = T0 + 10 * 60_000;
    let run = |store: &mut Store, percent: u64, now: i64| {
        let mut envelope = envelope(&messages, percent, now);
        envelope.harness = "pi".into();
        run_pass(store, envelope, &config, now).unwrap()
    };
    run(&mut store, 30, now);
    let out = run(&mut store, 70, now + 1000);
    assert_eq!(out.pass.decision, Decision::Execute, "{:?}", out.pass);
    let call = |out: &PassOutput, id: &str| -> Value {
        out.messages
            .iter()
            .flat_map(|m| m["content"].as_array().into_iter().flatten())
            .find(|b| b["type"] == "toolCall" && b["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("call {id} left the wire"))
    };
    let result = |out: &PassOutput, id: &str| -> Value {
        out.messages
            .iter()
            .find(|m| m["toolCallId"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("result {id} left the wire"))
    };
    // The oldest edit of src/f0.rs, edited again later: a marker in Pi's
    // own fields, the path verbatim, each text cut to a region hint.
    let marker = call(&out, "toolu_0");
    assert_eq!(marker["arguments"]["path"], "src/f0.rs", "{marker}");
    let old = marker["arguments"]["edits"][0]["oldText"].as_str().unwrap();
    assert!(
        old.starts_with("fn step_0() { old(); }") && old.ends_with('…'),
        "{old}"
    );
    assert!(
        old.chars().count() <= super::smart_drops::REGION_HINT_CHARS + 1,
        "{old}"
    );
    let text = result(&out, "toolu_0")["content"][0]["text"].clone();
    assert!(
        text.as_str().unwrap().starts_with("[dropped §"),
        "the result is the placeholder: {text}"
    );
    assert_eq!(
        result(&out, "toolu_0")["toolName"],
        "edit",
        "Pi's own fields stay"
    );
    // The newest edit of each file is whole.
    for id in ["toolu_8", "toolu_9"] {
        let whole = call(&out, id)["arguments"]["edits"][0]["oldText"].clone();
        assert_eq!(whole.as_str().unwrap().len(), 24 * 23, "{id}: {whole}");
    }
    // Every call still has its result right after it, and defer passes
    // replay the markers byte for byte.
    for (i, m) in out.messages.iter().enumerate() {
        for block in m["content"].as_array().into_iter().flatten() {
            if block["type"] == "toolCall" {
                assert_eq!(out.messages[i + 1]["toolCallId"], block["id"]);
            }
        }
    }
    let again = run(&mut store, 30, now + 2000);
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
}

/// Relief alone: no age reclaim, so every drop below is relief's.
fn relief_only() -> TransformConfig {
    TransformConfig {
        tool_reclaim: false,
        ..TransformConfig::default()
    }
}

/// What relief drops from `session(20)` at the threshold: every output
/// outside the protected window (tags 61..=80), and of the ten inside it
/// the older ones beyond 5 % of the 65k ceiling (3,250 tokens): each is
/// 1,560 bytes, 390 tokens, so the newest eight (turns 16–19) stay and
/// turn 15's two go.
fn relief_drops_of_session_20() -> Vec<i64> {
    (1..64).filter(|n| n % 4 == 2 || n % 4 == 3).collect()
}

#[test]
fn relief_at_the_threshold_reclaims_every_output_outside_the_protected_window() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(20); // tags 1..=80; the newest 20 (61..=80) protected
    start(&mut store, &messages);
    let now = warm_now(&messages);
    let before = pass(&mut store, &messages, 30, now);
    // 80 % of a 100k window, ~17k tokens tagged. The emergency's reserve
    // would keep the newest 20 % of the reads outside the window on the
    // wire, and the whole window: every one of them is re-sent after this
    // bust and meets the next threshold sooner.
    let out = run_pass(
        &mut store,
        envelope(&messages, 80, now + 10),
        &relief_only(),
        now + 10,
    )
    .unwrap();
    assert_eq!(out.pass.reason, "threshold");
    assert_eq!(out.pass.dropped, relief_drops_of_session_20());
    // The newest protected outputs are on the wire whole.
    let t = texts(&out);
    for tag in [66, 67, 78, 79] {
        assert!(
            t.iter().any(|s| s.starts_with(&format!("§{tag}§ line "))),
            "§{tag}§ kept: {t:?}"
        );
    }
    // The bust keeps the prefix up to its first change: the head had no news,
    // so the bytes before the first dropped output (tag 2, the first turn's
    // read, an old call dropped whole, its step with it) are the cached ones.
    let (old, new) = (bytes(&before.messages), bytes(&out.messages));
    let first_change = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    assert!(
        old[first_change].contains("\"msg_000_s0\""),
        "{}",
        old[first_change]
    );
    assert!(first_change >= 2, "the head (m[0], m[1]) is unchanged");
    // Replayed byte for byte while warm.
    let again = pass(&mut store, &messages, 30, now + 20);
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
}

#[test]
fn relief_with_the_whole_window_keeps_every_protected_output_and_drops_only_what_it_needs() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(20); // tags 1..=80; the newest 20 (61..=80) protected
    start(&mut store, &messages);
    let now = warm_now(&messages);
    let whole = TransformConfig {
        relief_window_percentage: 100,
        ..TransformConfig::default()
    };
    // 70 % of a 100k window, ~17k tokens tagged: relief drops tool outputs
    // outside the protected window, oldest first, only down to its target.
    let out = run_pass(&mut store, envelope(&messages, 70, now), &whole, now).unwrap();
    assert_eq!(out.pass.reason, "threshold");
    let dropped = &out.pass.dropped;
    assert!(!dropped.is_empty(), "relief dropped nothing");
    assert!(
        dropped.iter().all(|n| n % 4 == 2 || n % 4 == 3),
        "{dropped:?}"
    );
    assert!(dropped.iter().all(|&n| n < 61), "{dropped:?}");
    assert_eq!(dropped[0], 2);
    // The bounded window (the default) drops more, and into the window.
    let mut bounded_store = Store::open_in_memory().unwrap();
    start(&mut bounded_store, &messages);
    let bounded = run_pass(
        &mut bounded_store,
        envelope(&messages, 70, now),
        &TransformConfig::default(),
        now,
    )
    .unwrap();
    assert!(bounded.pass.dropped.len() > dropped.len());
    assert!(bounded.pass.dropped.iter().any(|&n| n >= 61));
}

#[test]
fn the_force_band_keeps_the_whole_protected_window() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(20);
    start(&mut store, &messages);
    let now = warm_now(&messages);
    // 85 %: the emergency drop, not relief; it keeps the protected window
    // whole (and its reserve of reads outside it).
    let out = run_pass(
        &mut store,
        envelope(&messages, 85, now),
        &relief_only(),
        now,
    )
    .unwrap();
    assert_eq!(out.pass.reason, "force_band");
    assert!(!out.pass.dropped.is_empty());
    assert!(
        out.pass.dropped.iter().all(|&n| n < 61),
        "{:?}",
        out.pass.dropped
    );
}

#[test]
fn a_cold_cache_buys_headroom_below_the_threshold_a_warm_one_does_not() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(20);
    start(&mut store, &messages);
    let config = relief_only();
    let now = warm_now(&messages);
    // Warm at 40 %: a defer, nothing changes.
    let warm = run_pass(&mut store, envelope(&messages, 40, now), &config, now).unwrap();
    assert_eq!(
        (warm.pass.decision, warm.pass.dropped.len()),
        (Decision::Defer, 0)
    );
    // Idle past the TTL at 40 % (above half the 65 % threshold): the pass busts
    // anyway, so relief drops old outputs now rather than at the threshold.
    let idle = now + 6 * 60_000;
    let cold = run_pass(&mut store, envelope(&messages, 40, idle), &config, idle).unwrap();
    assert_eq!(cold.pass.decision, Decision::Execute);
    assert!(
        super::scheduler::cache_cold(cold.pass.reason),
        "{}",
        cold.pass.reason
    );
    // It drops what relief at the threshold would.
    assert_eq!(cold.pass.dropped, relief_drops_of_session_20());
    // Replayed byte for byte while warm.
    let again = run_pass(
        &mut store,
        envelope(&messages, 40, idle + 10),
        &config,
        idle + 10,
    )
    .unwrap();
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&cold.messages));
}

#[test]
fn a_cold_cache_well_under_the_threshold_rides_no_relief() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(20);
    start(&mut store, &messages);
    let idle = warm_now(&messages) + 6 * 60_000;
    // 30 % is under half the threshold: the context is small, nothing to buy.
    let cold = run_pass(
        &mut store,
        envelope(&messages, 30, idle),
        &relief_only(),
        idle,
    )
    .unwrap();
    assert_eq!(cold.pass.decision, Decision::Execute);
    assert!(cold.pass.dropped.is_empty(), "{:?}", cold.pass.dropped);
}

#[test]
fn a_pass_on_messages_decoded_while_read_writes_the_bytes_of_its_value() {
    // The one-shot's way (messages decoded as the envelope is read, the
    // answer written from them) against the values' way, pass by pass.
    use mc_base::codec::opencode::parse_envelope;
    let config = TransformConfig {
        caveman: true,
        caveman_min_chars: 100,
        smart_drops: true,
        ..config()
    };
    let mut messages = session(14);
    messages[11]["parts"][1]["text"] =
        json!("The store keeps every tag in one table and the pass reads it once. ".repeat(8));
    messages[3]["info"]["tokens"] = json!({"input": 1.5e3, "weird": [1, "é\u{1}"]});
    let (mut by_value, mut by_text) = (
        Store::open_in_memory().unwrap(),
        Store::open_in_memory().unwrap(),
    );
    for (percent, drop) in [(30, None), (70, Some(&[1, 2, 3][..])), (30, None)] {
        if let Some(drop) = drop {
            queue(&mut by_value, drop);
            queue(&mut by_text, drop);
        }
        let now = warm_now(&messages);
        let mut input = envelope(&messages, percent, now);
        input.system = Some(json!(["Agent."]));
        let text = serde_json::to_string(&json!({"messages": input.messages})).unwrap();
        let want = run_pass(&mut by_value, input.clone(), &config, now).unwrap();
        let (_, decoded) = parse_envelope(&text).unwrap();
        input.messages = Vec::new();
        let resident = super::Resident {
            decoded: Some(decoded.expect("OpenCode messages decode")),
            unencoded: true,
            ..super::Resident::default()
        };
        let trees = mc_base::codec::opencode::packed_trees_built();
        let got = super::run_pass_on(&mut by_text, input, resident, &config, now).unwrap();
        assert!(got.messages.is_empty() && got.unencoded.is_some());
        // The pass reads and sets text parts without their trees (a tree is
        // most of a small part's memory): none built, none left.
        assert_eq!(
            mc_base::codec::opencode::packed_trees_built(),
            trees,
            "a pass built trees of text parts at {percent}%"
        );
        let text_parts: Vec<_> = got
            .unencoded
            .iter()
            .flatten()
            .flat_map(|m| &m.parts)
            .filter(|p| p.kind == mc_base::codec::opencode::PartKind::Text)
            .collect();
        assert!(text_parts.len() > 14, "at {percent}%");
        let unpacked = text_parts.iter().filter(|p| !p.is_packed()).count();
        assert_eq!(unpacked, 0, "text parts unpacked at {percent}%");
        let mut written = Vec::new();
        got.write_document(&mut written).unwrap();
        let want = serde_json::to_string(&want.into_value()).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), want, "at {percent}%");
    }
}
