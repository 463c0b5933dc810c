//! `mc-search mcp` as a process, spoken to over its stdio the way an MCP
//! client does: the handshake and the tool list, every kind of bad request,
//! clients that go away mid-call, and a memory of another project, which no
//! call can reach.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mc_base::store::{Store, StoreOptions};
use mc_tests::TestEnv;
use mc_tests::mcp_client::McpClient;
use serde_json::{Value, json};

/// How long a server may take to exit once its input closed (a guard).
const EXIT_LIMIT: Duration = Duration::from_secs(30);

/// A plain folder (identity `dir:…`) under the environment's root.
fn project(env: &TestEnv, name: &str) -> PathBuf {
    let dir = env.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `mc-search --db <db> mcp --harness claude-code`, serving the folder `dir`
/// (its working directory, as a harness starts it).
fn server(env: &TestEnv, dir: &Path) -> McpClient {
    let mut command = env.db_command("mc-search", &["mcp", "--harness", "claude-code"]);
    command.current_dir(dir);
    McpClient::spawn(&mut command)
}

fn memory_write(content: &str) -> Value {
    json!({"action": "write", "category": "CONSTRAINTS", "content": content})
}

/// The memories of the database as (live rows, rows of the full-text index,
/// SQLite's integrity verdict): a write is whole when all three agree.
fn memory_rows(env: &TestEnv) -> (i64, i64, String) {
    let store = Store::open(&env.db(), &StoreOptions::default()).unwrap();
    let count = |sql: &str| -> i64 { store.conn().query_row(sql, [], |r| r.get(0)).unwrap() };
    let integrity: String = store
        .conn()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    (
        count("SELECT count(*) FROM memories"),
        count("SELECT count(*) FROM memories_fts"),
        integrity,
    )
}

#[test]
fn the_handshake_negotiates_the_version_and_lists_the_five_tools() {
    let env = TestEnv::new();
    let dir = project(&env, "repo");
    let mut mcp = server(&env, &dir);
    let init = mcp.initialize("2025-06-18");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "mc");
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"],
        false
    );
    assert!(
        init["result"]["instructions"]
            .as_str()
            .is_some_and(|t| t.contains("ctx_search")),
        "{init}"
    );
    // A version we do not speak is answered with the newest we do.
    let other = mcp.request(
        "initialize",
        json!({"protocolVersion": "2099-01-01", "capabilities": {}}),
    );
    assert_eq!(
        other["result"]["protocolVersion"],
        mc_search_core::mcp::PROTOCOL_VERSIONS[0]
    );
    // The notification sent by `initialize` got no answer: the next line
    // is the answer to the next request.
    assert_eq!(mcp.request("ping", json!({}))["result"], json!({}));

    let list = mcp.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().expect("a tool list");
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "ctx_search",
            "ctx_memory",
            "ctx_note",
            "ctx_expand",
            "ctx_reduce"
        ]
    );
    let required: Vec<Value> = tools
        .iter()
        .map(|t| t["inputSchema"]["required"].clone())
        .collect();
    assert_eq!(
        required,
        [
            json!(["query"]),
            json!(["action"]),
            Value::Null,
            json!(["target"]),
            json!(["drop"])
        ]
    );
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(tool["inputSchema"]["properties"].is_object(), "{tool}");
        assert!(
            tool["description"].as_str().is_some_and(|d| d.len() > 80),
            "a description written for the model: {tool}"
        );
    }
    let (status, stderr) = mcp.finish(EXIT_LIMIT);
    assert!(status.success(), "{status}: {stderr}");
}

