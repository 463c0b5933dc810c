//! Test support other crates' tests build on (the `testkit` feature): a
//! small fake `/v1/embeddings` server of our own on 127.0.0.1 (the OpenAI
//! wire format), with its faults.
#![allow(clippy::indexing_slicing, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::embed::{Backend, Provider};

/// How the fake answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Vectors of `dims` numbers (concept counts, see [`concepts`]), named `model`.
    Fine,
    /// A 500 for the next `n` requests, then fine.
    Busy(usize),
    /// Vectors one number longer than asked.
    WrongLength,
    /// Another model's name.
    WrongModel,
    /// Not JSON.
    Garbage,
    /// Fine, after this long.
    Slow(Duration),
}

pub struct Fake {
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    /// Every request's body.
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

pub const DIMS: usize = 3;
pub const MODEL: &str = "fake-embed";

/// A toy meaning: vehicles, paperwork, anything else.
fn concepts(text: &str) -> Vec<f64> {
    let mut v = vec![0.0; DIMS];
    for word in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
        let dim = match word {
            "" => continue,
            "car" | "automobile" | "motor" | "engine" | "repair" => 0,
            "insurance" | "paperwork" | "form" | "due" => 1,
            _ => 2,
        };
        v[dim] += 1.0;
    }
    v
}

impl Fake {
    pub fn start(mode: Mode) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(mode));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, r, s) = (mode.clone(), requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (m, r) = (m.clone(), r.clone());
                std::thread::spawn(move || serve(stream, &m, &r));
            }
        });
        Fake {
            port,
            mode,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    pub fn provider(&self) -> Provider {
        Provider {
            name: format!("local/{MODEL}"),
            backend: Backend::Endpoint {
                url: format!("http://127.0.0.1:{}/v1/embeddings", self.port),
                model: MODEL.into(),
                key: Some("k-test".into()),
                connect_timeout: Duration::from_secs(2),
            },
            dimensions: None,
            batch_size: 2,
            timeout: Duration::from_secs(5),
            query_timeout: Duration::from_millis(300),
            retries: 2,
            index: Default::default(),
        }
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(stream: TcpStream, mode: &Mutex<Mode>, requests: &Mutex<Vec<Value>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    let mut authorized = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower == "authorization: bearer k-test" {
            authorized = true;
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    requests.lock().unwrap().push(request.clone());
    let current = {
        let mut m = mode.lock().unwrap();
        let now = m.clone();
        if let Mode::Busy(n) = *m {
            *m = if n <= 1 {
                Mode::Fine
            } else {
                Mode::Busy(n - 1)
            };
        }
        now
    };
    let texts: Vec<String> = request["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let data = |extra: usize| -> Value {
        // Out of order on purpose: the index says which text a vector is for.
        let mut items: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut v = concepts(t);
                v.extend(std::iter::repeat_n(0.5, extra));
                json!({"object": "embedding", "index": i, "embedding": v})
            })
            .collect();
        items.reverse();
        json!(items)
    };
    let (status, text) = match current {
        _ if !authorized => (401, json!({"error": "no key"}).to_string()),
        Mode::Busy(_) => (500, json!({"error": "busy"}).to_string()),
        Mode::Garbage => (200, "<html>oops</html>".to_string()),
        Mode::WrongModel => (
            200,
            json!({"object": "list", "model": "other-model", "data": data(0)}).to_string(),
        ),
        Mode::WrongLength => (
            200,
            json!({"object": "list", "model": MODEL, "data": data(1)}).to_string(),
        ),
        Mode::Slow(d) => {
            std::thread::sleep(d);
            (
                200,
                json!({"object": "list", "model": MODEL, "data": data(0)}).to_string(),
            )
        }
        Mode::Fine => (
            200,
            json!({"object": "list", "model": MODEL, "data": data(0),
                   "usage": {"prompt_tokens": 1, "total_tokens": 1}})
            .to_string(),
        ),
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// The test model's folder (`scripts/test-model` lays it out under
/// `target/`); a test that needs it fails, saying how to get it.
pub fn test_model() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-model/wordllama-l2-supercat-256");
    assert!(
        dir.join(crate::embed::local::WEIGHTS).is_file(),
        "no test model in {}: run scripts/test-model (it takes the wordllama wheel from PyPI)",
        dir.display()
    );
    dir
}
