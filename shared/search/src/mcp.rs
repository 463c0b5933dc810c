//! The Model Context Protocol, server side, over a byte stream (stdio in
//! `mc-search mcp`): JSON-RPC 2.0, one message per line. `initialize` with
//! version negotiation, `ping`, `tools/list`, `tools/call`; notifications are
//! taken and never answered. Whatever arrives — bad JSON, bytes that are not
//! UTF-8, a wrong method, bad params, an oversized line — gets a JSON-RPC
//! error and the server stays up;
//! it ends when the input ends or the client stops reading.
//!
//! A small loop of our own rather than an SDK crate: the maintained Rust SDK
//! needs an async runtime, and the four methods a tool server must answer are
//! a page of code. It is tested against the real Claude Code as the client.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

use mc_base::error::Result;
use mc_base::lines::{Line, Lines};

/// Protocol versions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The longest message accepted (bytes); a longer line is answered with an
/// error and skipped.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;

/// One tool as a `tools/list` entry describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Value,
}

/// A tool's answer: the text for the model, and whether it reports a failure
/// the model should see (bad arguments, an unknown id).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub is_error: bool,
    /// The structured result (what the CLI prints for the same request).
    pub data: Value,
}

/// What the server serves: the tool list and the calls.
pub trait Tools {
    fn specs(&self) -> Vec<ToolSpec>;
    /// Run a tool. `Err` with an input kind is a JSON-RPC invalid-params error
    /// (an unknown tool); any other `Err` an internal error. A failure the
    /// model should read comes back as an `Answer` with `is_error`.
    fn call(&mut self, name: &str, arguments: &Value) -> Result<Answer>;
    /// [`Tools::call`] with the request's `_meta` (what the client says about
    /// the call: Codex names its session there). Defaults to `call`.
    fn call_with_meta(&mut self, name: &str, arguments: &Value, meta: &Value) -> Result<Answer> {
        let _ = meta;
        self.call(name, arguments)
    }
}

/// Who the server says it is.
pub struct ServerInfo {
    pub name: &'static str,
    pub version: &'static str,
    /// Said to the client at `initialize` (how to use the tools).
    pub instructions: Option<String>,
}

/// The newest version both sides speak: the client's when we speak it, else ours.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| PROTOCOL_VERSIONS.iter().find(|v| **v == r).copied())
        .unwrap_or(PROTOCOL_VERSIONS[0])
}

