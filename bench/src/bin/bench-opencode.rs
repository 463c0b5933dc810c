//! bench-opencode: how much of each request a provider prefix cache would serve
//! with mc and without it, on the same scripted tool-heavy session driven
//! through the real OpenCode; plus the time OpenCode spends in mc's hook, the
//! bytes mc adds to a request, and what the historian did (runs, the model
//! they used, the tokens each fold spent). mc runs twice: resident (the
//! plugin's default, one `mc-transform serve`) and with every call a one-shot
//! process, so the hook times of both come from the same run. With no
//! `--mc-config` and no `--historian`, mc runs with no config at all: the
//! historian folds through OpenCode itself, on the session's model (the fake
//! provider plays it).
//!
//! Needs the workspace built (`cargo build --release --workspace --features mc-bench/bench`) and the
//! pinned OpenCode installed (`npm install --prefix tests/e2e`).
//! `MC_BENCH_KEEP_DB=FILE` keeps mc's database of the run; `MC_BENCH_DUMP=DIR`
//! writes every request mc's run sent to the provider (`NNN.json`);
//! `MC_BENCH_TRANSFORM=PATH` points the plugin at another mc-transform (a
//! wrapper that saves envelopes, say); `MC_BENCH_NO_BOUNDARY=1` runs every mc
//! run without mc's compaction boundary.

use std::process::ExitCode;

use mc_tests::bench::{CacheFigures, cache_share, fixed_additions, misses, percentiles, serve_rss};
use mc_tests::fake_provider::{Recorded, Reply, common_prefix};
use mc_tests::opencode::{OpenCode, Options, cache_key, tool_results};

/// The model window the script runs against by default: the 200k of the
/// Claude models whose API the fake provider speaks. 60 turns of 10 KB reads
/// reach ~360k tokens, so without mc the session overflows it. (`--limit 100`
/// runs the same script against a 100k window; see `growth_only_share` for why
/// a smaller window caps the share lower.)
const DEFAULT_CONTEXT: u64 = 200_000;
use serde_json::json;

/// Drives the real OpenCode through a scripted coding session against a fake
/// provider, without mc and with it (one-shot and resident), and compares
/// what the provider received: requests, sizes, prefix-cache share, hook time.
#[derive(clap::Parser)]
#[command(name = "bench-opencode")]
struct Args {
    /// User turns in the session
    #[arg(long, value_name = "N", default_value_t = 60)]
    turns: usize,
    /// Size of each file the agent reads, in KB
    #[arg(long, value_name = "N", default_value_t = 10)]
    file_kb: usize,
    /// The model's context window, in thousands of tokens
    #[arg(long, value_name = "K", default_value_t = DEFAULT_CONTEXT / 1000)]
    limit: u64,
    /// With mc, the agent drops all but its newest reads every N turns
    #[arg(long, value_name = "N")]
    reduce_every: Option<usize>,
    /// mc's config (JSONC) for the runs with mc
    #[arg(long, value_name = "JSONC", conflicts_with = "historian")]
    mc_config: Option<String>,
    /// A configured historian model the fake provider plays (default: no mc
    /// config, the historian folds through OpenCode itself)
    #[arg(long)]
    historian: bool,
    /// Per request: size, share, first difference
    #[arg(long)]
    detail: bool,
    /// Skip the run with every mc call a process of its own
    #[arg(long)]
    no_one_shot: bool,
    /// One more resident run without mc's compaction boundary
    #[arg(long)]
    compare_boundary: bool,
    /// Each turn the agent also edits one of three notes files (~1 KB of new
    /// text) and rewrites its todo list: the workload of smart drops and of
    /// the re-injected todo list
    #[arg(long)]
    edits: bool,
}

/// How the run uses mc.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Without,
    /// Every call a process of its own (`MC_TRANSFORM_SERVE=0`).
    OneShot,
    /// One resident `mc-transform serve` (the plugin's default).
    Resident,
    /// Resident, without mc's compaction boundary (`MC_OPENCODE_BOUNDARY=0`).
    NoBoundary,
}

