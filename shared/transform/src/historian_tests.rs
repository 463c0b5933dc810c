//! The historian's `check` against what the pass stored (moved from
//! mc-history's tests: the historian cannot name the pass that sits above it).

use mc_base::config::TransformConfig;
use mc_base::domain::measure;
use mc_base::store::Store;
use mc_history::historian::{Input, check};

use mc_base::testkit::{NOW, WORDS, envelope, messages};

use crate::run_pass;

#[test]
fn check_and_the_pass_agree() {
    for (turns, usage) in [
        (30, 5_000),
        (60, 5_000),
        (60, 13_000),
        (60, 18_000),
        (3, 19_000),
    ] {
        let mut store = Store::open_in_memory().unwrap();
        let session = format!("ses_agree_{turns}_{usage}");
        let config = TransformConfig::default();
        let make = || envelope(&session, messages(&session, turns, WORDS), usage);
        // Before any pass: check estimates what the pass will tag.
        let before = check(
            store.conn(),
            &Input::from_envelope(make()).unwrap(),
            &config,
        )
        .unwrap();
        let pass = run_pass(&mut store, make(), &config, NOW).unwrap().pass;
        assert_eq!(
            before.due.due, pass.historian_due,
            "{turns}/{usage}: {before:?}"
        );
        assert_eq!(before.due.reason, pass.historian_reason, "{turns}/{usage}");
        // After it: check reads what the pass stored (which may be less, when
        // the pass dropped old tool output in the force band).
        let after = check(
            store.conn(),
            &Input::from_envelope(make()).unwrap(),
            &config,
        )
        .unwrap();
        assert_eq!(after.due.due, pass.historian_due, "{turns}/{usage}");
        assert_eq!(after.due.reason, pass.historian_reason, "{turns}/{usage}");
        assert_eq!(after.due.blocking, pass.blocking, "{turns}/{usage}");
        if pass.dropped.is_empty() {
            assert_eq!(after.tail_tokens, before.tail_tokens, "{turns}/{usage}");
        } else {
            assert!(after.tail_tokens < before.tail_tokens);
        }
        assert!(after.known_session && !before.known_session);
    }
}

#[test]
fn inputs_without_a_context_limit_use_the_window_the_transform_saw() {
    let mut store = Store::open_in_memory().unwrap();
    let config = TransformConfig::default();
    let session = "ses_window";
    run_pass(
        &mut store,
        envelope(session, messages(session, 30, WORDS), 5_000),
        &config,
        NOW,
    )
    .unwrap();
    // An OpenCode server's list or a transcript has no context limit.
    let input = Input::from_messages("opencode", session, messages(session, 30, WORDS)).unwrap();
    assert_eq!(check(store.conn(), &input, &config).unwrap().window, 20_000);
    let unknown =
        Input::from_messages("opencode", "ses_unknown", messages("ses_unknown", 3, 10)).unwrap();
    assert_eq!(
        check(store.conn(), &unknown, &config).unwrap().window,
        measure::DEFAULT_CONTEXT_LIMIT
    );
}
