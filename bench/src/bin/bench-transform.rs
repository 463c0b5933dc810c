//! Whole-process benchmark of `mc-transform` against a JSON parse/serialise floor.
//!
//! Generates a long OpenCode session, then times, as whole processes (spawn,
//! write stdin, read stdout to the end, wait):
//!
//! 1. `json-floor`: parse and re-serialise the envelope, nothing else;
//! 2. a steady-state defer pass (the session's tags are already stored);
//! 3. a first execute pass with queued drops, on a fresh copy of a prepared DB;
//! 4. and 5. the same defer and execute passes with history present: 40
//!    compartments covering the first half of the session and 200 project
//!    memories, written straight into the DB and folded into the head (m[0])
//!    by an untimed pass first.
//!
//! Prints min / median / p90 and the ratios of each pass to the floor against
//! the targets (defer ≤ 2×, execute ≤ 3×, with or without history). Missing a
//! target is reported, not an error: this is a measurement. Last, what the
//! per-call record costs each pass (`mc_tests::bench::record_cost`), in µs
//! and as a share of the pass.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};
use std::time::{Duration, Instant};

use mc_base::domain::sessions::find_session;
use mc_base::store::{Store, StoreOptions};
use mc_history::store::{self as history_store, NewCompartment};
use mc_tests::bench::record_cost;
use mc_tests::generate::{self, CompartmentText, MemoryText, SessionSpec};
use mc_tests::serve::{Incremental, Served, request_line};
use mc_tests::{bin_path, pipe};
use serde_json::Value;

const DEFER_TARGET: f64 = 2.0;
const EXECUTE_TARGET: f64 = 3.0;
/// A resident pass (incremental) should cost at most this…
const SERVE_TARGET_MS: f64 = 2.0;
/// …plus this share of the one-shot defer pass.
const SERVE_TARGET_SHARE: f64 = 0.10;
/// The pause before each timed delta: the model call between two passes
/// (far shorter than any real one).
const BETWEEN_PASSES: Duration = Duration::from_millis(50);
const DEFER_USAGE_PERCENT: f64 = 40.0;
const EXECUTE_USAGE_PERCENT: f64 = 70.0;
/// How many old tool tags the execute pass finds queued for dropping.
const QUEUED_DROPS: usize = 36;
/// The history scenario: compartments over the first half of the session…
const HISTORY_COMPARTMENTS: usize = 40;
/// …and memories of the session's project.
const HISTORY_MEMORIES: usize = 200;

/// Times mc-transform (a steady-state defer pass and a first execute pass)
/// against json-floor, a program that only parses and re-serialises the same
/// JSON; then the same two passes with 40 compartments and 200 memories in
/// the DB. Both binaries must sit beside this one.
#[derive(clap::Parser)]
#[command(name = "bench-transform")]
struct Cli {
    /// Timed runs per measurement
    #[arg(long, value_name = "N", default_value_t = 30)]
    runs: usize,
    /// Untimed runs first
    #[arg(long, value_name = "N", default_value_t = 3)]
    warmup: usize,
    /// User turns in the generated session
    #[arg(long, value_name = "N", default_value_t = 100)]
    turns: usize,
    /// Approximate tokens in the session
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    tokens: u64,
    /// Generator seed [default: the benchmark's]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Work in DIR (envelopes, databases) and keep it afterwards
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Time only the plain passes, without compartments and memories
    #[arg(long)]
    no_history: bool,
    /// Instead of timing, measure peak RSS against the envelope's size: 1, 5
    /// and 21 MB envelopes of tiny messages (142k in 21 MB), of one-word
    /// messages with no time (200k in 21 MB) and of a coding session (big
    /// tool outputs), each one-shot on a fresh DB, again on the
    /// same DB, and through serve (whole, then deltas); the bound is 8× the
    /// envelope + 50 MiB (needs GNU time)
    #[arg(long)]
    memory: bool,
}

type Result<T> = std::result::Result<T, String>;

struct Args {
    runs: usize,
    warmup: usize,
    turns: usize,
    tokens: u64,
    seed: u64,
    keep: Option<PathBuf>,
    /// Also time the passes with compartments and memories present.
    history: bool,
    /// Measure peak memory instead of time.
    memory: bool,
}

impl From<Cli> for Args {
    fn from(cli: Cli) -> Args {
        Args {
            runs: cli.runs.max(1),
            warmup: cli.warmup,
            turns: cli.turns.max(1),
            tokens: cli.tokens,
            seed: cli.seed.unwrap_or(SessionSpec::bench().seed),
            keep: cli.keep,
            history: !cli.no_history,
            memory: cli.memory,
        }
    }
}