/// Serve until the input ends. Returns `Ok` on end of input or a closed
/// output (the client went away); an I/O error otherwise.
pub fn serve(
    input: impl BufRead,
    mut output: impl Write,
    tools: &mut dyn Tools,
    info: &ServerInfo,
) -> std::io::Result<()> {
    let mut lines = Lines::new(input, MAX_MESSAGE_BYTES);
    loop {
        let answer = match lines.next_line()? {
            Line::End => return Ok(()),
            Line::TooLong(_) => Some(error(
                Value::Null,
                INVALID_REQUEST,
                &format!("message longer than {MAX_MESSAGE_BYTES} bytes"),
            )),
            // JSON-RPC text is UTF-8: a message that is not is refused
            // whole rather than written with replacement characters.
            Line::NotUtf8 { valid_up_to, .. } => Some(error(
                Value::Null,
                PARSE_ERROR,
                &format!("the message is not UTF-8 (an invalid byte at offset {valid_up_to})"),
            )),
            Line::Text(text) if text.trim().is_empty() => continue,
            Line::Text(text) => handle_text(text.trim(), tools, info),
        };
        if let Some(answer) = answer {
            let mut bytes = serde_json::to_vec(&answer).unwrap_or_default();
            bytes.push(b'\n');
            match output.write_all(&bytes).and_then(|()| output.flush()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}

/// The answer to one line of input (`None` for notifications).
pub fn handle_text(text: &str, tools: &mut dyn Tools, info: &ServerInfo) -> Option<Value> {
    let message: Value = match serde_json::from_str(&mc_base::json::repair_lone_surrogates(text)) {
        Ok(v) => v,
        Err(e) => return Some(error(Value::Null, PARSE_ERROR, &format!("not JSON: {e}"))),
    };
    match message {
        Value::Array(batch) => {
            if batch.is_empty() {
                return Some(error(Value::Null, INVALID_REQUEST, "empty batch"));
            }
            let answers: Vec<Value> = batch
                .into_iter()
                .filter_map(|m| handle(m, tools, info))
                .collect();
            (!answers.is_empty()).then_some(Value::Array(answers))
        }
        other => handle(other, tools, info),
    }
}

fn handle(message: Value, tools: &mut dyn Tools, info: &ServerInfo) -> Option<Value> {
    let Value::Object(map) = message else {
        return Some(error(
            Value::Null,
            INVALID_REQUEST,
            "a message must be a JSON object",
        ));
    };
    let id = map.get("id").cloned();
    let Some(method) = map.get("method").and_then(Value::as_str) else {
        // A response from the client (we never ask it anything) needs no answer.
        if map.contains_key("result") || map.contains_key("error") {
            return None;
        }
        return Some(error(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "no \"method\"",
        ));
    };
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return id.map(|id| error(id, INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\""));
    }
    // Notifications (no id) are never answered, whatever they are.
    let id = id?;
    if !(id.is_string() || id.is_i64() || id.is_u64()) {
        return Some(error(
            Value::Null,
            INVALID_REQUEST,
            "\"id\" must be a string or an integer",
        ));
    }
    let params = map.get("params").cloned().unwrap_or(Value::Null);
    Some(match method {
        "initialize" => {
            let requested = params.get("protocolVersion").and_then(Value::as_str);
            let mut result = json!({
                "protocolVersion": negotiate(requested),
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": info.name, "version": info.version},
            });
            if let (Some(text), Some(map)) = (&info.instructions, result.as_object_mut()) {
                map.insert("instructions".into(), json!(text));
            }
            success(id, result)
        }
        "ping" => success(id, json!({})),
        "tools/list" => {
            let list: Vec<Value> = tools
                .specs()
                .into_iter()
                .map(|t| {
                    json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema})
                })
                .collect();
            success(id, json!({"tools": list}))
        }
        "tools/call" => {
            let Some(name) = params.get("name").and_then(Value::as_str) else {
                return Some(error(id, INVALID_PARAMS, "tools/call needs params.name"));
            };
            let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
            if !(arguments.is_object() || arguments.is_null()) {
                return Some(error(
                    id,
                    INVALID_PARAMS,
                    "params.arguments must be an object",
                ));
            }
            let meta = params.get("_meta").unwrap_or(&Value::Null);
            match tools.call_with_meta(name, &arguments, meta) {
                Ok(answer) => success(
                    id,
                    json!({
                        "content": [{"type": "text", "text": answer.text}],
                        "isError": answer.is_error,
                    }),
                ),
                Err(e) if e.kind() == mc_base::error::ErrorKind::Input => {
                    error(id, INVALID_PARAMS, &e.to_string())
                }
                Err(e) => error(id, INTERNAL_ERROR, &format!("{e:#}")),
            }
        }
        "resources/list" => success(id, json!({"resources": []})),
        "prompts/list" => success(id, json!({"prompts": []})),
        other => error(id, METHOD_NOT_FOUND, &format!("unknown method {other:?}")),
    })
}

