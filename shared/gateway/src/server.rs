//! The server: a listener on loopback, a bounded queue, a fixed pool of
//! workers, and one request per connection from head to the answer's last
//! byte.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mc_base::domain::gateway::{Answer, Api, Call, Forward, Pass};
use mc_base::{Error, Result};

use crate::config::{Config, OPENAI_PREFIX, check_listen};
use crate::http::{self, Framing, Head, HeadError};
use crate::upstream;
use crate::usage::UsageScanner;

/// The one path the gateway answers itself (`GET`): that it is mc's
/// gateway, its upstream and its counters, for launchers and the doctor.
/// Anthropic's API has no such path, so no request meant for it is lost.
pub const STATUS_PATH: &str = "/_mc/gateway";

/// The most of a non-streamed answer kept to read its usage.
const MAX_MESSAGE: usize = 8 * 1024 * 1024;

/// What the gateway has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests answered (forwarded, or refused with an error of ours).
    pub served: u64,
    /// Connections refused with 503 because every worker was busy and the queue full.
    pub busy: u64,
    /// Calls whose pass failed or panicked (sent untouched).
    pub pass_failed: u64,
    /// Answers cut because the client went away (the upstream call was dropped).
    pub client_gone: u64,
}

#[derive(Default)]
struct Counters {
    served: AtomicU64,
    busy: AtomicU64,
    pass_failed: AtomicU64,
    client_gone: AtomicU64,
    /// When the newest Messages call arrived (the clock's ms; 0: none yet).
    last_messages_ms: AtomicI64,
}

/// What every worker shares.
struct Shared {
    config: Config,
    pass: Arc<dyn Pass>,
    agent: ureq::Agent,
    counters: Counters,
    /// When it started (the clock's ms).
    started_ms: i64,
}

/// A running gateway. Dropping it stops it (requests in flight finish).
pub struct Gateway {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Listen on `config.listen` (loopback only) and serve with `pass`.
    /// Port `0` picks a free one ([`Gateway::addr`] says which).
    pub fn start(config: Config, pass: Arc<dyn Pass>) -> Result<Gateway> {
        check_listen(&config.listen)?;
        let listener = TcpListener::bind(config.listen).map_err(|e| {
            let taken = e.kind() == std::io::ErrorKind::AddrInUse;
            let error = Error::Io(e).context(format!("listening on {}", config.listen));
            if taken {
                error.with_hint(
                    "another process holds that port (a gateway already running?): \
                     stop it, or choose another address with --listen or gateway.listen",
                )
            } else {
                error
            }
        })?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            agent: upstream::agent(&config)?,
            pass,
            counters: Counters::default(),
            started_ms: (config.clock)(),
            config,
        });
        let limits = shared.config.limits;
        let (sender, receiver) = sync_channel::<TcpStream>(limits.queue.max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        let mut workers = Vec::with_capacity(limits.workers);
        for i in 0..limits.workers.max(1) {
            let receiver = receiver.clone();
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("gateway-{i}"))
                .spawn(move || work(&receiver, &shared))
                .map_err(|e| Error::Io(e).context("starting the gateway's workers"))?;
            workers.push(thread);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let stop = stop.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("gateway-accept".into())
                .spawn(move || accept_loop(&listener, &sender, &stop, &shared))
                .map_err(|e| Error::Io(e).context("starting the gateway's listener"))?
        };
        Ok(Gateway {
            addr,
            stop,
            shared,
            accept: Some(accept),
            workers,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            served: c.served.load(Ordering::Relaxed),
            busy: c.busy.load(Ordering::Relaxed),
            pass_failed: c.pass_failed.load(Ordering::Relaxed),
            client_gone: c.client_gone.load(Ordering::Relaxed),
        }
    }

    /// Serve until the process ends.
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        // The queue's sender went with the accept loop: workers finish what
        // they hold and end.
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    sender: &SyncSender<TcpStream>,
    stop: &AtomicBool,
    shared: &Shared,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            // EMFILE and the like: wait a little rather than spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        match sender.try_send(stream) {
            Ok(()) => {}
            Err(TrySendError::Full(mut stream)) => {
                shared.counters.busy.fetch_add(1, Ordering::Relaxed);
                let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = http::write_error(
                    &mut stream,
                    503,
                    "overloaded_error",
                    "every worker is busy and the queue is full; retry shortly",
                );
                let _ = stream.shutdown(Shutdown::Write);
            }
            Err(TrySendError::Disconnected(_)) => break,
        }
    }
}

