use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::incremental::kept;
use crate::testkit::{SESSION, T0, answer, tool_step, user};

/// `turns` OpenCode turns: a user prompt, a tool step, an answer; each
/// message about `words` words.
fn session(turns: usize, words: usize) -> Vec<Value> {
    let filler = "word ".repeat(words);
    let mut out = Vec::new();
    for t in 0..turns {
        let at = T0 + t as i64 * 10_000;
        out.push(user(
            &format!("msg_{t:03}_u"),
            &format!("prompt {t} {filler}"),
            at,
        ));
        out.push(tool_step(
            &format!("msg_{t:03}_t"),
            &format!("c{t}"),
            "read",
            &filler,
            at + 1_000,
        ));
        out.push(answer(
            &format!("msg_{t:03}_a"),
            &format!("done {t} {filler}"),
            at + 2_000,
        ));
    }
    out
}

fn estimate(values: &[Value]) -> u64 {
    values
        .iter()
        .map(|v| u64::from(tokens::estimate(&serde_json::to_string(v).unwrap())))
        .sum()
}

fn marker_text(message: &Value) -> &str {
    message["parts"][0]["text"].as_str().unwrap()
}

#[test]
fn raw_messages_that_fit_go_out_unchanged() {
    let input = session(5, 50);
    let window = estimate(&input) + 1;
    let (out, fallback) = fit_raw("opencode", Some(SESSION), input.clone(), window);
    assert_eq!(out, input);
    assert_eq!(fallback.shape, "raw");
    assert_eq!(fallback.left_out, 0);
    assert!(!fallback.over_window);
}

#[test]
fn too_long_a_history_loses_its_oldest_turns_whole_behind_one_marker() {
    let input = session(10, 200);
    let window = estimate(&input) / 2;
    let (out, fallback) = fit_raw("opencode", Some(SESSION), input.clone(), window);
    assert_eq!(fallback.shape, "cut");
    assert!(!fallback.over_window);
    assert!(
        fallback.left_out > 0 && fallback.left_out % 3 == 0,
        "{fallback:?}"
    );
    // The marker first, then the newest messages exactly as the harness sent them.
    assert_eq!(out.len(), input.len() - fallback.left_out + 1);
    assert_eq!(out[1..], input[fallback.left_out..]);
    assert_eq!(
        out[1]["info"]["role"], "user",
        "the kept part starts a turn"
    );
    assert_eq!(marker_text(&out[0]), cut_marker(fallback.left_out));
    assert_eq!(out[0]["info"]["role"], "user");
    assert_eq!(out[0]["info"]["sessionID"], SESSION);
    assert!(fallback.tokens <= window);
    // The oldest turn that fits: one more turn would not.
    let marker = fallback.tokens - estimate(&input[fallback.left_out..]);
    let one_more = estimate(&input[fallback.left_out - 3..]) + marker;
    assert!(one_more > window, "{one_more} <= {window}");
}

#[test]
fn a_newest_turn_larger_than_the_window_is_kept_whole_and_said() {
    let mut input = session(3, 20);
    input.push(user("msg_big_u", &"huge ".repeat(5_000), T0 + 100_000));
    input.push(answer("msg_big_a", "ok", T0 + 101_000));
    let (out, fallback) = fit_raw("opencode", Some(SESSION), input.clone(), 1_000);
    assert_eq!(fallback.shape, "cut");
    assert!(fallback.over_window);
    assert_eq!(fallback.left_out, 9);
    assert_eq!(out[1..], input[9..]);
    // One turn only, nothing to cut at: the raw messages, said to be over.
    let single = vec![user("msg_only", &"huge ".repeat(5_000), T0)];
    let (out, fallback) = fit_raw("opencode", Some(SESSION), single.clone(), 1_000);
    assert_eq!(out, single);
    assert_eq!((fallback.shape, fallback.over_window), ("raw", true));
}

#[test]
fn a_pi_history_is_cut_between_turns_with_results_beside_their_calls() {
    let filler = "word ".repeat(300);
    let mut input = Vec::new();
    for t in 0..8 {
        let at = T0 + t * 10_000;
        input.push(json!({"role": "user", "content": [{"type": "text", "text": format!("prompt {t} {filler}")}], "timestamp": at}));
        input.push(json!({"role": "assistant", "content": [{"type": "toolCall", "id": format!("call_{t}"), "name": "bash",
                          "arguments": {"command": "ls"}}], "stopReason": "toolUse", "timestamp": at + 1}));
        input.push(json!({"role": "toolResult", "toolCallId": format!("call_{t}"), "toolName": "bash",
                          "content": [{"type": "text", "text": filler.clone()}], "isError": false, "timestamp": at + 2}));
    }
    let window = estimate(&input) / 2;
    let (out, fallback) = fit_raw("pi", Some("pi-session"), input.clone(), window);
    assert_eq!(fallback.shape, "cut", "{fallback:?}");
    let kept = out.len() - 1;
    assert_eq!(
        out[1..],
        input[input.len() - kept..],
        "the newest messages as sent"
    );
    assert_eq!(out[1]["role"], "user");
    assert_eq!(out[0]["role"], "user");
    assert!(
        serde_json::to_string(&out[0])
            .unwrap()
            .contains("oldest messages of this session")
    );
    assert!(kept % 3 == 0, "whole turns: {kept}");
}

