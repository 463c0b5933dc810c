//! The gateway's HTTP side against a fake upstream of ours on 127.0.0.1 that
//! speaks raw HTTP/1.1 (so it can stream slowly, hang, reset or answer
//! garbage), with a raw client (so nothing buffers or retries for us).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mc_base::domain::envelope::Usage;
use mc_base::domain::gateway::{Answer, Api, Call, Forward, Identity, Pass};
use mc_gateway::{Config, Gateway, Limits, Upstream};

/// A request as the fake upstream received it: head and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;
/// What the pass was shown: the session and the headers.
type Seen = (Option<String>, Vec<(String, String)>);
/// What the pass learned: status, usage, error body.
type Learned = (u16, Option<Usage>, Option<Vec<u8>>);

const KEY: &str = "sk-ant-api03-THE-TEST-KEY";

/// How the fake upstream answers.
#[derive(Clone)]
enum Behaviour {
    /// SSE events, `gap` apart, chunked.
    Stream { events: Vec<String>, gap: Duration },
    /// A whole answer with this status and JSON body.
    Whole { status: u16, body: String },
    /// Read the request, never answer.
    Hang,
    /// Read the request, send half a head, close the connection.
    Reset,
    /// Read the request, answer bytes that are not HTTP.
    Garbage,
}

struct FakeUpstream {
    addr: SocketAddr,
    /// Every request as received: head and body.
    requests: Received,
    /// A streamed answer could not be written to the end: the gateway closed.
    cancelled: Arc<AtomicBool>,
}

impl FakeUpstream {
    fn start(behaviour: Behaviour) -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let behaviour = Arc::new(Mutex::new(behaviour));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let cancelled = Arc::new(AtomicBool::new(false));
        {
            let (behaviour, requests, cancelled) =
                (behaviour.clone(), requests.clone(), cancelled.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    let (behaviour, requests, cancelled) =
                        (behaviour.clone(), requests.clone(), cancelled.clone());
                    std::thread::spawn(move || {
                        upstream_serve(stream, &behaviour, &requests, &cancelled)
                    });
                }
            });
        }
        FakeUpstream {
            addr,
            requests,
            cancelled,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> Vec<(String, Vec<u8>)> {
        self.requests.lock().unwrap().clone()
    }
}

fn upstream_serve(
    stream: TcpStream,
    behaviour: &Mutex<Behaviour>,
    requests: &Mutex<Vec<(String, Vec<u8>)>>,
    cancelled: &AtomicBool,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    requests.lock().unwrap().push((head, body));
    let behaviour = behaviour.lock().unwrap().clone();
    let mut out = stream;
    match behaviour {
        Behaviour::Stream { events, gap } => {
            let _ = out.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nrequest-id: req_1\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n",
            );
            for event in events {
                let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                if out
                    .write_all(chunk.as_bytes())
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    cancelled.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(gap);
            }
            let _ = out.write_all(b"0\r\n\r\n");
        }
        Behaviour::Whole { status, body } => {
            let _ = write!(
                out,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nx-should-arrive: yes\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        }
        Behaviour::Hang => std::thread::sleep(Duration::from_secs(30)),
        Behaviour::Reset => {
            // Half a head, then the connection goes.
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\ncontent-");
            let _ = out.shutdown(Shutdown::Both);
        }
        Behaviour::Garbage => {
            let _ = out.write_all(b"\x00\x01 not http at all\r\n\r\n");
        }
    }
}

fn sse(kind: &str, data: &str) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