fn work(receiver: &Mutex<Receiver<TcpStream>>, shared: &Shared) {
    loop {
        let next = receiver.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(stream) = next else { return };
        // A panic here is a bug of ours; it must not take the worker down.
        let _ = catch_unwind(AssertUnwindSafe(|| serve(stream, shared)));
    }
}

/// Serve one connection: one request and its answer.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let limits = shared.config.limits;
    let _ = stream.set_read_timeout(Some(limits.client_read));
    let _ = stream.set_write_timeout(Some(limits.client_write));
    let _ = stream.set_nodelay(true);
    let counters = &shared.counters;
    let refuse = |stream: &mut TcpStream, status: u16, kind: &str, message: &str| {
        counters.served.fetch_add(1, Ordering::Relaxed);
        let _ = http::write_error(stream, status, kind, message);
        let _ = stream.shutdown(Shutdown::Write);
    };
    let head = match http::read_head(&mut stream, limits.max_head) {
        Ok(head) => head,
        Err(HeadError::Closed | HeadError::Io) => return,
        Err(HeadError::TooLarge) => {
            let message = format!("the request head is over {} bytes", limits.max_head);
            return refuse(&mut stream, 431, "invalid_request_error", &message);
        }
        Err(HeadError::Bad(why)) => {
            return refuse(&mut stream, 400, "invalid_request_error", &why);
        }
    };
    if head.method == "GET" && head.target == STATUS_PATH {
        counters.served.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({
            "gateway": "mc",
            "version": env!("CARGO_PKG_VERSION"),
            "upstream": shared.config.upstream.base(),
            "openai_upstream": shared.config.openai_upstream.as_ref().map(|u| u.base()),
            "served": counters.served.load(Ordering::Relaxed),
            "busy": counters.busy.load(Ordering::Relaxed),
            "pass_failed": counters.pass_failed.load(Ordering::Relaxed),
            "client_gone": counters.client_gone.load(Ordering::Relaxed),
            "pid": std::process::id(),
            "started_ms": shared.started_ms,
            "last_messages_ms": match counters.last_messages_ms.load(Ordering::Relaxed) {
                0 => serde_json::Value::Null,
                ms => serde_json::json!(ms),
            },
        })
        .to_string();
        let headers = [("content-type".to_string(), b"application/json".to_vec())];
        let _ = http::write_head(
            &mut stream,
            200,
            &headers,
            Framing::Length(body.len() as u64),
        )
        .and_then(|()| stream.write_all(body.as_bytes()));
        let _ = stream.shutdown(Shutdown::Write);
        return;
    }
    let Some((api, url)) = route(&shared.config, &head.target) else {
        let message = "the request target must be a path (/v1/messages): the gateway forwards \
                       only to its configured upstream and is not a proxy";
        return refuse(&mut stream, 400, "invalid_request_error", message);
    };
    if head.header("transfer-encoding").is_some() {
        let message = "a chunked request body is not supported; send content-length";
        return refuse(&mut stream, 411, "invalid_request_error", message);
    }
    let length = match content_length(&head) {
        Ok(length) => length,
        Err(message) => return refuse(&mut stream, 400, "invalid_request_error", &message),
    };
    if length > limits.max_body as u64 {
        let message = format!(
            "the request body is {length} bytes, over the gateway's limit of {} (the provider's own)",
            limits.max_body
        );
        refuse(&mut stream, 413, "request_too_large", &message);
        drain(&mut stream, length);
        return;
    }
    if head
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        let _ = stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let body = match read_body(&mut stream, &head, length as usize) {
        Ok(body) => body,
        Err(got) => {
            let message = format!("the request body ended after {got} of {length} bytes");
            return refuse(&mut stream, 400, "invalid_request_error", &message);
        }
    };
    forward(stream, shared, &head, api, &url, body);
}

/// Which wire a request target speaks and its upstream URL: under
/// [`OPENAI_PREFIX`] Codex's (the prefix off, to the OpenAI upstream), else
/// Anthropic's. `None`: not a path.
fn route(config: &Config, target: &str) -> Option<(Api, String)> {
    if let Some(openai) = &config.openai_upstream
        && let Some(rest) = target.strip_prefix(OPENAI_PREFIX)
        && (rest.starts_with('/') || rest.starts_with('?'))
    {
        let rest = if rest.starts_with('?') {
            format!("/{rest}")
        } else {
            rest.to_string()
        };
        return Some((Api::OpenAiResponses, openai.url_for(&rest)?));
    }
    Some((Api::AnthropicMessages, config.upstream.url_for(target)?))
}

