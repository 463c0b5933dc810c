//! Whole-process benchmark of `mc-transform` against a JSON parse/serialise floor.
//!
//! Generates a long OpenCode session, then times, as whole processes (spawn,
//! write stdin, read stdout to the end, wait):
//!
//! 1. `json-floor`: parse and re-serialise the envelope, nothing else;
//! 2. a steady-state defer pass (the session's tags are already stored);
//! 3. a first execute pass with queued drops, on a fresh copy of a prepared DB.
//!
//! Prints min / median / p90 and the ratios defer/floor and execute/floor
//! against the targets (≤ 2× and ≤ 3×). Missing a target is reported, not an
//! error: this is a measurement.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};
use std::time::{Duration, Instant};

use mc_tests::generate::{self, SessionSpec};
use mc_tests::{bin_path, pipe};
use serde_json::Value;

const DEFER_TARGET: f64 = 2.0;
const EXECUTE_TARGET: f64 = 3.0;
const DEFER_USAGE_PERCENT: f64 = 40.0;
const EXECUTE_USAGE_PERCENT: f64 = 70.0;
/// How many old tool tags the execute pass finds queued for dropping.
const QUEUED_DROPS: usize = 36;

const USAGE: &str = "\
Usage: bench-transform [--runs N] [--warmup N] [--turns N] [--tokens N] [--seed N] [--keep DIR]