fn main() -> ExitCode {
    let args = Args::from(<Cli as clap::Parser>::parse());
    let work = match WorkDir::new(args.keep.clone()) {
        Ok(work) => work,
        Err(e) => {
            eprintln!("bench-transform: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = if args.memory {
        run_memory(&args, &work.path)
    } else {
        run(&args, &work.path)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-transform: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The benchmark's scratch folder: removed on drop unless the user chose it.
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    fn new(keep: Option<PathBuf>) -> Result<WorkDir> {
        let (path, keep) = match keep {
            Some(path) => (path, true),
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let name = format!("mc-bench-{}-{nanos:08x}", std::process::id());
                (std::env::temp_dir().join(name), false)
            }
        };
        std::fs::create_dir_all(path.join("config"))
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(WorkDir { path, keep })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

struct Tools {
    transform: PathBuf,
    floor: PathBuf,
    work: PathBuf,
}

impl Tools {
    /// `mc-transform --db DB ARGS…`, isolated from the user's config and DB.
    fn transform(&self, db: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(&self.transform);
        command
            .arg("--db")
            .arg(db)
            .args(args)
            .current_dir(&self.work)
            .env("XDG_CONFIG_HOME", self.work.join("config"))
            .env_remove("MC_CONFIG")
            .env_remove("MC_DB");
        command
    }

    fn floor(&self) -> Command {
        let mut command = Command::new(&self.floor);
        command.current_dir(&self.work);
        command
    }
}

/// Run once, untimed; the process must succeed and print JSON.
fn run_json(command: &mut Command, stdin: &[u8], what: &str) -> Result<Value> {
    let output = pipe(command, stdin).map_err(|e| format!("{what}: cannot run: {e}"))?;
    parse_output(&output, what)
}

fn parse_output(output: &Output, what: &str) -> Result<Value> {
    if !output.status.success() {
        return Err(format!(
            "{what}: exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("{what}: output is not JSON: {e}"))
}

/// Time one whole process run.
fn timed(command: &mut Command, stdin: &[u8], what: &str) -> Result<(Duration, Output)> {
    let start = Instant::now();
    let output = pipe(command, stdin).map_err(|e| format!("{what}: cannot run: {e}"))?;
    let elapsed = start.elapsed();
    if !output.status.success() {
        return Err(format!(
            "{what}: exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok((elapsed, output))
}

/// Check a pass report: the expected decision, and optionally some drops.
fn check_pass(output: &Output, decision: &str, want_drops: bool, what: &str) -> Result<Value> {
    let value = parse_output(output, what)?;
    let pass = &value["pass"];
    if pass["decision"] != decision {
        return Err(format!(
            "{what}: expected decision {decision:?}, got {} (pass: {pass})",
            pass["decision"]
        ));
    }
    if want_drops && pass["dropped"].as_array().is_none_or(Vec::is_empty) {
        return Err(format!(
            "{what}: the execute pass dropped nothing (pass: {pass})"
        ));
    }
    Ok(value)
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    min: f64,
    median: f64,
    p90: f64,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    let median = if n % 2 == 1 {
        ms[n / 2]
    } else {
        (ms[n / 2 - 1] + ms[n / 2]) / 2.0
    };
    let p90 = ms[(n * 9).div_ceil(10).max(1) - 1];
    Stats {
        min: ms[0],
        median,
        p90,
    }
}

/// Tool-output tags (`§N§` at the start of a tool output) in a pass's messages,
/// oldest first.
fn tool_tags(messages: &Value) -> Vec<u64> {
    messages
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "tool")
        .filter_map(|p| leading_tag(p["state"]["output"].as_str()?))
        .collect()
}

fn leading_tag(text: &str) -> Option<u64> {
    let rest = text.strip_prefix('§')?;
    let end = rest.find('§')?;
    rest[..end].parse().ok()
}

/// Copy `db` and any `-wal`/`-shm` companions to `to` (replacing what is there).
fn copy_db(db: &Path, to: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let dest = PathBuf::from(format!("{}{suffix}", to.display()));
        let _ = std::fs::remove_file(&dest);
        let src = PathBuf::from(format!("{}{suffix}", db.display()));
        if src.exists() {
            std::fs::copy(&src, &dest)
                .map_err(|e| format!("cannot copy {} to {}: {e}", src.display(), dest.display()))?;
        }
    }
    Ok(())
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn run(args: &Args, work: &Path) -> Result<()> {
    let tools = Tools {
        transform: bin_path("mc-transform"),
        floor: bin_path("json-floor"),
        work: work.to_path_buf(),
    };
    let inputs = build_inputs(args, work)?;
    check_floor(&tools, &inputs.defer)?;

    let history = History::generate(args.seed);
    let plain = prepare(&tools, &inputs, work, &Scenario::PLAIN)?;
    let with_history = if args.history {
        Some(prepare(
            &tools,
            &inputs,
            work,
            &Scenario::with_history(&history),
        )?)
    } else {
        None
    };
    print_header(args, &inputs, &plain, with_history.as_ref());

    let floor = time_runs(
        args,
        || timed(&mut tools.floor(), &inputs.defer, "json-floor"),
        |_, _| Ok(()),
    )?;
    let mut measured = vec![measure(&tools, args, &inputs, &plain)?];
    if let Some(prepared) = &with_history {
        measured.push(measure(&tools, args, &inputs, prepared)?);
    }
    print_results(&stats(&floor), &measured, &history);
    let one_shot = measured
        .first()
        .map_or(f64::NAN, |m| stats(&m.defer).median);
    print_record_cost(args, work, one_shot)?;
    if args.keep.is_some() {
        println!("\n  kept      {}", work.display());
    }
    Ok(())
}

/// The generated session and the two envelopes every scenario is timed on.
struct Inputs {
    session_id: String,
    messages: usize,
    approx_tokens: u64,
    /// The newest message's time: when the seeded history was "written".
    last_ms: i64,
    defer: Vec<u8>,
    execute: Vec<u8>,
}

fn build_inputs(args: &Args, work: &Path) -> Result<Inputs> {
    let spec = SessionSpec::new(args.seed, args.turns, args.tokens);
    let messages = generate::session(&spec);
    let last = generate::last_time_ms(&messages);
    let project = Value::String(work.display().to_string());

    let mut defer_env = generate::envelope(
        &messages,
        &spec.session_id,
        generate::usage_at_percent(DEFER_USAGE_PERCENT),
        last + 60_000,
    );
    defer_env["project_dir"] = project.clone();
    let defer = serde_json::to_vec(&defer_env).map_err(|e| e.to_string())?;

    let mut execute_messages = messages.clone();
    let tail = generate::follow_up(
        &messages,
        "Thanks. Now clean up the leftovers from the refactor and run the whole test suite again.",
        45_000,
    );
    let tail_created = tail["info"]["time"]["created"].as_i64().unwrap_or(last);
    execute_messages.push(tail);
    let mut execute_env = generate::envelope(
        &execute_messages,
        &spec.session_id,
        generate::usage_at_percent(EXECUTE_USAGE_PERCENT),
        tail_created + 1_500,
    );
    execute_env["project_dir"] = project;
    let execute = serde_json::to_vec(&execute_env).map_err(|e| e.to_string())?;
    if args.keep.is_some() {
        for (name, bytes) in [
            ("defer-envelope.json", &defer),
            ("execute-envelope.json", &execute),
        ] {
            std::fs::write(work.join(name), bytes).map_err(|e| format!("writing {name}: {e}"))?;
        }
    }
    Ok(Inputs {
        session_id: spec.session_id,
        messages: messages.len(),
        approx_tokens: generate::approx_tokens(&messages),
        last_ms: last,
        defer,
        execute,
    })
}

/// Sanity: the floor echoes the envelope.
fn check_floor(tools: &Tools, input: &[u8]) -> Result<()> {
    let output =
        pipe(&mut tools.floor(), input).map_err(|e| format!("json-floor: cannot run: {e}"))?;
    if !output.status.success() || output.stdout.trim_ascii_end() != input {
        return Err("json-floor does not echo its input".into());
    }
    Ok(())
}

/// The historian output the history scenario writes into its DBs.
struct History {
    compartments: Vec<CompartmentText>,
    memories: Vec<MemoryText>,
}

impl History {
    fn generate(seed: u64) -> History {
        History {
            compartments: generate::compartment_texts(seed, HISTORY_COMPARTMENTS),
            memories: generate::memory_texts(seed, HISTORY_MEMORIES),
        }
    }
}

/// What a scenario adds to the session before its passes are timed.
struct Scenario<'a> {
    /// Appended to its row names: "" or "+history".
    suffix: &'static str,
    /// Prefix of its database files.
    files: &'static str,
    history: Option<&'a History>,
}

impl<'a> Scenario<'a> {
    const PLAIN: Scenario<'static> = Scenario {
        suffix: "",
        files: "",
        history: None,
    };

    fn with_history(history: &'a History) -> Scenario<'a> {
        Scenario {
            suffix: "+history",
            files: "history-",
            history: Some(history),
        }
    }
}

/// A scenario's databases, ready to time.
struct Prepared {
    suffix: &'static str,
    /// The outputs must open with a rendered head.
    head: bool,
    /// The DB the defer passes run on.
    defer_db: PathBuf,
    /// Each execute pass runs on a fresh copy of this, made at `run_db`.
    snapshot: PathBuf,
    run_db: PathBuf,
    /// Tags the defer DB's last preparing pass reported.
    tags: u64,
    queued: usize,
}

fn prepare(
    tools: &Tools,
    inputs: &Inputs,
    work: &Path,
    scenario: &Scenario<'_>,
) -> Result<Prepared> {
    let Scenario {
        suffix,
        files,
        history,
    } = *scenario;
    // Defer: a DB that has seen the session once (and folded the history).
    let defer_db = work.join(format!("{files}defer.db"));
    let seen = prepare_db(
        tools,
        &defer_db,
        inputs,
        history,
        &format!("preparing the defer{suffix} DB"),
    )?;
    let tags = seen["pass"]["tags"].as_u64().unwrap_or(0);

    // Execute: a snapshot with drops queued on old tool outputs.
    let snapshot = work.join(format!("{files}execute-snapshot.db"));
    let seen = prepare_db(
        tools,
        &snapshot,
        inputs,
        history,
        &format!("preparing the execute{suffix} snapshot"),
    )?;
    let queued = queue_drops(tools, &snapshot, &inputs.session_id, &seen)?;
    Ok(Prepared {
        suffix,
        head: history.is_some(),
        defer_db,
        snapshot,
        run_db: work.join(format!("{files}execute-run.db")),
        tags,
        queued,
    })
}

/// Let `db` see the session once; with `history`, then seed it and run the
/// pass that rebuilds the head from it. Returns the last pass's output.
fn prepare_db(
    tools: &Tools,
    db: &Path,
    inputs: &Inputs,
    history: Option<&History>,
    what: &str,
) -> Result<Value> {
    let seen = run_json(&mut tools.transform(db, &[]), &inputs.defer, what)?;
    let Some(history) = history else {
        return Ok(seen);
    };
    seed_history(db, &inputs.session_id, history, inputs.last_ms)
        .map_err(|e| format!("{what}: seeding history: {e}"))?;
    let folded = run_json(
        &mut tools.transform(db, &[]),
        &inputs.defer,
        &format!("{what}: folding history"),
    )?;
    if folded["pass"]["materialized"] != true {
        return Err(format!(
            "{what}: the pass after seeding did not rebuild the head (pass: {})",
            folded["pass"]
        ));
    }
    check_head(&folded, what)?;
    Ok(folded)
}

/// Queue drops on old tool outputs that `seen` (a pass's output) still shows:
/// [`QUEUED_DROPS`] picks spread over the older half. Returns how many were queued.
fn queue_drops(tools: &Tools, snapshot: &Path, session_id: &str, seen: &Value) -> Result<usize> {
    let old: Vec<u64> = {
        let all = tool_tags(&seen["messages"]);
        all[..all.len() / 2].to_vec()
    };
    if old.is_empty() {
        return Err("the prepared pass shows no tagged tool outputs to drop".into());
    }
    let picks = QUEUED_DROPS.min(old.len());
    let drop: Vec<String> = (0..picks)
        .map(|i| old[i * old.len() / picks].to_string())
        .collect();
    let drop = drop.join(",");
    let queued = run_json(
        &mut tools.transform(
            snapshot,
            &["reduce", "--session", session_id, "--drop", &drop],
        ),
        b"",
        "queueing drops",
    )?;
    let queued_count = queued["queued"].as_array().map_or(0, Vec::len);
    if queued_count == 0 {
        return Err(format!(
            "reduce queued nothing (is the session too small, every old tag still protected? try more --turns): {queued}"
        ));
    }
    Ok(queued_count)
}

/// A message row as the DB stores it.
struct StoredMessage {
    ordinal: i64,
    id: String,
    created_ms: Option<i64>,
}

/// Write `history` into `db` the way the historian and the memory tools would:
/// compartments over the first half of the stored messages, memories of the
/// session's project, then a memory-epoch bump so the next pass rebuilds m[0].
fn seed_history(db: &Path, session_id: &str, history: &History, now_ms: i64) -> Result<()> {
    let mut store = Store::open(db, &StoreOptions::default()).map_err(|e| e.to_string())?;
    let session = find_session(store.conn(), "opencode", session_id)
        .map_err(|e| e.to_string())?
        .ok_or("the session is not in the DB")?;
    let project = session
        .project_identity
        .ok_or("the session has no project identity")?;
    let messages = stored_messages(&store, session.id)?;
    let compartments = compartments_over(&messages[..messages.len() / 2], &history.compartments)?;
    store
        .write(|tx| {
            history_store::publish_compartments(tx, session.id, &compartments, now_ms)?;
            for memory in &history.memories {
                history_store::write_memory(
                    tx,
                    &project,
                    memory.category,
                    &memory.content,
                    Some(memory.importance),
                    "bench",
                    now_ms,
                )?;
            }
            history_store::bump_memory_epoch(tx, &project)
        })
        .map_err(|e| e.to_string())
}

fn stored_messages(store: &Store, session: i64) -> Result<Vec<StoredMessage>> {
    let mut statement = store
        .conn()
        .prepare(
            "SELECT ordinal, message_id, created_ms FROM messages WHERE session = ?1 ORDER BY ordinal",
        )
        .map_err(|e| e.to_string())?;
    let rows = statement
        .query_map([session], |row| {
            Ok(StoredMessage {
                ordinal: row.get(0)?,
                id: row.get(1)?,
                created_ms: row.get(2)?,
            })
        })
        .map_err(|e| e.to_string())?;
    rows.collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

/// One compartment per text, over contiguous, non-overlapping slices that
/// together cover `messages`.
fn compartments_over(
    messages: &[StoredMessage],
    texts: &[CompartmentText],
) -> Result<Vec<NewCompartment>> {
    let (n, count) = (messages.len(), texts.len());
    if n < count {
        return Err(format!(
            "{n} messages are too few for {count} compartments (try more --turns)"
        ));
    }
    Ok(texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let first = &messages[i * n / count];
            let last = &messages[(i + 1) * n / count - 1];
            NewCompartment {
                start_ordinal: first.ordinal,
                end_ordinal: last.ordinal,
                start_message_id: first.id.clone(),
                end_message_id: last.id.clone(),
                start_ms: first.created_ms,
                end_ms: last.created_ms,
                title: text.title.clone(),
                tiers: text.tiers.clone(),
                importance: text.importance,
                episode: Some(text.episode.to_string()),
            }
        })
        .collect())
}

/// The output must open with the two synthetic head messages, m[0] holding
/// rendered session history and project memory. Returns m[0]'s size in bytes.
fn check_head(value: &Value, what: &str) -> Result<usize> {
    let messages = value["messages"].as_array().map_or(&[][..], Vec::as_slice);
    let synthetic = |i: usize| {
        messages
            .get(i)
            .is_some_and(|m| m["info"]["syntheticHead"] == true)
    };
    if !(synthetic(0) && synthetic(1)) {
        return Err(format!(
            "{what}: the output does not start with the two head messages"
        ));
    }
    let m0 = messages[0]["parts"][0]["text"].as_str().unwrap_or_default();
    // An empty history renders as `<session-history></session-history>`, so
    // look for opening tags followed by content.
    for open in ["<session-history>\n", "<project-memory>\n"] {
        if !m0.contains(open) {
            return Err(format!(
                "{what}: m[0] has no {} block ({} bytes)",
                open.trim_end(),
                m0.len()
            ));
        }
    }
    Ok(m0.len())
}

fn print_header(args: &Args, inputs: &Inputs, plain: &Prepared, history: Option<&Prepared>) {
    println!("mc-transform benchmark");
    println!(
        "  session   {} turns, {} messages, {} tags, ~{} tokens (bytes/4)",
        args.turns,
        thousands(inputs.messages as u64),
        thousands(plain.tags),
        thousands(inputs.approx_tokens)
    );
    println!(
        "  input     defer {} bytes at {DEFER_USAGE_PERCENT}% usage; execute {} bytes at {EXECUTE_USAGE_PERCENT}% usage, {} drops queued",
        thousands(inputs.defer.len() as u64),
        thousands(inputs.execute.len() as u64),
        plain.queued,
    );
    if let Some(history) = history {
        println!(
            "  history   {HISTORY_COMPARTMENTS} compartments over the first half of the messages, {HISTORY_MEMORIES} memories; same inputs, {} drops queued on visible tool outputs",
            history.queued,
        );
    }
    println!(
        "  runs      {} timed + {} warm-up per row, whole processes",
        args.runs, args.warmup
    );
}

/// Run `run` `warmup + runs` times and keep the timed runs' durations;
/// `inspect` sees every run's index (warm-ups first) and output.
fn time_runs<T>(
    args: &Args,
    mut run: impl FnMut() -> Result<(Duration, T)>,
    mut inspect: impl FnMut(usize, T) -> Result<()>,
) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(args.runs);
    for i in 0..args.warmup + args.runs {
        let (elapsed, output) = run()?;
        inspect(i, output)?;
        if i >= args.warmup {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

/// One scenario's defer and execute timings.
struct Measured {
    suffix: &'static str,
    defer: Vec<Duration>,
    defer_out_bytes: usize,
    defer_stable: bool,
    /// m[0]'s size when the scenario expects a rendered head.
    m0_bytes: Option<usize>,
    execute: Vec<Duration>,
    execute_out_bytes: usize,
    dropped: usize,
    /// The defer pass as a request to one resident `mc-transform serve`:
    /// the whole envelope, and as an incremental delta (nothing changed).
    serve: Vec<Duration>,
    serve_delta: Vec<Duration>,
    /// Bytes of a delta request and of its answer.
    delta_bytes: (usize, usize),
}

fn measure(tools: &Tools, args: &Args, inputs: &Inputs, prepared: &Prepared) -> Result<Measured> {
    let suffix = prepared.suffix;

    // Defer, on the prepared DB; the first outputs are checked, all compared.
    let what = format!("defer{suffix} pass");
    let mut first_output: Option<Vec<u8>> = None;
    let mut defer_stable = true;
    let mut m0_bytes = None;
    let defer = time_runs(
        args,
        || {
            timed(
                &mut tools.transform(&prepared.defer_db, &[]),
                &inputs.defer,
                &what,
            )
        },
        |i, output| {
            if i <= args.warmup {
                let value = check_pass(&output, "defer", false, &what)?;
                if prepared.head {
                    m0_bytes = Some(check_head(&value, &what)?);
                }
            }
            match &first_output {
                None => first_output = Some(output.stdout),
                Some(previous) => defer_stable &= *previous == output.stdout,
            }
            Ok(())
        },
    )?;

    // Execute, each on a fresh copy of the snapshot.
    let what = format!("execute{suffix} pass");
    let mut dropped = 0;
    let mut execute_out_bytes = 0;
    let execute = time_runs(
        args,
        || {
            copy_db(&prepared.snapshot, &prepared.run_db)?;
            timed(
                &mut tools.transform(&prepared.run_db, &[]),
                &inputs.execute,
                &what,
            )
        },
        |i, output| {
            if i <= args.warmup {
                let value = check_pass(&output, "execute", true, &what)?;
                if prepared.head {
                    check_head(&value, &what)?;
                }
                dropped = value["pass"]["dropped"].as_array().map_or(0, Vec::len);
                execute_out_bytes = output.stdout.len();
            }
            Ok(())
        },
    )?;

    let (serve, serve_delta, delta_bytes) = measure_serve(
        tools,
        args,
        inputs,
        prepared,
        first_output.as_deref().unwrap_or_default(),
    )?;

    Ok(Measured {
        suffix,
        serve,
        serve_delta,
        delta_bytes,
        defer,
        defer_out_bytes: first_output.map_or(0, |o| o.len()),
        defer_stable,
        m0_bytes,
        execute,
        execute_out_bytes,
        dropped,
    })
}

/// The whole-envelope and delta timings through serve, and the delta's
/// request and answer sizes.
type ServeTimes = (Vec<Duration>, Vec<Duration>, (usize, usize));

/// The defer pass through one resident process: the whole envelope as a
/// request line (its answer must be the one-shot's bytes), then the same
/// input as an incremental delta (every message unchanged; the rebuilt
/// answer must be the one-shot's too).
fn measure_serve(
    tools: &Tools,
    args: &Args,
    inputs: &Inputs,
    prepared: &Prepared,
    one_shot: &[u8],
) -> Result<ServeTimes> {
    let what = format!("defer{} pass through serve", prepared.suffix);
    let want = String::from_utf8_lossy(one_shot).trim_end().to_string();
    let envelope: Value = serde_json::from_slice(&inputs.defer).map_err(|e| e.to_string())?;
    let mut served = Served::start(&mut tools.transform(&prepared.defer_db, &["serve"]));
    let line = request_line("pass", &envelope);
    let whole = time_runs(
        args,
        || {
            let start = Instant::now();
            let answer = served.request(&line);
            Ok((start.elapsed(), answer))
        },
        |_, answer| {
            if answer == want {
                Ok(())
            } else {
                Err(format!("{what}: the answer is not the one-shot's bytes"))
            }
        },
    )?;
    let mut client = Incremental::default();
    client
        .pass(&mut served, &envelope)
        .map_err(|e| format!("{what}: {e}"))?;
    let mut bytes = (0, 0);
    let mut delta = Vec::with_capacity(args.runs);
    for i in 0..args.warmup + args.runs {
        // A model call lies between two passes of a session: the resident
        // process does what the answer does not need (freeing, the next
        // baseline's copy) then, not while the next request waits.
        std::thread::sleep(BETWEEN_PASSES);
        let line = client.line(&envelope, |_| {});
        let key =
            serde_json::from_str::<Value>(&line).map_err(|e| e.to_string())?["incremental"]["key"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        let start = Instant::now();
        let answer = served.request(&line);
        let elapsed = start.elapsed();
        bytes = (line.len(), answer.len());
        let rebuilt = client
            .settle(&envelope, &answer, key, true)
            .map_err(|e| format!("{what} (delta): {e}"))?;
        if rebuilt != want {
            return Err(format!(
                "{what} (delta): the rebuilt answer is not the one-shot's bytes"
            ));
        }
        if i >= args.warmup {
            delta.push(elapsed);
        }
    }
    Ok((whole, delta, bytes))
}

fn print_results(floor: &Stats, measured: &[Measured], history: &History) {
    for m in measured {
        println!(
            "  output    defer{} {} bytes ({}); execute{} {} bytes, {} tags dropped",
            m.suffix,
            thousands(m.defer_out_bytes as u64),
            if m.defer_stable {
                "byte-identical across runs"
            } else {
                "NOT byte-identical across runs"
            },
            m.suffix,
            thousands(m.execute_out_bytes as u64),
            m.dropped,
        );
        if let Some(bytes) = m.m0_bytes {
            println!(
                "  head      m[0] {} bytes with {} compartments and {} memories present",
                thousands(bytes as u64),
                history.compartments.len(),
                history.memories.len(),
            );
        }
    }

    // (name, stats, target) for every timed pass.
    let rows: Vec<(String, Stats, f64)> = measured
        .iter()
        .flat_map(|m| {
            [
                (format!("defer{}", m.suffix), stats(&m.defer), DEFER_TARGET),
                (
                    format!("execute{}", m.suffix),
                    stats(&m.execute),
                    EXECUTE_TARGET,
                ),
            ]
        })
        .collect();
    println!();
    println!(
        "  {:<22} {:>9} {:>9} {:>9}   ms",
        "", "min", "median", "p90"
    );
    print_row("floor", floor);
    for (name, s, _) in &rows {
        print_row(name, s);
    }
    for m in measured {
        print_row(&format!("defer{} serve", m.suffix), &stats(&m.serve));
        print_row(
            &format!("defer{} serve Δ", m.suffix),
            &stats(&m.serve_delta),
        );
    }
    println!();
    let mut summary = String::new();
    for (name, s, target) in &rows {
        let ratio = s.median / floor.median;
        let verdict = if ratio <= *target { "ok" } else { "MISSED" };
        let name = format!("{name}/floor");
        let _ = writeln!(
            summary,
            "  {name:<28} {ratio:>5.2}×   (target ≤ {target}×)  {verdict}"
        );
    }
    for m in measured {
        let one_shot = stats(&m.defer).median;
        let serve = stats(&m.serve).median;
        let delta = stats(&m.serve_delta).median;
        let target = SERVE_TARGET_MS + SERVE_TARGET_SHARE * one_shot;
        let verdict = if delta <= target { "ok" } else { "MISSED" };
        let _ = writeln!(
            summary,
            "  {:<28} {:>5.2}×   (whole envelope through serve / one-shot process)",
            format!("defer{} serve/one-shot", m.suffix),
            serve / one_shot
        );
        let _ = writeln!(
            summary,
            "  {:<28} {delta:>5.2} ms (target ≤ {SERVE_TARGET_MS} ms + {:.0} % of the one-shot {one_shot:.2} ms = {target:.2} ms)  {verdict}; request {} B, answer {} B",
            format!("defer{} serve Δ", m.suffix),
            SERVE_TARGET_SHARE * 100.0,
            thousands(m.delta_bytes.0 as u64),
            thousands(m.delta_bytes.1 as u64),
        );
    }
    print!("{summary}");
}

/// What the per-call record costs each pass, absolute and as a share of
/// the pass (in-process, and of the one-shot process timed above).
fn print_record_cost(args: &Args, work: &Path, one_shot_ms: f64) -> Result<()> {
    let c = record_cost(work, args.runs.max(20)).map_err(|e| format!("the record: {e}"))?;
    println!(
        "\n  per-call record  {:.0} µs a pass: {:.2} % of an in-process defer pass ({:.2} ms), \
         {:.2} % of the one-shot defer process ({one_shot_ms:.2} ms)",
        c.record_us,
        c.record_us / c.pass_us * 100.0,
        c.pass_us / 1000.0,
        c.record_us / 1000.0 / one_shot_ms * 100.0,
    );
    println!(
        "                   (its statements inside the pass's transaction; {:.0} µs as a transaction of its own)",
        c.alone_us
    );
    Ok(())
}

fn print_row(name: &str, s: &Stats) {
    println!(
        "  {name:<22} {:>9.2} {:>9.2} {:>9.2}",
        s.min, s.median, s.p90
    );
}

// ---------------------------------------------------------------------------
// Memory (`--memory`): peak RSS against the envelope's size.

/// The bound on a pass's peak resident set: this many times its envelope…
const MEMORY_FACTOR: f64 = 8.0;
/// …plus this (the binary, the allocator, SQLite and the tokenizer's tables).
const MEMORY_BASE_MIB: f64 = 50.0;
/// The envelope sizes measured, in MB (10^6 bytes).
const MEMORY_SIZES_MB: [u64; 3] = [1, 5, 21];
/// Deltas sent to serve after its first whole envelope.
const MEMORY_DELTAS: usize = 5;
/// What GNU time reports maximum RSS with (`%M`, KiB, from wait4's rusage).
const GNU_TIME: &str = "/usr/bin/time";

/// An envelope shape the memory mode generates at each size.
#[derive(Clone, Copy)]
enum Shape {
    /// Many tiny messages (~150 bytes each: 142k of them in 21 MB).
    Tiny,
    /// The shape issue 26 was filed with: a one-word text part and no
    /// `time` (~100 bytes each: 200k of them in 21 MB).
    Word,
    /// The generator's coding session: fewer messages, big tool outputs.
    Session,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Tiny => "tiny",
            Shape::Word => "word",
            Shape::Session => "session",
        }
    }
}

/// `count` minimal OpenCode messages, user and assistant in turn, one short
/// text part each.
fn tiny_messages(count: usize, session_id: &str, start_ms: i64) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({
                "info": {
                    "id": format!("m{i:07}"),
                    "sessionID": session_id,
                    "role": role,
                    "time": {"created": start_ms + i as i64 * 1000},
                },
                "parts": [{"type": "text", "text": format!("note {i}")}],
            })
        })
        .collect()
}

/// `count` OpenCode messages of the shape issue 26 was filed with: no
/// `time`, one text part of one word.
fn word_messages(count: usize, session_id: &str) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({
                "info": {"id": format!("m{i:07}"), "sessionID": session_id, "role": role},
                "parts": [{"type": "text", "text": format!("w{i}")}],
            })
        })
        .collect()
}

/// An envelope of `shape` of about `mb` MB, and its message count.
fn memory_envelope(shape: Shape, mb: u64, seed: u64, work: &Path) -> Result<(Vec<u8>, usize)> {
    let target = mb * 1_000_000;
    let (messages, session_id) = match shape {
        Shape::Tiny => {
            let session_id = format!("ses_{seed:x}");
            let start = SessionSpec::new(seed, 1, 0).start_ms;
            let sample = serde_json::to_vec(&tiny_messages(1000, &session_id, start))
                .map_err(|e| e.to_string())?;
            let count = (target * 1000 / sample.len() as u64) as usize;
            (tiny_messages(count, &session_id, start), session_id)
        }
        Shape::Word => {
            let session_id = format!("ses_{seed:x}");
            let sample =
                serde_json::to_vec(&word_messages(1000, &session_id)).map_err(|e| e.to_string())?;
            let count = (target * 1000 / sample.len() as u64) as usize;
            (word_messages(count, &session_id), session_id)
        }
        Shape::Session => {
            // Envelope bytes grow with the turns and tokens: aim, then correct.
            let mut turns = (mb as usize * 8).clamp(10, 200);
            let mut tokens = target / 4;
            let mut spec = SessionSpec::new(seed, turns, tokens);
            let mut messages = generate::session(&spec);
            for _ in 0..3 {
                let got = serde_json::to_vec(&messages)
                    .map_err(|e| e.to_string())?
                    .len() as u64;
                if got.abs_diff(target) <= target / 20 {
                    break;
                }
                let scale = target as f64 / got as f64;
                tokens = (tokens as f64 * scale) as u64;
                turns = ((turns as f64 * scale.sqrt()) as usize).max(4);
                spec = SessionSpec::new(seed, turns, tokens);
                messages = generate::session(&spec);
            }
            (messages, spec.session_id)
        }
    };
    let last = generate::last_time_ms(&messages);
    let mut envelope = generate::envelope(
        &messages,
        &session_id,
        generate::usage_at_percent(DEFER_USAGE_PERCENT),
        last + 60_000,
    );
    envelope["project_dir"] = Value::String(work.display().to_string());
    let bytes = serde_json::to_vec(&envelope).map_err(|e| e.to_string())?;
    Ok((bytes, messages.len()))
}

/// Run `command` under GNU time: its output and its peak RSS in KiB.
fn peak_rss_of(command: &Command, stdin: &[u8], what: &str) -> Result<(Output, u64)> {
    let mut timed = Command::new(GNU_TIME);
    timed
        .arg("-f")
        .arg("mc-bench-maxrss-kib=%M")
        .arg(command.get_program())
        .args(command.get_args());
    if let Some(dir) = command.get_current_dir() {
        timed.current_dir(dir);
    }
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => timed.env(name, value),
            None => timed.env_remove(name),
        };
    }
    let output = pipe(&mut timed, stdin).map_err(|e| format!("{what}: cannot run: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let kib = stderr
        .lines()
        .find_map(|l| l.strip_prefix("mc-bench-maxrss-kib="))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            format!(
                "{what}: GNU time reported no maximum RSS: {}",
                stderr.trim()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "{what}: exited with {}: {}",
            output.status,
            stderr.trim()
        ));
    }
    Ok((output, kib))
}

