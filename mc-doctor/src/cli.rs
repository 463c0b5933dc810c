//! Arguments, the environment the doctor is handed, and the commands.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use clap::{Args as ClapArgs, Parser, Subcommand};
use serde_json::{Value, json};

use mc_cli::{Failure, finish};
use mc_doctor_core::harness::HarnessId;
use mc_doctor_core::{self as doctor, Check, Env, checks, issue, magic_context, migrate, setup};

use crate::outcome::outcome_text;

const NAME: &str = "mc-doctor";

const ABOUT: &str = "Is mc installed, wired into your harnesses, and working?

With no command: the checks — mc's binaries on PATH (one version), the
config layers, the database (opens, integrity, schema, size), the providers
(probed), each detected harness (OpenCode, Claude Code, Codex, Pi: mc's
plugin, hooks and MCP server in place and current, auto-compaction off),
the cron line of mc-dream, and recent failures. One line each, PASS, WARN
or FAIL with the fix, then a summary. Exit 0 when nothing FAILs, 1 when
something does, 2 for bad usage.

`setup` wires the harnesses (a wizard on a terminal; --harness … --yes for
scripts), `--fix` repairs what the checks found where that is safe,
`migrate` upgrades the database and config and imports from Magic Context,
`--issue` writes a redacted report for a bug.";

#[derive(Parser, Debug)]
#[command(name = "mc-doctor", version, about = ABOUT)]
struct Args {
    /// SQLite database [default: $MC_DB, else $XDG_DATA_HOME/mc/context.db]
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Extra config file, above user and project config [default: $MC_CONFIG]
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// One JSON document on stdout instead of lines
    #[arg(long, global = true)]
    json: bool,
    /// Repair what the checks found where it is safe, then check again
    #[arg(long)]
    fix: bool,
    /// Write a redacted Markdown report for an issue [default file:
    /// ./mc-issue-YYYYMMDD-HHMMSS.md]; nothing is sent anywhere
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    issue: Option<Option<PathBuf>>,
    /// Do not call the providers (no network)
    #[arg(long)]
    no_probe: bool,
    /// How long a provider probe may take
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    probe_timeout_ms: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Wire mc into harnesses: a wizard on a terminal, or flags for scripts.
    ///
    /// Every edit is idempotent (a second run changes nothing), keeps the
    /// comments of JSONC and TOML files, backs the old file up beside it
    /// (NAME.mc-backup-TIMESTAMP) and prints a diff. `--uninstall` takes back
    /// exactly what setup wrote (from its record in $XDG_DATA_HOME/mc/).
    Setup(SetupArgs),
    /// Upgrade the database schema (after a backup), rename deprecated config
    /// keys, and import from Magic Context.
    Migrate(MigrateArgs),
}

#[derive(ClapArgs, Debug, Default)]
struct SetupArgs {
    /// Harnesses to wire: opencode, claude-code, codex, pi (comma-separated)
    /// [default: every detected one]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    harness: Vec<String>,
    /// The historian's model, PROVIDER/MODEL (written into mc's user config)
    #[arg(long, value_name = "PROVIDER/MODEL")]
    historian_model: Option<String>,
    /// The provider's kind when setup defines it: anthropic, openai or command
    #[arg(long, value_name = "KIND")]
    historian_kind: Option<String>,
    /// The provider's base URL (anthropic, openai) [default: the kind's]
    #[arg(long, value_name = "URL")]
    historian_base_url: Option<String>,
    /// The variable holding the provider's key [default: ANTHROPIC_API_KEY / OPENAI_API_KEY]
    #[arg(long, value_name = "VAR")]
    historian_key_env: Option<String>,
    /// A program that answers the prompt on stdin, e.g. 'claude -p' (kind command)
    #[arg(long, value_name = "COMMAND")]
    historian_command: Option<String>,
    /// Also add mc-dream's cron line (mc-dream cron --install)
    #[arg(long)]
    cron: bool,
    /// Do it without asking (what scripts and tests pass)
    #[arg(long, short = 'y')]
    yes: bool,
    /// Show the diff of every change, write nothing
    #[arg(long)]
    dry_run: bool,
    /// Take back what setup wrote (for --harness, else everything)
    #[arg(long)]
    uninstall: bool,
}

#[derive(ClapArgs, Debug)]
struct MigrateArgs {
    /// Show what would change, write nothing
    #[arg(long)]
    dry_run: bool,
    /// Import from Magic Context's database [default path:
    /// $XDG_DATA_HOME/cortexkit/magic-context/context.db], read-only
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    from_magic_context: Option<PathBuf>,
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    finish(NAME, run(args))
}

