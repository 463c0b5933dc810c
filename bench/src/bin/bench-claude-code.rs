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

use std::process::ExitCode;
use std::time::Instant;

use mc_tests::bench::{CacheFigures, misses};
use mc_tests::claude::{ClaudeCode, Options};
use mc_tests::fake_provider::{Recorded, Reply};
use mc_tests::gateway::{GatewayProcess, free_port, write_config};
use mc_tests::opencode::cache_key;
use mc_tests::timing::{Stamp, TimingRelay, rss, timing_lines};
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

/// The Messages API calls, the ones the gateway passes through mc.
fn messages(path: &str) -> bool {
    path == "/v1/messages"
}

fn drive(with_mc: bool, turns: usize, file_kb: usize) -> Run {
    let label = if with_mc { "with-mc" } else { "without-mc" };
    let cc = ClaudeCode::start(&format!("bench-claude-code {label}"), Options::default())
        .expect("the bench needs the real Claude Code: npm install --prefix tests/e2e");
    cc.provider.auto_usage();
    let provider_root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let server_side = TimingRelay::start(&provider_root);
    let gateway = with_mc.then(|| {
        let config = write_config(cc.file("").as_path(), server_side.url());
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
            .map_or(server_side.url(), GatewayProcess::url),
    );
    cc.use_base_url(client_side.url());
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
        client: client_side.posts(messages),
        server: server_side.posts(messages),
        gateway_rss: gateway.as_ref().and_then(|g| rss(g.pid())),
        turn_seconds,
    }
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
    for line in timing_lines(
        (&without.client, &without.server),
        (&with.client, &with.server),
    ) {
        println!("{line}");
    }
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
