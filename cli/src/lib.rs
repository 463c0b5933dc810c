//! The binaries' shared edge: the global flags, failures with their exit
//! codes and hints, stdin and stdout JSON, the clock, and the database and
//! config as the process environment places them; the keys of a model chain
//! ([`keys`]); which harness and session a command runs for ([`session`]).
//!
//! Besides the binaries themselves, this is the only crate that touches
//! stdin, stdout, stderr or the environment; mc-core gets everything as
//! values. Whatever differs between the binaries (their messages, extra exit
//! rules, their own variables) stays in the binary.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Termination};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow};
use serde_json::Value;

use mc_base::config::{self, Config};
use mc_base::error::ErrorKind;
use mc_base::paths::{self, EnvPaths};
use mc_base::store::{Store, StoreOptions};

pub mod keys;
pub mod serve;
pub mod session;

/// The flags every mc binary takes, before and after its subcommand:
/// `#[command(flatten)]` this into the binary's arguments.
#[derive(clap::Args, Debug)]
pub struct GlobalArgs {
    /// SQLite database [default: $MC_DB, else $XDG_DATA_HOME/mc/context.db]
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,

    /// Extra config file, above user and project config [default: $MC_CONFIG]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Pretty-print the JSON output
    #[arg(long, global = true)]
    pub pretty: bool,
}

impl GlobalArgs {
    /// [`load_config`] with `--config`: the config `name`'s command runs
    /// under, for the project of `project_dir` (else the working directory).
    pub fn load_config(&self, name: &str, project_dir: Option<&Path>) -> Config {
        load_config(name, self.config.as_deref(), project_dir).0
    }
}

/// A failure with its exit code (2 for bad input or usage, 1 otherwise) and
/// what the user can do about it.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
    /// Printed as `name: hint: …` lines after the error line.
    pub hints: Vec<String>,
}

impl Failure {
    /// The caller's fault (bad input or usage): exit 2.
    pub fn input(error: anyhow::Error) -> Self {
        Failure::of_kind(ErrorKind::Input, error)
    }

    /// A runtime failure: exit 1, whatever the error is.
    pub fn runtime(error: anyhow::Error) -> Self {
        Failure {
            code: 1,
            hints: hints(&error),
            error,
        }
    }

    /// A failure of `kind`: its exit code, and the hints of the mc-core
    /// error in the chain.
    pub fn of_kind(kind: ErrorKind, error: anyhow::Error) -> Self {
        Failure {
            code: kind.exit_code(),
            hints: hints(&error),
            error,
        }
    }

    /// This failure, with `more` hints after its own.
    pub fn with_hints(mut self, more: impl IntoIterator<Item = String>) -> Self {
        self.hints.extend(more);
        self
    }
}

/// The exit code and hints of the first `mc_base::Error` in the chain (by its
/// kind: 2 for input and config, else 1); 1 and none when there is none.
impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        match core_error(&error).map(mc_base::Error::kind) {
            Some(kind) => Failure::of_kind(kind, error),
            None => Failure::runtime(error),
        }
    }
}

/// The first (outermost) mc-core error in the chain, if any.
pub fn core_error(error: &anyhow::Error) -> Option<&mc_base::Error> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<mc_base::Error>())
}

/// The hints of the first mc-core error in the chain.
pub fn hints(error: &anyhow::Error) -> Vec<String> {
    core_error(error)
        .map(mc_base::Error::hints)
        .unwrap_or_default()
}

impl From<mc_base::Error> for Failure {
    fn from(error: mc_base::Error) -> Self {
        anyhow::Error::from(error).into()
    }
}

/// The exit code of a command: success as the command says; a failure is
/// printed as `name: error: {error:#}` on stderr, then its hints as
/// `name: hint: …`, and exits with its code, except that a broken pipe
/// anywhere in the chain (the reader went away) exits 0 silently.
pub fn finish<T: Termination>(name: &str, result: Result<T, Failure>) -> ExitCode {
    finish_with(name, result, |error| format!("{error:#}"))
}