fn success(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::error::Error;

    struct Echo {
        calls: usize,
    }

    impl Tools for Echo {
        fn specs(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "echo",
                description: "says it back",
                input_schema: json!({"type": "object"}),
            }]
        }
        fn call(&mut self, name: &str, arguments: &Value) -> Result<Answer> {
            self.calls += 1;
            match name {
                "echo" => Ok(Answer {
                    text: arguments.to_string(),
                    is_error: false,
                    data: Value::Null,
                }),
                "broken" => Err(Error::Internal("boom".into())),
                _ => Err(Error::input(format!("unknown tool {name:?}"))),
            }
        }
    }

    const INFO: ServerInfo = ServerInfo {
        name: "test",
        version: "0.0.0",
        instructions: None,
    };

    fn run(input: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut tools = Echo { calls: 0 };
        serve(input.as_bytes(), &mut out, &mut tools, &INFO).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_session_initializes_lists_and_calls() {
        let out = run(concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
            "\n"
        ));
        assert_eq!(out.len(), 4, "the notification is not answered: {out:?}");
        assert_eq!(out[0]["result"]["protocolVersion"], "2025-06-18");
        assert_eq!(
            out[0]["result"]["capabilities"]["tools"]["listChanged"],
            false
        );
        assert_eq!(out[1]["result"]["tools"][0]["name"], "echo");
        assert_eq!(
            out[1]["result"]["tools"][0]["inputSchema"]["type"],
            "object"
        );
        assert_eq!(out[2]["id"], "three");
        assert_eq!(out[2]["result"]["content"][0]["text"], r#"{"a":1}"#);
        assert_eq!(out[2]["result"]["isError"], false);
        assert_eq!(out[3]["result"], json!({}));
    }

    #[test]
    fn versions_are_negotiated() {
        assert_eq!(negotiate(Some("2024-11-05")), "2024-11-05");
        assert_eq!(negotiate(Some("2099-01-01")), PROTOCOL_VERSIONS[0]);
        assert_eq!(negotiate(None), PROTOCOL_VERSIONS[0]);
    }

    #[test]
    fn every_fault_is_an_error_answer_and_the_server_stays_up() {
        let out = run(concat!(
            "not json\n",
            "[]\n",
            "42\n",
            r#"{"jsonrpc":"2.0","id":1}"#,
            "\n",
            r#"{"jsonrpc":"1.0","id":2,"method":"ping"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":[1]}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"missing"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"broken"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#,
            "\n"
        ));
        let codes: Vec<Value> = out.iter().map(|m| m["error"]["code"].clone()).collect();
        assert_eq!(
            codes,
            vec![
                json!(-32700),
                json!(-32600),
                json!(-32600),
                json!(-32600),
                json!(-32600),
                json!(-32601),
                json!(-32602),
                json!(-32602),
                json!(-32602),
                json!(-32603),
                json!(-32600),
                Value::Null
            ]
        );
        assert_eq!(out[11]["result"], json!({}), "still answering at the end");
    }

    #[test]
    fn an_oversized_line_is_refused_and_skipped() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"pad\":\"{}\"}}\n",
            "x".repeat(MAX_MESSAGE_BYTES + 10)
        );
        let out = run(&format!(
            "{big}{}\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#
        ));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["error"]["code"], -32600);
        assert_eq!(
            out[0]["error"]["message"],
            format!("message longer than {MAX_MESSAGE_BYTES} bytes")
        );
        assert_eq!(out[1]["id"], 2);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_refused_whole() {
        let mut input = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":""#.to_vec();
        input.extend_from_slice(b"\xff\xfe\"}}}\n");
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n");
        let mut out = Vec::new();
        let mut tools = Echo { calls: 0 };
        serve(&input[..], &mut out, &mut tools, &INFO).unwrap();
        let out: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(out[0]["error"]["code"], -32700, "{out:?}");
        assert_eq!(
            out[0]["error"]["message"],
            "the message is not UTF-8 (an invalid byte at offset 88)"
        );
        assert_eq!(tools.calls, 0, "the tool never ran");
        assert_eq!(out[1]["id"], 2);
    }

    #[test]
    fn batches_answer_their_requests_only() {
        let out = run(concat!(
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
            "\n"
        ));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_closed_output_ends_the_server_quietly() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut tools = Echo { calls: 0 };
        let input = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n".repeat(3);
        serve(input.as_bytes(), Closed, &mut tools, &INFO).unwrap();
    }
}
