//! Two mc-transform processes passing at the same time on one database lose
//! nothing: every tag and ordinal is allocated exactly once, no pass falls
//! back to passthrough, and the final state matches a serial run.

use std::path::Path;

use mc_tests::TestEnv;
use serde_json::{Value, json};

const TURNS: usize = 12;

fn turn(session: &str, t: usize) -> Vec<Value> {
    let at = 1_800_000_000_000i64 + t as i64 * 10_000;
    vec![
        json!({"info": {"id": format!("msg_{t:03}_u"), "sessionID": session, "role": "user", "time": {"created": at}},
               "parts": [{"type": "text", "text": format!("turn {t}")}]}),
        json!({"info": {"id": format!("msg_{t:03}_a"), "sessionID": session, "role": "assistant", "finish": "stop",
                        "time": {"created": at + 100, "completed": at + 900}},
               "parts": [{"type": "text", "text": format!("reply {t}")},
                         {"type": "tool", "callID": "read:1", "tool": "read",
                          "state": {"status": "completed", "input": {"filePath": "a.rs"}, "output": format!("out {t}")}}]}),
    ]
}

fn pass(env: &TestEnv, db: &Path, session: &str, messages: &[Value]) -> Value {
    let envelope = json!({
        "harness": "opencode", "session_id": session,
        "model": {"provider": "p", "id": "m", "context_limit": 100000},
        "usage": {"input": 10000}, "now_ms": 1_800_000_000_000i64 + 200_000,
        "messages": messages,
    });
    let db = db.to_str().unwrap();
    let out = env.run("mc-transform", &["--db", db], &envelope.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Grow a session turn by turn, one pass per turn; returns the last output.
fn drive(env: &TestEnv, db: &Path, session: &str) -> Value {
    let mut messages = Vec::new();
    let mut last = Value::Null;
    for t in 0..TURNS {
        messages.extend(turn(session, t));
        last = pass(env, db, session, &messages);
        assert_ne!(last["pass"]["decision"], "passthrough", "{}", last["pass"]);
    }
    last
}

fn tags_of(output: &Value) -> Vec<String> {
    output["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["info"]["syntheticHead"] != true)
        .flat_map(|m| m["parts"].as_array().unwrap().iter())
        .filter_map(|p| p["text"].as_str().or(p["state"]["output"].as_str()))
        .map(|s| s.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn concurrent_passes_lose_nothing() {
    // A sealed environment: the developer's config (a personal cache_ttl, say)
    // would change the decisions the serial run is compared with.
    let env = TestEnv::new();
    let db = env.db();
    // Two different sessions and two writers on one shared session, all at once.
    let outputs: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["ses_a", "ses_b", "ses_shared", "ses_shared"]
            .into_iter()
            .map(|session| {
                let (env, db) = (&env, &db);
                scope.spawn(move || drive(env, db, session))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let expected: Vec<String> = (1..=TURNS * 3).map(|n| format!("§{n}§")).collect();
    for output in &outputs {
        let mut tags = tags_of(output);
        tags.sort_by_key(|t| t.trim_matches('§').parse::<u32>().unwrap());
        assert_eq!(
            tags, expected,
            "every tag exactly once, numbered without gaps"
        );
    }
    // Both writers of the shared session saw the same bytes.
    assert_eq!(outputs[2], outputs[3]);
    // A serial run on a fresh database gives the same output for a session.
    let serial_db = env.path("serial.db");
    assert_eq!(
        drive(&env, &serial_db, "ses_a")["messages"],
        outputs[0]["messages"]
    );
}