fn content_length(head: &Head) -> std::result::Result<u64, String> {
    let mut values = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| {
            std::str::from_utf8(v)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
    let first = values.next();
    let Some(first) = first else { return Ok(0) };
    let Some(first) = first else {
        return Err("content-length is not a number".into());
    };
    if values.any(|v| v != Some(first)) {
        return Err("the request has conflicting content-length headers".into());
    }
    Ok(first)
}

/// The body: what came with the head, then the rest from the socket, read
/// straight into the body's buffer. `Err(n)`: the client stopped after `n`
/// bytes (it closed, or sent nothing for the read timeout).
fn read_body(
    stream: &mut TcpStream,
    head: &Head,
    length: usize,
) -> std::result::Result<Vec<u8>, usize> {
    let mut body = Vec::with_capacity(length);
    body.extend_from_slice(head.rest.get(..length).unwrap_or(&head.rest));
    let left = (length - body.len()) as u64;
    match Read::take(&mut *stream, left).read_to_end(&mut body) {
        Ok(_) if body.len() == length => Ok(body),
        _ => Err(body.len()),
    }
}

/// Read and discard up to `length` bytes (a refused body), so the client
/// reads the refusal rather than a reset; bounded in time by the read timeout.
fn drain(stream: &mut TcpStream, length: u64) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut piece = vec![0u8; 64 * 1024];
    let mut left = length;
    while left > 0 {
        match stream.read(&mut piece) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n as u64),
        }
    }
}

/// Whether a request is a call the pass sees: a Messages call (not a
/// token count), or a Responses one.
fn sees_pass(api: Api, method: &str, target: &str) -> bool {
    let path = target.split('?').next().unwrap_or_default();
    method == "POST"
        && match api {
            Api::AnthropicMessages => path == "/v1/messages",
            Api::OpenAiResponses => path.strip_prefix(OPENAI_PREFIX) == Some("/responses"),
        }
}

/// Header names and their raw values.
type RawHeaders = Vec<(String, Vec<u8>)>;

/// The headers that go upstream (all but hop-by-hop ones and
/// `accept-encoding`, names lower-cased) and those the pass may see (the
/// same without credentials, UTF-8 only).
fn request_headers(head: &Head) -> (RawHeaders, Vec<(String, String)>) {
    let connection = head.connection_tokens();
    let lower: Vec<String> = head
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    let mut upstream_headers = Vec::with_capacity(head.headers.len());
    let mut pass_headers = Vec::new();
    for ((_, value), name) in head.headers.iter().zip(&lower) {
        if http::is_hop_by_hop(name, &connection) || name == "accept-encoding" {
            continue;
        }
        upstream_headers.push((name.clone(), value.clone()));
        if !http::is_credential(name)
            && let Ok(text) = std::str::from_utf8(value)
        {
            pass_headers.push((name.clone(), text.to_string()));
        }
    }
    (upstream_headers, pass_headers)
}