#[test]
fn bad_requests_get_json_rpc_errors_and_the_server_stays_up() {
    let env = TestEnv::new();
    let dir = project(&env, "repo");
    let mut mcp = server(&env, &dir);
    mcp.initialize("2025-06-18");

    let expect_error = |mcp: &mut McpClient, raw: &[u8], code: i64| {
        mcp.send_raw(raw);
        let answer = mcp.recv();
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        answer
    };
    // Not JSON.
    let garbage = expect_error(
        &mut mcp,
        b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"meth\n",
        -32700,
    );
    assert_eq!(garbage["id"], Value::Null);
    // Not UTF-8: refused whole, nothing written.
    let mut invalid = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ctx_memory","arguments":{"action":"write","category":"NAMING","content":"bad "#.to_vec();
    invalid.extend_from_slice(b"\xff\xfe bytes\"}}}\n");
    expect_error(&mut mcp, &invalid, -32700);
    // Wrong params.
    for params in [
        json!({"name": "ctx_memory", "arguments": [1, 2]}),
        json!({"arguments": {}}),
        json!({"name": "ctx_delete_everything", "arguments": {}}),
    ] {
        let (_, line) = mcp.request_line("tools/call", params);
        expect_error(&mut mcp, line.as_bytes(), -32602);
    }
    // No such method; not JSON-RPC 2.0.
    let (_, line) = mcp.request_line("resources/subscribe", json!({}));
    expect_error(&mut mcp, line.as_bytes(), -32601);
    expect_error(
        &mut mcp,
        b"{\"jsonrpc\":\"1.0\",\"id\":9,\"method\":\"ping\"}\n",
        -32600,
    );
    // Arguments the tool refuses are the model's to correct: a tool error.
    let (text, is_error) = mcp.call_text("ctx_memory", json!({"action": "write", "content": "x"}));
    assert!(is_error, "{text}");
    assert!(text.contains("\"category\""), "{text}");
    let (text, is_error) = mcp.call_text(
        "ctx_memory",
        json!({"action": "write", "category": "FEELINGS", "content": "x"}),
    );
    assert!(is_error && text.contains("FEELINGS"), "{text}");

    // Still up, and nothing of the refused requests was written.
    assert_eq!(mcp.request("ping", json!({}))["result"], json!({}));
    let (text, is_error) = mcp.call_text("ctx_memory", json!({"action": "list"}));
    assert!(!is_error);
    assert_eq!(text, "No memories match.");
    let (status, stderr) = mcp.finish(EXIT_LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(memory_rows(&env), (0, 0, "ok".to_string()));
}

#[test]
fn a_client_that_closes_its_input_mid_call_gets_every_answer_and_the_server_exits() {
    let env = TestEnv::new();
    let dir = project(&env, "repo");
    let mut mcp = server(&env, &dir);
    mcp.initialize("2025-06-18");
    // Twenty writes in one burst, and the input closed right behind them:
    // the calls are in flight when the server sees the end of its input.
    let mut burst = Vec::new();
    for i in 0..20 {
        let (_, line) = mcp.request_line(
            "tools/call",
            json!({"name": "ctx_memory", "arguments": memory_write(&format!("Rule number {i}."))}),
        );
        burst.extend_from_slice(line.as_bytes());
    }
    mcp.send_raw(&burst);
    mcp.close_stdin();
    for i in 0..20 {
        let answer = mcp.recv();
        assert_eq!(
            answer["result"]["content"][0]["text"],
            format!(
                "Saved memory #{} in CONSTRAINTS. It joins your context at the next rebuild.",
                i + 1
            )
        );
    }
    let (status, stderr) = mcp.finish(EXIT_LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(memory_rows(&env), (20, 20, "ok".to_string()));
}

#[test]
fn a_client_that_dies_mid_call_leaves_no_half_write() {
    let env = TestEnv::new();
    let dir = project(&env, "repo");
    let burst = |mcp: &mut McpClient, from: usize| {
        let mut bytes = Vec::new();
        for i in from..from + 50 {
            let (_, line) = mcp.request_line(
                "tools/call",
                json!({"name": "ctx_memory", "arguments": memory_write(&format!("Fact {i}: {}.", "x".repeat(2000)))}),
            );
            bytes.extend_from_slice(line.as_bytes());
        }
        // The server may end before it has read everything (a broken pipe).
        let _ = mcp.try_send_raw(&bytes);
    };

    // The reader is gone before the first answer: the server's first write
    // fails with a broken pipe, and it ends quietly after that call.
    let mut command = env.db_command("mc-search", &["mcp", "--harness", "claude-code"]);
    command.current_dir(&dir);
    let mut unread = McpClient::spawn_unread(&mut command);
    burst(&mut unread, 0);
    let (status, stderr) = unread.finish(EXIT_LIMIT);
    assert!(
        status.success(),
        "a closed output is a clean end: {status}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (rows, indexed, integrity) = memory_rows(&env);
    assert_eq!(
        (rows, indexed, integrity.as_str()),
        (1, 1, "ok"),
        "the call in flight was written whole, nothing after it"
    );

    // Killed while calls are in flight: every write is whole or absent.
    let mut mcp = server(&env, &dir);
    mcp.initialize("2025-06-18");
    burst(&mut mcp, 100);
    let first = mcp.recv();
    assert_eq!(first["result"]["isError"], false, "{first}");
    mcp.kill();
    let _ = mcp.finish(EXIT_LIMIT);
    let (rows, indexed, integrity) = memory_rows(&env);
    assert_eq!(integrity, "ok");
    assert_eq!(rows, indexed, "a memory and its index entry go together");
    assert!((2..=51).contains(&rows), "{rows} memories");
    // The store is usable at once by the next server.
    let mut next = server(&env, &dir);
    let (text, is_error) = next.call_text("ctx_memory", json!({"action": "list", "limit": 1}));
    assert!(
        !is_error && text.starts_with("#1 [CONSTRAINTS] Fact 0:"),
        "{text}"
    );
}

#[test]
fn a_memory_of_another_project_is_invisible_through_mcp() {
    let env = TestEnv::new();
    let ours = project(&env, "ours");
    let theirs = project(&env, "theirs");
    let write = |dir: &Path, content: &str| {
        let out = env.run_db(
            "mc-search",
            &[
                "memory",
                "write",
                "--project-dir",
                dir.to_str().unwrap(),
                "--category",
                "CONSTRAINTS",
                "--content",
                content,
            ],
            "",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"]
            .as_i64()
            .unwrap()
    };
    let secret = write(&theirs, "The zebra password rotates on Mondays.");
    let own = write(&ours, "The lion build runs on every push.");

    let mut mcp = server(&env, &ours);
    mcp.initialize("2025-06-18");
    // By id: the same answer as an id that does not exist at all.
    let (shown, is_error) = mcp.call_text("ctx_memory", json!({"action": "show", "id": secret}));
    assert!(is_error, "{shown}");
    let (missing, _) = mcp.call_text("ctx_memory", json!({"action": "show", "id": 999}));
    assert_eq!(
        shown.replace(&format!("#{secret}"), "#N"),
        missing.replace("#999", "#N")
    );
    assert!(!shown.contains("zebra"), "{shown}");
    for args in [
        json!({"action": "update", "id": secret, "content": "Overwritten."}),
        json!({"action": "archive", "id": secret, "reason": "gone"}),
        json!({"action": "merge", "ids": [secret, own], "content": "Both."}),
    ] {
        let (text, is_error) = mcp.call_text("ctx_memory", args.clone());
        assert!(is_error, "{args}: {text}");
    }
    // By list and by search.
    let (list, _) = mcp.call_text("ctx_memory", json!({"action": "list"}));
    assert_eq!(
        list,
        format!("#{own} [CONSTRAINTS] The lion build runs on every push.")
    );
    let (found, _) = mcp.call_text("ctx_search", json!({"query": "zebra password"}));
    assert!(found.starts_with("No results"), "{found}");
    let (found, _) = mcp.call_text("ctx_search", json!({"query": "lion build"}));
    assert!(
        found.contains(&format!("memory #{own}")) || found.contains(&format!("#{own}")),
        "{found}"
    );
    assert!(!found.contains("zebra"), "{found}");
    let (status, stderr) = mcp.finish(EXIT_LIMIT);
    assert!(status.success(), "{status}: {stderr}");

    // Their memory is untouched.
    let out = env.run_db(
        "mc-search",
        &[
            "memory",
            "show",
            "--id",
            &secret.to_string(),
            "--project-dir",
            theirs.to_str().unwrap(),
        ],
        "",
    );
    assert!(out.status.success());
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["content"], "The zebra password rotates on Mondays.");
    assert_eq!(shown["status"], "active");
}