impl Mode {
    fn with_mc(self) -> bool {
        self != Mode::Without
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Without => "without mc",
            Mode::OneShot => "mc one-shot",
            Mode::Resident => "mc resident",
            Mode::NoBoundary => "mc resident, no boundary",
        }
    }
}

struct Run {
    requests: Vec<Recorded>,
    hook_ms: Vec<f64>,
    /// Per messages-hook call, how many messages OpenCode handed the hook.
    hook_inputs: Vec<usize>,
    /// The OpenCode instance's folder (it appears in paths in the requests).
    dir: String,
    /// The resident process's resident set at the end, and its peak, in KiB.
    serve_rss_kib: Option<(u64, u64)>,
    /// The system prompt hook (a second, small mc-transform call).
    system_hook_ms: Vec<f64>,
    /// `mc-transform status` of the session at the end (with mc).
    status: Option<serde_json::Value>,
    /// Every historian run, oldest first (with mc).
    historian: Vec<HistorianRun>,
    /// The historian's prompts the fake provider answered.
    historian_prompts: usize,
    /// Tags mc dropped, by cause (with mc).
    drops: Vec<(String, i64)>,
}

/// One row of `historian_runs`.
struct HistorianRun {
    status: String,
    model: Option<String>,
    tokens_in: i64,
    tokens_out: i64,
    compartments: i64,
}

/// The historian runs mc recorded in `db`.
fn historian_runs(db: &std::path::Path) -> Vec<HistorianRun> {
    let Ok(store) = mc_base::store::Store::open(db, &mc_base::store::StoreOptions::default())
    else {
        return Vec::new();
    };
    let Ok(mut stmt) = store.conn().prepare(
        "SELECT coalesce(status, 'unfinished'), model, tokens_in, tokens_out, compartments
         FROM historian_runs ORDER BY id",
    ) else {
        return Vec::new();
    };
    stmt.query_map([], |r| {
        Ok(HistorianRun {
            status: r.get(0)?,
            model: r.get(1)?,
            tokens_in: r.get(2)?,
            tokens_out: r.get(3)?,
            compartments: r.get(4)?,
        })
    })
    .map(|rows| rows.filter_map(Result::ok).collect())
    .unwrap_or_default()
}

/// A scripted session: each turn reads two files and answers.
/// mc config that makes the fake provider play the historian model too.
const HISTORIAN_CONFIG: &str = r#"{
    "providers": {"fake": {"kind": "anthropic", "base_url": "{provider}"}},
    "historian": {"model": "fake/mock-historian", "retries": 0, "timeout_ms": 30000}
}"#;

/// What one run of the script is.
#[derive(Clone, Copy)]
struct Script {
    turns: usize,
    file_kb: usize,
    /// The model's context window in tokens.
    context: u64,
    /// Every this many turns the agent (with mc) first calls ctx_reduce on the
    /// reads it no longer needs: all but the newest `KEEP_READS`.
    reduce_every: Option<usize>,
    /// Each turn also an edit and a todo list (`--edits`).
    edits: bool,
}

/// Notes files the `--edits` workload edits in turn.
const NOTES: usize = 3;

/// The `--edits` workload's calls of one turn: an edit of
/// `src/notes_<turn % 3>.md` that inserts ~1 KB before its `END` line, and
/// a todo list of the last six steps.
fn edit_and_todo(project: &std::path::Path, turn: usize) -> [Reply; 2] {
    let file = project.join(format!("src/notes_{}.md", turn % NOTES));
    let block = format!("- step {turn}: what changed and why, in a line of notes\n").repeat(20);
    let todos: Vec<serde_json::Value> = (turn.saturating_sub(5)..=turn)
        .map(|i| {
            json!({"content": format!("step {i}: read, edit, summarise"),
                   "status": if i < turn { "completed" } else { "in_progress" },
                   "priority": "medium"})
        })
        .collect();
    [
        Reply::Tool {
            name: "edit".into(),
            input: json!({"filePath": file, "oldString": "END\n", "newString": format!("{block}END\n")}),
        },
        Reply::Tool {
            name: "todowrite".into(),
            input: json!({ "todos": todos }),
        },
    ]
}

