//! bench-pi: bench-opencode's scripted workload in the real Pi — each turn the
//! agent reads two files of ~10 KB and answers, 60 turns against a 200k
//! window — without mc and with mc's extension (resident by default), on the
//! fake Anthropic provider. Prints the share of request bytes a provider
//! prefix cache would serve in each run and their ratio, the time Pi spends
//! in mc's hooks (timed from outside by two extensions loaded around mc's:
//! Pi runs an event's handlers in load order), the bytes mc adds to the first
//! request, Pi's own compactions, and the resident process's memory. Pi's
//! own compaction stays on (its default settings), as a user has it.
//!
//! Needs the workspace built (`cargo build --release --workspace --features mc-bench/bench`) and the
//! pinned Pi installed (`npm install --prefix tests/e2e`).

use std::process::ExitCode;

use mc_tests::bench::{CacheFigures, fixed_additions, misses, percentiles, serve_rss};
use mc_tests::fake_provider::{Recorded, Reply};
use mc_tests::opencode::cache_key;
use mc_tests::pi::{Options, Pi};
use serde_json::json;

/// Drives the real Pi through a scripted coding session against a fake
/// provider, without mc and with it, and compares what the provider received.
#[derive(clap::Parser)]
#[command(name = "bench-pi")]
struct Args {
    /// User turns in the session
    #[arg(long, value_name = "N", default_value_t = 60)]
    turns: usize,
    /// Size of each file the agent reads, in KB
    #[arg(long, value_name = "N", default_value_t = 10)]
    file_kb: usize,
    /// The model's context window, in thousands of tokens
    #[arg(long, value_name = "K", default_value_t = 200)]
    limit: u64,
    /// Every mc call a process of its own
    #[arg(long)]
    one_shot: bool,
}

/// Records when mc's handlers start (loaded before mc's extension).
const BEFORE: &str = r#"export default function (pi: any) {
  pi.on("context", () => { (globalThis as any).__mcBenchContext = performance.now() })
  pi.on("before_agent_start", () => { (globalThis as any).__mcBenchSystem = performance.now() })
}
"#;

/// Logs how long mc's handlers took (loaded after mc's extension).
const AFTER: &str = r#"import { appendFileSync } from "node:fs"
export default function (pi: any) {
  const log = process.env.MC_BENCH_HOOK_LOG as string
  pi.on("context", () => {
    appendFileSync(log, `messages ${(performance.now() - (globalThis as any).__mcBenchContext).toFixed(3)}\n`)
  })
  pi.on("before_agent_start", () => {
    appendFileSync(log, `system ${(performance.now() - (globalThis as any).__mcBenchSystem).toFixed(3)}\n`)
  })
}
"#;

struct Run {
    requests: Vec<Recorded>,
    hook_ms: Vec<f64>,
    system_ms: Vec<f64>,
    compactions: usize,
    serve_rss_kib: Option<(u64, u64)>,
    status: Option<serde_json::Value>,
}

fn drive(with_mc: bool, one_shot: bool, turns: usize, file_kb: usize, context: u64) -> Option<Run> {
    let dir = tempfile::tempdir().expect("a temp folder");
    let (before, after, log) = (
        dir.path().join("before.ts"),
        dir.path().join("after.ts"),
        dir.path().join("hook-ms.log"),
    );
    std::fs::write(&before, BEFORE).unwrap();
    std::fs::write(&after, AFTER).unwrap();
    let mut env = vec![("MC_BENCH_HOOK_LOG".to_string(), log.display().to_string())];
    if one_shot {
        env.push(("MC_TRANSFORM_SERVE".into(), "0".into()));
    }
    let pi = Pi::start(
        "bench-pi",
        Options {
            context_window: context,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
            with_mc,
            mc_config: None,
            extensions_around: if with_mc {
                (vec![before], vec![after])
            } else {
                (Vec::new(), Vec::new())
            },
            env,
        },
    )?;
    let src = pi.project.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..8 {
        let line = format!("pub fn item_{i}_{{n}}() -> usize {{ {i} * 1_000 + n }}\n");
        let body: String = (0..file_kb * 1024 / line.len())
            .map(|n| line.replace("{n}", &n.to_string()))
            .collect();
        std::fs::write(src.join(format!("module_{i}.rs")), body).unwrap();
    }
    pi.provider.auto_usage();
    let session = pi.session("bench");
    let mut rpc = pi.rpc(&session);
    let mut compactions = 0;
    for turn in 0..turns {
        for k in 0..2 {
            let file = format!("src/module_{}.rs", (turn * 2 + k) % 8);
            pi.provider.push(
                Reply::Tool {
                    name: "read".into(),
                    input: json!({"path": file}),
                },
                None,
            );
        }
        pi.provider.push(
            Reply::Text(format!("Read two modules for step {turn}; continuing.")),
            None,
        );
        rpc.prompt(&format!(
            "Step {turn}: read the next two modules and summarise them."
        ));
        if rpc.settle() {
            compactions += 1;
        }
    }
    let serve_rss_kib = with_mc.then(|| serve_rss(rpc.pid())).flatten();
    rpc.finish();
    let timings = std::fs::read_to_string(&log).unwrap_or_default();
    let hook = |name: &str| -> Vec<f64> {
        timings
            .lines()
            .filter_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .collect()
    };
    let status = with_mc.then(|| {
        let text = std::fs::read_to_string(&session).unwrap_or_default();
        let header: serde_json::Value = text
            .lines()
            .next()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_default();
        let id = header["id"].as_str().unwrap_or_default().to_string();
        let out = mc_tests::pipe(
            pi.command(mc_tests::bin_path("mc-transform")).args([
                "status",
                "--harness",
                "pi",
                "--session",
                &id,
            ]),
            b"",
        )
        .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    });
    Some(Run {
        requests: pi.provider.agent_requests(),
        hook_ms: hook("messages"),
        system_ms: hook("system"),
        compactions,
        serve_rss_kib,
        status: status.flatten(),
    })
}

