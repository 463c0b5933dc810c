//! bench-dashboard: how long `mc-doctor dashboard` takes to answer each page
//! over HTTP on loopback, with a database of 100,000 recorded calls (200
//! sessions of 500 calls, usage on every call, a bust every 25) and 10,000
//! memories of one project. The server runs in-process on a real SQLite file
//! in a temporary folder; each page is fetched `--runs` times after
//! `--warmup`, and the median and p90 printed.
//!
//! First it prices the per-call record on the pass's hot path
//! (`mc_tests::bench::record_cost`, also printed by bench-transform).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;

use mc_base::config::Config;
use mc_base::domain::envelope::Usage;
use mc_base::domain::sessions;
use mc_base::store::{Store, StoreOptions};
use mc_dashboard::{Dashboard, Server};
use mc_tests::bench::{percentiles, record_cost};
use mc_transform_core::calls::{self, HeadMove, Keep, NewCall, Prompt, Sources};
use mc_transform_core::{Bust, Decision};

const T0: i64 = 1_800_000_000_000;
const PROJECT: &str = "git:bench";

#[derive(Parser)]
#[command(
    name = "bench-dashboard",
    about = "Page times of mc-doctor dashboard at 100k calls and 10k memories"
)]
struct Cli {
    /// Fetches of each page that are timed
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Untimed fetches first
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Sessions, each of --calls calls
    #[arg(long, default_value_t = 200)]
    sessions: usize,
    #[arg(long, default_value_t = 500)]
    calls: usize,
    /// Memories of the one project
    #[arg(long, default_value_t = 10_000)]
    memories: usize,
}

fn fill(store: &mut Store, cli: &Cli) -> mc_base::Result<()> {
    let keep = Keep {
        rows: 10_000_000,
        days: 3650,
    };
    store.write(|tx| {
        for s in 0..cli.sessions {
            let row = sessions::create_session(
                tx,
                "opencode",
                &format!("ses_{s:05}"),
                false,
                Some(PROJECT),
                T0,
            )?;
            for c in 0..cli.calls {
                let at = T0 + (s * cli.calls + c) as i64 * 20_000;
                let grown = 20_000 + (c as u64 % 25) * 4_000;
                let bust = c % 25 == 0;
                calls::record(
                    tx,
                    &NewCall {
                        session: row.id,
                        at_ms: at,
                        decision: if bust {
                            Decision::Execute
                        } else {
                            Decision::Defer
                        },
                        reason: if bust { "threshold" } else { "cache_warm" },
                        bust: if bust { Bust::Soft } else { Bust::None },
                        head: HeadMove::Replayed,
                        head_reason: None,
                        usage_percent: grown as f64 / 2_000.0,
                        context_window: 200_000,
                        model: Some("anthropic/claude-sonnet-4-5"),
                        prompt: Prompt::default(),
                        messages: c + 1,
                        first_message: Some("msg_0"),
                        sources: Sources {
                            head: 3_000,
                            memory: 1_000,
                            pins: 0,
                            conversation: grown as i64 / 3,
                            tool_output: grown as i64 / 2,
                        },
                        drops: usize::from(bust) * 3,
                        sample: Some(Usage {
                            input: 50,
                            cache_read: if bust { 2_000 } else { grown },
                            cache_write: if bust { grown } else { 1_000 },
                            output: 400,
                        }),
                    },
                    keep,
                )?;
            }
        }
        for m in 0..cli.memories {
            mc_search_core::memory::write_in(
                tx,
                PROJECT,
                "ARCHITECTURE",
                &format!("Module {m} keeps its state in table t{m}; callers go through api_{m}."),
                "historian",
                T0,
            )?;
        }
        Ok(())
    })
}

fn get(addr: SocketAddr, path: &str, cookie: &str) -> (u16, usize) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read");
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer.len())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let dir = tempfile::tempdir().expect("a temporary folder");
    match record_cost(dir.path(), cli.runs.max(20)) {
        Ok(c) => println!(
            "the per-call record on the pass's path: a defer pass (200k-token session, in-process) {:.0} µs median; \
             the record's statements {:.0} µs ({:.1} % of the pass; {:.0} µs as a transaction of its own)\n",
            c.pass_us,
            c.record_us,
            c.record_us / c.pass_us * 100.0,
            c.alone_us
        ),
        Err(e) => {
            eprintln!("bench-dashboard: timing the record: {e}");
            return ExitCode::FAILURE;
        }
    }
    let db = dir.path().join("mc.db");
    let mut store = Store::open(&db, &StoreOptions::default()).expect("the store");
    let started = Instant::now();
    if let Err(e) = fill(&mut store, &cli) {
        eprintln!("bench-dashboard: filling the database: {e}");
        return ExitCode::FAILURE;
    }
    let rows: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .unwrap_or(0);
    drop(store);
    println!(
        "mc-doctor dashboard page times: {rows} calls in {} sessions, {} memories (filled in {:.1}s)\n",
        cli.sessions,
        cli.memories,
        started.elapsed().as_secs_f64()
    );
    let token = "0".repeat(32);
    let dash = Dashboard {
        db,
        store_options: StoreOptions::default(),
        config: Config::default(),
        doctor: mc_doctor_core::Env::default(),
        checks: mc_doctor_core::checks::Options::default(),
        logs: Vec::new(),
        token: token.clone(),
        csrf: "1".repeat(32),
        clock: Arc::new(|| T0 + 86_400_000),
    };
    let server = match Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), dash) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench-dashboard: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = server.addr();
    std::thread::spawn(move || server.run());
    let cookie = format!("mc_dashboard_{}={token}", addr.port());
    let last = cli.sessions;
    let pages = [
        ("sessions", "/".to_string()),
        ("sessions, filtered", "/?q=ses_0019".to_string()),
        ("a session (500 calls)", format!("/session?id={last}")),
        (
            "memory (10k, first 200)",
            format!("/memory?project={PROJECT}"),
        ),
        (
            "memory search",
            format!("/memory?project={PROJECT}&q=table+t9999"),
        ),
        ("spend", "/spend".to_string()),
        ("dreamer", "/dream".to_string()),
        ("export", "/export".to_string()),
    ];
    println!(
        "  {:<26} {:>9} {:>9} {:>10}",
        "page", "median", "p90", "bytes"
    );
    let mut worst: f64 = 0.0;
    for (label, path) in &pages {
        let mut times = Vec::with_capacity(cli.runs);
        let mut bytes = 0;
        for k in 0..cli.warmup + cli.runs {
            let t = Instant::now();
            let (status, n) = get(addr, path, &cookie);
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if status != 200 {
                eprintln!("bench-dashboard: {path} answered {status}");
                return ExitCode::FAILURE;
            }
            bytes = n;
            if k >= cli.warmup {
                times.push(ms);
            }
        }
        let (median, p90) = percentiles(&mut times);
        if *label != "export" {
            worst = worst.max(p90);
        }
        println!("  {label:<26} {median:>7.1}ms {p90:>7.1}ms {bytes:>10}");
    }
    println!("\n  slowest page p90 (export aside): {worst:.1} ms (target: well under 200 ms)");
    ExitCode::SUCCESS
}
