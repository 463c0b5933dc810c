//! A resident `mc-transform serve` driven one request at a time, and a client
//! of its incremental envelope as an adapter would run it: for tests and the
//! benchmark.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use mc_transform_core::incremental::{fingerprint, same};
use serde_json::{Map, Value, json};

/// How long a test waits for one answer before it fails (a guard against a
/// hang, never a measure of speed).
const ANSWER_GUARD: Duration = Duration::from_secs(120);

/// A running `mc-transform serve`.
pub struct Served {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
}

impl Served {
    /// Start `command` (an `mc-transform … serve` command) with piped stdio;
    /// stderr is discarded.
    pub fn start(command: &mut Command) -> Served {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mc-transform serve");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Served {
            child,
            stdin,
            answers,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Write raw bytes (a request line must end with `\n`).
    pub fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).expect("write to serve");
        stdin.flush().expect("flush to serve");
    }

    /// The next answer line; panics when none comes within the guard.
    pub fn answer(&mut self) -> String {
        self.answers
            .recv_timeout(ANSWER_GUARD)
            .expect("mc-transform serve answered within the guard")
    }

    /// Send one request line and read its answer.
    pub fn request(&mut self, line: &str) -> String {
        assert!(!line.contains('\n'), "a request is one line");
        self.send(format!("{line}\n").as_bytes());
        self.answer()
    }

    /// Send `value` with `"kind": kind` as one request line; its answer.
    pub fn call(&mut self, kind: &str, value: &Value) -> String {
        self.request(&request_line(kind, value))
    }

    /// Close stdin and wait for the process to end.
    pub fn close(mut self) -> ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("wait for serve")
    }

    /// Kill the process (a crash).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `value` (a JSON object) with `"kind": kind` first, as one compact line.
pub fn request_line(kind: &str, value: &Value) -> String {
    let mut map = Map::new();
    map.insert("kind".into(), json!(kind));
    if let Value::Object(fields) = value {
        map.extend(fields.clone());
    }
    serde_json::to_string(&map).expect("a request serialises")
}

/// What a client of the incremental envelope keeps per session: the last
/// input it sent and the last output it was answered, under their key.
#[derive(Default)]
pub struct Incremental {
    next: u64,
    base: Option<Base>,
    /// How the last call was sent: whole (`false`) or as a delta (`true`),
    /// and the resync reason when the server asked for the whole envelope.
    pub last_sent_delta: bool,
    pub last_resync: Option<String>,
    /// The fingerprints of the last line's envelope's messages: the next
    /// base's index (each message fingerprinted once a call).
    sent: Option<HashMap<u128, usize>>,
}

struct Base {
    key: String,
    input: Vec<Value>,
    output: Vec<Value>,
    /// The first index of each input message's fingerprint.
    at: HashMap<u128, usize>,
}

/// The first index of each fingerprint in `prints`.
fn index_of(prints: impl Iterator<Item = u128>) -> HashMap<u128, usize> {
    let mut at = HashMap::new();
    for (i, print) in prints.enumerate() {
        at.entry(print).or_insert(i);
    }
    at
}

impl Incremental {
    /// Forget the baseline (the next call is sent whole).
    pub fn reset(&mut self) {
        self.base = None;
    }

    fn key(&mut self) -> String {
        self.next += 1;
        format!("k{}", self.next)
    }

    /// The request line for `envelope` (which carries `session_id` and
    /// `messages`): a delta against the baseline when there is one, else
    /// the whole envelope that starts one. `tamper` may change the delta's
    /// `incremental` object (to inject a doubt).
    pub fn line(
        &mut self,
        envelope: &Value,
        tamper: impl FnOnce(&mut Map<String, Value>),
    ) -> String {
        let key = self.key();
        self.sent = None;
        let mut fields = envelope.as_object().cloned().unwrap_or_default();
        let mut incremental = Map::new();
        incremental.insert("key".into(), json!(key));
        self.last_sent_delta = false;
        if let Some(base) = &self.base {
            let messages = fields
                .shift_remove("messages")
                .and_then(|m| m.as_array().cloned())
                .unwrap_or_default();
            // Equal bytes (the fingerprints match, and the values, keys in
            // their order): the first such message of the base.
            let prints: Vec<u128> = messages.iter().map(fingerprint).collect();
            let refs: Vec<Value> = messages
                .into_iter()
                .zip(&prints)
                .map(|(m, print)| match base.at.get(print) {
                    Some(&i) if same(&base.input[i], &m) => json!(i),
                    _ => m,
                })
                .collect();
            self.sent = Some(index_of(prints.into_iter()));
            incremental.insert("base".into(), json!(base.key));
            incremental.insert("base_len".into(), json!(base.input.len()));
            incremental.insert("messages".into(), Value::Array(refs));
            self.last_sent_delta = true;
        }
        tamper(&mut incremental);
        fields.insert("incremental".into(), Value::Object(incremental));
        request_line("pass", &Value::Object(fields))
    }