fn events() -> Vec<String> {
    vec![
        sse(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":7,"cache_creation_input_tokens":11,"cache_read_input_tokens":900,"output_tokens":1}}}"#,
        ),
        sse("ping", r#"{"type":"ping"}"#),
        sse(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
        ),
        sse(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}"#,
        ),
        sse("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

/// A pass that records what it was shown and what it learned.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Seen>>,
    /// The wire and harness of each call shown.
    wires: Mutex<Vec<(Api, String)>>,
    answers: Mutex<Vec<Learned>>,
    /// What `request` does: 0 untouched, 1 rewrite, 2 error, 3 panic.
    mode: AtomicUsize,
}

impl Pass for Recorder {
    fn request(&self, call: &Call<'_>) -> mc_base::Result<Forward> {
        self.seen
            .lock()
            .unwrap()
            .push((call.session_id.map(str::to_string), call.headers.to_vec()));
        self.wires
            .lock()
            .unwrap()
            .push((call.api, call.harness.to_string()));
        match self.mode.load(Ordering::SeqCst) {
            1 => Ok(Forward::Body(b"{\"rewritten\":true}".to_vec())),
            2 => Err(mc_base::Error::Internal("the pass failed".into())),
            3 => panic!("the pass panicked"),
            _ => Ok(Forward::Untouched),
        }
    }

    fn answered(&self, _call: &Call<'_>, answer: &Answer<'_>) {
        self.answers.lock().unwrap().push((
            answer.status,
            answer.usage,
            answer.error_body.map(<[u8]>::to_vec),
        ));
    }
}

fn config(upstream: &str, limits: Limits) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstream: Upstream::parse(upstream).unwrap(),
        openai_upstream: Some(Upstream::parse_openai(&format!("{upstream}/oa")).unwrap()),
        limits,
        harness: "claude-code".into(),
        proxy: None,
        clock: Arc::new(|| 1_700_000_000_000),
    }
}

fn quick() -> Limits {
    Limits {
        upstream_read: Duration::from_secs(2),
        client_read: Duration::from_secs(2),
        ..Limits::default()
    }
}

fn start(upstream: &FakeUpstream, pass: Arc<dyn Pass>) -> Gateway {
    Gateway::start(config(&upstream.url(), quick()), pass).unwrap()
}

/// A Messages request as Claude Code sends it.
fn request(target: &str, body: &[u8], extra: &str) -> Vec<u8> {
    let mut raw = format!(
        "POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nanthropic-version: 2023-06-01\r\n\
         anthropic-beta: claude-code-20250219,oauth-2025-04-20\r\nx-api-key: {KEY}\r\n\
         X-Claude-Code-Session-Id: s-1\r\ncontent-type: application/json\r\n{extra}\
         content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// Send raw bytes, read the whole answer (until the gateway closes).
fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

const BODY: &[u8] =
    br#"{"model":"claude-opus-4-8","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

#[test]
fn a_messages_call_goes_upstream_byte_for_byte_with_its_headers_and_streams_back() {
    let upstream = FakeUpstream::start(Behaviour::Stream {
        events: events(),
        gap: Duration::ZERO,
    });
    let pass = Arc::new(Recorder::default());
    let gateway = start(&upstream, pass.clone());
    let answer = exchange(gateway.addr(), &request("/v1/messages?beta=true", BODY, ""));
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.contains("request-id: req_1"), "{answer}");
    assert!(answer.contains("transfer-encoding: chunked"), "{answer}");
    for event in events() {
        assert!(answer.contains(&event), "{event} missing from {answer}");
    }
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    let (head, body) = &requests[0];
    assert_eq!(body, BODY);
    assert!(
        head.starts_with("POST /v1/messages?beta=true HTTP/1.1\r\n"),
        "{head}"
    );
    let lower = head.to_ascii_lowercase();
    for line in [
        "anthropic-version: 2023-06-01",
        "anthropic-beta: claude-code-20250219,oauth-2025-04-20",
        &format!("x-api-key: {}", KEY.to_ascii_lowercase()),
        "x-claude-code-session-id: s-1",
        &format!("host: {}", upstream.addr),
        "accept-encoding: identity",
    ] {
        assert!(lower.contains(line), "{line} missing upstream:\n{head}");
    }
    // The pass saw the session, never the credential.
    let seen = pass.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0.as_deref(), Some("s-1"));
    assert!(
        seen[0]
            .1
            .iter()
            .all(|(n, v)| n != "x-api-key" && !v.contains(KEY))
    );
    assert!(seen[0].1.iter().any(|(n, _)| n == "anthropic-beta"));
    // It learned the streamed usage.
    drop(gateway);
    let answers = pass.answers.lock().unwrap().clone();
    assert_eq!(
        answers,
        [(
            200,
            Some(Usage {
                input: 7,
                cache_read: 900,
                cache_write: 11,
                output: 42
            }),
            None
        )]
    );
}