Times mc-transform (a steady-state defer pass and a first execute pass) against
json-floor, a program that only parses and re-serialises the same JSON.
Both binaries must sit beside this one: cargo build --release --workspace.

  --runs N     timed runs per measurement (default 30)
  --warmup N   untimed runs first (default 3)
  --turns N    user turns in the generated session (default 100)
  --tokens N   approximate tokens in the session (default 200000)
  --seed N     generator seed (default: the benchmark's)
  --keep DIR   work in DIR (envelopes, databases) and keep it afterwards";

type Result<T> = std::result::Result<T, String>;

struct Args {
    runs: usize,
    warmup: usize,
    turns: usize,
    tokens: u64,
    seed: u64,
    keep: Option<PathBuf>,
}

fn parse_args() -> Result<Option<Args>> {
    let mut args = Args {
        runs: 30,
        warmup: 3,
        turns: 100,
        tokens: 200_000,
        seed: SessionSpec::bench().seed,
        keep: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))?;
        let number = || -> Result<u64> {
            value
                .parse()
                .map_err(|_| format!("{flag}: {value:?} is not a number"))
        };
        match flag.as_str() {
            "--runs" => args.runs = number()?.max(1) as usize,
            "--warmup" => args.warmup = number()? as usize,
            "--turns" => args.turns = number()?.max(1) as usize,
            "--tokens" => args.tokens = number()?,
            "--seed" => args.seed = number()?,
            "--keep" => args.keep = Some(PathBuf::from(&value)),
            _ => return Err(format!("unknown argument {flag:?}\n\n{USAGE}")),
        }
    }
    Ok(Some(args))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench-transform: {e}");
            return ExitCode::from(2);
        }
    };
    let work = match WorkDir::new(args.keep.clone()) {
        Ok(work) => work,
        Err(e) => {
            eprintln!("bench-transform: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&args, &work.path) {
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

    // The session and its two envelopes.
    let spec = SessionSpec::new(args.seed, args.turns, args.tokens);
    let messages = generate::session(&spec);
    let approx = generate::approx_tokens(&messages);
    let last = generate::last_time_ms(&messages);
    let project = work.display().to_string();

    let mut defer_env = generate::envelope(
        &messages,
        &spec.session_id,
        generate::usage_at_percent(DEFER_USAGE_PERCENT),
        last + 60_000,
    );
    defer_env["project_dir"] = Value::String(project.clone());
    let defer_bytes = serde_json::to_vec(&defer_env).map_err(|e| e.to_string())?;

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
    execute_env["project_dir"] = Value::String(project);
    let execute_bytes = serde_json::to_vec(&execute_env).map_err(|e| e.to_string())?;
    if args.keep.is_some() {
        for (name, bytes) in [
            ("defer-envelope.json", &defer_bytes),
            ("execute-envelope.json", &execute_bytes),
        ] {
            std::fs::write(work.join(name), bytes).map_err(|e| format!("writing {name}: {e}"))?;
        }
    }

    // Sanity: the floor echoes the envelope.
    let floor_out = pipe(&mut tools.floor(), &defer_bytes)
        .map_err(|e| format!("json-floor: cannot run: {e}"))?;
    if !floor_out.status.success() || floor_out.stdout.trim_ascii_end() != defer_bytes {
        return Err("json-floor does not echo its input".into());
    }

    // Defer: a DB that has seen the session once.
    let defer_db = work.join("defer.db");
    let first = run_json(
        &mut tools.transform(&defer_db, &[]),
        &defer_bytes,
        "preparing the defer DB",
    )?;
    let tags = first["pass"]["tags"].as_u64().unwrap_or(0);

    // Execute: a snapshot with drops queued on old tool outputs.
    let snapshot = work.join("execute-snapshot.db");
    let seen = run_json(
        &mut tools.transform(&snapshot, &[]),
        &defer_bytes,
        "preparing the execute snapshot",
    )?;
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
            &snapshot,
            &["reduce", "--session", &spec.session_id, "--drop", &drop],
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

    let total = args.warmup + args.runs;
    println!("mc-transform benchmark");
    println!(
        "  session   {} turns, {} messages, {} tags, ~{} tokens (bytes/4)",
        args.turns,
        thousands(messages.len() as u64),
        thousands(tags),
        thousands(approx)
    );
    println!(
        "  input     defer {} bytes at {DEFER_USAGE_PERCENT}% usage; execute {} bytes at {EXECUTE_USAGE_PERCENT}% usage, {queued_count} drops queued",
        thousands(defer_bytes.len() as u64),
        thousands(execute_bytes.len() as u64),
    );
    println!(
        "  runs      {} timed + {} warm-up per row, whole processes",
        args.runs, args.warmup
    );

    // 1. floor
    let mut floor = Vec::with_capacity(args.runs);
    for i in 0..total {
        let (elapsed, _) = timed(&mut tools.floor(), &defer_bytes, "json-floor")?;
        if i >= args.warmup {
            floor.push(elapsed);
        }
    }

    // 2. defer
    let mut defer = Vec::with_capacity(args.runs);
    let mut defer_output: Option<Vec<u8>> = None;
    let mut defer_stable = true;
    let mut defer_out_bytes = 0;
    for i in 0..total {
        let (elapsed, output) = timed(
            &mut tools.transform(&defer_db, &[]),
            &defer_bytes,
            "defer pass",
        )?;
        if i <= args.warmup {
            check_pass(&output, "defer", false, "defer pass")?;
        }
        match &defer_output {
            None => {
                defer_out_bytes = output.stdout.len();
                defer_output = Some(output.stdout);
            }
            Some(previous) => defer_stable &= *previous == output.stdout,
        }
        if i >= args.warmup {
            defer.push(elapsed);
        }
    }

    // 3. execute, each on a fresh copy of the snapshot
    let mut execute = Vec::with_capacity(args.runs);
    let run_db = work.join("execute-run.db");
    let mut dropped = 0;
    let mut execute_out_bytes = 0;
    for i in 0..total {
        copy_db(&snapshot, &run_db)?;
        let (elapsed, output) = timed(
            &mut tools.transform(&run_db, &[]),
            &execute_bytes,
            "execute pass",
        )?;
        if i <= args.warmup {
            let value = check_pass(&output, "execute", true, "execute pass")?;
            dropped = value["pass"]["dropped"].as_array().map_or(0, Vec::len);
            execute_out_bytes = output.stdout.len();
        }
        if i >= args.warmup {
            execute.push(elapsed);
        }
    }

    let (floor, defer, execute) = (stats(&floor), stats(&defer), stats(&execute));
    println!(
        "  output    defer {} bytes ({}); execute {} bytes, {dropped} tags dropped",
        thousands(defer_out_bytes as u64),
        if defer_stable {
            "byte-identical across runs"
        } else {
            "NOT byte-identical across runs"
        },
        thousands(execute_out_bytes as u64),
    );
    println!();
    println!(
        "  {:<10} {:>9} {:>9} {:>9}   ms",
        "", "min", "median", "p90"
    );
    for (name, s) in [("floor", floor), ("defer", defer), ("execute", execute)] {
        println!(
            "  {name:<10} {:>9.2} {:>9.2} {:>9.2}",
            s.min, s.median, s.p90
        );
    }
    println!();
    let mut summary = String::new();
    for (name, s, target) in [
        ("defer/floor", defer, DEFER_TARGET),
        ("execute/floor", execute, EXECUTE_TARGET),
    ] {
        let ratio = s.median / floor.median;
        let verdict = if ratio <= target { "ok" } else { "MISSED" };
        let _ = writeln!(
            summary,
            "  {name:<14} {ratio:>5.2}×   (target ≤ {target}×)  {verdict}"
        );
    }
    print!("{summary}");
    if args.keep.is_some() {
        println!("\n  kept      {}", work.display());
    }
    Ok(())
}
