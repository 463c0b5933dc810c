//! bench-claude-code: the real pinned Claude Code through a scripted
//! tool-heavy session (each turn reads two files of ~10 KB, then answers),
//! twice in one run: straight to the fake Anthropic provider, and with
//! `mc-transform gateway` in front of it. Prints the share of request bytes
//! a prefix cache serves (the fake reports cache reads by common prefix) and
//! its ratio, the largest request against the window, Claude Code's own
//! compactions, the time the gateway adds to each request (median, p90,
//! first) against a JSON parse and write of the same body, the time to the
//! answer's first byte both ways, and the gateway's memory. Nothing is
//! asserted: it prints figures.
//!
//! Timing: a relay of ours sits on each side of the gateway (and, in the run
//! without mc, the same two relays back to back), so "added" is the time
//! from the request's last byte leaving the client-side relay to its last
//! byte reaching the provider-side one, on one clock.
//!
//! Needs the workspace built in release (`cargo build --release --workspace
//! --features mc-bench/bench`) and the pinned Claude Code (`npm install
//! --prefix tests/e2e`).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mc_tests::bench::{CacheFigures, misses, percentiles};
use mc_tests::claude::{ClaudeCode, Options};
use mc_tests::fake_provider::{Recorded, Reply};
use mc_tests::gateway::{GatewayProcess, free_port, write_config};
use mc_tests::opencode::cache_key;
use serde_json::json;

/// Drives the real Claude Code through a scripted session without mc and
/// through mc's gateway, and compares what the provider received.
#[derive(clap::Parser)]
#[command(name = "bench-claude-code")]
struct Args {
    /// User turns in the session (each: two file reads, then an answer)
    #[arg(long, value_name = "N", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    turns: u64,
    /// Size of each file the agent reads, in KB
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    file_kb: u64,
    /// Per request: size, share, first difference
    #[arg(long)]
    detail: bool,
}

/// The window of the Claude models (the gateway's default and Claude Code's).
const WINDOW: u64 = 200_000;

/// One request as a relay saw it pass.
#[derive(Debug, Clone)]
struct Stamp {
    target: String,
    /// The request's body (`POST /v1/messages` only).
    body: Vec<u8>,
    /// Its last byte read from the client.
    read: Instant,
    /// Its last byte written on to the server.
    written: Instant,
    /// The answer's first byte from the server.
    first_byte: Option<Instant>,
}

/// A TCP relay on 127.0.0.1 that passes bytes on as they come and stamps
/// each HTTP request (content-length bodies) and its answer's first byte.
struct TimingRelay {
    url: String,
    stamps: Arc<Mutex<Vec<Stamp>>>,
}