fn max_tokens(requests: &[Recorded]) -> u64 {
    requests
        .iter()
        .map(|r| r.raw.len() as u64 / 4)
        .max()
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let args: Args = clap::Parser::parse();
    let (turns, file_kb, context, one_shot) =
        (args.turns, args.file_kb, args.limit * 1000, args.one_shot);
    let Some(without) = drive(false, false, turns, file_kb, context) else {
        eprintln!("bench-pi: the pinned Pi is not installed (npm install --prefix tests/e2e)");
        return ExitCode::FAILURE;
    };
    let Some(mut with) = drive(true, one_shot, turns, file_kb, context) else {
        return ExitCode::FAILURE;
    };
    let keys =
        |run: &Run| -> Vec<String> { run.requests.iter().map(|r| cache_key(r).concat()).collect() };
    let (keys_without, keys_with) = (keys(&without), keys(&with));
    let cache = CacheFigures::of(&keys_without, &keys_with);
    println!(
        "bench-pi: {turns} turns, 2 reads of ~{file_kb} KB per turn, real Pi, fake provider, mc {}",
        if one_shot { "one-shot" } else { "resident" }
    );
    println!(
        "  agent requests     without mc {:>6}   with mc {:>6}",
        without.requests.len(),
        with.requests.len()
    );
    println!(
        "  Pi's compactions   without mc {:>6}   with mc {:>6}",
        without.compactions, with.compactions
    );
    println!(
        "  largest request    without mc {:>6}k  with mc {:>6}k tokens (bytes/4; model limit {}k)",
        max_tokens(&without.requests) / 1000,
        max_tokens(&with.requests) / 1000,
        context / 1000
    );
    for line in cache.lines(None) {
        println!("{line}");
    }
    println!(
        "  cache misses (<90 %) without mc: {}",
        misses(&keys_without).join(", ")
    );
    println!(
        "  cache misses (<90 %) with mc: {}",
        misses(&keys_with).join(", ")
    );
    if let Some(status) = &with.status {
        println!(
            "  mc passes          {} (last bust: {}; head: {})",
            status["passes"], status["last_bust"], status["head"]["compartments"]
        );
    }
    println!(
        "  mc hook time (ms)  {:<10} {:>8} {:>8} {:>8} {:>7}",
        "", "first", "median", "p90", "calls"
    );
    for (hook, samples) in [
        ("messages", &mut with.hook_ms),
        ("system", &mut with.system_ms),
    ] {
        let first = samples.first().copied().unwrap_or(f64::NAN);
        let (median, p90) = percentiles(samples);
        println!(
            "                     {hook:<10} {first:>8.1} {median:>8.1} {p90:>8.1} {:>7}",
            samples.len()
        );
    }
    if let Some((now, peak)) = with.serve_rss_kib {
        println!(
            "  serve memory       RSS {:.1} MiB at the end of the run, peak {:.1} MiB",
            now as f64 / 1024.0,
            peak as f64 / 1024.0
        );
    }
    println!(
        "  bytes mc adds      {}",
        fixed_additions(&without.requests[0], &with.requests[0])
    );
    ExitCode::SUCCESS
}
