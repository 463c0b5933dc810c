//! A minimal MCP client over a child's stdio, for tests and the benchmark:
//! JSON-RPC 2.0, one message per line. Answers are read by a thread, so a
//! test can wait for one with a deadline instead of blocking forever.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long any single answer may take before the test fails (a guard
/// against a hung server, not a measurement).
pub const ANSWER_LIMIT: Duration = Duration::from_secs(60);

/// A spawned MCP server and the client's ends of its pipes.
pub struct McpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Option<Receiver<String>>,
    next_id: i64,
}

impl McpClient {
    /// Spawn `command` (e.g. `mc-search mcp`) with piped stdio; stderr is
    /// collected by [`McpClient::finish`].
    pub fn spawn(command: &mut Command) -> McpClient {
        McpClient::spawn_with(command, true)
    }

    /// Spawn `command` as a client that died before reading anything: the
    /// read end of the server's stdout is closed at once, so its first
    /// write fails with a broken pipe.
    pub fn spawn_unread(command: &mut Command) -> McpClient {
        McpClient::spawn_with(command, false)
    }

    fn spawn_with(command: &mut Command, read: bool) -> McpClient {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {command:?}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let lines = read.then(|| {
            let (tx, rx) = channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            rx
        });
        McpClient {
            child,
            stdin,
            lines,
            next_id: 0,
        }
    }

    /// Write raw bytes (one or more lines, or garbage) to the server.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.try_send_raw(bytes).expect("writing to the server");
    }

    /// [`McpClient::send_raw`] that reports a failure (a broken pipe when the
    /// server has ended) instead of failing the test.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().expect("stdin is still open");
        stdin.write_all(bytes)?;
        stdin.flush()
    }

    /// A request line with the next id; returns the id.
    pub fn request_line(&mut self, method: &str, params: Value) -> (i64, String) {
        self.next_id += 1;
        let message =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        (self.next_id, format!("{message}\n"))
    }

    /// Send a request without waiting for its answer; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> i64 {
        let (id, line) = self.request_line(method, params);
        self.send_raw(line.as_bytes());
        id
    }

    /// Send a notification (no id, never answered).
    pub fn notify(&mut self, method: &str) {
        let line = format!("{}\n", json!({"jsonrpc": "2.0", "method": method}));
        self.send_raw(line.as_bytes());
    }

    /// The next message from the server.
    pub fn recv(&mut self) -> Value {
        self.try_recv(ANSWER_LIMIT)
            .unwrap_or_else(|| panic!("the server sent nothing within {ANSWER_LIMIT:?}"))
    }

    /// The next message, or `None` when the server closed its output or
    /// sent nothing within `limit`.
    pub fn try_recv(&mut self, limit: Duration) -> Option<Value> {
        let lines = self.lines.as_ref().expect("stdout is still read");
        match lines.recv_timeout(limit) {
            Ok(line) => Some(serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("the server sent a line that is not JSON ({e}): {line}")
            })),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Send a request and wait for its answer (which must carry its id).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let answer = self.recv();
        assert_eq!(answer["id"], id, "answers come in order: {answer}");
        answer
    }

    /// `tools/call` of `name`; the JSON-RPC answer.
    pub fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// `tools/call` that must succeed at the protocol level: the text the
    /// model would read, and whether the tool reported an error.
    pub fn call_text(&mut self, name: &str, arguments: Value) -> (String, bool) {
        let answer = self.call(name, arguments);
        let result = &answer["result"];
        assert!(result.is_object(), "tools/call failed: {answer}");
        (
            result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            result["isError"] == true,
        )
    }

    /// The `initialize` handshake (and the `initialized` notification).
    pub fn initialize(&mut self, version: &str) -> Value {
        let answer = self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {},
                   "clientInfo": {"name": "mc-tests", "version": "0"}}),
        );
        self.notify("notifications/initialized");
        answer
    }

    /// Close the server's stdin (the client is done, or went away).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Kill the server (SIGKILL on Unix), as a crash or an OOM kill would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Wait for the server to exit (failing the test after `limit`); its exit
    /// status and everything it wrote on stderr.
    pub fn finish(mut self, limit: Duration) -> (ExitStatus, String) {
        self.stdin.take();
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the server") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the server was still running {limit:?} after its input closed");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
        }
        (status, stderr)
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