/// [`finish`], with the binary's own way of putting the error on one line.
pub fn finish_with<T: Termination>(
    name: &str,
    result: Result<T, Failure>,
    describe: impl FnOnce(&anyhow::Error) -> String,
) -> ExitCode {
    match result {
        Ok(value) => value.report(),
        Err(failure) if is_broken_pipe(&failure.error) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{name}: error: {}", describe(&failure.error));
            hint(name, &failure.hints);
            ExitCode::from(failure.code)
        }
    }
}

/// True when a broken pipe is anywhere in the error's chain.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Each warning as `name: warning: …` on stderr.
pub fn warn(name: &str, warnings: &[String]) {
    for warning in warnings {
        eprintln!("{name}: warning: {warning}");
    }
}

/// Each hint as `name: hint: …` on stderr (after the error or warning it is about).
pub fn hint(name: &str, hints: &[String]) {
    for hint in hints {
        eprintln!("{name}: hint: {hint}");
    }
}

/// All of stdin. A terminal is refused with `when_terminal` as the message;
/// both that and a failed read are input failures (exit 2).
pub fn read_stdin(when_terminal: &str) -> Result<String, Failure> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(Failure::input(anyhow!("{when_terminal}")));
    }
    let bytes = read_exactly(&mut stdin.lock()).context("cannot read stdin");
    let bytes = bytes.map_err(Failure::input)?;
    String::from_utf8(bytes).map_err(|_| {
        let error = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        );
        Failure::input(anyhow::Error::from(error).context("cannot read stdin"))
    })
}

/// All of `input`, in a buffer of exactly its size: read in chunks, joined
/// once. (`read_to_end` doubles its buffer as it goes: up to twice the
/// input for as long as the text is kept, and every smaller buffer before.)
fn read_exactly(input: &mut impl Read) -> std::io::Result<Vec<u8>> {
    const CHUNK: u64 = 1 << 20;
    let mut chunks = Vec::new();
    loop {
        let mut chunk = Vec::with_capacity(CHUNK as usize);
        input.by_ref().take(CHUNK).read_to_end(&mut chunk)?;
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let mut bytes = Vec::with_capacity(chunks.iter().map(Vec::len).sum());
    for chunk in chunks {
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// `text` as JSON; otherwise an input failure (exit 2) saying
/// `{what} is not JSON: …`. Lone surrogate escapes, which JavaScript writes
/// for a string cut mid-character, are read as U+FFFD rather than refused.
/// The value holds no spare room (`mc_base::json::parse_compact`): an
/// envelope's tree is the largest thing a pass keeps.
pub fn parse_json(text: &str, what: &str) -> Result<Value, Failure> {
    mc_base::json::parse_compact(&mc_base::json::repair_lone_surrogates(text))
        .with_context(|| format!("{what} is not JSON"))
        .map_err(Failure::input)
}

/// One JSON document on stdout, compact or pretty, then a newline.
pub fn write_json(value: &Value, pretty: bool) -> anyhow::Result<()> {
    write_json_with(|out| {
        if pretty {
            serde_json::to_writer_pretty(out, value)
        } else {
            serde_json::to_writer(out, value)
        }
    })
}

/// One JSON document on stdout, as `write` writes it, then a newline.
pub fn write_json_with(
    write: impl FnOnce(&mut dyn Write) -> serde_json::Result<()>,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    write(&mut out)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// `f`, with a panic turned into an internal error, for the commands that
/// fail open (the pass, `system`): a bug must not stop the agent's prompt
/// loop either. The panic message still reaches stderr through the default hook.
pub fn catch_panic<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(mc_base::Error::Internal(what).into())
    })
}

/// The clock in milliseconds since the epoch: the system clock (0 before the
/// epoch), unless `MC_NOW_MS` holds an integer.
///
/// `MC_NOW_MS` is a testing aid: process tests set it to fix the time of
/// commands whose input carries none (`reduce`, `mc-pin`, `mc-historian`
/// without `--now-ms`). Commands that get a time in their input (an
/// envelope's `now_ms`) use that instead. This is the only place it is read.
pub fn now_ms() -> i64 {
    clock(std::env::var("MC_NOW_MS").ok().as_deref(), || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    })
}