#[test]
fn the_last_shape_is_the_previous_answer_then_what_is_new() {
    let previous = vec![
        json!({"info": {"role": "user", "syntheticHead": true}, "parts": []}),
        json!({"info": {"id": "msg_2"}, "parts": [{"type": "text", "text": "§2§ two"}]}),
        json!({"info": {"id": "msg_3"}, "parts": [{"type": "text", "text": "§3§ three"}]}),
    ];
    let previous = kept(&previous);
    let base = [
        json!({"info": {"id": "msg_1"}}),
        json!({"info": {"id": "msg_2"}}),
        json!({"info": {"id": "msg_3"}}),
    ];
    // Grown at the tail: the whole previous answer, then the new message.
    let mut input = base.to_vec();
    input.push(json!({"info": {"id": "msg_4"}}));
    let delta = [json!(0), json!(1), json!(2), input[3].clone()];
    assert_eq!(unchanged_prefix(&delta, &base), 3);
    // A message sent again with only its metadata changed counts as unchanged.
    let touched = json!({"info": {"id": "msg_3", "time": {"completed": 9}}});
    let delta = [json!(0), json!(1), touched.clone(), input[3].clone()];
    assert_eq!(
        unchanged_prefix(&delta, &base),
        2,
        "no parts: not known the same"
    );
    let with_parts = |info: Value| json!({"info": info, "parts": [{"type": "text", "text": "x"}]});
    let base_parts = [
        base[0].clone(),
        base[1].clone(),
        with_parts(json!({"id": "msg_3"})),
    ];
    let delta = [
        json!(0),
        json!(1),
        with_parts(json!({"id": "msg_3", "done": true})),
        input[3].clone(),
    ];
    assert_eq!(unchanged_prefix(&delta, &base_parts), 3);
    let delta = [json!(0), json!(1), with_parts(json!({"id": "msg_9"}))];
    assert_eq!(unchanged_prefix(&delta, &base_parts), 2, "another message");
    assert_eq!(
        last_shape(&previous, 3, 3, &input),
        Some(vec![json!(0), json!(1), json!(2), input[3].clone()])
    );
    // The newest message rewritten in place (a step that grew): the
    // previous answer up to its old rendering, then the new version.
    let mut grown = base.to_vec();
    grown[2] =
        json!({"info": {"id": "msg_3"}, "parts": [{"type": "text", "text": "three, and more"}]});
    let delta = [json!(0), json!(1), grown[2].clone()];
    assert_eq!(unchanged_prefix(&delta, &base), 2);
    assert_eq!(
        last_shape(&previous, 3, 2, &grown),
        Some(vec![json!(0), json!(1), grown[2].clone()])
    );
    // Nothing to join on: a changed first message, or one never shown.
    assert_eq!(last_shape(&previous, 3, 0, &input), None);
    let mut unknown = base.to_vec();
    unknown[1] = json!({"info": {"id": "msg_x"}});
    assert_eq!(last_shape(&previous, 3, 1, &unknown), None);
    assert_eq!(last_shape(&[], 3, 3, &input), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the session and the window: what goes out is the input, or
    /// one marker and a suffix of the input that starts a turn; a cut that
    /// could fit does fit, and keeps the most turns that fit.
    #[test]
    fn a_cut_keeps_the_newest_whole_turns_that_fit(
        sizes in prop::collection::vec(1usize..400, 1..12),
        share in 1u64..120,
    ) {
        let mut input = Vec::new();
        for (t, words) in sizes.iter().enumerate() {
            let at = T0 + t as i64 * 10_000;
            let filler = "w ".repeat(*words);
            input.push(user(&format!("u{t}"), &filler, at));
            input.push(tool_step(&format!("t{t}"), &format!("c{t}"), "bash", &filler, at + 1));
        }
        let window = (estimate(&input) * share / 100).max(1);
        let (out, fallback) = fit_raw("opencode", Some(SESSION), input.clone(), window);
        match fallback.shape {
            "raw" => {
                prop_assert_eq!(&out, &input);
                prop_assert!(fallback.over_window || estimate(&input) <= window);
            }
            "cut" => {
                let start = fallback.left_out;
                prop_assert!(start > 0 && start % 2 == 0);
                prop_assert_eq!(&out[1..], &input[start..]);
                let marker = cut_marker(start);
                prop_assert_eq!(marker_text(&out[0]), marker.as_str());
                if !fallback.over_window {
                    prop_assert!(fallback.tokens <= window);
                    // The turn before would not have fitted.
                    let before = fallback.tokens + estimate(&input[start - 2..start]);
                    prop_assert!(before > window || start == 0);
                } else {
                    prop_assert_eq!(start, input.len() - 2, "only the newest turn");
                }
            }
            other => prop_assert!(false, "shape {other}"),
        }
    }
}