#[test]
fn a_bearer_login_is_forwarded_and_hidden_from_the_pass() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: r#"{"type":"message","usage":{"input_tokens":3,"output_tokens":4}}"#.into(),
    });
    let pass = Arc::new(Recorder::default());
    let gateway = start(&upstream, pass.clone());
    let raw = request(
        "/v1/messages",
        BODY,
        "authorization: Bearer sk-ant-oat01-LOGIN\r\n",
    );
    let answer = exchange(gateway.addr(), &raw);
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(
        upstream.requests()[0]
            .0
            .contains("authorization: Bearer sk-ant-oat01-LOGIN")
    );
    let seen = pass.seen.lock().unwrap().clone();
    assert!(
        seen[0]
            .1
            .iter()
            .all(|(n, v)| n != "authorization" && !v.contains("LOGIN"))
    );
    drop(gateway);
    let answers = pass.answers.lock().unwrap().clone();
    assert_eq!(answers[0].1.map(|u| (u.input, u.output)), Some((3, 4)));
}

#[test]
fn the_client_sees_the_first_event_before_the_upstream_sends_the_last() {
    let upstream = FakeUpstream::start(Behaviour::Stream {
        events: events(),
        gap: Duration::from_millis(400),
    });
    let gateway = start(&upstream, Arc::new(Identity));
    let mut stream = TcpStream::connect(gateway.addr()).unwrap();
    let started = Instant::now();
    stream
        .write_all(&request("/v1/messages", BODY, ""))
        .unwrap();
    let mut seen = Vec::new();
    let mut piece = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("message_start") {
        let n = stream.read(&mut piece).unwrap();
        assert!(n > 0, "closed before the first event");
        seen.extend_from_slice(&piece[..n]);
    }
    // Five events 400 ms apart: the last leaves the upstream after 1.6 s.
    let first = started.elapsed();
    assert!(
        first < Duration::from_millis(1200),
        "the first event came after {first:?}"
    );
    let _ = stream.read_to_end(&mut seen);
    assert!(String::from_utf8_lossy(&seen).contains("message_stop"));
}