/// `VmRSS` and `VmHWM` (KiB) of a running process.
fn rss_of(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let kib = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/status has no {name}"))
    };
    Ok((kib("VmRSS:")?, kib("VmHWM:")?))
}

/// A pass's output must be a pass, not a passthrough (which would not
/// measure the pass at all).
fn not_passthrough(output: &Output, what: &str) -> Result<()> {
    let value = parse_output(output, what)?;
    match value["pass"]["decision"].as_str() {
        Some("passthrough") | None => Err(format!("{what}: no pass ran (pass: {})", value["pass"])),
        Some(_) => Ok(()),
    }
}

/// One measured row: what ran, its peak in KiB.
struct MemoryRow {
    what: String,
    peak_kib: u64,
}

fn run_memory(args: &Args, work: &Path) -> Result<()> {
    if !Path::new(GNU_TIME).is_file() {
        return Err(format!(
            "--memory measures one-shot passes with GNU time ({GNU_TIME}): install it (Debian: apt-get install time)"
        ));
    }
    let tools = Tools {
        transform: bin_path("mc-transform"),
        floor: bin_path("json-floor"),
        work: work.to_path_buf(),
    };
    println!(
        "mc-transform peak RSS against the envelope (bound: {MEMORY_FACTOR}× envelope + {MEMORY_BASE_MIB} MiB)\n"
    );
    let base_kib = base_peak_kib(&tools, args.seed, work)?;
    println!(
        "  base: {:.1} MiB, a one-shot pass on one tiny message; B/msg is (peak − base) / messages\n",
        base_kib as f64 / 1024.0
    );
    println!(
        "  {:<8} {:>7} {:>8}  {:<22} {:>9} {:>7} {:>9} {:>7}",
        "shape", "MiB", "messages", "run", "peak MiB", "ratio", "bound", "B/msg"
    );
    let mut missed = 0;
    for shape in [Shape::Tiny, Shape::Word, Shape::Session] {
        for mb in MEMORY_SIZES_MB {
            let (envelope, messages) = memory_envelope(shape, mb, args.seed, work)?;
            let rows = memory_rows(&tools, &envelope, &format!("{}-{mb}", shape.name()))?;
            let size = envelope.len() as f64 / (1 << 20) as f64;
            for row in rows {
                let peak = row.peak_kib as f64 / 1024.0;
                let bound = MEMORY_FACTOR * size + MEMORY_BASE_MIB;
                let verdict = if peak <= bound {
                    "ok"
                } else {
                    missed += 1;
                    "MISSED"
                };
                let per_message =
                    row.peak_kib.saturating_sub(base_kib) * 1024 / (messages.max(1) as u64);
                println!(
                    "  {:<8} {size:>7.2} {messages:>8}  {:<22} {peak:>9.1} {:>6.1}× {bound:>8.1} {per_message:>7}  {verdict}",
                    shape.name(),
                    row.what,
                    peak / size,
                );
            }
        }
    }
    if missed > 0 {
        println!("\n  {missed} run(s) above the bound");
    }
    Ok(())
}