/// Tags mc dropped in `db`, by cause (`reduce`, `age`, `emergency`, `edit`
/// for edit markers, `smart` for spent control-plane outputs).
fn drops_by_cause(db: &std::path::Path) -> Vec<(String, i64)> {
    let Ok(store) = mc_base::store::Store::open(db, &mc_base::store::StoreOptions::default())
    else {
        return Vec::new();
    };
    let Ok(mut stmt) = store.conn().prepare(
        "SELECT coalesce(drop_cause, '-'), count(*) FROM tags WHERE status = 'dropped'
         GROUP BY 1 ORDER BY 1",
    ) else {
        return Vec::new();
    };
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

/// Reads a reducing agent keeps.
const KEEP_READS: usize = 4;

/// The tags of the reads in the newest request that are not dropped yet, but
/// the newest `keep`: what a reducing agent would ask to drop.
fn spent_reads(requests: &[Recorded], keep: usize) -> Vec<u64> {
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    let tags: Vec<u64> = tool_results(last)
        .iter()
        .filter(|(_, text)| text.contains("<path>"))
        .filter_map(|(_, text)| text.strip_prefix('§')?.split('§').next()?.parse().ok())
        .collect();
    tags[..tags.len().saturating_sub(keep)].to_vec()
}

#[allow(
    clippy::too_many_lines,
    reason = "a benchmark's scenario, read top to bottom; the 150-line rule is for mc's own code"
)]
fn drive(mode: Mode, script: Script, mc_config: Option<&str>) -> Run {
    let with_mc = mode.with_mc();
    let Script {
        turns,
        file_kb,
        context,
        reduce_every,
        edits,
    } = script;
    let dir = tempfile::tempdir().expect("a temp folder");
    let log = dir.path().join("hook-ms.log");
    let oc = OpenCode::start(
        dir.path(),
        Options {
            db: Some(dir.path().join("ctx.db")),
            with_plugin: with_mc,
            mc_config: mc_config.map(str::to_string),
            timing_log: with_mc.then(|| log.clone()),
            transform_bin: std::env::var_os("MC_BENCH_TRANSFORM").map(std::path::PathBuf::from),
            context: Some(context),
            historian_bin: None,
            env: {
                let mut env = match mode {
                    Mode::OneShot => vec![("MC_TRANSFORM_SERVE".into(), "0".into())],
                    Mode::NoBoundary => vec![("MC_OPENCODE_BOUNDARY".into(), "0".into())],
                    _ => Vec::new(),
                };
                // MC_BENCH_NO_BOUNDARY=1: every mc run without the boundary.
                if std::env::var_os("MC_BENCH_NO_BOUNDARY").is_some_and(|v| v == "1") {
                    env.push(("MC_OPENCODE_BOUNDARY".into(), "0".into()));
                }
                env
            },
            project: None,
        },
    )
    .expect("the bench needs the real OpenCode: npm install --prefix tests/e2e");
    let src = dir.path().join("project/src");
    for i in 0..8 {
        let line = format!("pub fn item_{i}_{{n}}() -> usize {{ {i} * 1_000 + n }}\n");
        let body: String = (0..file_kb * 1024 / line.len())
            .map(|n| line.replace("{n}", &n.to_string()))
            .collect();
        std::fs::write(src.join(format!("module_{i}.rs")), body).expect("write a project file");
    }
    for k in 0..NOTES {
        std::fs::write(
            src.join(format!("notes_{k}.md")),
            format!("# Notes {k}\nEND\n"),
        )
        .expect("write a notes file");
    }
    oc.provider.auto_usage();
    oc.provider.play_historian("mock-historian");
    let session = oc.new_session();
    for turn in 0..turns {
        let reducing = reduce_every.is_some_and(|n| with_mc && n > 0 && turn > 0 && turn % n == 0);
        if reducing {
            let spent = spent_reads(&oc.provider.agent_requests(), KEEP_READS);
            if !spent.is_empty() {
                let drop: Vec<String> = spent.iter().map(u64::to_string).collect();
                oc.provider.push(
                    Reply::Tool {
                        name: "ctx_reduce".into(),
                        input: json!({"drop": drop.join(",")}),
                    },
                    None,
                );
            }
        }
        for k in 0..2 {
            let file = format!("src/module_{}.rs", (turn * 2 + k) % 8);
            oc.provider.push(
                Reply::Tool {
                    name: "read".into(),
                    input: json!({"filePath": file}),
                },
                None,
            );
        }
        if edits {
            for reply in edit_and_todo(&oc.project, turn) {
                oc.provider.push(reply, None);
            }
        }
        oc.provider.push(
            Reply::Text(format!("Read two modules for step {turn}; continuing.")),
            None,
        );
        oc.prompt(
            &session,
            &format!("Step {turn}: read the next two modules and summarise them."),
        );
    }
    let timings = std::fs::read_to_string(&log).unwrap_or_default();
    let hook = |name: &str| -> Vec<f64> {
        timings
            .lines()
            .filter_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .collect()
    };
    let (hook_ms, system_hook_ms) = (hook("messages"), hook("system"));
    let hook_inputs = timings
        .lines()
        .filter_map(|l| l.strip_prefix("input ")?.split(' ').next()?.parse().ok())
        .collect();
    let serve_rss_kib = matches!(mode, Mode::Resident | Mode::NoBoundary)
        .then(|| serve_rss(oc.pid()))
        .flatten();
    if let (true, Some(keep)) = (with_mc, std::env::var_os("MC_BENCH_KEEP_DB")) {
        let _ = std::fs::copy(dir.path().join("ctx.db"), &keep);
        let mut wal = keep.clone();
        wal.push("-wal");
        let _ = std::fs::copy(dir.path().join("ctx.db-wal"), wal);
    }
    let status = with_mc.then(|| {
        let db = dir.path().join("ctx.db");
        let out = mc_tests::run_bin(
            "mc-transform",
            &[
                "--db",
                &db.display().to_string(),
                "status",
                "--session",
                &session,
            ],
            b"",
        );
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    });
    let (historian, drops) = if with_mc {
        let db = dir.path().join("ctx.db");
        (historian_runs(&db), drops_by_cause(&db))
    } else {
        (Vec::new(), Vec::new())
    };
    let historian_prompts = oc
        .provider
        .requests()
        .iter()
        .filter(|r| r.is_historian() || r.body["model"] == "mock-historian")
        .count();
    Run {
        requests: oc.provider.agent_requests(),
        hook_ms,
        hook_inputs,
        dir: dir.path().display().to_string(),
        serve_rss_kib,
        system_hook_ms,
        status,
        historian,
        historian_prompts,
        drops,
    }
}

