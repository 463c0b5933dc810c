//! A tool call that breaks its tool's published schema is refused, not run
//! on a default: through `mc-search call` (what the OpenCode and Pi tools
//! run), `mc-search mcp` and `mc-transform reduce`. The error names the
//! field and what is allowed; the shapes the harness adapters send still work.

use std::time::Duration;

use mc_tests::TestEnv;
use mc_tests::mcp_client::McpClient;
use serde_json::{Value, json};

/// Calls that break the schema, and what the error must say.
fn bad_calls() -> Vec<(&'static str, Value, Vec<&'static str>)> {
    vec![
        (
            "ctx_memory",
            json!({}),
            vec![
                "ctx_memory needs \"action\"",
                "one of write, update, archive, merge, list, show",
            ],
        ),
        (
            "ctx_memory",
            json!({"content": "Never log keys.", "category": "CONSTRAINTS"}),
            vec!["ctx_memory needs \"action\""],
        ),
        (
            "ctx_search",
            json!({"querry": "keys"}),
            vec![
                "ctx_search has no field \"querry\"",
                "(its fields: query, sources, limit, session, since, until)",
            ],
        ),
        (
            "ctx_memory",
            json!({"action": "list", "id": "abc"}),
            vec!["\"id\" must be an integer, not \"abc\""],
        ),
        (
            "ctx_memory",
            json!({"action": "delete", "id": 1}),
            vec![
                "\"action\" must be one of write, update, archive, merge, list, show, not \"delete\"",
            ],
        ),
        (
            "ctx_memory",
            json!({"action": "list", "status": "all"}),
            vec!["ctx_memory has no field \"status\""],
        ),
        (
            "ctx_memory",
            json!({"action": "write", "content": "Never log keys."}),
            vec![
                "ctx_memory write needs \"category\" (one of PROJECT_RULES",
                "write needs \"content\", \"category\"",
            ],
        ),
        (
            "ctx_memory",
            json!({"action": "show", "id": 1, "content": "Never log keys."}),
            vec!["ctx_memory show does not take \"content\" (show needs \"id\")"],
        ),
        (
            "ctx_search",
            json!({"query": "keys", "limit": 500}),
            vec!["ctx_search \"limit\" must be from 1 to 100, not 500"],
        ),
        (
            "ctx_expand",
            json!({"target": "c1", "budget": 5}),
            vec!["ctx_expand \"budget\" must be from 100 to 100000, not 5"],
        ),
        (
            "ctx_expand",
            json!({"target": "c1", "budgt": 200}),
            vec!["ctx_expand has no field \"budgt\" (its fields: target, budget)"],
        ),
        (
            "ctx_note",
            json!({"contnet": "check the lock"}),
            vec!["ctx_note has no field \"contnet\" (its fields: action, content, id, all)"],
        ),
        (
            "ctx_note",
            json!({"action": "read"}),
            vec!["\"action\" must be one of write, list, dismiss, not \"read\""],
        ),
        (
            "ctx_note",
            json!({"action": "list", "all": "yes"}),
            vec!["ctx_note \"all\" must be true or false, not \"yes\""],
        ),
        (
            "ctx_reduce",
            json!({"drop": "1", "tags": "2"}),
            vec!["ctx_reduce has no field \"tags\" (its fields: drop)"],
        ),
    ]
}

fn project(env: &TestEnv) -> String {
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    dir.to_str().unwrap().to_string()
}