/// The environment, as the doctor's core sees it.
fn environment(args: &Args) -> Result<Env, Failure> {
    let env_paths = mc_cli::env_paths();
    let db = mc_cli::db_path(args.db.as_deref()).map_err(Failure::from)?;
    let layers = mc_base::paths::config_layers(args.config.as_deref(), None, &env_paths);
    let abs = |p: Option<PathBuf>| p.filter(|p| p.is_absolute());
    Ok(Env {
        home: env_paths.home.clone().unwrap_or_default(),
        xdg_config_home: abs(env_paths.xdg_config_home.clone()),
        xdg_data_home: abs(env_paths.xdg_data_home.clone()),
        path: std::env::var_os("PATH").unwrap_or_default(),
        vars: std::env::vars().collect(),
        cwd: env_paths.cwd.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        db,
        layers,
        now_ms: mc_cli::now_ms(),
    })
}

fn check_options(args: &Args) -> checks::Options {
    checks::Options {
        probes: !args.no_probe,
        probe_timeout: Duration::from_millis(args.probe_timeout_ms.max(1)),
        crontab: std::env::var_os("MC_CRONTAB")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("crontab"), PathBuf::from),
        ..checks::Options::default()
    }
}

fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn run(args: Args) -> Result<ExitCode, Failure> {
    let env = environment(&args)?;
    match &args.command {
        Some(Command::Setup(setup_args)) => return run_setup(&args, setup_args, &env),
        Some(Command::Migrate(m)) => return run_migrate(&args, m, &env),
        None => {}
    }
    let options = check_options(&args);
    let before = checks::run(&env, &options);
    if let Some(file) = &args.issue {
        // `--issue` alone: the default name, in the working folder.
        let file = file
            .clone()
            .unwrap_or_else(|| PathBuf::from(issue::file_name(env.now_ms)));
        let state = std::env::var_os("XDG_STATE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join(".local/state"));
        let logs = vec![state.join("mc").join("dream.log")];
        let text = issue::report(&env, &before, &logs);
        std::fs::write(&file, text)
            .map_err(|e| Failure::runtime(anyhow!("cannot write {}: {e}", file.display())))?;
        if args.json {
            mc_cli::write_json(&json!({"issue": file.display().to_string()}), true)?;
        } else {
            print(&format!(
                "Wrote {} (home paths and secrets redacted; read it before you share it; nothing was sent).\n",
                file.display()
            ))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.fix {
        return report(&args, &before, None);
    }
    let fixed = setup::fix(&env, &before);
    let after = checks::run(&env, &options);
    if !args.json {
        let mut text = String::new();
        for change in &fixed.changes {
            text.push_str(&change.diff);
        }
        for line in &fixed.repaired {
            text.push_str(&format!("FIXED  {line}\n"));
        }
        for line in &fixed.failed {
            text.push_str(&format!("NOT FIXED  {line}\n"));
        }
        if fixed.repaired.is_empty() && fixed.failed.is_empty() {
            text.push_str("Nothing --fix can repair.\n");
        }
        text.push_str("\nAfter the repairs:\n");
        print(&text)?;
    }
    report(&args, &after, Some((&before, &fixed)))
}

fn report(
    args: &Args,
    checks: &[Check],
    fixed: Option<(&[Check], &setup::Fixed)>,
) -> Result<ExitCode, Failure> {
    let summary = doctor::summary(checks);
    if args.json {
        let mut doc = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "checks": checks,
            "summary": summary,
        });
        if let Some((before, fixed)) = fixed {
            doc["before"] = json!({"checks": before, "summary": doctor::summary(before)});
            doc["fixed"] = serde_json::to_value(fixed).unwrap_or(Value::Null);
        }
        mc_cli::write_json(&doc, true)?;
    } else {
        print(&doctor::render(checks, color()))?;
    }
    Ok(if summary.fail > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn parse_harnesses(names: &[String]) -> Result<Vec<HarnessId>, Failure> {
    let mut out = Vec::new();
    for name in names.iter().filter(|n| !n.trim().is_empty()) {
        let id = HarnessId::parse(name).ok_or_else(|| {
            Failure::input(anyhow!(
                "unknown harness {name:?} (opencode, claude-code, codex, pi)"
            ))
        })?;
        if !out.contains(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

fn historian_choice(a: &SetupArgs) -> Result<Option<setup::Historian>, Failure> {
    let Some(model) = &a.historian_model else {
        if a.historian_command.is_some() || a.historian_kind.is_some() {
            return Err(Failure::input(anyhow!(
                "--historian-kind/--historian-command need --historian-model PROVIDER/MODEL"
            )));
        }
        return Ok(None);
    };
    Ok(Some(setup::Historian {
        model: model.clone(),
        kind: a.historian_kind.clone(),
        base_url: a.historian_base_url.clone(),
        key_env: a.historian_key_env.clone(),
        command: a
            .historian_command
            .as_ref()
            .map(|c| c.split_whitespace().map(str::to_string).collect()),
    }))
}

fn detected(env: &Env) -> Vec<HarnessId> {
    mc_doctor_core::harness::integrations(env)
        .into_iter()
        .filter(|i| i.detected.is_some())
        .map(|i| i.id)
        .collect()
}

fn run_setup(args: &Args, a: &SetupArgs, env: &Env) -> Result<ExitCode, Failure> {
    let mut harnesses = parse_harnesses(&a.harness)?;
    if a.uninstall {
        let outcome = setup::uninstall(env, &harnesses, a.dry_run).map_err(Failure::from)?;
        return show_outcome(args, &outcome, a.dry_run, None);
    }
    let interactive = !a.yes && !a.dry_run;
    if interactive {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::input(anyhow!(
                "setup asks before it writes: run it on a terminal, or pass --yes (or --dry-run)"
            )));
        }
        let preselected = if harnesses.is_empty() {
            detected(env)
        } else {
            harnesses
        };
        return crate::wizard::run(env, preselected);
    }
    if harnesses.is_empty() {
        harnesses = detected(env);
        if harnesses.is_empty() && a.historian_model.is_none() {
            return Err(Failure::input(anyhow!(
                "no harness found (opencode, claude, codex or pi on PATH, or their folders): name one with --harness"
            )));
        }
    }
    let request = setup::Request {
        harnesses,
        historian: historian_choice(a)?,
        dry_run: a.dry_run,
    };
    let outcome = setup::setup(env, &request).map_err(Failure::from)?;
    let cron = if a.cron {
        Some(setup::install_cron(env, a.dry_run).map_err(Failure::from)?)
    } else {
        None
    };
    show_outcome(args, &outcome, a.dry_run, cron)
}

fn show_outcome(
    args: &Args,
    outcome: &setup::Outcome,
    dry_run: bool,
    cron: Option<String>,
) -> Result<ExitCode, Failure> {
    if args.json {
        let mut doc = serde_json::to_value(outcome).unwrap_or(Value::Null);
        doc["dry_run"] = json!(dry_run);
        if let Some(cron) = cron {
            doc["cron"] = json!(cron);
        }
        mc_cli::write_json(&doc, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    print(&outcome_text(outcome, dry_run, cron.as_deref()))?;
    Ok(ExitCode::SUCCESS)
}

fn run_migrate(args: &Args, m: &MigrateArgs, env: &Env) -> Result<ExitCode, Failure> {
    let mut lines = Vec::new();
    if m.dry_run {
        lines.push(format!(
            "database: would back up and migrate {} if its schema is older",
            env.tilde(&env.db)
        ));
    } else {
        lines.push(migrate::schema(env).map_err(Failure::from)?);
    }
    let diffs = migrate::config_keys(env, m.dry_run).map_err(Failure::from)?;
    if diffs.is_empty() {
        lines.push("config: no deprecated keys".into());
    }
    let mut doc = json!({"database": lines.first(), "config": diffs});
    if let Some(source) = &m.from_magic_context {
        let source = if source.as_os_str().is_empty() {
            magic_context::default_path(&env.data_home())
        } else {
            source.clone()
        };
        if m.dry_run {
            lines.push(format!(
                "magic context: would import from {}",
                env.tilde(&source)
            ));
        } else {
            let (config, _) = mc_cli::load_config(NAME, args.config.as_deref(), None);
            let mut store = mc_cli::open_store(args.db.as_deref(), &config)?;
            let report =
                magic_context::import(&source, &mut store, env.now_ms).map_err(Failure::from)?;
            lines.push(format!(
                "magic context ({}): imported {} memories, {} profile items, {} compartments; {} already here; {} skipped",
                env.tilde(&source),
                report.memories_imported,
                report.profile_imported,
                report.compartments_imported,
                report.memories_existing,
                report.skipped.len()
            ));
            for skip in &report.skipped {
                lines.push(format!("  skipped {skip}"));
            }
            lines.push("  not mapped:".into());
            for field in &report.unmapped_fields {
                lines.push(format!("    {field}"));
            }
            doc["magic_context"] = serde_json::to_value(&report).unwrap_or(Value::Null);
        }
    }
    if args.json {
        mc_cli::write_json(&doc, true)?;
    } else {
        let mut text = diffs.join("");
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
        print(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}
