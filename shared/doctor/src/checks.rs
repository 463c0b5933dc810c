//! The checks, in the order they print: mc's binaries, the config, the
//! database, the providers, each detected harness, the cron line, and the
//! failures the database recorded recently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use super::harness::{self, HarnessId, Integration, State};
use super::{Check, Env, Repair};
use mc_base::config::{self, Config, ProviderKind};

/// mc's binaries, which the harnesses' hooks and plugins run.
pub const BINARIES: [&str; 5] = [
    "mc-transform",
    "mc-pin",
    "mc-historian",
    "mc-search",
    "mc-dream",
];

/// How far back "recent" failures go: a week.
pub const RECENT_MS: i64 = 7 * 24 * 3600 * 1000;

/// What a run checks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Call each configured provider (a cheap request with a timeout).
    pub probes: bool,
    pub probe_timeout: Duration,
    /// How many recent failures to list.
    pub recent: usize,
    /// The `crontab` program (tests point `MC_CRONTAB` at a fake).
    pub crontab: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            probes: true,
            probe_timeout: Duration::from_secs(5),
            recent: 5,
            crontab: PathBuf::from("crontab"),
        }
    }
}

/// Every check, in order.
pub fn run(env: &Env, options: &Options) -> Vec<Check> {
    let loaded = config::load(&env.layers);
    let integrations = harness::integrations(env);
    // The harnesses' `--version` are slow (node programs): ask them all at once.
    let versions: Vec<Option<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = integrations
            .iter()
            .map(|i| {
                let program = i.detected.as_ref().and(i.program.clone());
                let package = i.id.npm_package();
                scope.spawn(move || {
                    let program = program?;
                    package
                        .and_then(|name| npm_version(&program, name))
                        .or_else(|| version_of(&program))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let mut checks = Vec::new();
    checks.extend(binaries(env));
    checks.extend(config_checks(env, &loaded));
    checks.extend(database(env));
    checks.extend(super::indexes::search_indexes(env));
    checks.extend(writable(env));
    checks.extend(providers(env, &loaded.config, options));
    for (integration, version) in integrations.iter().zip(versions) {
        checks.extend(harness_checks(env, integration, version.as_deref()));
    }
    checks.push(cron(&loaded.config, options));
    checks.push(gateway(env, &loaded.config));
    checks.extend(recent_failures(env, options));
    checks
}

/// How long a Messages call may take between its arrival at the gateway
/// and the assistant message Claude Code writes from it (the gateway's
/// upstream read limit).
const TURN_SLACK_MS: i64 = 600_000;

/// mc's gateway's status at `gateway.listen`, when it is mc's.
fn gateway_status(listen: &str) -> Option<Value> {
    let url = format!("http://{listen}{}", mc_gateway::STATUS_PATH);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_millis(1500)))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .build()
        .into();
    agent
        .get(&url)
        .call()
        .ok()
        .filter(|r| r.status() == 200)
        .and_then(|mut r| r.body_mut().with_config().limit(64 * 1024).read_json().ok())
        .filter(|s: &Value| s.get("gateway").and_then(Value::as_str) == Some("mc"))
}

/// Whether mc's gateway answers at `gateway.listen`, where it forwards, and
/// — when setup wired Claude Code through it — whether Claude Code's last
/// turn went through it. Not running is no failure when nothing points at
/// it (`mc-transform claude` starts one on demand); wired, it is a warning.
fn gateway(env: &Env, config: &Config) -> Check {
    use super::claude_gateway as cg;
    let listen = &config.gateway.listen;
    let settings = harness::claude_dir(env).join("settings.json");
    let wired = cg::wired(env, &settings);
    let codex_toml = harness::codex_dir(env).join("config.toml");
    let codex = super::codex_gateway::wired(env, &codex_toml);
    let Some(status) = gateway_status(listen) else {
        let mut down = Vec::new();
        if wired {
            down.push(format!(
                "Claude Code is wired through the gateway on {listen}, but none answers: \
                 a session started now starts one (its hooks), a running one's calls \
                 fail until its next prompt"
            ));
        }
        if codex {
            down.push(format!(
                "Codex is wired through the gateway on {listen} (model_provider = \
                 \"{}\"), but none answers: a session started now starts one (its hooks), \
                 a running one waits \"Reconnecting...\" until its next prompt starts one",
                super::codex_gateway::PROVIDER
            ));
        }
        if !down.is_empty() {
            let harness = match (wired, codex) {
                (true, false) => "claude-code",
                (false, true) => "codex",
                _ => "claude-code,codex",
            };
            return Check::warn(
                "gateway",
                down.join("; "),
                format!(
                    "mc-transform gateway --ensure (or go direct: mc-doctor setup --uninstall \
                     --harness {harness})"
                ),
            );
        }
        return Check::pass(
            "gateway",
            format!(
                "no gateway on {listen} (`mc-transform claude` starts one; Claude Code \
                 started otherwise talks to its provider directly)"
            ),
        );
    };
    let upstream = status
        .get("upstream")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let served = status.get("served").and_then(Value::as_u64).unwrap_or(0);
    let openai = status.get("openai_upstream").and_then(Value::as_str);
    let mut what =
        format!("gateway up on {listen}, forwarding to {upstream}, {served} requests served");
    if let Some(openai) = openai {
        what.push_str(&format!(
            "; Codex's {} to {openai}",
            mc_gateway::OPENAI_PREFIX
        ));
    }
    if codex {
        what.push_str(&format!(
            " (Codex's config selects it: model_provider = \"{}\")",
            super::codex_gateway::PROVIDER
        ));
    }
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    let mut stale = Vec::new();
    if !same(upstream, &config.gateway.anthropic_upstream) {
        stale.push(format!(
            "gateway.anthropic_upstream is {}",
            config.gateway.anthropic_upstream
        ));
    }
    if openai.is_some_and(|o| !same(o, &config.gateway.openai_upstream)) {
        stale.push(format!(
            "gateway.openai_upstream is {}",
            config.gateway.openai_upstream
        ));
    }
    if !stale.is_empty() {
        return Check::warn(
            "gateway",
            format!("{what}; {}", stale.join(", ")),
            "restart the gateway so it reads the config again",
        );
    }
    let started = status
        .get("started_ms")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some((note, hint)) = codex_last_turn(env, codex, started) {
        what.push_str(&note);
        if let Some(hint) = hint {
            return Check::warn("gateway", what, hint);
        }
    }
    let Some((session, at)) = cg::last_turn(env) else {
        return Check::pass("gateway", what);
    };
    let last = status.get("last_messages_ms").and_then(Value::as_i64);
    match last {
        Some(last) if last + TURN_SLACK_MS >= at => Check::pass(
            "gateway",
            format!("{what}; Claude Code's last turn (session {session}) went through it"),
        ),
        _ if at < started => Check::pass(
            "gateway",
            format!("{what}; no Claude Code call since it started"),
        ),
        _ => Check::warn(
            "gateway",
            format!(
                "{what}; Claude Code's last turn (session {session}) did not go through it{}",
                if wired {
                    ""
                } else {
                    " (Claude Code is not wired to it)"
                }
            ),
            if wired {
                "that session's ANTHROPIC_BASE_URL pointed elsewhere (its own --settings or \
                 environment); start it again"
            } else {
                "mc-doctor setup --harness claude-code"
            },
        ),
    }
}

/// What the gateway check says of Codex's newest turn (its rollout) against
/// the calls mc's pass recorded for that thread: it went through the
/// gateway, or it did not (a warning, with its hint, only when Codex's
/// config selects the gateway: `wired`), or it came before the gateway
/// started (`started`).
fn codex_last_turn(env: &Env, wired: bool, started: i64) -> Option<(String, Option<&'static str>)> {
    use super::codex_gateway as xg;
    let (thread, at) = xg::last_turn(env)?;
    Some(match xg::last_recorded(&env.db, &thread) {
        Some(call) if call + TURN_SLACK_MS >= at => (
            format!("; Codex's last turn (thread {thread}) went through it"),
            None,
        ),
        _ if at < started => ("; no Codex call since it started".into(), None),
        _ if wired => (
            format!("; Codex's last turn (thread {thread}) did not go through it"),
            Some(
                "that session ran on another provider (a -c override or a profile of its \
                 own); start it again, or run it as mc-transform codex",
            ),
        ),
        _ => (
            format!(
                "; Codex's last turn (thread {thread}) went to its own provider (Codex is \
                 not wired to it: mc-doctor setup --harness codex, or mc-transform codex)"
            ),
            None,
        ),
    })
}

/// `command`'s output when it finished within `limit` (its pipes drained
/// as it runs); `None` when it could not start or was killed at the deadline.
pub fn run_limited(command: &mut Command, limit: Duration) -> Option<std::process::Output> {
    mc_base::process::run_with_deadline(command, None, limit)
        .ok()
        .flatten()
}

/// The version in the `package.json` of npm package `name` that `program`
/// (a link into `node_modules`) belongs to: starting a node or bun program
/// only to ask its version costs a second or two.
pub fn npm_version(program: &Path, name: &str) -> Option<String> {
    let real = program.canonicalize().ok()?;
    real.ancestors().skip(1).take(3).find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
        let doc: Value = serde_json::from_str(&text).ok()?;
        (doc.get("name")?.as_str()? == name)
            .then(|| doc.get("version")?.as_str().map(str::to_string))
            .flatten()
    })
}

