//! What `mc-transform gateway` adds to a Claude Code request: the captured
//! main-conversation request of the real Claude Code (`tests/testdata/
//! claude-code`, ~85 KB) sent `--runs` times to the fake Anthropic provider,
//! straight and through the gateway (the binary, on 127.0.0.1), one request
//! per connection as Claude Code's reach the gateway. Prints per-request
//! time (median, p90, first) and time to the first answer byte for both,
//! the difference, a JSON parse-and-write of the same body for scale, and
//! the gateway's memory. With `--turns N` a Claude Code session follows
//! (bench-gateway's workload, two requests a turn, one session id, so mc's
//! pass runs on each), straight and through the gateway, request by
//! request, with the same figures and the gateway's memory at its end.
//! Nothing is asserted.
//!
//! Build the binaries first: `cargo build --release --workspace --features mc-bench/bench`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mc_tests::bench::{claude_code_body, claude_code_turn, percentiles};
use mc_tests::fake_provider::FakeProvider;
use mc_tests::gateway::{GatewayProcess, free_port, write_config};

/// One request on a new connection: (time to the first byte, whole time), ms.
fn once(addr: &str, raw: &[u8]) -> (f64, f64) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).ok();
    stream.write_all(raw).expect("send");
    let mut piece = [0u8; 16 * 1024];
    let n = stream.read(&mut piece).expect("an answer");
    let first = started.elapsed();
    let mut total = n;
    while let Ok(n) = stream.read(&mut piece) {
        if n == 0 {
            break;
        }
        total += n;
    }
    assert!(total > 0);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(first), ms(started.elapsed()))
}

fn request(host: &str, body: &[u8], session: Option<&str>) -> Vec<u8> {
    let session = session
        .map(|s| format!("x-claude-code-session-id: {s}\r\n"))
        .unwrap_or_default();
    let mut raw = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: {host}\r\ncontent-type: application/json\r\n\
         anthropic-version: 2023-06-01\r\nx-api-key: sk-ant-bench\r\nconnection: close\r\n\
         {session}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

fn report(name: &str, runs: &[(f64, f64)]) -> f64 {
    let mut ttfb: Vec<f64> = runs.iter().map(|r| r.0).collect();
    let mut total: Vec<f64> = runs.iter().map(|r| r.1).collect();
    let first = total[0];
    let (t50, t90) = percentiles(&mut total);
    let (f50, f90) = percentiles(&mut ttfb);
    println!(
        "{name:<16} request median {t50:.2} ms  p90 {t90:.2} ms  first {first:.2} ms   first byte median {f50:.2} ms  p90 {f90:.2} ms"
    );
    t50
}

/// Times what `mc-transform gateway` adds to a captured Claude Code request
/// sent to the fake provider, straight and through the gateway.
#[derive(clap::Parser)]
#[command(name = "bench-gateway-http")]
struct Cli {
    /// Requests sent each way.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Turns of a Claude Code session sent after them (0: none).
    #[arg(long, default_value_t = 0)]
    turns: usize,
    /// Size of each file the session reads, in KB.
    #[arg(long = "file-kb", default_value_t = 10)]
    file_kb: usize,
}

/// A JSON parse and write of `body`, in ms.
fn parse_and_write(body: &[u8]) -> f64 {
    let started = Instant::now();
    let value: serde_json::Value = serde_json::from_slice(body).expect("JSON");
    let out = serde_json::to_vec(&value).expect("bytes");
    assert!(!out.is_empty());
    started.elapsed().as_secs_f64() * 1000.0
}

/// The gateway's `VmRSS` and `VmHWM`.
fn memory(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| "?".into())
    };
    format!("RSS {}, peak {}", field("VmRSS:"), field("VmHWM:"))
}

/// `turns` turns of bench-gateway's workload in one session, each request
/// straight and through the gateway; prints the figures per request.
fn session(direct: &str, via: &str, turns: usize, kb: usize) {
    let mut messages = vec![serde_json::json!(
        {"role": "user", "content": [{"type": "text", "text": "Turn 0."}]}
    )];
    let (mut straight, mut through, mut added, mut parse) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut largest = 0;
    for t in 0..turns {
        let [call, result, answer, prompt] = claude_code_turn(t, kb);
        for step in [vec![call, result], vec![answer, prompt]] {
            messages.extend(step);
            let body = claude_code_body(&messages);
            largest = largest.max(body.len());
            let a = once(direct, &request(direct, &body, Some("bench-straight")));
            let b = once(via, &request(via, &body, Some("bench-session")));
            added.push(b.1 - a.1);
            straight.push(a);
            through.push(b);
            parse.push(parse_and_write(&body));
        }
    }
    println!(
        "a session of {turns} turns x two {kb} KB reads: {} requests each way, the largest {largest} bytes",
        straight.len()
    );
    report("straight", &straight);
    report("via gateway", &through);
    let (a50, a90) = percentiles(&mut added);
    let (p50, _) = percentiles(&mut parse);
    println!(
        "added by the gateway per request: median {a50:.2} ms, p90 {a90:.2} ms; JSON parse-and-write median {p50:.2} ms (ratio {:.2})",
        a50 / p50
    );
}

fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let runs = cli.runs;
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/testdata/claude-code/main-turn-1-tools.body.json"
    ))
    .expect("the captured request");
    let provider = FakeProvider::start();
    let direct = provider
        .base_url()
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let dir = tempfile::tempdir().expect("a temp folder");
    let config = write_config(dir.path(), &format!("http://{direct}"));
    let gateway = GatewayProcess::start(&config, dir.path(), free_port());
    let via = gateway.url().trim_start_matches("http://").to_string();
    // Alternate the two so machine noise falls on both alike.
    let (mut straight, mut through) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        straight.push(once(&direct, &request(&direct, &body, None)));
        through.push(once(&via, &request(&via, &body, None)));
    }
    println!("{} requests of {} bytes each way", runs, body.len());
    let a = report("straight", &straight);
    let b = report("via gateway", &through);
    let mut parse: Vec<f64> = (0..runs).map(|_| parse_and_write(&body)).collect();
    let (p50, _) = percentiles(&mut parse);
    println!(
        "added by the gateway (median difference) {:.2} ms; JSON parse-and-write of the body {p50:.2} ms (ratio {:.2})",
        b - a,
        (b - a) / p50
    );
    let pid = gateway.pid();
    println!("gateway memory: {}", memory(pid));
    if cli.turns > 0 {
        provider.auto_usage();
        session(&direct, &via, cli.turns, cli.file_kb);
        println!("gateway memory after the session: {}", memory(pid));
    }
    ExitCode::SUCCESS
}