    /// One pass through `served`: the answer as the one-shot pass would
    /// print it (the delta's references resolved), or `Err(answer)` for an
    /// error line. A resync is followed at once by the whole envelope.
    pub fn pass(&mut self, served: &mut Served, envelope: &Value) -> Result<String, String> {
        self.pass_value(served, envelope)
            .map(|doc| serde_json::to_string(&doc).expect("serialises"))
    }

    /// [`Incremental::pass`], the answer as a value.
    pub fn pass_value(&mut self, served: &mut Served, envelope: &Value) -> Result<Value, String> {
        self.last_resync = None;
        let line = self.line(envelope, |_| {});
        let mut answer = served.request(&line);
        let mut key = key_of(&line);
        let mut delta = self.last_sent_delta;
        let resync = serde_json::from_str::<Value>(&answer)
            .ok()
            .and_then(|v| v.get("resync").and_then(Value::as_str).map(str::to_string));
        if let Some(reason) = resync {
            self.last_resync = Some(reason);
            self.base = None;
            let line = self.line(envelope, |_| {});
            key = key_of(&line);
            delta = false;
            answer = served.request(&line);
        }
        self.settle_value(envelope, &answer, key, delta)
    }

    /// Take `answer` to a request made by [`Incremental::line`] with `key`
    /// (`delta`: sent as a delta): the whole answer, and the new baseline.
    pub fn settle(
        &mut self,
        envelope: &Value,
        answer: &str,
        key: String,
        delta: bool,
    ) -> Result<String, String> {
        self.settle_value(envelope, answer, key, delta)
            .map(|doc| serde_json::to_string(&doc).expect("serialises"))
    }

    /// [`Incremental::settle`], the answer as a value.
    pub fn settle_value(
        &mut self,
        envelope: &Value,
        answer: &str,
        key: String,
        delta: bool,
    ) -> Result<Value, String> {
        let mut doc: Map<String, Value> = match serde_json::from_str(answer) {
            Ok(Value::Object(doc)) => doc,
            _ => {
                self.base = None;
                return Err(answer.to_string());
            }
        };
        if doc.contains_key("error") || doc.contains_key("resync") {
            self.base = None;
            return Err(answer.to_string());
        }
        if doc["pass"]["decision"] == "wait" {
            self.base = None;
            return Ok(Value::Object(doc));
        }
        let output: Vec<Value> = if delta {
            let previous = &self.base.as_ref().expect("a delta has a base").output;
            doc["messages"]
                .as_array()
                .expect("the answer has messages")
                .iter()
                .map(|m| match m.as_u64() {
                    Some(i) => previous
                        .get(i as usize)
                        .cloned()
                        .expect("a reference into the previous output"),
                    None => m.clone(),
                })
                .collect()
        } else {
            doc["messages"].as_array().cloned().unwrap_or_default()
        };
        doc.insert("messages".into(), Value::Array(output.clone()));
        let input = envelope["messages"].as_array().cloned().unwrap_or_default();
        let at = self
            .sent
            .take()
            .unwrap_or_else(|| index_of(input.iter().map(fingerprint)));
        self.base = Some(Base {
            key,
            input,
            output,
            at,
        });
        Ok(Value::Object(doc))
    }
}

fn key_of(line: &str) -> String {
    let value: Value = serde_json::from_str(line).expect("the request is JSON");
    value["incremental"]["key"]
        .as_str()
        .expect("the request has a key")
        .to_string()
}