#[test]
fn a_client_that_goes_away_cancels_the_upstream_call_and_nothing_is_learned() {
    let mut many = events();
    let filler = sse("ping", r#"{"type":"ping"}"#);
    many.splice(2..2, std::iter::repeat_n(filler, 200));
    let upstream = FakeUpstream::start(Behaviour::Stream {
        events: many,
        gap: Duration::from_millis(20),
    });
    let pass = Arc::new(Recorder::default());
    let gateway = start(&upstream, pass.clone());
    {
        let mut stream = TcpStream::connect(gateway.addr()).unwrap();
        stream
            .write_all(&request("/v1/messages", BODY, ""))
            .unwrap();
        let mut piece = [0u8; 512];
        let _ = stream.read(&mut piece).unwrap();
        stream.shutdown(Shutdown::Both).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(4);
    while !upstream.cancelled.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        upstream.cancelled.load(Ordering::SeqCst),
        "the upstream kept streaming to nobody"
    );
    assert_eq!(gateway.stats().client_gone, 1);
    drop(gateway);
    assert!(
        pass.answers.lock().unwrap().is_empty(),
        "a cut answer was learned"
    );
}

#[test]
fn upstream_errors_reach_the_client_unchanged_and_the_pass_learns_them() {
    let overflow = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    for (code, body) in [(400, overflow), (529, overloaded)] {
        let upstream = FakeUpstream::start(Behaviour::Whole {
            status: code,
            body: body.into(),
        });
        let pass = Arc::new(Recorder::default());
        let gateway = start(&upstream, pass.clone());
        let answer = exchange(gateway.addr(), &request("/v1/messages", BODY, ""));
        assert_eq!(status(&answer), code, "{answer}");
        assert!(answer.ends_with(body), "{answer}");
        assert!(answer.contains("x-should-arrive: yes"), "{answer}");
        drop(gateway);
        let answers = pass.answers.lock().unwrap().clone();
        assert_eq!(answers, [(code, None, Some(body.as_bytes().to_vec()))]);
    }
}

#[test]
fn a_failing_or_panicking_pass_sends_the_original_bytes() {
    let upstream = FakeUpstream::start(Behaviour::Stream {
        events: events(),
        gap: Duration::ZERO,
    });
    let pass = Arc::new(Recorder::default());
    let gateway = start(&upstream, pass.clone());
    for mode in [1, 2, 3] {
        pass.mode.store(mode, Ordering::SeqCst);
        let answer = exchange(gateway.addr(), &request("/v1/messages", BODY, ""));
        assert_eq!(status(&answer), 200, "mode {mode}: {answer}");
    }
    let bodies: Vec<Vec<u8>> = upstream.requests().into_iter().map(|(_, b)| b).collect();
    assert_eq!(bodies[0], b"{\"rewritten\":true}");
    assert_eq!(bodies[1], BODY);
    assert_eq!(bodies[2], BODY);
    assert_eq!(gateway.stats().pass_failed, 2);
}

#[test]
fn token_counts_and_other_paths_are_forwarded_without_the_pass() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: r#"{"input_tokens":12}"#.into(),
    });
    let pass = Arc::new(Recorder::default());
    let gateway = start(&upstream, pass.clone());
    let answer = exchange(
        gateway.addr(),
        &request("/v1/messages/count_tokens?beta=true", BODY, ""),
    );
    assert!(answer.ends_with(r#"{"input_tokens":12}"#), "{answer}");
    let head = exchange(
        gateway.addr(),
        b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Bun/1.4.0\r\n\r\n",
    );
    assert_eq!(status(&head), 200, "{head}");
    let requests = upstream.requests();
    assert!(
        requests[0]
            .0
            .starts_with("POST /v1/messages/count_tokens?beta=true ")
    );
    assert!(requests[1].0.starts_with("HEAD / "));
    assert!(pass.seen.lock().unwrap().is_empty());
}

#[test]
fn codex_s_responses_calls_go_to_the_openai_upstream_through_the_pass() {
    let completed = r#"{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":5000,"input_tokens_details":{"cached_tokens":4096},"output_tokens":33}}}"#;
    let upstream = FakeUpstream::start(Behaviour::Stream {
        events: vec![
            sse("response.created", r#"{"type":"response.created"}"#),
            sse("response.completed", completed),
        ],
        gap: Duration::ZERO,
    });
    let pass = Arc::new(Recorder::default());
    let gateway = start(&upstream, pass.clone());
    let body = br#"{"model":"gpt-5","input":[],"stream":true}"#;
    let mut raw = format!(
        "POST /openai/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nauthorization: Bearer {KEY}\r\n\
         session-id: thread-1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    let answer = exchange(gateway.addr(), &raw);
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.contains("response.completed"), "{answer}");
    // Codex's models list goes the same way, without the pass.
    let models = exchange(
        gateway.addr(),
        b"GET /openai/models?client_version=0.169.0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    );
    assert_eq!(status(&models), 200, "{models}");
    // An Anthropic call on the same gateway still goes to its own upstream.
    exchange(gateway.addr(), &request("/v1/messages", BODY, ""));
    drop(gateway);
    let requests = upstream.requests();
    assert!(
        requests[0].0.starts_with("POST /oa/responses "),
        "{}",
        requests[0].0
    );
    assert!(
        requests[0]
            .0
            .contains(&format!("authorization: Bearer {KEY}"))
    );
    assert_eq!(requests[0].1, body);
    assert!(
        requests[1]
            .0
            .starts_with("GET /oa/models?client_version=0.169.0 ")
    );
    assert!(requests[2].0.starts_with("POST /v1/messages "));
    let wires = pass.wires.lock().unwrap().clone();
    assert_eq!(
        wires,
        [
            (Api::OpenAiResponses, "codex".to_string()),
            (Api::AnthropicMessages, "claude-code".to_string())
        ]
    );
    let seen = pass.seen.lock().unwrap().clone();
    assert_eq!(seen[0].0.as_deref(), Some("thread-1"));
    assert!(seen[0].1.iter().all(|(n, _)| n != "authorization"));
    let answers = pass.answers.lock().unwrap().clone();
    let usage = Usage {
        input: 904,
        cache_read: 4096,
        cache_write: 0,
        output: 33,
    };
    assert_eq!(answers[0], (200, Some(usage), None));
}

#[test]
fn a_failed_responses_stream_teaches_the_pass_its_error() {
    let failed = r#"{"type":"response.failed","response":{"error":{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model."}}}"#;
    let upstream = FakeUpstream::start(Behaviour::Stream {
        events: vec![sse("response.failed", failed)],
        gap: Duration::ZERO,
    });
    let pass = Arc::new(Recorder::default());
    let gateway = start(&upstream, pass.clone());
    let body = br#"{"input":[]}"#;
    let mut raw = format!(
        "POST /openai/responses HTTP/1.1\r\nHost: x\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    let answer = exchange(gateway.addr(), &raw);
    assert!(answer.contains("context_length_exceeded"), "{answer}");
    drop(gateway);
    let answers = pass.answers.lock().unwrap().clone();
    let error: serde_json::Value = serde_json::from_slice(answers[0].2.as_ref().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "context_length_exceeded");
}

#[test]
fn the_request_never_chooses_the_upstream() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: "{}".into(),
    });
    let elsewhere = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: "{}".into(),
    });
    let gateway = start(&upstream, Arc::new(Identity));
    // Another host in Host: still the configured upstream, with its own Host.
    let raw = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\ncontent-length: 2\r\n\r\n{{}}",
        elsewhere.addr
    );
    assert_eq!(status(&exchange(gateway.addr(), raw.as_bytes())), 200);
    assert!(
        upstream.requests()[0]
            .0
            .contains(&format!("host: {}", upstream.addr))
    );
    // An absolute target is refused, not followed.
    let absolute = format!(
        "GET http://{}/v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        elsewhere.addr
    );
    let answer = exchange(gateway.addr(), absolute.as_bytes());
    assert_eq!(status(&answer), 400, "{answer}");
    assert!(answer.contains("not a proxy"), "{answer}");
    assert!(elsewhere.requests().is_empty());
    assert_eq!(upstream.requests().len(), 1);
}