impl TimingRelay {
    fn start(target: &str) -> TimingRelay {
        let upstream = target.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let stamps = Arc::new(Mutex::new(Vec::new()));
        let shared = stamps.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (upstream, stamps) = (upstream.clone(), shared.clone());
                std::thread::spawn(move || relay(client, &upstream, &stamps));
            }
        });
        TimingRelay { url, stamps }
    }

    /// The `POST /v1/messages` requests it passed, in order.
    fn messages(&self) -> Vec<Stamp> {
        let mut stamps = self.stamps.lock().unwrap().clone();
        stamps.retain(|s| s.target.split('?').next() == Some("/v1/messages"));
        stamps.sort_by_key(|s| s.written);
        stamps
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Relay one client connection: requests one after another (keep-alive),
/// answers copied back by a second thread that stamps the first byte after
/// each request.
fn relay(mut client: TcpStream, upstream: &str, stamps: &Arc<Mutex<Vec<Stamp>>>) {
    let Ok(mut server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let waiting: Arc<Mutex<Option<usize>>> = Arc::new(Mutex::new(None));
    let (Ok(mut server_in), Ok(mut client_out)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    {
        let (waiting, stamps) = (waiting.clone(), stamps.clone());
        std::thread::spawn(move || {
            let mut piece = vec![0u8; 64 * 1024];
            loop {
                let n = match server_in.read(&mut piece) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if let Some(i) = waiting.lock().unwrap().take() {
                    stamps.lock().unwrap()[i].first_byte = Some(Instant::now());
                }
                if client_out.write_all(&piece[..n]).is_err() {
                    break;
                }
            }
            let _ = client_out.shutdown(Shutdown::Write);
        });
    }
    let mut buffer: Vec<u8> = Vec::new();
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        // One request head.
        let end = loop {
            if let Some(at) = find(&buffer, b"\r\n\r\n") {
                break at + 4;
            }
            match client.read(&mut piece) {
                Ok(0) | Err(_) => {
                    let _ = server.shutdown(Shutdown::Write);
                    return;
                }
                Ok(n) => buffer.extend_from_slice(&piece[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let target = head
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buffer.len() < end + length {
            match client.read(&mut piece) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&piece[..n]),
            }
        }
        let read = Instant::now();
        let request: Vec<u8> = buffer.drain(..end + length).collect();
        let messages = target.split('?').next() == Some("/v1/messages");
        // Stamped before it goes on, so no answer byte can come first.
        let at = {
            let mut all = stamps.lock().unwrap();
            all.push(Stamp {
                target,
                body: if messages {
                    request[end..].to_vec()
                } else {
                    Vec::new()
                },
                read,
                written: read,
                first_byte: None,
            });
            all.len() - 1
        };
        *waiting.lock().unwrap() = Some(at);
        if server.write_all(&request).is_err() {
            return;
        }
        stamps.lock().unwrap()[at].written = Instant::now();
    }
}

/// What one run of the script gave.
struct Run {
    requests: Vec<Recorded>,
    compactions: usize,
    /// The requests as Claude Code sent them (client side) and as the
    /// provider got them (server side), in order.
    client: Vec<Stamp>,
    server: Vec<Stamp>,
    /// The gateway's resident set at the end, and its peak, in KiB.
    gateway_rss: Option<(u64, u64)>,
    turn_seconds: f64,
}

fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((kib("VmRSS:")?, kib("VmHWM:")?))
}

fn drive(with_mc: bool, turns: usize, file_kb: usize) -> Run {
    let label = if with_mc { "with-mc" } else { "without-mc" };
    let cc = ClaudeCode::start(&format!("bench-claude-code {label}"), Options::default())
        .expect("the bench needs the real Claude Code: npm install --prefix tests/e2e");
    cc.provider.auto_usage();
    let provider_root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let server_side = TimingRelay::start(&provider_root);
    let gateway = with_mc.then(|| {
        let config = write_config(cc.file("").as_path(), &server_side.url);
        GatewayProcess::start_with(
            &config,
            &cc.home(),
            free_port(),
            &[("MC_DB", cc.db.as_path())],
        )
    });
    let client_side = TimingRelay::start(
        gateway
            .as_ref()
            .map_or(server_side.url.as_str(), GatewayProcess::url),
    );
    cc.use_base_url(&client_side.url);
    // Distinct files: Claude Code answers a second read of an unchanged
    // file with a short stub.
    for i in 0..turns * 2 {
        let line = format!("pub fn item_{i}_{{n}}(input: &str) -> usize {{ input.len() + n }}\n");
        let body: String = (0..file_kb * 1024 / line.len())
            .map(|n| line.replace("{n}", &n.to_string()))
            .collect();
        std::fs::write(cc.project.join(format!("module_{i}.rs")), body).expect("a project file");
    }
    let started = Instant::now();
    let mut session: Option<String> = None;
    for turn in 0..turns {
        for k in 0..2 {
            let path = cc.project.join(format!("module_{}.rs", turn * 2 + k));
            cc.provider.push(
                Reply::Tool {
                    name: "Read".into(),
                    input: json!({"file_path": path.display().to_string()}),
                },
                None,
            );
        }
        cc.provider.push(
            Reply::Text(format!("Read two modules for step {turn}; continuing.")),
            None,
        );
        let result = cc.prompt_plain(
            session.as_deref(),
            &format!("Step {turn}: read the next two modules and summarise them."),
        );
        if session.is_none() {
            session = result["session_id"].as_str().map(str::to_string);
        }
    }
    let turn_seconds = started.elapsed().as_secs_f64() / turns as f64;
    let all = cc.provider.requests();
    Run {
        requests: cc.provider.agent_requests(),
        compactions: all.iter().filter(|r| r.is_compaction()).count(),
        client: client_side.messages(),
        server: server_side.messages(),
        gateway_rss: gateway.as_ref().and_then(|g| rss(g.pid())),
        turn_seconds,
    }
}

fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// Per request: from its last byte leaving the client-side relay to its
/// last byte reaching the provider-side one.
fn added(run: &Run) -> Vec<f64> {
    run.client
        .iter()
        .zip(&run.server)
        .map(|(c, s)| ms(c.written, s.read))
        .collect()
}

/// Per request: from its last byte leaving the client-side relay to the
/// answer's first byte reaching it.
fn first_byte(run: &Run) -> Vec<f64> {
    run.client
        .iter()
        .filter_map(|c| Some(ms(c.written, c.first_byte?)))
        .collect()
}

/// A serde_json parse and write of each body Claude Code sent, ms.
fn parse_and_write(run: &Run) -> Vec<f64> {
    run.client
        .iter()
        .map(|c| {
            let started = Instant::now();
            let value: serde_json::Value =
                serde_json::from_slice(&c.body).unwrap_or(serde_json::Value::Null);
            let out = serde_json::to_vec(&value).unwrap_or_default();
            std::hint::black_box(out);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}

/// (first, median, p90) of `values`.
fn figures(values: &[f64]) -> (f64, f64, f64) {
    let first = values.first().copied().unwrap_or(f64::NAN);
    let (median, p90) = percentiles(&mut values.to_vec());
    (first, median, p90)
}

fn max_tokens(requests: &[Recorded]) -> u64 {
    requests
        .iter()
        .map(|r| r.raw.len() as u64 / 4)
        .max()
        .unwrap_or(0)
}

fn detail(label: &str, keys: &[String]) {
    for (i, w) in keys.windows(2).enumerate() {
        let shared = mc_tests::fake_provider::common_prefix(w[0].as_bytes(), w[1].as_bytes());
        println!(
            "  {label} #{:<3} {:>8} B  {:>5.1}%  first difference at byte {shared}",
            i + 1,
            w[1].len(),
            shared as f64 / w[1].len().max(1) as f64 * 100.0,
        );
    }
}

fn main() -> ExitCode {
    let args: Args = clap::Parser::parse();
    let (turns, file_kb) = (args.turns as usize, args.file_kb as usize);
    let without = drive(false, turns, file_kb);
    let with = drive(true, turns, file_kb);
    // Each request as a prefix cache keys it (tools, system, messages; no
    // breakpoint markers), computed once.
    let keys =
        |run: &Run| -> Vec<String> { run.requests.iter().map(|r| cache_key(r).concat()).collect() };
    let (keys_without, keys_with) = (keys(&without), keys(&with));
    let cache = CacheFigures::of(&keys_without, &keys_with);
    println!(
        "bench-claude-code: {turns} turns, 2 reads of ~{file_kb} KB per turn, real Claude Code, fake provider, {}k window",
        WINDOW / 1000
    );
    println!(
        "  agent requests     without mc {:>6}   with mc {:>6}   ({:.1} s / {:.1} s a turn)",
        without.requests.len(),
        with.requests.len(),
        without.turn_seconds,
        with.turn_seconds
    );
    println!(
        "  largest request    without mc {:>6}k  with mc {:>6}k tokens (bytes/4; window {}k)",
        max_tokens(&without.requests) / 1000,
        max_tokens(&with.requests) / 1000,
        WINDOW / 1000
    );
    println!(
        "  Claude Code's own compactions  without mc {}   with mc {}",
        without.compactions, with.compactions
    );
    for line in cache.lines(Some("≥ 98 %")) {
        println!("{line}");
    }
    println!(
        "  cache misses (<90 %)  without mc: {}",
        misses(&keys_without).join(", ")
    );
    println!(
        "                        with mc: {}",
        misses(&keys_with).join(", ")
    );
    if args.detail {
        detail("without", &keys_without);
        detail("with", &keys_with);
    }
    if with.client.len() != with.server.len() {
        println!(
            "  note: {} requests left Claude Code, {} reached the provider; times pair them in order",
            with.client.len(),
            with.server.len()
        );
    }
    let (hop, via) = (added(&without), added(&with));
    let json = parse_and_write(&with);
    println!("  per request, ms                    first   median      p90   requests");
    let line = |name: &str, values: &[f64]| {
        let (first, median, p90) = figures(values);
        println!(
            "  {name:<32} {first:>7.2} {median:>8.2} {p90:>8.2} {:>10}",
            values.len()
        );
        (first, median, p90)
    };
    let (_, hop_median, _) = line("relay to relay, without mc", &hop);
    let (via_first, via_median, via_p90) = line("relay to relay, through mc", &via);
    let (json_first, json_median, json_p90) = line("JSON parse+write of the body", &json);
    let (_, fb_without, _) = line("first answer byte, without mc", &first_byte(&without));
    let (_, fb_with, _) = line("first answer byte, with mc", &first_byte(&with));
    let added_median = via_median - hop_median;
    println!(
        "  the gateway adds {added_median:.2} ms median ({:.2}× the parse+write median; first {:.2}×, p90 {:.2}×); first byte {:+.2} ms median (targets: ≤ 5 ms and ≤ 1.5×)",
        added_median / json_median,
        via_first / json_first,
        via_p90 / json_p90,
        fb_with - fb_without
    );
    // The second half: the largest histories.
    let half = via.len() / 2;
    let (_, late, _) = figures(&via[half..]);
    let (_, late_json, _) = figures(&json[half..]);
    println!(
        "  second half: through mc {late:.2} ms median against parse+write {late_json:.2} ms ({:.2}×)",
        (late - hop_median) / late_json
    );
    match with.gateway_rss {
        Some((now, peak)) => println!(
            "  gateway memory     RSS {:.1} MiB at the end of the run, peak {:.1} MiB",
            now as f64 / 1024.0,
            peak as f64 / 1024.0
        ),
        None => println!("  gateway memory     not readable (no /proc?)"),
    }
    ExitCode::SUCCESS
}
