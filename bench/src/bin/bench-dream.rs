//! Figures for mc-dream (a measurement, not a test):
//!
//! 1. **Tick time when nothing is due**: whole `mc-dream tick` processes
//!    (spawn to exit) against a database of 10 projects and 500 memories
//!    whose tasks all ran a minute earlier. This is what every user pays
//!    every 15 minutes.
//! 2. **Model tokens per task on a 500-memory project** (a git repository
//!    with the files the memories point at), with the default budgets: each
//!    task is run until it has nothing left, against a scripted model that
//!    answers every manifest the obvious way and counts tokens with mc's
//!    estimator. Prints calls and tokens of the first run and of all runs.
//! 3. **Consolidate's precision** on a hand-built set: facts with their
//!    paraphrases (true duplicates) among facts that share words but differ
//!    (the same setting with another value, the same file with another
//!    rule). The lexical stage proposes groups; a worst-case model merges
//!    every group whole. Prints how many true duplicate pairs were merged and
//!    how many distinct pairs were wrongly merged.
//!
//! Run: `cargo build --release --workspace --features mc-bench/bench && target/release/bench-dream`.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use mc_base::config::DreamConfig;
use mc_base::store::{Store, StoreOptions};
use mc_base::tokens::estimate;
use mc_dream_core::{self as dream, Settings, Task, lease};
use mc_llm::{Completion, Event, LlmError, Model, ModelRef, Prompt};
use mc_search_core::memory;
use mc_tests::TestEnv;

const NOW: i64 = TestEnv::NOW_MS;
const MIN: i64 = 60_000;

fn ids(text: &str) -> Vec<i64> {
    text.match_indices("<memory id=\"")
        .filter_map(|(i, m)| text.get(i + m.len()..)?.split('"').next()?.parse().ok())
        .collect()
}

/// Answers every task the obvious way (merge each group whole, classify,
/// verify and keep everything) and counts tokens with mc's estimator.
#[derive(Default)]
struct Oracle {
    calls: RefCell<u64>,
    tokens: RefCell<(u64, u64)>,
}

impl Oracle {
    fn answer(user: &str) -> String {
        if user.starts_with("Task: consolidate") {
            let merges: String = user
                .split("<group ")
                .skip(1)
                .map(|g| {
                    let list: Vec<String> = ids(g).iter().map(i64::to_string).collect();
                    let first = g
                        .split("<memory id=\"")
                        .nth(1)
                        .and_then(|r| r.split_once("\">"))
                        .and_then(|(_, r)| r.split("</memory>").next())
                        .unwrap_or("merged");
                    format!("<merge ids=\"{}\">{first}</merge>\n", list.join(","))
                })
                .collect();
            format!("<consolidate>\n{merges}</consolidate>")
        } else if user.starts_with("Task: classify") {
            let body: String = ids(user)
                .iter()
                .map(|id| format!("<memory id=\"{id}\" importance=\"50\" scope=\"project\"/>\n"))
                .collect();
            format!("<classify>\n{body}</classify>")
        } else if user.starts_with("Task: verify") {
            let body: String = ids(user)
                .iter()
                .map(|id| format!("<memory id=\"{id}\" verdict=\"verified\"/>\n"))
                .collect();
            format!("<verify>\n{body}</verify>")
        } else {
            let body: String = ids(user)
                .iter()
                .map(|id| format!("<memory id=\"{id}\" verdict=\"keep\"/>\n"))
                .collect();
            format!("<archive_stale>\n{body}</archive_stale>")
        }
    }
}

impl Model for Oracle {
    fn complete(&self, prompt: &Prompt, _: &mut dyn FnMut(Event)) -> Result<Completion, LlmError> {
        let text = Oracle::answer(&prompt.user);
        let input = u64::from(estimate(&prompt.system)) + u64::from(estimate(&prompt.user));
        let output = u64::from(estimate(&text));
        *self.calls.borrow_mut() += 1;
        let mut t = self.tokens.borrow_mut();
        t.0 += input;
        t.1 += output;
        Ok(Completion {
            text,
            model: ModelRef::parse("bench/oracle").ok_or_else(|| {
                LlmError::new(None, mc_llm::CallFailure::Config, "bad model name")
            })?,
            tokens_in: input,
            tokens_out: output,
            truncated: false,
        })
    }
}