#[test]
fn bad_requests_get_clear_errors_and_never_reach_the_upstream() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: "{}".into(),
    });
    let gateway = start(&upstream, Arc::new(Identity));
    let addr = gateway.addr();
    // Not HTTP.
    let answer = exchange(addr, b"\x16\x03\x01\x02\x00 hello\r\n\r\n");
    assert_eq!(status(&answer), 400, "{answer}");
    // A body cut short: the client stops after 10 of 100 bytes.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(
            b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-length: 100\r\n\r\n0123456789",
        )
        .unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert_eq!(status(&answer), 400, "{answer}");
    assert!(answer.contains("ended after 10 of 100 bytes"), "{answer}");
    // Chunked request bodies are refused.
    let answer = exchange(
        addr,
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert_eq!(status(&answer), 411, "{answer}");
    assert!(upstream.requests().is_empty());
}

#[test]
fn a_body_that_is_not_json_is_forwarded_untouched() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 400,
        body: r#"{"type":"error","error":{"type":"invalid_request_error","message":"There was an issue with your request"}}"#.into(),
    });
    let gateway = start(&upstream, Arc::new(Identity));
    let answer = exchange(gateway.addr(), &request("/v1/messages", b"{not json", ""));
    assert_eq!(status(&answer), 400);
    assert!(answer.contains("There was an issue"), "{answer}");
    assert_eq!(upstream.requests()[0].1, b"{not json");
}

#[test]
fn a_64_mib_request_gets_a_413_that_the_client_can_read() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: "{}".into(),
    });
    let gateway = start(&upstream, Arc::new(Identity));
    let body = vec![b'a'; 64 * 1024 * 1024];
    let mut stream = TcpStream::connect(gateway.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let writer = {
        let mut stream = stream.try_clone().unwrap();
        let raw = request("/v1/messages", &body, "");
        std::thread::spawn(move || {
            let _ = stream.write_all(&raw);
        })
    };
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let _ = writer.join();
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status(&answer), 413, "{answer}");
    assert!(answer.contains("request_too_large"), "{answer}");
    assert!(upstream.requests().is_empty());
}