/// One line on what the historian did.
fn historian_summary(run: &Run) -> String {
    let runs = &run.historian;
    if runs.is_empty() {
        return "no run".into();
    }
    let count = |status: &str| runs.iter().filter(|r| r.status == status).count();
    let published: Vec<&HistorianRun> = runs.iter().filter(|r| r.status == "published").collect();
    let mut models: Vec<&str> = runs.iter().filter_map(|r| r.model.as_deref()).collect();
    models.dedup();
    let per_fold = if published.is_empty() {
        String::new()
    } else {
        let n = published.len() as i64;
        let (tin, tout): (i64, i64) = published
            .iter()
            .fold((0, 0), |(a, b), r| (a + r.tokens_in, b + r.tokens_out));
        let max_in = published.iter().map(|r| r.tokens_in).max().unwrap_or(0);
        format!(
            "; per published run: {} compartments, tokens in {} (max {max_in}), out {}",
            published.iter().map(|r| r.compartments).sum::<i64>() / n,
            tin / n,
            tout / n
        )
    };
    format!(
        "{} runs ({} published, {} failed, {} nothing to do), {} prompts answered, model {}{per_fold}",
        runs.len(),
        published.len(),
        count("failed"),
        count("nothing_to_do"),
        run.historian_prompts,
        if models.is_empty() {
            "-".to_string()
        } else {
            models.join(", ")
        }
    )
}