fn no_progress(_: &str) {}

fn settings<'a>(
    dream: &'a DreamConfig,
    model: &'a dyn Model,
    now: &'a dyn Fn() -> i64,
) -> Settings<'a> {
    Settings {
        dream,
        model: Some(model),
        model_problem: None,
        tz: jiff::tz::TimeZone::UTC,
        host: "bench".into(),
        holder: lease::holder_name("bench", std::process::id(), 1),
        lease_ms: 10 * MIN,
        now,
        progress: &no_progress,
        embeddings: Err("no embeddings.model configured".into()),
    }
}

const NOUNS: &[&str] = &[
    "session",
    "memory",
    "compartment",
    "lease",
    "tag",
    "pin",
    "head",
    "note",
    "commit",
    "profile",
    "schedule",
    "manifest",
    "budget",
    "provider",
    "transcript",
    "migration",
    "config",
    "token",
];
const VERBS: &[&str] = &[
    "log", "cache", "drop", "rewrite", "retry", "rename", "split", "merge",
];
const CATEGORIES: &[&str] = &[
    "PROJECT_RULES",
    "ARCHITECTURE",
    "CONSTRAINTS",
    "CONFIG_VALUES",
    "NAMING",
];

/// Memory `n` of a generated project: a mix of file pointers, symbols,
/// config values and plain rules; every 25th restates the one before.
fn generated(n: usize) -> (&'static str, String) {
    let noun = NOUNS[n % NOUNS.len()];
    let other = NOUNS[(n * 7 + 3) % NOUNS.len()];
    let verb = VERBS[n % VERBS.len()];
    let category = CATEGORIES[n % CATEGORIES.len()];
    let text = match n % 5 {
        0 => format!(
            "src/{noun}_{n}.rs owns the {noun} rows; {other} code reaches them only through its functions."
        ),
        1 => format!(
            "`{noun}_limit_{n}` bounds how many {other} entries one {noun} keeps; it defaults to {}.",
            10 + n
        ),
        2 => format!("Never {verb} a {noun} while a {other} write is open (case {n})."),
        3 => format!(
            "The {noun} module {n} is named after what it stores, never after who calls it."
        ),
        _ => format!(
            "Before changing the {noun} format {n}, bump the {other} version and add a migration."
        ),
    };
    (category, text)
}

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=b@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn tick_figure() -> Result<(), String> {
    let env = TestEnv::new().with_var("TZ", "UTC");
    let dream = DreamConfig {
        model: Some("bench/oracle".into()),
        ..DreamConfig::default()
    };
    env.user_config(
        r#"{"providers": {"bench": {"kind": "anthropic", "base_url": "http://127.0.0.1:9"}},
            "dream": {"model": "bench/oracle"}}"#,
    );
    let mut store = Store::open(&env.db(), &StoreOptions::default()).map_err(|e| e.to_string())?;
    for p in 0..10 {
        let dir = env.path(format!("project-{p}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let known = dream::register(&mut store, &dir, NOW).map_err(|e| e.to_string())?;
        for n in 0..50 {
            let (category, text) = generated(p * 50 + n);
            memory::write(
                &mut store,
                &known.project,
                category,
                &text,
                "agent",
                NOW - 3_600_000,
            )
            .map_err(|e| e.to_string())?;
        }
    }
    let oracle = Oracle::default();
    let clock = || NOW;
    let s = settings(&dream, &oracle, &clock);
    // Settle: every task runs once (until nothing is left), then nothing is due.
    for _ in 0..40 {
        dream::tick(&mut store, &s).map_err(|e| e.to_string())?;
    }
    drop(store);
    let later = (NOW + MIN).to_string();
    let mut times = Vec::new();
    for run in 0..25 {
        let start = Instant::now();
        let out = env
            .db_command("mc-dream", &["tick"])
            .env("MC_NOW_MS", &later)
            .output()
            .map_err(|e| e.to_string())?;
        let elapsed = start.elapsed();
        if !out.status.success()
            || !String::from_utf8_lossy(&out.stdout).contains("\"projects\":[]")
        {
            return Err(format!(
                "the tick did work: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if run >= 3 {
            times.push(elapsed);
        }
    }
    let min = times.iter().min().copied().unwrap_or_default();
    println!(
        "tick, nothing due (10 projects, 500 memories, whole process): median {:.1} ms, min {:.1} ms over {} runs",
        median(times.clone()).as_secs_f64() * 1000.0,
        min.as_secs_f64() * 1000.0,
        times.len()
    );
    Ok(())
}

fn tokens_figure() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("repo");
    std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
    // Generated texts repeat now and then (exact duplicates are one
    // memory): take enough for 500 distinct ones.
    let mut texts = Vec::new();
    let mut seen = BTreeSet::new();
    for m in mc_tests::generate::memory_texts(7, 800) {
        if texts.len() < 500 && seen.insert(mc_history::store::memory_key(&m.content)) {
            texts.push(m);
        }
    }
    // The files the memories point at exist, holding the symbols they name.
    for m in &texts {
        let symbols = mc_dream_core::verify::symbols(&m.content);
        for path in mc_dream_core::verify::path_words(&m.content) {
            let file = root.join(&path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            let body: String = symbols
                .iter()
                .map(|s| {
                    format!(
                        "// {s} is defined here.\npub fn {}() {{}}\n",
                        s.replace(['.', ':'], "_")
                    )
                })
                .collect::<String>()
                .repeat(4);
            std::fs::write(&file, format!("//! {path}\n{body}")).map_err(|e| e.to_string())?;
        }
    }
    git(&root, &["init", "-q"])?;
    git(&root, &["add", "."])?;
    git(&root, &["commit", "-q", "-m", "bench"])?;
    let db = dir.path().join("seed.db");
    {
        let mut store = Store::open(&db, &StoreOptions::default()).map_err(|e| e.to_string())?;
        let known = dream::register(&mut store, &root, NOW).map_err(|e| e.to_string())?;
        let mut created = 0;
        for m in &texts {
            let w = memory::write(
                &mut store,
                &known.project,
                m.category,
                &m.content,
                "agent",
                NOW - 200 * 86_400_000,
            )
            .map_err(|e| e.to_string())?;
            created += usize::from(w.result == memory::Written::Created);
        }
        let live = dream::live_memories(store.conn(), &known.project)
            .map_err(|e| e.to_string())?
            .len();
        if created != 500 || live != 500 {
            return Err(format!(
                "{created} memories written, {live} live: expected 500"
            ));
        }
        // Everything into the main file: each task starts from a copy of it.
        store
            .conn()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .map_err(|e| e.to_string())?;
    }
    let dream = DreamConfig {
        model: Some("bench/oracle".into()),
        ..DreamConfig::default()
    };
    println!(
        "tokens per task, 500-memory project (task budget {}, max output {}), estimated by mc's counter:",
        dream.task_token_budget, dream.max_output_tokens
    );
    for task in [
        Task::Consolidate,
        Task::Verify,
        Task::Classify,
        Task::ArchiveStale,
    ] {
        // Each task starts from the same 500 memories.
        let copy = dir.path().join(format!("{}.db", task.name()));
        std::fs::copy(&db, &copy).map_err(|e| e.to_string())?;
        let mut store = Store::open(&copy, &StoreOptions::default()).map_err(|e| e.to_string())?;
        let oracle = Oracle::default();
        let mut first = None;
        let mut runs = 0;
        let mut detail = serde_json::Value::Null;
        for n in 0..200 {
            let now = NOW + n * MIN;
            let clock = move || now;
            let s = settings(&dream, &oracle, &clock);
            let report = dream::run_now(&mut store, &s, &root, task).map_err(|e| e.to_string())?;
            runs += 1;
            let t = &report.tasks[0];
            if first.is_none() {
                first = Some((*oracle.calls.borrow(), *oracle.tokens.borrow()));
                detail = t.detail.clone();
            }
            // Done when a run has nothing left to ask about.
            if t.outcome == "failed" || t.tokens.total() == 0 {
                if t.outcome == "failed" {
                    println!("  {} failed: {:?}", task.name(), t.failure);
                }
                break;
            }
        }
        let (calls, (input, output)) = (*oracle.calls.borrow(), *oracle.tokens.borrow());
        let (c1, (i1, o1)) = first.unwrap_or_default();
        println!(
            "  {:<14} first run: {c1} call(s), {i1} in + {o1} out; until nothing is left: {runs} run(s), {calls} call(s), {input} in + {output} out",
            task.name()
        );
        println!("  {:<14} first run's detail: {detail}", "");
    }
    Ok(())
}

/// Facts and their paraphrases: every pair inside a line is a true duplicate.
const DUPLICATES: &[&[&str]] = &[
    &[
        "Never log API keys.",
        "API keys must never be logged.",
        "Do not write API keys to any log.",
    ],
    &[
        "Tests never touch the real home directory.",
        "Tests must not touch the real home directory.",
    ],
    &[
        "The database runs in WAL mode.",
        "SQLite is opened in WAL mode.",
    ],
    &[
        "Run cargo fmt before every commit.",
        "Always run cargo fmt before committing.",
    ],
    &[
        "Migrations are never edited once shipped.",
        "A shipped migration is never edited; add a new one.",
    ],
    &[
        "mc-core never reads the environment.",
        "The core crate never reads environment variables.",
    ],
    &[
        "Every binary prints exactly one JSON document on stdout.",
        "A binary writes exactly one JSON document to stdout.",
    ],
    &[
        "Exit code 2 means bad input.",
        "Bad input exits with code 2.",
    ],
    &[
        "The memory budget in the head is 4000 tokens by default.",
        "By default the head's memory budget is 4000 tokens.",
    ],
    &[
        "Config keys live in shared/src/config/keys.rs.",
        "Every config key is a row in shared/src/config/keys.rs.",
    ],
    &[
        "Progress goes to stderr only when it is a terminal.",
        "Progress is drawn on stderr only when stderr is a terminal.",
    ],
    &[
        "Use thiserror for errors in mc-core.",
        "mc-core errors are typed with thiserror.",
    ],
    &[
        "Never add a dependency on tokio.",
        "Do not depend on tokio or any async runtime.",
    ],
    &[
        "Snapshots live in the snapshots folder of each crate.",
        "Each crate keeps its insta snapshots in its snapshots folder.",
    ],
    &[
        "The historian holds back the last compartment at the chunk edge.",
        "At the chunk edge the historian holds back its last compartment.",
    ],
];

/// Facts that share words with others but say something else.
const DISTINCT: &[&str] = &[
    "Never log session ids.",
    "API keys are read from the variable api_key_env names.",
    "Tests never touch the network beyond 127.0.0.1.",
    "The database busy timeout is 5000 ms by default.",
    "The hook busy timeout is 1000 ms by default.",
    "Run cargo clippy before every commit.",
    "Migrations are numbered by the order they shipped in.",
    "mc-core never writes to stdout.",
    "Every binary reads its input as JSON on stdin.",
    "Exit code 1 means a runtime failure.",
    "The history budget in the head is 15 percent of the threshold.",
    "Provider settings live in shared/src/config/providers.rs.",
    "Progress bars use indicatif.",
    "Use anyhow for errors in the binaries.",
    "Never add a dependency that downloads at build time.",
    "Snapshots are reviewed with cargo insta review.",
    "The historian repairs a rejected answer once.",
    "The memory epoch changes only for edits from outside a session.",
    "SQLite is bundled with FTS5.",
    "Tests use a fixed clock through MC_NOW_MS.",
];

fn precision_figure() -> Result<(), String> {
    let mut store = Store::open_in_memory().map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let known = dream::register(&mut store, dir.path(), NOW).map_err(|e| e.to_string())?;
    let mut fact_of = std::collections::BTreeMap::new();
    let mut write = |text: &str, fact: Option<usize>| -> Result<(), String> {
        let w = memory::write(
            &mut store,
            &known.project,
            "PROJECT_RULES",
            text,
            "agent",
            NOW,
        )
        .map_err(|e| e.to_string())?;
        fact_of.insert(w.id, fact);
        Ok(())
    };
    for (f, group) in DUPLICATES.iter().enumerate() {
        for text in *group {
            write(text, Some(f))?;
        }
    }
    for text in DISTINCT {
        write(text, None)?;
    }
    let true_pairs: usize = DUPLICATES.iter().map(|g| g.len() * (g.len() - 1) / 2).sum();
    let total = fact_of.len();
    let all_pairs = total * (total - 1) / 2;
    let oracle = Oracle::default();
    let dream = DreamConfig {
        model: Some("bench/oracle".into()),
        task_token_budget: 1_000_000,
        ..DreamConfig::default()
    };
    let clock = || NOW;
    let s = settings(&dream, &oracle, &clock);
    let report =
        dream::run_now(&mut store, &s, dir.path(), Task::Consolidate).map_err(|e| e.to_string())?;
    let merged = report.tasks[0].detail["merged"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (mut right, mut wrong) = (0, 0);
    let mut wrong_examples = BTreeSet::new();
    for m in &merged {
        let from: Vec<i64> = m["from"]
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect())
            .unwrap_or_default();
        for (i, a) in from.iter().enumerate() {
            for b in from.iter().skip(i + 1) {
                match (
                    fact_of.get(a).copied().flatten(),
                    fact_of.get(b).copied().flatten(),
                ) {
                    (Some(x), Some(y)) if x == y => right += 1,
                    _ => {
                        wrong += 1;
                        wrong_examples.insert((*a, *b));
                    }
                }
            }
        }
    }
    println!(
        "consolidate precision ({total} memories: {} facts with {true_pairs} true duplicate pairs, {} distinct look-alikes; {all_pairs} pairs in all):",
        DUPLICATES.len(),
        DISTINCT.len()
    );
    println!(
        "  groups proposed {}; with a model that merges every group whole: {right} of {true_pairs} true duplicate pairs merged, {wrong} distinct pairs wrongly merged; {} model call(s), {} tokens in",
        report.tasks[0].detail["groups"],
        oracle.calls.borrow(),
        oracle.tokens.borrow().0
    );
    let merged_pairs: BTreeSet<(i64, i64)> = merged
        .iter()
        .flat_map(|m| {
            let from: Vec<i64> = m["from"]
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect())
                .unwrap_or_default();
            let mut pairs = Vec::new();
            for (i, a) in from.iter().enumerate() {
                for b in from.iter().skip(i + 1) {
                    pairs.push((*a.min(b), *a.max(b)));
                }
            }
            pairs
        })
        .collect();
    let ids: Vec<i64> = fact_of.keys().copied().collect();
    let mut missed = Vec::new();
    for (i, a) in ids.iter().enumerate() {
        for b in ids.iter().skip(i + 1) {
            let same = matches!((fact_of.get(a).copied().flatten(), fact_of.get(b).copied().flatten()), (Some(x), Some(y)) if x == y);
            if same && !merged_pairs.contains(&(*a, *b)) {
                missed.push((*a, *b));
            }
        }
    }
    for (a, b) in missed {
        let text = |id: i64| {
            store
                .conn()
                .query_row("SELECT content FROM memories WHERE id = ?1", [id], |r| {
                    r.get::<_, String>(0)
                })
                .unwrap_or_default()
        };
        println!("    missed: {:?} + {:?}", text(a), text(b));
    }
    for (a, b) in wrong_examples {
        let text = |id: i64| {
            mc_dream_core::live_memories(store.conn(), &known.project)
                .ok()
                .and_then(|_| {
                    store
                        .conn()
                        .query_row("SELECT content FROM memories WHERE id = ?1", [id], |r| {
                            r.get::<_, String>(0)
                        })
                        .ok()
                })
                .unwrap_or_default()
        };
        println!("    wrongly merged: {:?} + {:?}", text(a), text(b));
    }
    Ok(())
}

/// Figures for mc-dream: tick time when nothing is due, model tokens per
/// task on a 500-memory project, and consolidate's precision.
#[derive(clap::Parser)]
#[command(name = "bench-dream")]
struct Args {}

fn main() -> ExitCode {
    let Args {} = clap::Parser::parse();
    let mut failed = false;
    for (name, figure) in [
        ("tick", tick_figure as fn() -> Result<(), String>),
        ("tokens", tokens_figure),
        ("precision", precision_figure),
    ] {
        if let Err(e) = figure() {
            eprintln!("bench-dream: {name}: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
