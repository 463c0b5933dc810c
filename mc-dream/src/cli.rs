//! Argument parsing, the environment mc-dream reads, and the commands.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use mc_base::config::Config;
use mc_base::identity::project_identity;
use mc_base::store::Store;
use mc_cli::{Failure, GlobalArgs, write_json};
use mc_dream_core::{self as dream, Embedder, Settings, Task, crontab, lease, team};
use mc_llm::{self as llm, Client, Model};

const NAME: &str = "mc-dream";

const ABOUT: &str = "Keeps project memory true, from cron: consolidates duplicates, verifies
memories against the code, classifies them, archives stale ones, indexes git
commits for search, and shares memory with a team through files in the repo.

`tick` (every 15 minutes from the crontab line `mc-dream cron` prints) runs
every task that is due for every project mc knows; each task's schedule is a
cron expression under dream.schedule in the user config, its model
dream.model. Every command prints one JSON document. Exit codes: 0 ok, 1 a
runtime failure (or a `run` whose task failed), 2 bad input.";

#[derive(Parser, Debug)]
#[command(name = "mc-dream", version, about = ABOUT)]
struct Args {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every due task of every known project, then exit (for cron).
    Tick,
    /// Run one task now for one project, whatever its schedule says:
    /// consolidate, verify, classify, archive-stale, git-index, sync or embed.
    Run {
        task: String,
        /// The project's folder [default: the working directory]
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Per project and task: schedule, last run and result, next due, lease.
    Status {
        /// Only the project of this folder
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Print the crontab line for this install; --install adds it to the
    /// user's crontab (once), --uninstall removes it.
    Cron {
        #[arg(long, conflicts_with = "uninstall")]
        install: bool,
        #[arg(long)]
        uninstall: bool,
    },
    /// Write the project's memories to <repo>/.mc/memory/<CATEGORY>.md.
    Export {
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
        /// Overwrite changes in the files that were not imported
        #[arg(long)]
        force: bool,
    },
    /// Read <repo>/.mc/memory/*.md into the project's memories.
    Import {
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Mark a memory private (never exported) or, with --off, shareable.
    Private {
        #[arg(long)]
        id: i64,
        #[arg(long)]
        off: bool,
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Command::Tick => tick(&args),
        Command::Run { task, project } => run(&args, task, project.as_deref()),
        Command::Status { project } => status(&args, project.as_deref()),
        Command::Cron { install, uninstall } => cron(&args, *install, *uninstall),
        Command::Export { project, force } => export(&args, project.as_deref(), *force),
        Command::Import { project } => import(&args, project.as_deref()),
        Command::Private { id, off, project } => private(&args, *id, !*off, project.as_deref()),
    };
    mc_cli::finish(NAME, result)
}

/// The folder a command is about: `--project`, else the working directory.
fn project_dir(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    let dir = flag
        .map(Path::to_path_buf)
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| Failure::input(anyhow!("no project folder: pass --project DIR")))?;
    if !dir.is_dir() {
        return Err(Failure::input(anyhow!("{} is not a folder", dir.display())));
    }
    Ok(dir.canonicalize().unwrap_or(dir))
}

fn setup(args: &Args, dir: Option<&Path>) -> Result<(Config, Store), Failure> {
    let config = args.global.load_config(NAME, dir);
    let path = mc_cli::db_path(args.global.db.as_deref())?;
    let store = mc_cli::open_store(Some(&path), &config)
        .with_context(|| format!("opening {}", path.display()))?;
    Ok((config, store))
}

/// The dreamer's model chain, with each provider's key read from the
/// variable the user config names; `Err`: why there is none.
fn client(config: &Config) -> Result<Client, String> {
    let chain = config.dream.chain();
    if chain.is_empty() {
        return Err(
            "no dream.model configured (set dream.model to \"provider/model\" in the user config)"
                .into(),
        );
    }
    let keys = mc_cli::keys::chain_keys(&chain, &config.providers);
    let options = llm::Options {
        connect_timeout: Duration::from_secs(10),
        timeout: Duration::from_millis(config.dream.timeout_ms),
        retries: config.dream.retries,
        backoff: Duration::from_secs(2),
        proxy: mc_cli::proxy_env(),
        sleep: llm::Sleeper::new(std::thread::sleep),
    };
    Client::new(&config.providers, &chain, &keys, options).map_err(|e| e.to_string())
}

/// This machine's name, for lease liveness.
fn host() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn show_progress(line: &str) {
    eprintln!("{NAME}: {line}");
}

fn no_progress(_: &str) {}

/// Run `f` with the settings a tick or a run needs.
fn with_settings<T>(config: &Config, f: impl FnOnce(&Settings<'_>) -> T) -> T {
    let client = client(config);
    let (model, problem): (Option<&dyn Model>, Option<String>) = match &client {
        Ok(c) => (Some(c), None),
        Err(problem) => (None, Some(problem.clone())),
    };
    let lease = match &client {
        Ok(c) => c.options().worst_case(c.chain().len()) + Duration::from_secs(60),
        Err(_) => Duration::from_secs(600),
    };
    let host = host();
    let holder = lease::holder_name(
        &host,
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let now = mc_cli::now_ms;
    let terminal = std::io::stderr().is_terminal();
    let provider =
        mc_search_core::embed::Provider::from_config(config, &|var| std::env::var(var).ok())
            .map_err(|e| e.to_string())
            .and_then(|p| p.ok_or_else(|| "no embeddings.model configured".to_string()));
    let sleep = std::thread::sleep;
    let settings = Settings {
        dream: &config.dream,
        model,
        model_problem: problem,
        tz: jiff::tz::TimeZone::system(),
        host,
        holder,
        lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
        now: &now,
        progress: if terminal {
            &show_progress
        } else {
            &no_progress
        },
        embeddings: provider
            .as_ref()
            .map_err(Clone::clone)
            .map(|provider| Embedder {
                provider,
                sleep: &sleep,
            }),
    };
    f(&settings)
}

fn print(value: &impl serde::Serialize, pretty: bool) -> Result<(), Failure> {
    write_json(
        &serde_json::to_value(value).map_err(anyhow::Error::from)?,
        pretty,
    )?;
    Ok(())
}

fn tick(args: &Args) -> Result<ExitCode, Failure> {
    let (config, mut store) = setup(args, None)?;
    let report = with_settings(&config, |settings| dream::tick(&mut store, settings))?;
    for project in &report.projects {
        for task in project.tasks.iter().filter(|t| t.outcome == "failed") {
            if let Some(failure) = &task.failure {
                eprintln!(
                    "{NAME}: warning: {} {} failed: {}",
                    project.project, task.task, failure.message
                );
                mc_cli::hint(NAME, &failure.hints);
            }
        }
    }
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

fn parse_task(name: &str) -> Result<Task, Failure> {
    Task::parse(name).ok_or_else(|| {
        Failure::input(anyhow!(
            "unknown task {name:?} (one of {})",
            Task::ALL.map(Task::name).join(", ")
        ))
    })
}

fn run(args: &Args, task: &str, project: Option<&Path>) -> Result<ExitCode, Failure> {
    let task = parse_task(task)?;
    let dir = project_dir(project)?;
    let (config, mut store) = setup(args, Some(&dir))?;
    let report = with_settings(&config, |settings| {
        dream::run_now(&mut store, settings, &dir, task)
    })?;
    print(&report, args.global.pretty)?;
    let failed = report.tasks.iter().find_map(|t| t.failure.as_ref());
    if let Some(failure) = failed {
        eprintln!("{NAME}: error: {} failed: {}", task.name(), failure.message);
        mc_cli::hint(NAME, &failure.hints);
        return Ok(ExitCode::from(1));
    }
    if let Some(reason) = report
        .tasks
        .iter()
        .find(|t| t.outcome == "skipped")
        .and_then(|t| t.reason.as_ref())
    {
        eprintln!("{NAME}: warning: {} skipped: {reason}", task.name());
    }
    Ok(ExitCode::SUCCESS)
}

fn status(args: &Args, project: Option<&Path>) -> Result<ExitCode, Failure> {
    let dir = project.map(|p| project_dir(Some(p))).transpose()?;
    let (config, mut store) = setup(args, dir.as_deref())?;
    let only = dir.as_deref().map(|d| {
        project_identity(&mc_dream_core::gitlog::toplevel(d).unwrap_or_else(|| d.to_path_buf()))
    });
    let mut report = with_settings(&config, |settings| {
        dream::status(&mut store, settings, only.as_deref())
    })?;
    report.model = config.dream.model.clone();
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

/// The `crontab` program: `MC_CRONTAB` when set (tests point it at a fake),
/// else `crontab` on PATH.
fn crontab_program() -> PathBuf {
    std::env::var_os("MC_CRONTAB")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("crontab"), PathBuf::from)
}

/// The user's crontab text (empty when they have none).
fn read_crontab(program: &Path) -> Result<String, Failure> {
    let out = Process::new(program)
        .arg("-l")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("no crontab") {
        return Ok(String::new());
    }
    Err(Failure::runtime(anyhow!(
        "{} -l failed ({}): {}",
        program.display(),
        out.status,
        err.trim()
    )))
}

fn write_crontab(program: &Path, text: &str) -> Result<(), Failure> {
    let mut child = Process::new(program)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .context("writing the crontab")?;
    }
    let out = child.wait_with_output().context("writing the crontab")?;
    if !out.status.success() {
        return Err(Failure::runtime(anyhow!(
            "{} - failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn cron(args: &Args, install: bool, uninstall: bool) -> Result<ExitCode, Failure> {
    let binary = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot find the path of mc-dream")?;
    // What cron must set: cron starts a job with almost no environment.
    let mut env: Vec<(String, String)> = Vec::new();
    let bin_dir = binary.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let path = if std::env::split_paths(&path).any(|p| p == bin_dir) {
        path
    } else {
        format!("{}:{path}", bin_dir.display())
    };
    env.push(("PATH".into(), path));
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if let Some(db) = &args.global.db {
        env.push(("MC_DB".into(), absolute(db).display().to_string()));
    }
    if let Some(config) = &args.global.config {
        env.push(("MC_CONFIG".into(), absolute(config).display().to_string()));
    }
    for name in [
        "MC_DB",
        "MC_CONFIG",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "TZ",
    ] {
        if env.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Ok(value) = std::env::var(name)
            && !value.is_empty()
        {
            env.push((name.into(), value));
        }
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    let log = state.map(|s| s.join("mc").join("dream.log"));
    let line = crontab::line(&crontab::LineSpec {
        binary: &binary,
        env: &env,
        log: log.as_deref(),
    });
    // Keys live in the environment of a shell; cron does not have them.
    let config = args.global.load_config(NAME, None);
    let mut notes: Vec<String> = Vec::new();
    for name in config.dream.chain() {
        if let Some(var) = llm::ModelRef::parse(&name)
            .and_then(|m| config.providers.get(&m.provider))
            .and_then(|p| p.api_key_env.clone())
            && !notes.iter().any(|n| n.contains(&var))
        {
            notes.push(format!(
                "{var} (the key of {name}) is read from the environment, which cron does not \
                 pass on: add a line `{var}=…` above mc-dream's line in your crontab"
            ));
        }
    }
    let program = crontab_program();
    let mut answer = json!({"line": line, "log": log.as_ref().map(|l| l.display().to_string())});
    if install || uninstall {
        let existing = read_crontab(&program)?;
        let (text, changed) = if install {
            crontab::install(&existing, &line)
        } else {
            crontab::uninstall(&existing)
        };
        if changed {
            if let Some(dir) = log.as_deref().and_then(Path::parent).filter(|_| install) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            write_crontab(&program, &text)?;
        }
        answer["installed"] = Value::Bool(crontab::installed(&text));
        answer["changed"] = Value::Bool(changed);
    } else {
        let existing = read_crontab(&program).ok();
        answer["installed"] = existing.map_or(Value::Null, |t| Value::Bool(crontab::installed(&t)));
    }
    if !notes.is_empty() {
        answer["notes"] = json!(notes);
        for note in &notes {
            eprintln!("{NAME}: note: {note}");
        }
    }
    write_json(&answer, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

/// The project of `dir`, registered with its folder, and the folder's top.
fn project_of(store: &mut Store, dir: &Path) -> Result<(String, PathBuf), Failure> {
    let known = dream::register(store, dir, mc_cli::now_ms())?;
    let root = known.dir.clone().unwrap_or_else(|| dir.to_path_buf());
    Ok((known.project, root))
}

fn export(args: &Args, project: Option<&Path>, force: bool) -> Result<ExitCode, Failure> {
    let dir = project_dir(project)?;
    let (_config, mut store) = setup(args, Some(&dir))?;
    let (project, root) = project_of(&mut store, &dir)?;
    let report = team::export(&mut store, &project, &root, force)?;
    for refused in &report.refused {
        eprintln!(
            "{NAME}: warning: memory {} ({}) was not exported: {}",
            refused.id, refused.category, refused.reason
        );
    }
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

fn import(args: &Args, project: Option<&Path>) -> Result<ExitCode, Failure> {
    let dir = project_dir(project)?;
    let (_config, mut store) = setup(args, Some(&dir))?;
    let (project, root) = project_of(&mut store, &dir)?;
    let report = team::import(&mut store, &project, &root, mc_cli::now_ms())?;
    for refused in &report.refused {
        eprintln!(
            "{NAME}: warning: entry {} of {}.md was not imported: {}",
            refused.id, refused.category, refused.reason
        );
    }
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

fn private(
    args: &Args,
    id: i64,
    private: bool,
    project: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let dir = project_dir(project)?;
    let (_config, mut store) = setup(args, Some(&dir))?;
    let (project, _) = project_of(&mut store, &dir)?;
    dream::set_private(&mut store, &project, id, private)?;
    write_json(&json!({"id": id, "private": private}), args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}