/// The peak of a one-shot pass on an envelope of one tiny message: what the
/// process costs before its input (binary, allocator, SQLite, the estimator).
fn base_peak_kib(tools: &Tools, seed: u64, work: &Path) -> Result<u64> {
    let session_id = format!("ses_{seed:x}");
    let start = SessionSpec::new(seed, 1, 0).start_ms;
    let messages = tiny_messages(1, &session_id, start);
    let mut envelope = generate::envelope(
        &messages,
        &session_id,
        generate::usage_at_percent(DEFER_USAGE_PERCENT),
        start + 60_000,
    );
    envelope["project_dir"] = Value::String(work.display().to_string());
    let bytes = serde_json::to_vec(&envelope).map_err(|e| e.to_string())?;
    let db = work.join("memory-base.db");
    let (output, kib) = peak_rss_of(&tools.transform(&db, &[]), &bytes, "one-shot (base)")?;
    not_passthrough(&output, "one-shot (base)")?;
    Ok(kib)
}

/// The one-shot pass on a fresh DB and again on the same DB, then serve:
/// the whole envelope (incremental), then deltas of the same messages.
fn memory_rows(tools: &Tools, envelope: &[u8], name: &str) -> Result<Vec<MemoryRow>> {
    let db = tools.work.join(format!("memory-{name}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let mut rows = Vec::new();
    let (first, kib) = peak_rss_of(&tools.transform(&db, &[]), envelope, "one-shot (fresh DB)")?;
    not_passthrough(&first, "one-shot (fresh DB)")?;
    rows.push(MemoryRow {
        what: "one-shot, fresh DB".into(),
        peak_kib: kib,
    });
    let (second, kib) = peak_rss_of(&tools.transform(&db, &[]), envelope, "one-shot (second)")?;
    not_passthrough(&second, "one-shot (same DB)")?;
    rows.push(MemoryRow {
        what: "one-shot, same DB".into(),
        peak_kib: kib,
    });

    let serve_db = tools.work.join(format!("memory-{name}-serve.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", serve_db.display()));
    }
    let value: Value = serde_json::from_slice(envelope).map_err(|e| e.to_string())?;
    let mut served = Served::start(&mut tools.transform(&serve_db, &["serve"]));
    let mut client = Incremental::default();
    client
        .pass(&mut served, &value)
        .map_err(|e| format!("serve (whole envelope): {e}"))?;
    let (_, hwm) = rss_of(served.id())?;
    rows.push(MemoryRow {
        what: "serve, whole envelope".into(),
        peak_kib: hwm,
    });
    for _ in 0..MEMORY_DELTAS {
        std::thread::sleep(BETWEEN_PASSES);
        client
            .pass(&mut served, &value)
            .map_err(|e| format!("serve (delta): {e}"))?;
        if !client.last_sent_delta {
            return Err("serve: a delta was answered with a resync".into());
        }
    }
    std::thread::sleep(BETWEEN_PASSES);
    let (now, hwm) = rss_of(served.id())?;
    rows.push(MemoryRow {
        what: format!("serve, {MEMORY_DELTAS} deltas (peak)"),
        peak_kib: hwm,
    });
    rows.push(MemoryRow {
        what: "serve, resident after".into(),
        peak_kib: now,
    });
    served.close();
    Ok(rows)
}
