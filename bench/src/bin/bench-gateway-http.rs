//! What `mc-transform gateway` adds to a Claude Code request: the captured
//! main-conversation request of the real Claude Code (`tests/testdata/
//! claude-code`, ~85 KB) sent `--runs` times to the fake Anthropic provider,
//! straight and through the gateway (the binary, on 127.0.0.1), one request
//! per connection as Claude Code's reach the gateway. Prints per-request
//! time (median, p90, first) and time to the first answer byte for both,
//! the difference, a JSON parse-and-write of the same body for scale, and
//! the gateway's memory. Nothing is asserted.
//!
//! Build the binaries first: `cargo build --release --workspace --features mc-bench/bench`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mc_tests::bench::percentiles;
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

fn request(host: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: {host}\r\ncontent-type: application/json\r\n\
         anthropic-version: 2023-06-01\r\nx-api-key: sk-ant-bench\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n",
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
}

fn main() -> ExitCode {
    let runs = <Cli as clap::Parser>::parse().runs;
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
        straight.push(once(&direct, &request(&direct, &body)));
        through.push(once(&via, &request(&via, &body)));
    }
    println!("{} requests of {} bytes each way", runs, body.len());
    let a = report("straight", &straight);
    let b = report("via gateway", &through);
    let mut parse: Vec<f64> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let value: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            let out = serde_json::to_vec(&value).expect("bytes");
            assert!(!out.is_empty());
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    let (p50, _) = percentiles(&mut parse);
    println!(
        "added by the gateway (median difference) {:.2} ms; JSON parse-and-write of the body {p50:.2} ms (ratio {:.2})",
        b - a,
        (b - a) / p50
    );
    let pid = gateway.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| "?".into())
    };
    println!(
        "gateway memory: RSS {}, peak {}",
        field("VmRSS:"),
        field("VmHWM:")
    );
    ExitCode::SUCCESS
}