/// `mc-search call` as the OpenCode plugin and the Pi extension run it.
fn call(env: &TestEnv, dir: &str, harness: &str, tool: &str, arguments: &Value) -> Value {
    let input = json!({"tool": tool, "arguments": arguments, "harness": harness,
                       "session_id": "ses_1", "project_dir": dir});
    let out = env.run_db("mc-search", &["call"], &input.to_string());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn memories(env: &TestEnv, dir: &str) -> Value {
    let out = env.run_db(
        "mc-search",
        &["--project-dir", dir, "memory", "list", "--status", "all"],
        "",
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["memories"].clone()
}

#[test]
fn a_call_that_breaks_the_schema_is_refused_by_mc_search_call_with_the_field_named() {
    let env = TestEnv::new();
    let dir = project(&env);
    for (tool, arguments, said) in bad_calls() {
        let answer = call(&env, &dir, "opencode", tool, &arguments);
        let text = answer["text"].as_str().unwrap_or_default();
        assert_eq!(answer["is_error"], true, "{tool} {arguments}: {answer}");
        assert!(text.starts_with("Error: "), "{answer}");
        for words in said {
            assert!(text.contains(words), "{words:?} not in {text:?}");
        }
    }
    assert_eq!(memories(&env, &dir), json!([]), "nothing was written");
    // The adapters' own shape (harness, session_id and project_dir beside
    // the arguments) with arguments as the schema has them runs.
    for harness in ["opencode", "pi"] {
        let saved = call(
            &env,
            &dir,
            harness,
            "ctx_memory",
            &json!({"action": "write", "category": "constraints", "content": "Never log keys."}),
        );
        assert_eq!(saved["is_error"], false, "{saved}");
    }
    // What models send loosely and the tools always took: a quoted id, nulls
    // for fields not given, a comma list of sources.
    let shown = call(
        &env,
        &dir,
        "opencode",
        "ctx_memory",
        &json!({"action": "show", "id": "#1", "content": null}),
    );
    assert_eq!(shown["is_error"], false, "{shown}");
    let found = call(
        &env,
        &dir,
        "opencode",
        "ctx_search",
        &json!({"query": "keys", "sources": "memory, note"}),
    );
    assert_eq!(found["is_error"], false, "{found}");
}

#[test]
fn a_call_that_breaks_the_schema_is_an_mcp_tool_error_naming_the_field() {
    let env = TestEnv::new();
    let dir = project(&env);
    let mut command = env.db_command("mc-search", &["mcp", "--harness", "claude-code"]);
    command.current_dir(&dir);
    let mut mcp = McpClient::spawn(&mut command);
    mcp.initialize("2025-06-18");
    for (tool, arguments, said) in bad_calls() {
        let (text, is_error) = mcp.call_text(tool, arguments.clone());
        assert!(is_error, "{tool} {arguments}: {text}");
        for words in said {
            assert!(text.contains(words), "{words:?} not in {text:?}");
        }
    }
    let (text, is_error) = mcp.call_text(
        "ctx_memory",
        json!({"action": "write", "category": "NAMING", "content": "Tools are ctx_*."}),
    );
    assert!(!is_error, "{text}");
    let (status, stderr) = mcp.finish(Duration::from_secs(30));
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(memories(&env, &dir).as_array().map(Vec::len), Some(1));
}

#[test]
fn mc_transform_reduce_refuses_a_field_it_does_not_know() {
    let env = TestEnv::new();
    let out = env.run_db(
        "mc-transform",
        &["reduce"],
        r#"{"harness": "opencode", "session_id": "ses_1", "drop": "3", "dorp": "4"}"#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("mc-transform: error: ")
            && stderr
                .contains("reduce has no field \"dorp\" (its fields: harness, session_id, drop)"),
        "{stderr}"
    );
    let out = env.run_db(
        "mc-transform",
        &["reduce"],
        r#"{"harness": "opencode", "session_id": "ses_1", "drop": {"tags": "3"}}"#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"drop\" must be tags"), "{stderr}");
    // The adapters' request, one-shot and resident.
    let out = env.run_db(
        "mc-transform",
        &["reduce"],
        r#"{"harness": "opencode", "session_id": "ses_1", "drop": "3"}"#,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["unknown"], json!([3]), "{answer}");
    let out = env.run_db(
        "mc-transform",
        &["serve"],
        "{\"kind\":\"reduce\",\"harness\":\"pi\",\"session_id\":\"s\",\"drop\":\"3-4\"}\n\
         {\"kind\":\"reduce\",\"harness\":\"pi\",\"session_id\":\"s\",\"drop\":\"3\",\"dorp\":1}\n",
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["unknown"], json!([3, 4]), "{}", lines[0]);
    let message = lines[1]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no field \"dorp\""), "{}", lines[1]);
}

#[test]
fn the_published_schemas_are_pinned() {
    let env = TestEnv::new();
    let out = env.run("mc-search", &["--pretty", "tools"], "");
    assert!(out.status.success());
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    let schemas: Vec<String> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| format!("{}: {}", t["name"], t["input_schema"]))
        .collect();
    snapshot!(
        "published_tool_schemas",
        "mc-search tools: the input schema of each tool, as published",
        schemas.join("\n")
    );
}
