//! bench-codex: the real pinned Codex (`codex exec`, then `exec resume` for
//! each later turn) through bench-opencode's script — each turn reads two
//! files of ~10 KB with its shell tool, then answers — twice in one run:
//! straight to the fake Responses provider, and with `mc-transform gateway`
//! in front of it. The fake is strict (it refuses an unpaired call or output
//! and a changed reasoning item, and reports cached tokens by the common
//! prefix with the previous request), so Codex sees usage that grows as a
//! provider's would and compacts by its own rule. Prints the share of
//! request bytes a prefix cache serves and its ratio, the largest request
//! against the window, Codex's own compactions, the time the gateway adds to
//! each request (median, p90, first) against a JSON parse and write of the
//! same body, the time to the answer's first byte both ways, and the
//! gateway's memory. Nothing is asserted: it prints figures.
//!
//! Timing: [`mc_tests::timing`]'s relays on each side of the gateway (back
//! to back in the run without mc).
//!
//! Needs the workspace built in release (`cargo build --release --workspace
//! --features mc-bench/bench`) and the pinned Codex (`npm install --prefix
//! tests/e2e`).

use std::process::ExitCode;
use std::time::Instant;

use mc_base::codec::responses::Request;
use mc_tests::bench::{CacheFigures, misses};
use mc_tests::codex::{Codex, Options};
use mc_tests::fake_provider::common_prefix;
use mc_tests::fake_responses::{Recorded, Reply};
use mc_tests::gateway::{GatewayProcess, free_port};
use mc_tests::timing::{Stamp, TimingRelay, rss, timing_lines};
use serde_json::json;

/// Drives the real Codex through a scripted session without mc and through
/// mc's gateway, and compares what the provider received.
#[derive(clap::Parser)]
#[command(name = "bench-codex")]
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

/// Codex's `model_context_window` in the bench's config.
const WINDOW: u64 = 200_000;

/// What one run of the script gave.
struct Run {
    /// The model turns the provider got (compactions left out).
    turns: Vec<Recorded>,
    compactions: usize,
    refusals: Vec<String>,
    /// The Responses requests as Codex sent them (client side) and as the
    /// provider got them (server side), in order.
    client: Vec<Stamp>,
    server: Vec<Stamp>,
    /// The gateway's resident set at the end, and its peak, in KiB.
    gateway_rss: Option<(u64, u64)>,
    turn_seconds: f64,
}

fn responses(path: &str) -> bool {
    path.ends_with("/responses")
}

fn shell(cmd: String) -> Reply {
    Reply::Call {
        namespace: None,
        name: "exec_command".into(),
        arguments: json!({ "cmd": cmd }),
    }
}

fn drive(with_mc: bool, turns: usize, file_kb: usize) -> Run {
    let label = if with_mc { "with-mc" } else { "without-mc" };
    let cx = Codex::start(&format!("bench-codex {label}"), Options::default())
        .expect("the bench needs the real Codex: npm install --prefix tests/e2e");
    cx.provider.strict();
    let server_side = TimingRelay::start(&cx.provider.base_url());
    let gateway = with_mc.then(|| {
        let config = cx.file("gateway-config.jsonc");
        std::fs::write(
            &config,
            json!({"gateway": {"openai_upstream": format!("{}/v1", server_side.url())}})
                .to_string(),
        )
        .expect("the gateway's config");
        GatewayProcess::start_with(&config, &cx.home(), free_port(), &[("MC_DB", &cx.db)])
    });
    let client_side = TimingRelay::start(
        gateway
            .as_ref()
            .map_or(server_side.url(), GatewayProcess::url),
    );
    let path = if with_mc { "openai" } else { "v1" };
    cx.use_base_url(&format!("{}/{path}", client_side.url()));
    for i in 0..turns * 2 {
        let line = format!("pub fn item_{i}_{{n}}(input: &str) -> usize {{ input.len() + n }}\n");
        let body: String = (0..file_kb * 1024 / line.len())
            .map(|n| line.replace("{n}", &n.to_string()))
            .collect();
        std::fs::write(cx.project.join(format!("module_{i}.rs")), body).expect("a project file");
    }
    let started = Instant::now();
    let mut thread: Option<String> = None;
    for turn in 0..turns {
        for k in 0..2 {
            cx.provider
                .push(shell(format!("cat module_{}.rs", turn * 2 + k)), None);
        }
        cx.provider.push(
            Reply::Text(format!("Read two modules for step {turn}; continuing.")),
            None,
        );
        let exec = cx.exec(
            thread.as_deref(),
            &format!("Step {turn}: read the next two modules and summarise them."),
        );
        thread.get_or_insert(exec.thread_id);
    }
    let turn_seconds = started.elapsed().as_secs_f64() / turns as f64;
    Run {
        turns: cx.provider.turns(),
        compactions: cx.provider.compactions(),
        refusals: cx.provider.refusals(),
        client: client_side.posts(responses),
        server: server_side.posts(responses),
        gateway_rss: gateway.as_ref().and_then(|g| rss(g.pid())),
        turn_seconds,
    }
}

/// A request as a prefix cache keys it: the tools, the instructions, then
/// every input item, each as the bytes sent.
fn cache_key(request: &Recorded) -> String {
    let Ok(parsed) = Request::parse(&request.raw) else {
        return String::from_utf8_lossy(&request.raw).into_owned();
    };
    let mut key = Vec::new();
    for span in [parsed.tools_span, parsed.instructions]
        .into_iter()
        .flatten()
    {
        key.extend_from_slice(parsed.bytes(span));
    }
    for item in &parsed.items {
        key.extend_from_slice(parsed.bytes(item.span));
    }
    String::from_utf8_lossy(&key).into_owned()
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
        let shared = common_prefix(w[0].as_bytes(), w[1].as_bytes());
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
    let keys = |run: &Run| -> Vec<String> { run.turns.iter().map(cache_key).collect() };
    let (keys_without, keys_with) = (keys(&without), keys(&with));
    let cache = CacheFigures::of(&keys_without, &keys_with);
    println!(
        "bench-codex: {turns} turns, 2 reads of ~{file_kb} KB per turn, real Codex, strict fake Responses provider, {}k window",
        WINDOW / 1000
    );
    println!(
        "  model turns        without mc {:>6}   with mc {:>6}   ({:.1} s / {:.1} s a turn)",
        without.turns.len(),
        with.turns.len(),
        without.turn_seconds,
        with.turn_seconds
    );
    println!(
        "  largest request    without mc {:>6}k  with mc {:>6}k tokens (bytes/4; window {}k)",
        max_tokens(&without.turns) / 1000,
        max_tokens(&with.turns) / 1000,
        WINDOW / 1000
    );
    println!(
        "  Codex's own compactions  without mc {}   with mc {}",
        without.compactions, with.compactions
    );
    for (name, run) in [("without mc", &without), ("with mc", &with)] {
        if !run.refusals.is_empty() {
            println!("  refused {name}: {}", run.refusals.join("; "));
        }
    }
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
            "  note: {} requests left Codex, {} reached the provider; times pair them in order",
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