/// One line per request: its size, the share the previous request's prefix
/// covers, and where the two first differ (to see what breaks the cache).
fn detail(label: &str, keys: &[String]) {
    for (i, w) in keys.windows(2).enumerate() {
        let shared = common_prefix(w[0].as_bytes(), w[1].as_bytes());
        let around = |s: &str| {
            let start = shared.saturating_sub(40);
            let end = (shared + 60).min(s.len());
            String::from_utf8_lossy(&s.as_bytes()[start..end]).replace('\n', " ")
        };
        println!(
            "  {label} #{:<3} {:>7} B  {:>5.1}%  at {shared}: …{}… → …{}…",
            i + 1,
            w[1].len(),
            shared as f64 / w[1].len() as f64 * 100.0,
            around(&w[0]),
            around(&w[1])
        );
    }
}

fn max_tokens(requests: &[Recorded]) -> u64 {
    requests
        .iter()
        .map(|r| r.raw.len() as u64 / 4)
        .max()
        .unwrap_or(0)
}

/// A request key with what differs between two OpenCode servers made equal:
/// their temp folder and the fake provider's tool call ids.
fn comparable(key: &str, dir: &str) -> String {
    let key = key.replace(dir, "<dir>");
    let mut out = String::with_capacity(key.len());
    let mut rest = key.as_str();
    while let Some(at) = rest.find("toolu_fake_") {
        out.push_str(&rest[..at]);
        out.push_str("toolu_fake_#");
        rest = rest[at + "toolu_fake_".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

#[allow(
    clippy::too_many_lines,
    reason = "a benchmark's scenario, read top to bottom; the 150-line rule is for mc's own code"
)]
fn main() -> ExitCode {
    let args: Args = clap::Parser::parse();
    let (turns, file_kb) = (args.turns, args.file_kb);
    let context = args.limit * 1000;
    let reduce_every = args.reduce_every;
    let mc_config = match args.historian {
        true => Some(HISTORIAN_CONFIG.to_string()),
        false => args.mc_config,
    };
    let (show_detail, compare_one_shot, compare_boundary) =
        (args.detail, !args.no_one_shot, args.compare_boundary);
    let script = Script {
        turns,
        file_kb,
        context,
        reduce_every,
        edits: args.edits,
    };
    let without = drive(Mode::Without, script, None);
    let mut one_shot = compare_one_shot.then(|| drive(Mode::OneShot, script, mc_config.as_deref()));
    let mut with = drive(Mode::Resident, script, mc_config.as_deref());
    let mut no_boundary =
        compare_boundary.then(|| drive(Mode::NoBoundary, script, mc_config.as_deref()));
    // Each request as a prefix cache keys it, computed once.
    let keys =
        |run: &Run| -> Vec<String> { run.requests.iter().map(|r| cache_key(r).concat()).collect() };
    let (keys_without, keys_with) = (keys(&without), keys(&with));
    let cache = CacheFigures::of(&keys_without, &keys_with);
    let share_without = cache.without;
    println!(
        "bench-opencode: {turns} turns, 2 reads of ~{file_kb} KB per turn{}, real OpenCode, fake provider",
        if args.edits {
            ", an edit and a todo list"
        } else {
            ""
        }
    );
    println!(
        "  agent requests     without mc {:>6}   with mc {:>6}",
        without.requests.len(),
        with.requests.len()
    );
    println!(
        "  largest request    without mc {:>6}k  with mc {:>6}k tokens (bytes/4; model limit {}k)",
        max_tokens(&without.requests) / 1000,
        max_tokens(&with.requests) / 1000,
        context / 1000
    );
    for line in cache.lines(Some("≥ 95 %")) {
        println!("{line}");
    }
    println!(
        "  cache misses (<90 %) with mc: {}",
        misses(&keys_with).join(", ")
    );
    if let Some(status) = &with.status {
        println!(
            "  mc passes          {} (last bust: {})",
            status["passes"], status["last_bust"]
        );
    }
    println!("  historian          {}", historian_summary(&with));
    let mean_bytes = |run: &Run| {
        run.requests.iter().map(|r| r.raw.len()).sum::<usize>() / run.requests.len().max(1)
    };
    println!(
        "  bytes per request  without mc {:>7}   with mc {:>7} (mean)",
        mean_bytes(&without),
        mean_bytes(&with)
    );
    let drops: Vec<String> = with
        .drops
        .iter()
        .map(|(cause, n)| format!("{cause} {n}"))
        .collect();
    println!(
        "  drops by cause     {}",
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(", ")
        }
    );
    if args.edits {
        let todo = |r: &&Recorded| String::from_utf8_lossy(&r.raw).contains("mc_synthetic_todo_");
        println!(
            "  todo re-injected   in {} of {} requests",
            with.requests.iter().filter(todo).count(),
            with.requests.len()
        );
    }
    if let Some(dump) = std::env::var_os("MC_BENCH_DUMP") {
        for (i, r) in with.requests.iter().enumerate() {
            let _ = std::fs::write(
                std::path::Path::new(&dump).join(format!("{i:03}.json")),
                &r.raw,
            );
        }
    }
    if show_detail {
        detail("without", &keys_without);
        detail("with", &keys_with);
    }
    if let Some(one_shot) = &one_shot {
        let same = keys(one_shot)
            .iter()
            .zip(&keys_with)
            .filter(|(a, b)| comparable(a, &one_shot.dir) == comparable(b, &with.dir))
            .count();
        println!(
            "  resident = one-shot {same} of {} requests byte-identical (folders and tool ids aside; {} one-shot requests)",
            keys_with.len(),
            one_shot.requests.len()
        );
    }
    if let Some(run) = &no_boundary {
        let share = cache_share(&keys(run));
        println!(
            "  no boundary        prefix-cache share {:>5.1}% ({:.1}% of without mc); {} of {} requests byte-identical to the boundary run",
            share * 100.0,
            share / share_without * 100.0,
            keys(run)
                .iter()
                .zip(&keys_with)
                .filter(|(a, b)| comparable(a, &run.dir) == comparable(b, &with.dir))
                .count(),
            keys_with.len()
        );
    }
    for (run, mode) in [
        (Some(&with), Mode::Resident),
        (no_boundary.as_ref(), Mode::NoBoundary),
    ] {
        let Some(run) = run else { continue };
        println!(
            "  messages to hook   {:<26} last call {:>4}, most {:>4}, mean {:>6.1}",
            mode.label(),
            run.hook_inputs.last().copied().unwrap_or(0),
            run.hook_inputs.iter().copied().max().unwrap_or(0),
            run.hook_inputs.iter().sum::<usize>() as f64 / run.hook_inputs.len().max(1) as f64
        );
    }
    println!(
        "  mc hook time (ms)  {:<26} {:>8} {:>8} {:>8} {:>7}",
        "", "first", "median", "p90", "calls"
    );
    for (run, mode) in [
        (Some(&mut with), Mode::Resident),
        (no_boundary.as_mut(), Mode::NoBoundary),
        (one_shot.as_mut(), Mode::OneShot),
    ] {
        let Some(run) = run else { continue };
        for (hook, samples) in [
            ("messages", &mut run.hook_ms),
            ("system", &mut run.system_hook_ms),
        ] {
            let first = samples.first().copied().unwrap_or(f64::NAN);
            let (median, p90) = percentiles(samples);
            println!(
                "                     {:<26} {first:>8.1} {median:>8.1} {p90:>8.1} {:>7}",
                format!("{hook}, {}", mode.label()),
                samples.len()
            );
        }
    }
    match with.serve_rss_kib {
        Some((now, peak)) => println!(
            "  serve memory       RSS {:.1} MiB at the end of the run, peak {:.1} MiB",
            now as f64 / 1024.0,
            peak as f64 / 1024.0
        ),
        None => {
            println!("  serve memory       no resident mc-transform found at the end of the run")
        }
    }
    println!(
        "  bytes mc adds      {}",
        fixed_additions(&without.requests[0], &with.requests[0])
    );
    ExitCode::SUCCESS
}