#[test]
fn an_upstream_that_hangs_resets_or_babbles_gets_a_clear_error_without_the_key() {
    for (behaviour, code) in [
        (Behaviour::Hang, 504),
        (Behaviour::Reset, 502),
        (Behaviour::Garbage, 502),
    ] {
        let upstream = FakeUpstream::start(behaviour);
        let gateway = start(&upstream, Arc::new(Identity));
        let started = Instant::now();
        let answer = exchange(gateway.addr(), &request("/v1/messages", BODY, ""));
        assert_eq!(status(&answer), code, "{answer}");
        assert!(answer.contains("mc gateway: the upstream"), "{answer}");
        assert!(!answer.contains(KEY), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    // Nothing listening upstream at all.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let gateway = Gateway::start(config(&url, quick()), Arc::new(Identity)).unwrap();
    let answer = exchange(gateway.addr(), &request("/v1/messages", BODY, ""));
    assert_eq!(status(&answer), 502, "{answer}");
    assert!(answer.contains("could not be reached"), "{answer}");
}

#[test]
fn a_burst_of_a_thousand_requests_is_served_by_a_bounded_pool() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: "{}".into(),
    });
    let limits = Limits {
        workers: 8,
        ..quick()
    };
    let gateway = Gateway::start(config(&upstream.url(), limits), Arc::new(Identity)).unwrap();
    let addr = gateway.addr();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            std::thread::spawn(move || {
                (0..50)
                    .map(|_| status(&exchange(addr, &request("/v1/messages", b"{}", ""))))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let codes: Vec<u16> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    assert_eq!(codes.len(), 1000);
    assert!(codes.iter().all(|&c| c == 200 || c == 503), "{codes:?}");
    let stats = gateway.stats();
    assert_eq!(
        stats.served + stats.busy,
        1000,
        "every request got an answer: {stats:?}"
    );
    assert_eq!(upstream.requests().len() as u64, stats.served);
}

#[test]
fn a_full_queue_answers_503_at_once() {
    let upstream = FakeUpstream::start(Behaviour::Hang);
    let limits = Limits {
        workers: 1,
        queue: 1,
        ..quick()
    };
    let gateway = Gateway::start(config(&upstream.url(), limits), Arc::new(Identity)).unwrap();
    let addr = gateway.addr();
    // One hangs in the worker, one waits in the queue, the third is refused.
    let held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&request("/v1/messages", BODY, "")).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            s
        })
        .collect();
    let started = Instant::now();
    let answer = exchange(addr, &request("/v1/messages", BODY, ""));
    assert_eq!(status(&answer), 503, "{answer}");
    assert!(answer.contains("overloaded_error"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(1));
    drop(held);
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut config = config("http://127.0.0.1:9", Limits::default());
    config.listen = taken.local_addr().unwrap();
    let error = Gateway::start(config, Arc::new(Identity)).err().unwrap();
    assert_eq!(error.kind(), mc_base::error::ErrorKind::Unavailable);
    let text = format!("{error:#}");
    assert!(text.contains("listening on 127.0.0.1:"), "{text}");
    assert!(
        error.hints().iter().any(|h| h.contains("--listen")),
        "{:?}",
        error.hints()
    );
}

#[test]
fn a_non_loopback_address_is_refused() {
    let mut config = config("http://127.0.0.1:9", Limits::default());
    config.listen = "0.0.0.0:0".parse().unwrap();
    let error = Gateway::start(config, Arc::new(Identity)).err().unwrap();
    assert!(error.to_string().contains("loopback only"), "{error}");
}

#[test]
fn the_status_path_says_it_is_mc_s_gateway_and_where_it_forwards() {
    let upstream = FakeUpstream::start(Behaviour::Whole {
        status: 200,
        body: "{}".into(),
    });
    let gateway = start(&upstream, Arc::new(Identity));
    let answer = exchange(
        gateway.addr(),
        format!(
            "GET {} HTTP/1.1\r\nHost: x\r\n\r\n",
            mc_gateway::STATUS_PATH
        )
        .as_bytes(),
    );
    assert_eq!(status(&answer), 200, "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let status: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(status["gateway"], "mc");
    assert_eq!(status["upstream"], upstream.url());
    assert!(
        upstream.requests().is_empty(),
        "answered by the gateway itself"
    );
}