/// `fixed` when it is an integer, else the `system` clock.
fn clock(fixed: Option<&str>, system: impl FnOnce() -> i64) -> i64 {
    fixed
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(system)
}

/// The process's working directory, if it has one.
pub fn working_dir() -> Option<PathBuf> {
    std::env::current_dir().ok()
}

/// Whether this process runs inside a program the historian started as its
/// model (see [`mc_llm::HISTORIAN_CHILD_ENV`]): harness hooks then do
/// nothing, so the historian's own call leaves no trace on the folder.
pub fn inside_historian_child() -> bool {
    std::env::var_os(mc_llm::HISTORIAN_CHILD_ENV).is_some_and(|v| !v.is_empty())
}

/// The most of Codex's `config.toml` mc reads.
pub const CODEX_CONFIG_MAX_BYTES: u64 = 1 << 20;

/// Codex's `config.toml` (`$CODEX_HOME`, else `~/.codex`), when it is a
/// regular file of at most [`CODEX_CONFIG_MAX_BYTES`]; `None` otherwise.
pub fn codex_config() -> Option<String> {
    let home = std::env::var_os("CODEX_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".codex")))?;
    read_small_file(&home.join("config.toml"), CODEX_CONFIG_MAX_BYTES)
}

/// The text of the regular file at `path` if it holds at most `max` bytes.
/// Looked at before it is opened — opening a FIFO for reading waits for a
/// writer, and a hook must not — then opened without waiting and looked at
/// again, in case the path was replaced in between.
pub fn read_small_file(path: &Path, max: u64) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let fits = |m: &std::fs::Metadata| m.is_file() && m.len() <= max;
    if !fits(&std::fs::metadata(path).ok()?) {
        return None;
    }
    let nonblock = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).ok()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nonblock)
        .open(path)
        .ok()?;
    if !fits(&file.metadata().ok()?) {
        return None;
    }
    let mut text = String::new();
    file.take(max).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The proxy variables (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`,
/// either case) of this process, for the clients mc-core builds.
pub fn proxy_env() -> mc_llm::ProxyEnv {
    mc_llm::ProxyEnv::from_lookup(&|name| std::env::var(name).ok())
}

/// A client for the OpenCode server at `url`, with this process's proxies.
pub fn opencode(url: &str) -> mc_llm::opencode_api::OpenCode {
    mc_llm::opencode_api::OpenCode::new(url).with_proxies(&proxy_env())
}

/// What the historian's harness default may use, from this process: the
/// OpenCode server (`opencode_url` as a flag gave it, else `OPENCODE_URL`)
/// and the programs of `historian::choice::PROGRAMS` found on `PATH`.
/// `opencode_plugin`: runs of OpenCode sessions come from mc's plugin, which
/// passes its server (for a report that has none at hand).
pub fn harness_env(
    opencode_url: Option<&str>,
    opencode_plugin: bool,
) -> mc_history::historian::choice::HarnessEnv {
    let opencode_url = opencode_url
        .map(str::to_string)
        .or_else(|| std::env::var("OPENCODE_URL").ok())
        .filter(|url| !url.trim().is_empty());
    let path = std::env::var_os("PATH").unwrap_or_default();
    let programs = mc_history::historian::choice::PROGRAMS
        .iter()
        .filter_map(|(_, name)| Some(((*name).to_string(), find_program(name, &path)?)))
        .collect();
    mc_history::historian::choice::HarnessEnv {
        opencode_url,
        opencode_plugin,
        programs,
    }
}

/// The first executable file called `name` in the folders of `path` (a
/// `PATH` value).
pub fn find_program(name: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// The environment values path resolution reads, from this process.
pub fn env_paths() -> EnvPaths {
    EnvPaths::from_lookup(&|name| std::env::var_os(name), working_dir())
}

/// The config from its layers (user, project of `project_dir` or the working
/// directory, then `--config` or `MC_CONFIG`). Each warning is printed as
/// `name: warning: …` and returned too.
pub fn load_config(
    name: &str,
    flag: Option<&Path>,
    project_dir: Option<&Path>,
) -> (Config, Vec<String>) {
    let layers = paths::config_layers(flag, project_dir, &env_paths());
    let loaded = config::load(&layers);
    warn(name, &loaded.warnings);
    (loaded.config, loaded.warnings)
}

/// How long a command waits for a sibling process's database lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// A per-call hook the agent waits on (`sqlite.hook_busy_timeout_ms`).
    Hook,
    /// Anything else (`sqlite.busy_timeout_ms`).
    Background,
}

impl Wait {
    pub fn timeout(self, config: &Config) -> Duration {
        Duration::from_millis(match self {
            Wait::Hook => config.sqlite.hook_busy_timeout_ms,
            Wait::Background => config.sqlite.busy_timeout_ms,
        })
    }
}

/// The config and store of a command about one session.
pub struct SessionSetup {
    pub config: Config,
    /// The config's warnings (already printed).
    pub warnings: Vec<String>,
    /// The store, or why it could not be opened.
    pub store: anyhow::Result<Store>,
    /// The project folder the config was read from.
    pub project_dir: Option<PathBuf>,
}

/// One config resolution per session: the store is opened with the user's
/// SQLite settings and `wait`, then the config is read with the project
/// folder the session's first pass recorded — else `project_dir` (the
/// envelope's), else the working directory — so a pass, `system`, `reduce`
/// and `status` of one session read the same layers wherever they run.
pub fn session_setup(
    name: &str,
    global: &GlobalArgs,
    session: Option<(&str, &str)>,
    project_dir: Option<&Path>,
    wait: Wait,
) -> SessionSetup {
    session_setup_in(
        &mut Stores::default(),
        name,
        global,
        session,
        project_dir,
        wait,
    )
}

/// [`session_setup`], reusing the store `stores` kept from an earlier
/// request of a resident process when it is still the same database file.
/// Hand the store back with [`Stores::keep`] when done with it.
pub fn session_setup_in(
    stores: &mut Stores,
    name: &str,
    global: &GlobalArgs,
    session: Option<(&str, &str)>,
    project_dir: Option<&Path>,
    wait: Wait,
) -> SessionSetup {
    let env = env_paths();
    let flag = global.config.as_deref();
    let first_dir = project_dir.map(Path::to_path_buf).or(env.cwd.clone());
    let first = config::load(&paths::config_layers(flag, first_dir.as_deref(), &env));
    let store = db_path(global.db.as_deref())
        .and_then(|path| Ok(stores.open(&path, &first.config, wait)?));
    let recorded = match (&store, session) {
        (Ok(store), Some((harness, id))) => {
            mc_base::domain::sessions::session_project_dir(store.conn(), harness, id)
                .ok()
                .flatten()
                .map(PathBuf::from)
        }
        _ => None,
    };
    let (loaded, dir) = match recorded {
        Some(dir) if Some(&dir) != first_dir.as_ref() => (
            config::load(&paths::config_layers(flag, Some(&dir), &env)),
            Some(dir),
        ),
        Some(dir) => (first, Some(dir)),
        None => (first, first_dir),
    };
    warn(name, &loaded.warnings);
    SessionSetup {
        config: loaded.config,
        warnings: loaded.warnings,
        store,
        project_dir: dir,
    }
}

/// The store a resident process keeps open between requests. A one-shot
/// command starts with none and opens its store once.
///
/// A kept store is used again only for the same path, while that path is
/// still the same file (a database deleted or replaced meanwhile is opened
/// anew, as a new process would), and after the schema fence is checked
/// again (a database a newer mc migrated since is refused, as an open would).
#[derive(Default)]
pub struct Stores {
    kept: Option<Kept>,
}

struct Kept {
    file: FileId,
    store: Store,
}

/// What identifies a file beyond its path: (device, inode) on Unix.
type FileId = Option<(u64, u64)>;

fn file_id(path: &Path) -> FileId {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

impl Stores {
    /// The store at `path`, waiting as long as `wait` says for a sibling's
    /// lock: the kept one when it still fits, else a fresh open.
    pub fn open(&mut self, path: &Path, config: &Config, wait: Wait) -> mc_base::Result<Store> {
        if let Some(Kept { file, mut store }) = self.kept.take() {
            let same_file = file.is_some() && file == file_id(path);
            if same_file && store.path() == path {
                store.set_busy_timeout(wait.timeout(config))?;
                store.check_schema()?;
                return Ok(store);
            }
        }
        open_store_at(path, config, wait)
    }

    /// Keep `store` for the next request.
    pub fn keep(&mut self, store: Store) {
        let file = file_id(store.path());
        self.kept = Some(Kept { file, store });
    }

    /// Keep the store of a setup whose store opened; drop an error.
    pub fn keep_result(&mut self, store: anyhow::Result<Store>) {
        if let Ok(store) = store {
            self.keep(store);
        }
    }
}

/// `--db`, else `MC_DB`, else `$XDG_DATA_HOME/mc/context.db`.
pub fn db_path(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(paths::db_path(flag, &env_paths())?)
}

/// The store at [`db_path`], with the configured busy timeout.
pub fn open_store(db_flag: Option<&Path>, config: &Config) -> anyhow::Result<Store> {
    let path = db_path(db_flag)?;
    Ok(open_store_at(&path, config, Wait::Background)?)
}

/// As [`open_store`], waiting as long as `wait` says for a sibling's lock.
pub fn open_store_waiting(
    db_flag: Option<&Path>,
    config: &Config,
    wait: Wait,
) -> anyhow::Result<Store> {
    let path = db_path(db_flag)?;
    Ok(open_store_at(&path, config, wait)?)
}

/// The store at `path`, waiting as long as `wait` says for a sibling's lock.
fn open_store_at(path: &Path, config: &Config, wait: Wait) -> mc_base::Result<Store> {
    let options = StoreOptions {
        busy_timeout: wait.timeout(config),
    };
    Store::open(path, &options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_small_regular_file_is_read_and_a_fifo_is_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "model = \"gpt-5\"\n").unwrap();
        assert_eq!(
            read_small_file(&file, 64).as_deref(),
            Some("model = \"gpt-5\"\n")
        );
        assert_eq!(read_small_file(&file, 4), None, "over the bound");
        assert_eq!(read_small_file(dir.path(), 64), None, "a folder");
        assert_eq!(read_small_file(&dir.path().join("none"), 64), None);
        // A FIFO no one writes to: opening it for reading would wait forever.
        let fifo = dir.path().join("fifo.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        assert_eq!(read_small_file(&fifo, 64), None);
    }

    #[test]
    fn input_errors_exit_2_anywhere_in_the_chain() {
        let input = anyhow::Error::from(mc_base::Error::input("bad"));
        assert_eq!(Failure::from(input).code, 2);
        let wrapped = anyhow::Error::from(mc_base::Error::input("bad")).context("reading");
        assert_eq!(Failure::from(wrapped).code, 2);
        assert_eq!(Failure::from(mc_base::Error::input("bad")).code, 2);
        assert_eq!(Failure::from(mc_base::Error::Corrupt("x".into())).code, 1);
        assert_eq!(Failure::from(anyhow!("other")).code, 1);
    }

    #[test]
    fn the_exit_code_and_hints_follow_the_kind_of_the_core_error() {
        let config = mc_base::Error::Config("no database path".into()).with_hint("pass --db");
        let failure = Failure::from(anyhow::Error::from(config).context("opening the store"));
        assert_eq!(
            (failure.code, failure.hints.as_slice()),
            (2, &["pass --db".to_string()][..])
        );
        let too_new = mc_base::Error::SchemaTooNew {
            path: "db".into(),
            found: 9,
            supported: 7,
        };
        let failure = Failure::from(too_new);
        assert_eq!(failure.code, 1);
        assert!(
            failure.hints[0].starts_with("upgrade mc"),
            "{:?}",
            failure.hints
        );
        // Input errors have no hints of their own; a binary may add some.
        let failure = Failure::input(anyhow!("usage")).with_hints(["pass --session".to_string()]);
        assert_eq!((failure.code, failure.hints.len()), (2, 1));
        // An error mc-core did not make: exit 1, no hints.
        let failure = Failure::from(anyhow!("other"));
        assert_eq!((failure.code, failure.hints.len()), (1, 0));
        // A caught panic is an internal error with its hint.
        let panic = catch_panic::<()>(|| panic!("boom")).unwrap_err();
        assert_eq!(
            core_error(&panic).map(mc_base::Error::kind),
            Some(ErrorKind::Internal)
        );
        assert!(hints(&panic)[0].contains("bug in mc"));
    }

    #[cfg(unix)]
    #[test]
    fn programs_are_found_as_executable_files_on_the_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (plain, bin) = (dir.path().join("plain"), dir.path().join("bin"));
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::create_dir_all(bin.join("claude")).unwrap(); // a folder, not a program
        std::fs::write(plain.join("claude"), "not executable").unwrap();
        let exe = bin.join("pi");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(&exe, plain.join("pi")).unwrap();
        let path = std::env::join_paths([bin.as_path(), plain.as_path()]).unwrap();
        assert_eq!(find_program("claude", &path), None);
        assert_eq!(
            find_program("pi", &path),
            Some(exe),
            "the first folder wins"
        );
        assert_eq!(find_program("codex", &path), None);
    }

    #[test]
    fn a_panic_becomes_an_error_that_names_it() {
        let caught = catch_panic::<()>(|| panic!("index out of bounds: 7")).unwrap_err();
        let text = format!("{caught:#}");
        assert!(text.contains("internal error"), "{text}");
        assert!(text.contains("index out of bounds: 7"), "{text}");
        let owned = catch_panic::<()>(|| panic!("{} of {}", 1, 2)).unwrap_err();
        assert!(format!("{owned}").contains("1 of 2"));
        assert_eq!(catch_panic(|| Ok(5)).unwrap(), 5);
    }

    #[test]
    fn a_broken_pipe_anywhere_in_the_chain_counts() {
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(is_broken_pipe(
            &anyhow::Error::from(pipe).context("writing")
        ));
        let other = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(!is_broken_pipe(&anyhow::Error::from(other)));
    }

    #[test]
    fn not_json_is_an_input_failure_naming_what() {
        let failure = parse_json("nope", "the event on stdin").unwrap_err();
        assert_eq!(failure.code, 2);
        assert!(
            format!("{:#}", failure.error).starts_with("the event on stdin is not JSON: "),
            "{:#}",
            failure.error
        );
        assert_eq!(parse_json("[1]", "input").unwrap(), serde_json::json!([1]));
    }

    #[test]
    fn input_is_parsed_without_slack() {
        // serde_json's own parse keeps room for 8 items here.
        let value = parse_json(r#"{"messages":[1,2,3,4,5]}"#, "input").unwrap();
        let messages = value["messages"].as_array().unwrap();
        assert_eq!(messages.capacity(), messages.len());
    }

    #[test]
    fn a_fixed_clock_wins_only_when_it_is_an_integer() {
        assert_eq!(clock(Some("1796100000000"), || 5), 1_796_100_000_000);
        assert_eq!(clock(Some(" 42\n"), || 5), 42);
        assert_eq!(clock(Some("soon"), || 5), 5);
        assert_eq!(clock(Some(""), || 5), 5);
        assert_eq!(clock(None, || 5), 5);
    }
}