/// The pass's body for a call, or `None` to send the original: untouched,
/// or the pass failed or panicked (counted, as is a failed pass's fallback).
fn run_pass(shared: &Shared, call: &Call<'_>) -> Option<Vec<u8>> {
    match catch_unwind(AssertUnwindSafe(|| shared.pass.request(call))) {
        Ok(Ok(Forward::Body(body))) => Some(body),
        Ok(Ok(Forward::Untouched)) => None,
        Ok(Ok(Forward::Fallback(body))) => {
            shared.counters.pass_failed.fetch_add(1, Ordering::Relaxed);
            Some(body)
        }
        Ok(Err(_)) | Err(_) => {
            shared.counters.pass_failed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The harness and session a call of `api` names.
fn whose<'a>(shared: &'a Shared, head: &'a Head, api: Api) -> (&'a str, Option<&'a str>) {
    match api {
        Api::AnthropicMessages => (
            shared.config.harness.as_str(),
            head.header("x-claude-code-session-id"),
        ),
        // Codex 0.169 names the session `session-id`; older builds `session_id`.
        Api::OpenAiResponses => (
            "codex",
            head.header("session-id")
                .or_else(|| head.header("session_id")),
        ),
    }
}

fn forward(
    mut stream: TcpStream,
    shared: &Shared,
    head: &Head,
    api: Api,
    url: &str,
    original: Vec<u8>,
) {
    let counters = &shared.counters;
    let (upstream_headers, pass_headers) = request_headers(head);
    let sees_pass = sees_pass(api, &head.method, &head.target);
    let (harness, session_id) = whose(shared, head, api);
    let call = Call {
        api,
        harness,
        session_id,
        path: &head.target,
        headers: &pass_headers,
        body: &original,
        now_ms: (shared.config.clock)(),
    };
    let rewritten = if sees_pass {
        // What the doctor compares with Claude Code's newest turn.
        if matches!(api, Api::AnthropicMessages) {
            counters
                .last_messages_ms
                .fetch_max(call.now_ms, Ordering::Relaxed);
        }
        run_pass(shared, &call)
    } else {
        None
    };
    let body = rewritten.as_deref().unwrap_or(&original);
    counters.served.fetch_add(1, Ordering::Relaxed);
    let response = match upstream::send(&shared.agent, &head.method, url, &upstream_headers, body) {
        Ok(response) => response,
        Err(failed) => {
            let _ = http::write_error(&mut stream, failed.status, failed.kind, &failed.message);
            let _ = stream.shutdown(Shutdown::Write);
            return;
        }
    };
    let (parts, body) = response.into_parts();
    let status = parts.status.as_u16();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let decoded = header("content-encoding")
        .is_some_and(|e| matches!(e.trim().to_ascii_lowercase().as_str(), "gzip" | "br"));
    let streaming = header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
    let upstream_connection: Vec<String> = header("connection")
        .map(|v| {
            v.split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default();
    let mut answer_headers = Vec::with_capacity(parts.headers.len());
    for (name, value) in &parts.headers {
        let name = name.as_str();
        if http::is_hop_by_hop(name, &upstream_connection)
            || (decoded && name == "content-encoding")
        {
            continue;
        }
        answer_headers.push((name.to_string(), value.as_bytes().to_vec()));
    }
    let length = header("content-length").and_then(|v| v.trim().parse::<u64>().ok());
    let bodiless = head.method == "HEAD" || status == 204 || status == 304 || status < 200;
    let framing = match (bodiless, length) {
        (true, _) => {
            if let Some(n) = length {
                answer_headers.push(("content-length".into(), n.to_string().into_bytes()));
            }
            Framing::None
        }
        (false, Some(n)) if !decoded => Framing::Length(n),
        _ => Framing::Chunked,
    };
    if http::write_head(&mut stream, status, &answer_headers, framing).is_err() {
        counters.client_gone.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut scanner = UsageScanner::default();
    let mut kept = Vec::new();
    let keep_limit = if status >= 400 {
        shared.config.limits.error_prefix
    } else if streaming {
        0
    } else {
        MAX_MESSAGE
    };
    let mut kept_all = true;
    if framing != Framing::None {
        let mut reader = body.into_reader();
        let mut piece = vec![0u8; 16 * 1024];
        loop {
            let n = match reader.read(&mut piece) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // The upstream broke off: the client sees a cut answer
                // (no final chunk), and nothing is learned from it.
                Err(_) => return,
            };
            let bytes = piece.get(..n).unwrap_or_default();
            if streaming {
                scanner.feed(bytes);
            }
            if kept.len() < keep_limit {
                let room = keep_limit - kept.len();
                kept.extend_from_slice(bytes.get(..room).unwrap_or(bytes));
                kept_all &= n <= room;
            } else if keep_limit > 0 {
                kept_all = false;
            }
            let written = match framing {
                Framing::Chunked => http::write_chunk(&mut stream, bytes),
                _ => stream.write_all(bytes).and_then(|()| stream.flush()),
            };
            if written.is_err() {
                // The client went away: dropping the reader closes the
                // upstream connection, which cancels the call.
                counters.client_gone.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if framing == Framing::Chunked && stream.write_all(b"0\r\n\r\n").is_err() {
            counters.client_gone.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
    if sees_pass {
        let usage = if streaming {
            scanner.usage()
        } else if status < 400 && kept_all {
            UsageScanner::from_message(&kept)
        } else {
            None
        };
        let answer = Answer {
            status,
            usage,
            error_body: if status >= 400 {
                Some(kept.as_slice())
            } else {
                scanner.failure()
            },
        };
        let _ = catch_unwind(AssertUnwindSafe(|| shared.pass.answered(&call, &answer)));
    }
}