/// The first `N.N.N` in `program --version`'s output.
pub fn version_of(program: &Path) -> Option<String> {
    let out = run_limited(
        Command::new(program).arg("--version"),
        Duration::from_secs(15),
    )?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(|c: char| c.is_whitespace() || c == 'v')
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 3
                && parts
                    .iter()
                    .take(3)
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

fn binaries(env: &Env) -> Vec<Check> {
    BINARIES
        .iter()
        .map(|name| {
            let id = format!("binary.{name}");
            let install = format!(
                "install it: cargo install --path {name} (from mc's source), and put ~/.cargo/bin on the PATH your harness starts with"
            );
            let Some(path) = env.which(name) else {
                return Check::fail(id, format!("{name} is not on PATH"), install);
            };
            match version_of(&path) {
                Some(v) if v == env.version => {
                    Check::pass(id, format!("{name} {v} ({})", env.tilde(&path)))
                }
                Some(v) => Check::fail(
                    id,
                    format!(
                        "{name} is {v}, the doctor is {} ({})",
                        env.version,
                        env.tilde(&path)
                    ),
                    format!("reinstall every mc binary from one source: {install}"),
                ),
                None => Check::fail(
                    id,
                    format!("{name} at {} does not answer --version", env.tilde(&path)),
                    install,
                ),
            }
        })
        .collect()
}

fn config_checks(env: &Env, loaded: &config::Loaded) -> Vec<Check> {
    let mut checks = Vec::new();
    let read: Vec<String> = loaded.sources.iter().map(|p| env.tilde(p)).collect();
    let broken: Vec<&String> = loaded
        .warnings
        .iter()
        .filter(|w| w.contains("ignoring this file"))
        .collect();
    let others: Vec<&String> = loaded
        .warnings
        .iter()
        .filter(|w| !w.contains("ignoring this file"))
        .collect();
    for warning in &broken {
        checks.push(Check::fail(
            "config.parse",
            located(&super::redact::paths(env, warning)),
            "fix the file at the place the error names (mc ignores the whole file until then)",
        ));
    }
    if !others.is_empty() {
        let fell_back = if loaded.fallbacks.is_empty() {
            String::new()
        } else {
            format!(
                "; fell back to the lower layers or defaults: {}",
                loaded.fallbacks.join(", ")
            )
        };
        checks.push(Check::warn(
            "config.values",
            format!(
                "config: {} warning(s): {}{fell_back}",
                others.len(),
                others
                    .iter()
                    .map(|w| {
                        let w = super::redact::paths(env, w);
                        w.strip_prefix("config: ").map(str::to_string).unwrap_or(w)
                    })
                    .collect::<Vec<_>>()
                    .join(" | ")
            ),
            "correct those values (`mc-doctor --json` lists them one by one)",
        ));
    }
    let deprecated: Vec<String> = env
        .layers
        .iter()
        .filter_map(|layer| {
            let text = mc_base::config::read_layer_of(layer).ok()??;
            let found = super::migrate::deprecated_in(&text);
            (!found.is_empty()).then(|| {
                format!(
                    "{} ({})",
                    env.tilde(&layer.path),
                    found
                        .iter()
                        .map(|(old, new)| format!("{old} → {new}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect();
    if !deprecated.is_empty() {
        checks.push(Check::warn(
            "config.deprecated",
            format!("config: deprecated keys in {}", deprecated.join("; ")),
            "run `mc-doctor migrate` (renames them, comments kept, after a backup)",
        ));
    }
    if broken.is_empty() && others.is_empty() {
        checks.push(Check::pass(
            "config",
            if read.is_empty() {
                "config: no config file; built-in defaults".to_string()
            } else {
                format!("config: {} parse and apply cleanly", read.join(", "))
            },
        ));
    }
    checks
}

/// `config: FILE: not valid JSONC: WHY on line L column C; …` as
/// `config: FILE:L:C: not valid JSONC: WHY; …` (the form editors jump to).
fn located(warning: &str) -> String {
    let Some((head, rest)) = warning.split_once(": not valid JSONC: ") else {
        return warning.to_string();
    };
    let Some((why, place)) = rest.split_once(" on line ") else {
        return warning.to_string();
    };
    let (place, tail) = place.split_once(';').unwrap_or((place, ""));
    let Some((line, column)) = place.split_once(" column ") else {
        return warning.to_string();
    };
    format!("{head}:{line}:{column}: not valid JSONC: {why};{tail}")
}

/// Open `path` without creating or migrating it.
fn open_existing(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .or_else(|_| {
        Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    })
}

/// Whether mc can write where it must: the database's folder (the file, its
/// `-wal` and `-shm`), the database itself, and mc's user config folder that
/// setup writes to. Real writes, not permission bits (which root ignores): a
/// file created and removed in each folder, and a write transaction on the
/// database that is rolled back. A FAIL names what to change; without this a
/// read-only home passed every other check while each pass was a passthrough.
fn writable(env: &Env) -> Vec<Check> {
    let mut checks = Vec::new();
    let db_shown = env.tilde(&env.db);
    if let Some(folder) = env.db.parent().filter(|p| !p.as_os_str().is_empty())
        && let Err(why) = probe_folder(folder)
    {
        let shown = env.tilde(folder);
        checks.push(Check::fail(
                "db.folder",
                format!("database folder {shown}: mc cannot write there ({why}); every pass would be a passthrough and nothing would be kept"),
                format!("make {shown} a folder your user can write (chown/chmod u+w), or point MC_DB or --db at a database in one"),
            ));
    }
    if env.db.is_file() {
        match probe_database(&env.db) {
            Ok(()) => {}
            Err(Probed::Locked) => {}
            Err(Probed::Refused(why)) => checks.push(Check::fail(
                "db.write",
                format!("database {db_shown}: mc cannot write it ({why}); every pass is a passthrough and nothing is kept"),
                format!("make {db_shown} (and its folder, for the -wal and -shm files) writable for your user (chown/chmod u+w), or point MC_DB or --db at a database you can write"),
            )),
        }
    }
    if let Some(folder) = env.user_config().parent()
        && let Err(why) = probe_folder(folder)
    {
        let shown = env.tilde(folder);
        checks.push(Check::fail(
            "config.folder",
            format!("config folder {shown}: mc cannot write there ({why}); `mc-doctor setup` writes mc's user config there"),
            format!("make {shown} a folder your user can write (chown/chmod u+w), or set XDG_CONFIG_HOME to one"),
        ));
    }
    if checks.is_empty() {
        checks.push(Check::pass(
            "writable",
            format!(
                "mc can write its database {db_shown}, its folder, and the config folder {}",
                env.tilde(env.user_config().parent().unwrap_or(Path::new("")))
            ),
        ));
    }
    checks
}

/// Create a file in `folder` and remove it again. A folder not there yet is
/// probed at its nearest ancestor that is (mc creates the rest); an ancestor
/// that is no folder is named.
fn probe_folder(folder: &Path) -> Result<(), String> {
    let mut at = folder;
    loop {
        match std::fs::metadata(at) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => return Err(format!("{} is a file, not a folder", at.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match at.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => at = parent,
                _ => return Err(format!("{} does not exist", folder.display())),
            },
            Err(e) => return Err(format!("{}: {e}", at.display())),
        }
    }
    if at != folder {
        // mc would create the missing folders below `at`: they must be creatable.
        if let Err(e) = std::fs::create_dir(at.join(".mc-doctor-write-probe"))
            .and_then(|()| std::fs::remove_dir(at.join(".mc-doctor-write-probe")))
        {
            return Err(format!("cannot create {}: {e}", folder.display()));
        }
        return Ok(());
    }
    let probe = at.join(format!(".mc-doctor-write-probe-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"mc"));
    let _ = std::fs::remove_file(&probe);
    written.map_err(|e| format!("cannot create a file there: {e}"))
}

enum Probed {
    /// Another process holds the write lock: it writes, so mc can.
    Locked,
    Refused(String),
}

/// Open the database for writing and write in a transaction that is rolled back.
fn probe_database(path: &Path) -> Result<(), Probed> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| Probed::Refused(e.to_string()))?;
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return Err(Probed::Refused("it opens read-only".into()));
    }
    let _ = conn.busy_timeout(Duration::from_secs(1));
    let wrote =
        conn.execute_batch("BEGIN IMMEDIATE; CREATE TABLE mc_doctor_write_probe (x); ROLLBACK;");
    match wrote {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ) =>
        {
            Err(Probed::Locked)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(Probed::Refused(e.to_string()))
        }
    }
}

fn database(env: &Env) -> Vec<Check> {
    let path = &env.db;
    let shown = env.tilde(path);
    if !path.exists() {
        return vec![Check::pass(
            "db",
            format!("database {shown}: not created yet (the first mc command creates it)"),
        )];
    }
    let broken = |what: String| {
        Check::fail(
            "db.open",
            format!("database {shown}: {what}"),
            format!(
                "move it aside (mv {shown} {shown}.broken; mc starts a new one), and save what is left with `sqlite3 {shown}.broken .recover | sqlite3 {shown}`"
            ),
        )
    };
    let conn = match open_existing(path) {
        Ok(conn) => conn,
        Err(e) => return vec![broken(format!("cannot open it: {e}"))],
    };
    let _ = conn.busy_timeout(Duration::from_secs(5));
    let version: i64 = match conn.query_row("PRAGMA user_version", [], |r| r.get(0)) {
        Ok(v) => v,
        Err(e) => return vec![broken(format!("cannot read it: {e}"))],
    };
    let mut checks = Vec::new();
    let integrity: Result<Vec<String>, _> = conn
        .prepare("PRAGMA integrity_check(5)")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect());
    match integrity {
        Ok(lines) if lines == ["ok"] => {}
        Ok(lines) => checks.push(broken(format!("integrity_check: {}", lines.join("; ")))),
        Err(e) => checks.push(broken(format!("integrity_check failed: {e}"))),
    }
    let supported = mc_base::store::SCHEMA_VERSION;
    if version > supported {
        checks.push(Check::fail(
            "db.schema",
            format!("database {shown}: schema {version} is newer than this mc ({supported})"),
            "upgrade every mc binary to the version that wrote it",
        ));
    } else if version < supported {
        checks.push(
            Check::warn(
                "db.schema",
                format!(
                    "database {shown}: schema {version}, this mc has {supported} (its next command migrates it)"
                ),
                "run `mc-doctor migrate` to back it up and migrate it now",
            )
            .with_repair(Repair::Migrate),
        );
    }
    if checks.is_empty() {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let count = |table: &str| -> String {
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .map_or_else(|_| "?".to_string(), |n| n.to_string())
        };
        checks.push(Check::pass(
            "db",
            format!(
                "database {shown}: {}, schema {version}, integrity ok; {} sessions, {} compartments, {} memories, {} notes, {} pins",
                super::bytes(size),
                count("sessions"),
                count("compartments"),
                count("memories"),
                count("notes"),
                count("pins"),
            ),
        ));
    }
    checks
}

/// How a provider probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Ok,
    AuthFailed(u16),
    EndpointUnsupported(u16),
    HttpError(u16),
    Timeout,
    NetworkError(String),
}

impl Probe {
    pub fn class(&self) -> &'static str {
        match self {
            Probe::Ok => "ok",
            Probe::AuthFailed(_) => "auth failed",
            Probe::EndpointUnsupported(_) => "endpoint unsupported",
            Probe::HttpError(_) => "http error",
            Probe::Timeout => "timeout",
            Probe::NetworkError(_) => "network error",
        }
    }
}

/// GET `url` with `headers` (a key's value is sent, never shown).
pub fn probe(url: &str, headers: &[(&str, String)], timeout: Duration) -> Probe {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .build()
        .into();
    let mut request = agent.get(url);
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    match request.call() {
        Ok(response) => {
            let status = response.status().as_u16();
            match status {
                200..=299 => Probe::Ok,
                401 | 403 => Probe::AuthFailed(status),
                404 | 405 => Probe::EndpointUnsupported(status),
                _ => Probe::HttpError(status),
            }
        }
        Err(ureq::Error::Timeout(_)) => Probe::Timeout,
        Err(e) => {
            let text = e.to_string();
            if text.to_ascii_lowercase().contains("timed out") {
                Probe::Timeout
            } else {
                Probe::NetworkError(text)
            }
        }
    }
}

fn providers(env: &Env, config: &Config, options: &Options) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut probed: std::collections::BTreeMap<String, Check> = Default::default();
    for (role, chain, default) in [
        (
            "historian",
            config.historian.chain(),
            if config.historian.harness_model {
                "no model configured: folds through the harness's own model"
            } else {
                "no model configured and historian.harness_model is off: historian runs refuse to start"
            },
        ),
        (
            "dream",
            config.dream.chain(),
            "no model configured: dream's model tasks are off",
        ),
        (
            "embeddings",
            config.embeddings.model.iter().cloned().collect(),
            "no model configured: search ranks by full text (BM25) only",
        ),
    ] {
        if chain.is_empty() {
            let what = format!("{role}: {default}");
            checks.push(if role == "historian" && !config.historian.harness_model {
                Check::warn(
                    format!("provider.{role}"),
                    what,
                    "set historian.model (mc-doctor setup --historian-model …)",
                )
            } else {
                Check::pass(format!("provider.{role}"), what)
            });
            continue;
        }
        for model in chain {
            let id = format!("provider.{role}.{model}");
            if role == "embeddings" && model.starts_with(mc_search_core::embed::LOCAL_PREFIX) {
                checks.push(local_model_check(env, config, id));
                continue;
            }
            let Some((name, _)) = model.split_once('/') else {
                checks.push(Check::fail(
                    id,
                    format!("{role}: model {model:?} is not provider/model"),
                    "write it as NAME/MODEL with NAME a key of `providers`",
                ));
                continue;
            };
            let Some(provider) = config.providers.get(name) else {
                checks.push(Check::fail(
                    id,
                    format!("{role}: {model} names provider {name:?}, which `providers` does not define"),
                    format!("add providers.{name} to your user config (mc-doctor setup --historian-model … writes one)"),
                ));
                continue;
            };
            let check = probed
                .entry(name.to_string())
                .or_insert_with(|| provider_check(env, name, provider, options))
                .clone();
            checks.push(Check {
                id,
                what: format!("{role}: {model}: {}", check.what),
                ..check
            });
        }
    }
    checks
}

/// A local embeddings model: known, fetched, of the right size and checksum.
fn local_model_check(env: &Env, config: &Config, id: String) -> Check {
    use mc_search_core::embed::{Provider, local::State as ModelState};
    let provider = match Provider::from_config(
        config,
        &|v| env.vars.get(v).cloned(),
        env.models_dir.as_deref(),
    ) {
        Ok(Some(p)) => p,
        Ok(None) => return Check::pass(id, "embeddings: none configured"),
        Err(e) => {
            return Check::fail(
                id,
                format!("embeddings: {e}"),
                "set embeddings.model to a local model mc knows, or to provider/model",
            );
        }
    };
    let Some(local) = provider.local() else {
        return Check::pass(id, "embeddings: an endpoint");
    };
    let shown = local.dir.display();
    match local.state() {
        ModelState::Ready => Check::pass(
            id,
            format!(
                "embeddings: {}: the local model is in {shown}, checksums match",
                provider.name
            ),
        ),
        // Not set up is a choice, not a fault: said, not warned.
        ModelState::Missing => Check::pass(
            id,
            format!(
                "embeddings: {}: the local model is not fetched yet: search ranks by full text \
                 (BM25) only (mc-doctor setup --embeddings fetches it)",
                provider.name
            ),
        ),
        ModelState::Broken(why) => Check::warn(
            id,
            format!(
                "embeddings: {}: {why}: search ranks by full text (BM25) only",
                provider.name
            ),
            "mc-doctor setup --embeddings fetches it again",
        ),
    }
}

fn provider_check(
    env: &Env,
    name: &str,
    provider: &config::ProviderConfig,
    options: &Options,
) -> Check {
    let id = format!("provider.{name}");
    match provider.kind {
        ProviderKind::Command => {
            let program = provider
                .command
                .as_ref()
                .and_then(|c| c.first())
                .cloned()
                .unwrap_or_default();
            let found = if program.contains('/') {
                Path::new(&program)
                    .is_file()
                    .then(|| PathBuf::from(&program))
            } else {
                env.which(&program)
            };
            match found {
                Some(path) => Check::pass(id, format!("command {program} ({})", env.tilde(&path))),
                None => Check::fail(
                    id,
                    format!("command {program:?} is not found"),
                    format!("install {program}, or change providers.{name}.command"),
                ),
            }
        }
        ProviderKind::Opencode => Check::pass(
            id,
            match &provider.base_url {
                Some(url) => format!("the OpenCode server at {url}"),
                None => "the OpenCode server the plugin passes".into(),
            },
        ),
        ProviderKind::Anthropic | ProviderKind::Openai => {
            let base = provider
                .effective_base_url()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_string();
            let key = match &provider.api_key_env {
                Some(var) => match env.var(var) {
                    Some(value) => Some(value.to_string()),
                    None => {
                        return Check::fail(
                            id,
                            format!(
                                "{} at {base}: its key variable {var} is not set",
                                provider.kind.as_str()
                            ),
                            format!("export {var}=… in the environment your harness starts with"),
                        );
                    }
                },
                None => None,
            };
            if !options.probes {
                return Check::pass(
                    id,
                    format!("{} at {base} (not probed)", provider.kind.as_str()),
                );
            }
            let (url, headers) = match provider.kind {
                ProviderKind::Anthropic => {
                    let mut headers = vec![("anthropic-version", "2023-06-01".to_string())];
                    if let Some(key) = key {
                        headers.push(("x-api-key", key));
                    }
                    (format!("{base}/v1/models"), headers)
                }
                _ => {
                    let headers = key
                        .map(|k| vec![("authorization", format!("Bearer {k}"))])
                        .unwrap_or_default();
                    (format!("{base}/models"), headers)
                }
            };
            let result = probe(&url, &headers, options.probe_timeout);
            let what = format!("{} at {base}: {}", provider.kind.as_str(), result.class());
            match result {
                Probe::Ok => Check::pass(id, what),
                Probe::AuthFailed(status) => Check::fail(
                    id,
                    format!("{what} ({status})"),
                    format!(
                        "check the key in {}",
                        provider
                            .api_key_env
                            .as_deref()
                            .unwrap_or("providers.NAME.api_key_env (none set)")
                    ),
                ),
                Probe::EndpointUnsupported(status) => Check::warn(
                    id,
                    format!("{what} ({status} for {url})"),
                    format!(
                        "check providers.{name}.base_url (the model list is not served there; calls may still work)"
                    ),
                ),
                Probe::HttpError(status) => Check::fail(
                    id,
                    format!("{what} ({status})"),
                    format!("check providers.{name}.base_url and the provider's status"),
                ),
                Probe::Timeout => Check::fail(
                    id,
                    format!(
                        "{what} (no answer within {} ms)",
                        options.probe_timeout.as_millis()
                    ),
                    format!("check providers.{name}.base_url and your network"),
                ),
                Probe::NetworkError(e) => Check::fail(
                    id,
                    format!("{what} ({e})"),
                    format!("check providers.{name}.base_url: nothing answers there"),
                ),
            }
        }
    }
}

fn harness_checks(env: &Env, integration: &Integration, version: Option<&str>) -> Vec<Check> {
    let id = integration.id;
    let name = id.title();
    let key = id.as_str();
    let Some(detected) = &integration.detected else {
        return vec![Check::pass(
            format!("{key}.detected"),
            format!(
                "{name}: not found (no `{}` on PATH) — skipped",
                id.program()
            ),
        )];
    };
    let mut checks = Vec::new();
    let setup = format!("mc-doctor setup --harness {key}");
    match (version, id.tested_with()) {
        (Some(v), Some(tested)) if v == tested => checks.push(Check::pass(
            format!("{key}.version"),
            format!("{name} {v} ({detected}), the version mc is tested with"),
        )),
        (Some(v), Some(tested)) => checks.push(Check::warn(
            format!("{key}.version"),
            format!("{name} {v} ({detected}); mc is tested with {tested}"),
            format!("if mc misbehaves, try {name} {tested}"),
        )),
        (Some(v), None) => checks.push(Check::pass(
            format!("{key}.version"),
            format!("{name} {v} ({detected})"),
        )),
        (None, _) => checks.push(Check::pass(
            format!("{key}.version"),
            format!("{name} ({detected}; version unknown)"),
        )),
    }
    for piece in &integration.pieces {
        let cid = format!("{key}.{}", piece.id);
        let place = env.tilde(&piece.path);
        let compaction_off = id == HarnessId::OpenCode
            && piece.id == "compaction"
            && env.var("OPENCODE_DISABLE_AUTOCOMPACT").is_some();
        let check = match harness::state(piece) {
            State::Installed => Check::pass(cid, format!("{name}: {} ({place})", piece.label)),
            _ if compaction_off => Check::pass(
                cid,
                format!("{name}: auto-compaction off (OPENCODE_DISABLE_AUTOCOMPACT)"),
            ),
            State::Missing => Check::fail(
                cid,
                format!("{name}: {}: missing ({place})", piece.label),
                setup.clone(),
            )
            .with_repair(Repair::Harness { harness: id }),
            State::Stale(why) => Check::fail(
                cid,
                format!(
                    "{name}: {}: not as mc needs it ({place}: {why})",
                    piece.label
                ),
                setup.clone(),
            )
            .with_repair(Repair::Harness { harness: id }),
            State::Unavailable(why) => Check::warn(
                cid,
                format!("{name}: {} cannot be installed: {why}", piece.label),
                "install an mc build that ships it",
            ),
            State::Broken(why) => Check::fail(
                cid,
                format!("{name}: {}", super::redact::paths(env, &why)),
                format!("fix {place} by hand, then run mc-doctor again"),
            ),
        };
        checks.push(check);
    }
    if id == HarnessId::OpenCode {
        checks.extend(opencode_conflicts(env));
    }
    checks
}

/// Other context-management plugins in OpenCode's config fight mc over the
/// same messages.
fn opencode_conflicts(env: &Env) -> Vec<Check> {
    let path = harness::opencode_config(env);
    let Ok(Some(text)) = harness::read(&path) else {
        return Vec::new();
    };
    let Ok(root) = super::edit::json_value(&text, "") else {
        return Vec::new();
    };
    let plugins: Vec<String> = root
        .get("plugin")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().or_else(|| p.get(0)?.as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let conflicts: Vec<&String> = plugins
        .iter()
        .filter(|p| p.contains("opencode-magic-context") || p.contains("opencode-dcp"))
        .collect();
    if conflicts.is_empty() {
        return vec![Check::pass(
            "opencode.conflicts",
            "OpenCode: no other context-management plugin",
        )];
    }
    vec![Check::fail(
        "opencode.conflicts",
        format!(
            "OpenCode: {} also manage(s) the context",
            conflicts
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!("remove it from `plugin` in {}", env.tilde(&path)),
    )]
}

/// The crontab's text, `None` when it cannot be read.
pub fn crontab_text(program: &Path) -> Option<String> {
    let out = run_limited(Command::new(program).arg("-l"), Duration::from_secs(10))?;
    if out.status.success() {
        return Some(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    err.contains("no crontab").then(String::new)
}

fn cron(config: &Config, options: &Options) -> Check {
    if config.dream.model.is_none() {
        return Check::pass(
            "cron",
            "cron: no dream model configured; no `mc-dream tick` line needed",
        );
    }
    match crontab_text(&options.crontab) {
        Some(text) if mc_dream_core::crontab::installed(&text) => {
            Check::pass("cron", "cron: the `mc-dream tick` line is installed")
        }
        Some(_) => Check::fail(
            "cron",
            "cron: dream.model is set but the crontab has no `mc-dream tick` line",
            "mc-dream cron --install",
        )
        .with_repair(Repair::Cron),
        None => Check::warn(
            "cron",
            "cron: cannot read the crontab (no `crontab` program?)",
            "run `mc-dream tick` every 15 minutes some other way (`mc-dream cron` prints the line)",
        ),
    }
}

fn recent_failures(env: &Env, options: &Options) -> Vec<Check> {
    if !env.db.exists() {
        return Vec::new();
    }
    let Ok(conn) = open_existing(&env.db) else {
        return Vec::new();
    };
    let since = env.now_ms - RECENT_MS;
    let mut checks = Vec::new();
    let passthroughs: Vec<String> = conn
        .prepare(
            "SELECT harness, session_id, updated_ms, last_error FROM sessions
             WHERE last_decision = 'passthrough' AND last_error IS NOT NULL AND updated_ms >= ?1
             ORDER BY updated_ms DESC, id DESC LIMIT ?2",
        )
        .and_then(|mut s| {
            s.query_map(rusqlite::params![since, options.recent as i64], |r| {
                Ok(format!(
                    "{} {} at {}: {}",
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    when(r.get(2)?),
                    r.get::<_, String>(3)?
                ))
            })?
            .collect()
        })
        .unwrap_or_default();
    checks.push(if passthroughs.is_empty() {
        Check::pass(
            "recent.passthrough",
            "no fail-open passthrough in the last 7 days",
        )
    } else {
        Check::warn(
            "recent.passthrough",
            format!(
                "fail-open passthroughs in the last 7 days (newest first): {}",
                passthroughs.join(" | ")
            ),
            "the messages went out untouched; the reason says what to repair",
        )
    });
    let runs: Vec<String> = conn
        .prepare(
            "SELECT s.harness, s.session_id, r.started_ms, r.model, r.error FROM historian_runs r
             JOIN sessions s ON s.id = r.session
             WHERE r.status = 'failed' AND r.started_ms >= ?1
             ORDER BY r.started_ms DESC, r.id DESC LIMIT ?2",
        )
        .and_then(|mut s| {
            s.query_map(rusqlite::params![since, options.recent as i64], |r| {
                Ok(format!(
                    "{} {} at {} ({}): {}",
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    when(r.get(2)?),
                    r.get::<_, Option<String>>(3)?
                        .unwrap_or_else(|| "no model".into()),
                    r.get::<_, Option<String>>(4)?.unwrap_or_default()
                ))
            })?
            .collect()
        })
        .unwrap_or_default();
    checks.push(if runs.is_empty() {
        Check::pass(
            "recent.historian",
            "no failed historian run in the last 7 days",
        )
    } else {
        Check::warn(
            "recent.historian",
            format!(
                "failed historian runs in the last 7 days (newest first): {}",
                runs.join(" | ")
            ),
            "`mc-historian status --session ID` shows the session; check the provider above",
        )
    });
    checks
}

fn when(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::store::{Store, StoreOptions};

    /// A Codex rollout of `thread` whose model answered at `at` (its format).
    fn rollout(home: &Path, thread: &str, at: &str) {
        let dir = home.join(".codex/sessions/2026/12/04");
        std::fs::create_dir_all(&dir).unwrap();
        let lines = [
            serde_json::json!({"timestamp": "2026-12-04T01:00:00.000Z", "type": "session_meta",
                "payload": {"id": thread, "cwd": "/p"}}),
            serde_json::json!({"timestamp": "2026-12-04T01:00:01.000Z", "type": "response_item",
                "payload": {"type": "message", "role": "user", "content": []}}),
            serde_json::json!({"timestamp": at, "type": "response_item",
                "payload": {"type": "message", "role": "assistant", "content": []}}),
            serde_json::json!({"timestamp": "2026-12-04T03:00:00.000Z", "type": "event_msg",
                "payload": {"type": "token_count"}}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(
            dir.join(format!("rollout-2026-12-04T01-00-00-{thread}.jsonl")),
            text,
        )
        .unwrap();
    }

    #[test]
    fn the_gateway_check_says_whether_codex_s_last_turn_went_through_it() {
        use mc_transform_core::calls::{self, HeadMove, Keep, NewCall, Prompt, Sources};
        use mc_transform_core::{Bust, Decision};
        let dir = tempfile::tempdir().unwrap();
        let env = Env {
            home: dir.path().to_path_buf(),
            db: dir.path().join("ctx.db"),
            ..Env::default()
        };
        let thread = "019a23bf-d2c3-7ee0-8036-3655ca831d14";
        let stamp = "2026-12-04T02:00:00.000Z";
        let at = mc_base::codec::claude::parse_timestamp(stamp).unwrap();
        // No rollout: nothing to say.
        assert_eq!(codex_last_turn(&env, true, 0), None);
        rollout(dir.path(), thread, stamp);
        // Nothing recorded for the thread: wired, a warning; not, a note.
        let (note, hint) = codex_last_turn(&env, true, 0).unwrap();
        assert!(
            note.contains(&format!("thread {thread}) did not go through it")),
            "{note}"
        );
        assert!(hint.is_some());
        let (note, hint) = codex_last_turn(&env, false, 0).unwrap();
        assert!(note.contains("went to its own provider"), "{note}");
        assert_eq!(hint, None);
        // A gateway started after that turn has carried no Codex call yet.
        let (note, hint) = codex_last_turn(&env, true, at + 1).unwrap();
        assert_eq!(
            (note.as_str(), hint),
            ("; no Codex call since it started", None)
        );
        // mc's pass recorded the turn's call, a moment before the answer.
        let mut store = Store::open(&env.db, &StoreOptions::default()).unwrap();
        store
            .write(|tx| {
                let session = mc_base::domain::sessions::create_session(
                    tx, "codex", thread, false, None, at,
                )?;
                let call = NewCall {
                    session: session.id,
                    at_ms: at - 2_000,
                    decision: Decision::Defer,
                    reason: "cache_warm",
                    bust: Bust::None,
                    head: HeadMove::Replayed,
                    head_reason: None,
                    usage_percent: 10.0,
                    context_window: 272_000,
                    model: Some("gpt-5"),
                    prompt: Prompt::default(),
                    messages: 3,
                    first_message: None,
                    sources: Sources::default(),
                    drops: 0,
                    sample: None,
                };
                calls::record(tx, &call, Keep { rows: 100, days: 7 }).map(|_| ())
            })
            .unwrap();
        drop(store);
        let (note, hint) = codex_last_turn(&env, true, 0).unwrap();
        assert_eq!(
            (note, hint),
            (
                format!("; Codex's last turn (thread {thread}) went through it"),
                None
            )
        );
    }

    #[test]
    fn recent_passthroughs_and_failed_historian_runs_are_listed_with_their_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let now = 1_796_100_000_000;
        let env = Env {
            home: dir.path().to_path_buf(),
            db: dir.path().join("ctx.db"),
            now_ms: now,
            ..Env::default()
        };
        let mut store = Store::open(&env.db, &StoreOptions::default()).unwrap();
        let old = now - RECENT_MS - 1;
        let id = store
            .write(|tx| {
                let a = mc_base::domain::sessions::create_session(
                    tx, "opencode", "ses_a", false, None, old,
                )?;
                mc_base::domain::sessions::create_session(
                    tx,
                    "claude-code",
                    "s-old",
                    false,
                    None,
                    old,
                )?;
                tx.execute(
                    "INSERT INTO historian_runs (session, started_ms, status, model, error)
                     VALUES (?1, ?2, 'failed', 'fake/m', 'provider said 401'),
                            (?1, ?3, 'failed', 'fake/m', 'too old to list'),
                            (?1, ?2, 'published', 'fake/m', NULL)",
                    rusqlite::params![a.id, now - 60_000, old],
                )?;
                Ok(a.id)
            })
            .unwrap();
        assert!(id > 0);
        mc_transform_core::pass::record_passthrough(
            &mut store,
            "opencode",
            "ses_a",
            "database is locked",
            now - 1000,
        )
        .unwrap();
        mc_transform_core::pass::record_passthrough(
            &mut store,
            "claude-code",
            "s-old",
            "ancient",
            old,
        )
        .unwrap();
        drop(store);
        let checks = recent_failures(&env, &Options::default());
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].status, super::super::Status::Warn);
        assert_eq!(
            checks[0].what,
            "fail-open passthroughs in the last 7 days (newest first): opencode ses_a at 2026-12-01 04:39 UTC: database is locked"
        );
        assert_eq!(
            checks[1].what,
            "failed historian runs in the last 7 days (newest first): opencode ses_a at 2026-12-01 04:39 UTC (fake/m): provider said 401"
        );
    }

    /// A server on 127.0.0.1 answering each connection with the next status
    /// (0: read the request and never answer).
    fn server(statuses: Vec<u16>) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for status in statuses {
                let (mut stream, _) = listener.accept().unwrap();
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                if status == 0 {
                    held.push(stream);
                    continue;
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        });
        url
    }

    #[test]
    fn an_npm_harness_s_version_comes_from_its_package_json() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("node_modules/opencode-ai");
        std::fs::create_dir_all(package.join("bin")).unwrap();
        std::fs::write(package.join("bin/opencode.exe"), "").unwrap();
        std::fs::write(
            package.join("package.json"),
            r#"{"name": "opencode-ai", "version": "9.8.7"}"#,
        )
        .unwrap();
        let bin = dir.path().join("node_modules/.bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(package.join("bin/opencode.exe"), bin.join("opencode")).unwrap();
        assert_eq!(
            npm_version(&bin.join("opencode"), "opencode-ai").as_deref(),
            Some("9.8.7")
        );
        // Another package's manifest is not the harness's.
        assert_eq!(npm_version(&bin.join("opencode"), "@openai/codex"), None);
    }

    #[test]
    fn the_embeddings_model_is_checked_like_the_historian_s() {
        let env = Env::default();
        let options = Options {
            probes: false,
            ..Options::default()
        };
        let mut config = Config::default();
        config.embeddings.model = None;
        let find = |checks: Vec<Check>, id: &str| {
            checks
                .into_iter()
                .find(|c| c.id == id)
                .unwrap_or_else(|| panic!("no {id}"))
        };
        let check = find(providers(&env, &config, &options), "provider.embeddings");
        assert_eq!(check.status, super::super::Status::Pass);
        assert_eq!(
            check.what,
            "embeddings: no model configured: search ranks by full text (BM25) only"
        );
        config.embeddings.model = Some("local/wordllama".into());
        let check = find(
            providers(&env, &config, &options),
            "provider.embeddings.local/wordllama",
        );
        assert_eq!(check.status, super::super::Status::Fail);
        assert!(
            check.what.contains("names provider \"local\""),
            "{}",
            check.what
        );
    }

    #[test]
    fn probe_classes() {
        let url = server(vec![200, 401, 403, 404, 405, 500, 0]);
        let t = Duration::from_millis(400);
        assert_eq!(probe(&url, &[], t), Probe::Ok);
        assert_eq!(probe(&url, &[], t), Probe::AuthFailed(401));
        assert_eq!(probe(&url, &[], t), Probe::AuthFailed(403));
        assert_eq!(probe(&url, &[], t), Probe::EndpointUnsupported(404));
        assert_eq!(probe(&url, &[], t), Probe::EndpointUnsupported(405));
        assert_eq!(probe(&url, &[], t), Probe::HttpError(500));
        assert_eq!(probe(&url, &[], t), Probe::Timeout);
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = dead.local_addr().unwrap().port();
        drop(dead);
        assert!(matches!(
            probe(&format!("http://127.0.0.1:{port}"), &[], t),
            Probe::NetworkError(_)
        ));
    }
}
