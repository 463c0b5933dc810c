//! Argument parsing and the commands. Every command but `mcp`, `profile` and
//! `session-start` is one of the agent's tools with its arguments taken from
//! flags (or JSON on stdin), so the command line and the tools cannot drift.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args as ClapArgs, Parser, Subcommand};
use serde_json::{Map, Value, json};

use mc_base::identity::project_identity;
use mc_cli::{Failure, GlobalArgs, Wait, now_ms, write_json};
use mc_search_core::mcp::{self, ServerInfo};
use mc_search_core::tools::{self, SessionSource, ToolServer};
use mc_search_core::{self as search, Scope, memory};

const NAME: &str = "mc-search";

const ABOUT: &str = "Project memory, session notes, expand and search: the agent's tools
(ctx_memory, ctx_note, ctx_expand, ctx_search, ctx_reduce) on the command line
and over MCP.

Memories belong to a project (the git root commit of --project-dir, default
the working directory) and are never visible from another one. A memory
written here reaches the agent's prompt on the next pass that rebuilds it
anyway: writing never costs a prompt-cache miss.

Every command prints one JSON document. Without any of its field flags, a
command reads the same fields as a JSON object on stdin when stdin is not a
terminal: {\"harness\", \"session_id\", \"project_dir\", and the command's own
fields, e.g. \"category\", \"content\"}. Exit codes: 0 ok, 1 runtime failure,
2 bad input (an unknown id, a bad category, empty content).";

#[derive(Parser, Debug)]
#[command(name = "mc-search", version, about = ABOUT)]
struct Args {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(flatten)]
    at: Where,

    #[command(subcommand)]
    command: Command,
}

/// Which project and session a command is about.
#[derive(ClapArgs, Debug, Clone, Default)]
struct Where {
    /// Harness of the session: opencode, claude-code, codex or pi [default: opencode]
    #[arg(long, global = true)]
    harness: Option<String>,
    /// Session id (notes, expand, reduce)
    #[arg(long, global = true, value_name = "ID")]
    session: Option<String>,
    /// The project's folder [default: the working directory]
    #[arg(long, global = true, value_name = "DIR")]
    project_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Project memory: durable facts, per project.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Session notes the agent keeps for itself.
    #[command(subcommand)]
    Note(NoteCommand),
    /// The original content of a dropped tag (§12§), a compartment (c3) or messages (10-20).
    Expand {
        /// What to expand: §12§ or 12, c3, 10-20
        target: Option<String>,
        /// Most tokens to return [default: 15000]
        #[arg(long)]
        budget: Option<u64>,
    },
    /// Search memories, notes, compartments, messages and commits of the project.
    Query {
        /// The words to look for
        text: Option<String>,
        /// Only these sources: memory, note, compartment, message, commit (repeatable)
        #[arg(long = "source", value_name = "SOURCE")]
        sources: Vec<String>,
        /// Most hits [default: 10]
        #[arg(long)]
        limit: Option<u64>,
        /// Only from this day on (YYYY-MM-DD) or epoch milliseconds
        #[arg(long)]
        since: Option<String>,
        /// Only before this day (YYYY-MM-DD) or epoch milliseconds
        #[arg(long)]
        until: Option<String>,
        /// Only sessions of --harness (with --session: only that session)
        #[arg(long)]
        only_harness: bool,
    },
    /// Index the raw messages kept since the last index (search does a bounded
    /// step of this itself); --session for one session only. Progress on stderr
    /// when it is a terminal.
    Index {
        /// Report the state of every search index instead: parts kept,
        /// indexed, waiting, healthy, and each index (exit 1 when one is not)
        #[arg(long, conflicts_with = "rebuild")]
        check: bool,
        /// Throw every search index away (messages, memories, notes,
        /// compartments, commits) and build it again from the rows it indexes:
        /// the repair for a damaged index
        #[arg(long)]
        rebuild: bool,
        /// Index the git commits of the project's repository instead (HEAD, no
        /// merges, the last year, the newest 2000; what mc-dream's git-index
        /// task does)
        #[arg(long, conflicts_with_all = ["check", "rebuild"])]
        commits: bool,
        /// Embed every searchable text that has no vector yet with the
        /// configured embeddings.model (batches of embeddings.batch_size,
        /// each stored as it comes: run it again to resume)
        #[arg(long, conflicts_with_all = ["check", "rebuild", "commits"])]
        embeddings: bool,
    },
    /// Queue tags to drop (as ctx_reduce): --drop 3-5,12
    Reduce {
        #[arg(long, value_name = "TAGS")]
        drop: Option<String>,
    },
    /// The user profile: what the user is like, in every project's prompt.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Run one agent tool: {"tool", "arguments", "harness", "session_id",
    /// "project_dir"} on stdin → {"text", "is_error", "data"} (what a harness
    /// plugin calls; the text is what the model reads).
    Call,
    /// The agent tools as a harness registers them: {"tools": [{"name",
    /// "description", "input_schema"}]} (a JSON Schema each).
    Tools,
    /// Serve the agent tools over MCP (JSON-RPC on stdin/stdout) until stdin closes.
    ///
    /// The session is --session when given; else the one the harness names in
    /// the server's environment (Claude Code: CLAUDE_CODE_SESSION_ID, with
    /// --harness claude-code); else, per call, the session the harness's
    /// SessionStart hook last recorded for this folder (see `session-start`).
    Mcp,
    /// A SessionStart hook: record the hook's session as the current one of its
    /// folder (what `mcp` serves when the harness does not name its session).
    /// Reads the hook input on stdin; prints {}.
    SessionStart,
}

#[derive(Subcommand, Debug)]
enum MemoryCommand {
    /// Write a memory (a duplicate answers "existing" with the live one's id).
    Write {
        #[arg(long)]
        category: Option<String>,
        #[arg(long)]
        content: Option<String>,
    },
    /// Change a memory's text.
    Update {
        #[arg(long)]
        id: Option<i64>,
        #[arg(long)]
        content: Option<String>,
    },
    /// Take a memory out of the prompt, saying why.
    Archive {
        #[arg(long)]
        id: Option<i64>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Fold several memories into one; the others become superseded.
    Merge {
        /// The memories to merge: 3,7,9
        #[arg(long, value_delimiter = ',')]
        ids: Vec<i64>,
        #[arg(long)]
        content: Option<String>,
        /// Category of the result [default: the sources' category]
        #[arg(long)]
        category: Option<String>,
    },
    /// The project's memories.
    List {
        #[arg(long)]
        category: Option<String>,
        /// live (default), all, active, permanent, archived or superseded
        #[arg(long)]
        status: Option<String>,
        /// Only memories containing these words
        #[arg(long)]
        text: Option<String>,
        #[arg(long)]
        limit: Option<u64>,
    },
    /// One memory, with its history fields.
    Show {
        #[arg(long)]
        id: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
enum NoteCommand {
    Write {
        #[arg(long)]
        content: Option<String>,
    },
    List {
        /// Include dismissed notes
        #[arg(long)]
        all: bool,
    },
    Dismiss {
        #[arg(long)]
        id: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
enum ProfileCommand {
    /// Add a line (a duplicate answers "existing").
    Add {
        #[arg(long)]
        content: Option<String>,
    },
    /// The active lines (--all: archived too).
    List {
        #[arg(long)]
        all: bool,
    },
    /// Archive a line.
    Archive {
        #[arg(long)]
        id: Option<i64>,
    },
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    let result = run(&args);
    mc_cli::finish(NAME, result)
}

/// Fields from the flags; when none was given, from JSON on stdin.
fn fields(flags: Map<String, Value>, at: &Where) -> Result<Map<String, Value>, Failure> {
    let mut map = Map::new();
    let given = flags.keys().any(|k| k != "action")
        || at.harness.is_some()
        || at.session.is_some()
        || at.project_dir.is_some();
    if !given && !std::io::stdin().is_terminal() {
        let text = mc_cli::read_stdin("")?;
        if !text.trim().is_empty() {
            match mc_cli::parse_json(&text, "the input on stdin")? {
                Value::Object(m) => map = m,
                _ => {
                    return Err(Failure::input(anyhow!(
                        "the input on stdin must be a JSON object"
                    )));
                }
            }
        }
    }
    map.extend(flags);
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            map.insert(key.to_string(), v);
        }
    };
    put("harness", at.harness.clone().map(Value::String));
    put("session_id", at.session.clone().map(Value::String));
    put(
        "project_dir",
        at.project_dir
            .as_ref()
            .map(|p| Value::String(p.display().to_string())),
    );
    Ok(map)
}

fn flag_map(pairs: &[(&str, Option<Value>)]) -> Map<String, Value> {
    pairs
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
        .collect()
}

/// A time flag: epoch milliseconds as a number, anything else as text.
fn time_value(text: &str) -> Value {
    text.trim()
        .parse::<i64>()
        .map_or_else(|_| Value::String(text.to_string()), Value::from)
}

fn s(v: &Option<String>) -> Option<Value> {
    v.clone().map(Value::String)
}

fn n<T: Into<Value> + Copy>(v: &Option<T>) -> Option<Value> {
    v.map(Into::into)
}

/// The tool and its arguments a command stands for.
fn as_tool(command: &Command, at: &Where) -> Option<(&'static str, Map<String, Value>)> {
    Some(match command {
        Command::Memory(m) => {
            let (action, mut flags) = match m {
                MemoryCommand::Write { category, content } => (
                    "write",
                    flag_map(&[("category", s(category)), ("content", s(content))]),
                ),
                MemoryCommand::Update { id, content } => (
                    "update",
                    flag_map(&[("id", n(id)), ("content", s(content))]),
                ),
                MemoryCommand::Archive { id, reason } => {
                    ("archive", flag_map(&[("id", n(id)), ("reason", s(reason))]))
                }
                MemoryCommand::Merge {
                    ids,
                    content,
                    category,
                } => (
                    "merge",
                    flag_map(&[
                        ("ids", (!ids.is_empty()).then(|| json!(ids))),
                        ("content", s(content)),
                        ("category", s(category)),
                    ]),
                ),
                MemoryCommand::List {
                    category,
                    status,
                    text,
                    limit,
                } => (
                    "list",
                    flag_map(&[
                        ("category", s(category)),
                        ("status", s(status)),
                        ("text", s(text)),
                        ("limit", n(limit)),
                    ]),
                ),
                MemoryCommand::Show { id } => ("show", flag_map(&[("id", n(id))])),
            };
            flags.insert("action".into(), json!(action));
            ("ctx_memory", flags)
        }
        Command::Note(note) => {
            let (action, mut flags) = match note {
                NoteCommand::Write { content } => ("write", flag_map(&[("content", s(content))])),
                NoteCommand::List { all } => {
                    ("list", flag_map(&[("all", all.then_some(json!(true)))]))
                }
                NoteCommand::Dismiss { id } => ("dismiss", flag_map(&[("id", n(id))])),
            };
            flags.insert("action".into(), json!(action));
            ("ctx_note", flags)
        }
        Command::Expand { target, budget } => (
            "ctx_expand",
            flag_map(&[("target", s(target)), ("budget", n(budget))]),
        ),
        Command::Query {
            text,
            sources,
            limit,
            since,
            until,
            only_harness,
        } => (
            "ctx_search",
            flag_map(&[
                ("query", s(text)),
                ("sources", (!sources.is_empty()).then(|| json!(sources))),
                ("limit", n(limit)),
                ("since", since.as_deref().map(time_value)),
                ("until", until.as_deref().map(time_value)),
                (
                    "harness",
                    only_harness.then(|| json!(at.harness.as_deref().unwrap_or("opencode"))),
                ),
                ("session", at.session.clone().map(Value::String)),
            ]),
        ),
        Command::Reduce { drop } => ("ctx_reduce", flag_map(&[("drop", s(drop))])),
        Command::Profile(_)
        | Command::Index { .. }
        | Command::Call
        | Command::Tools
        | Command::Mcp
        | Command::SessionStart => return None,
    })
}

/// The keys a command's own fields may use (besides harness, session, project).
const SCOPE_KEYS: [&str; 3] = ["harness", "session_id", "project_dir"];

fn run(args: &Args) -> Result<(), Failure> {
    match &args.command {
        Command::Mcp => return serve_mcp(args),
        Command::SessionStart => return session_start(args),
        Command::Profile(p) => return profile(args, p),
        Command::Index {
            check,
            rebuild,
            commits,
            embeddings,
        } => {
            if *commits {
                return index_commits(args);
            }
            if *embeddings {
                return index_embeddings(args);
            }
            return index(args, *check, *rebuild);
        }
        Command::Tools => {
            let list: Vec<Value> = tools::specs()
                .into_iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
                .collect();
            return Ok(write_json(&json!({"tools": list}), args.global.pretty)?);
        }
        _ => {}
    }
    let (tool, arguments, fields) = match as_tool(&args.command, &args.at) {
        Some((tool, flags)) => {
            let mut fields = fields(flags, &args.at)?;
            let action = fields.get("action").cloned();
            let mut arguments: Map<String, Value> = fields
                .iter()
                .filter(|(k, _)| !SCOPE_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            // The subcommand names the action; stdin may not change it.
            if let Some(a) = action {
                arguments.insert("action".into(), a);
            }
            fields.retain(|k, _| SCOPE_KEYS.contains(&k.as_str()));
            (tool.to_string(), Value::Object(arguments), fields)
        }
        None => {
            // `call`: the whole request on stdin.
            let text = mc_cli::read_stdin(
                "expected {\"tool\", \"arguments\", \"harness\", \"session_id\", \"project_dir\"} on stdin",
            )?;
            let Value::Object(mut request) = mc_cli::parse_json(&text, "the call on stdin")? else {
                return Err(Failure::input(anyhow!(
                    "the call on stdin must be a JSON object"
                )));
            };
            let tool = match request.remove("tool") {
                Some(Value::String(t)) => t,
                _ => {
                    return Err(Failure::input(anyhow!(
                        "the call needs \"tool\" (e.g. \"ctx_memory\")"
                    )));
                }
            };
            let arguments = request.remove("arguments").unwrap_or(Value::Null);
            let mut fields = fields(Map::new(), &args.at).unwrap_or_default();
            for key in SCOPE_KEYS {
                if let Some(v) = request.remove(key) {
                    fields.entry(key.to_string()).or_insert(v);
                }
            }
            return call_tool(args, &tool, &arguments, &fields, true);
        }
    };
    call_tool(args, &tool, &arguments, &fields, false)
}

fn field<'a>(fields: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    fields
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The project folder: the field, else the working directory.
fn project_dir(fields: &Map<String, Value>) -> Result<PathBuf, Failure> {
    field(fields, "project_dir")
        .map(PathBuf::from)
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| Failure::input(anyhow!("no project folder: pass --project-dir")))
}

fn scope_of(fields: &Map<String, Value>, dir: &Path) -> Scope {
    Scope {
        project: project_identity(dir),
        harness: field(fields, "harness").unwrap_or("opencode").to_string(),
        session_id: field(fields, "session_id").map(str::to_string),
    }
}

/// Run one tool. From a subcommand, the structured result is printed and a
/// failed call is an error (exit 2); from `call`, the whole answer is printed.
fn call_tool(
    args: &Args,
    tool: &str,
    arguments: &Value,
    fields: &Map<String, Value>,
    whole_answer: bool,
) -> Result<(), Failure> {
    let dir = project_dir(fields)?;
    let scope = scope_of(fields, &dir);
    let session = scope
        .session_id
        .as_deref()
        .map(|id| (scope.harness.as_str(), id));
    let setup = mc_cli::session_setup(NAME, &args.global, session, Some(&dir), Wait::Background);
    let mut store = setup.store?;
    let embeddings = embeddings_of(&setup.config);
    let ctx = tools::Context {
        scope: &scope,
        source: if whole_answer { "agent" } else { "user" },
        transform: &setup.config.transform,
        now_ms: now_ms(),
        embeddings: embeddings.as_ref(),
    };
    if whole_answer {
        let answer = tools::call(&mut store, &ctx, tool, arguments)?;
        return Ok(write_json(
            &json!({"text": answer.text, "is_error": answer.is_error, "data": answer.data}),
            args.global.pretty,
        )?);
    }
    // A subcommand's failure keeps its kind and hints (exit 2, hint lines).
    let answer = tools::run(&mut store, &ctx, tool, arguments)?;
    Ok(write_json(&answer.data, args.global.pretty)?)
}

fn profile(args: &Args, command: &ProfileCommand) -> Result<(), Failure> {
    let flags = match command {
        ProfileCommand::Add { content } => flag_map(&[("content", s(content))]),
        ProfileCommand::List { all } => flag_map(&[("all", all.then_some(json!(true)))]),
        ProfileCommand::Archive { id } => flag_map(&[("id", n(id))]),
    };
    let fields = fields(flags, &args.at)?;
    let config = args.global.load_config(NAME, None);
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let value = match command {
        ProfileCommand::Add { .. } => {
            let content = field(&fields, "content")
                .ok_or_else(|| Failure::input(anyhow!("profile add needs --content")))?;
            json!(memory::profile_add(&mut store, content, now_ms())?)
        }
        ProfileCommand::List { .. } => {
            let all = fields.get("all").and_then(Value::as_bool).unwrap_or(false);
            json!({"profile": memory::profile_list(store.conn(), all)?})
        }
        ProfileCommand::Archive { .. } => {
            let id = fields
                .get("id")
                .and_then(Value::as_i64)
                .ok_or_else(|| Failure::input(anyhow!("profile archive needs --id")))?;
            json!(memory::profile_archive(&mut store, id)?)
        }
    };
    Ok(write_json(&value, args.global.pretty)?)
}

fn serve_mcp(args: &Args) -> Result<(), Failure> {
    let dir = args
        .at
        .project_dir
        .clone()
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| Failure::input(anyhow!("no project folder: pass --project-dir")))?;
    let harness = args.at.harness.clone().unwrap_or_else(|| "opencode".into());
    // The harness's own word on the session, when it gives one.
    let named = tools::session_variable(&harness)
        .and_then(|name| std::env::var(name).ok())
        .filter(|id| !id.trim().is_empty());
    let session = match (&args.at.session, named) {
        (Some(id), _) => SessionSource::Fixed(Some(id.clone())),
        (None, Some(session_id)) => SessionSource::Harness { session_id },
        (None, None) => SessionSource::Current {
            project_dir: canonical(&dir),
        },
    };
    let config = args.global.load_config(NAME, Some(&dir));
    let store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let clock = now_ms;
    let mut server = ToolServer {
        store,
        project: project_identity(&dir),
        harness,
        session,
        transform: config.transform.clone(),
        clock: &clock,
        embeddings: embeddings_of(&config),
    };
    let info = ServerInfo {
        name: "mc",
        version: env!("CARGO_PKG_VERSION"),
        instructions: Some(
            "mc keeps this project's memory and your session's history. Search it with \
             ctx_search before asking what may already be known; save durable facts with \
             ctx_memory; get back dropped or summarized content with ctx_expand."
                .into(),
        ),
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    mcp::serve(stdin.lock(), stdout.lock(), &mut server, &info)
        .map_err(|e| Failure::runtime(anyhow!(e).context("the MCP connection failed")))
}

/// The folder as the hooks and the server both name it.
fn canonical(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

fn session_start(args: &Args) -> Result<(), Failure> {
    let text = mc_cli::read_stdin("expected a SessionStart hook input as JSON on stdin")?;
    if mc_cli::inside_historian_child() {
        // The historian's own `claude -p` / `codex exec`: not the folder's session.
        return Ok(write_json(&json!({}), false)?);
    }
    let input = mc_cli::parse_json(&text, "the hook input")?;
    let session_id = args
        .at
        .session
        .clone()
        .or_else(|| {
            input
                .get("session_id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .ok_or_else(|| Failure::input(anyhow!("the hook input has no \"session_id\"")))?;
    let dir = args
        .at
        .project_dir
        .clone()
        .or_else(|| input.get("cwd").and_then(Value::as_str).map(PathBuf::from))
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| {
            Failure::input(anyhow!("no project folder: the hook input has no \"cwd\""))
        })?;
    let harness = args
        .at
        .harness
        .clone()
        .unwrap_or_else(|| "claude-code".into());
    let scope = Scope {
        project: project_identity(&dir),
        harness,
        session_id: Some(session_id),
    };
    let config = args.global.load_config(NAME, Some(&dir));
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let transcript = input.get("transcript_path").and_then(Value::as_str);
    search::record_session_start(&mut store, &scope, &canonical(&dir), transcript, now_ms())?;
    Ok(write_json(&json!({}), false)?)
}

fn index(args: &Args, check: bool, rebuild: bool) -> Result<(), Failure> {
    let config = args.global.load_config(NAME, None);
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    if check {
        let state = search::index::check(store.conn())?;
        write_json(&json!(state), args.global.pretty)?;
        return match &state.problem {
            None => Ok(()),
            Some(problem) => Err(
                Failure::runtime(anyhow!("a search index is damaged: {problem}")).with_hints([
                    format!(
                        "run `{}` (it builds every index again from the rows it indexes)",
                        search::fts::REBUILD_COMMAND
                    ),
                ]),
            ),
        };
    }
    let session = match &args.at.session {
        None => None,
        Some(id) => {
            let harness = args.at.harness.as_deref().unwrap_or("opencode");
            let row = mc_base::domain::sessions::find_session(store.conn(), harness, id)?
                .ok_or_else(|| {
                    Failure::input(anyhow!("mc has not seen {harness} session {id:?}"))
                })?;
            Some(row.id)
        }
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} parts indexed ({per_sec})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut progress = |done, total| {
        if let Some(bar) = &bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    };
    let out = if rebuild {
        // Every index, whatever --session says: a rebuild is of the whole database.
        let report = search::fts::rebuild(&mut store, &mut progress)?;
        let requeued = report
            .rebuilt
            .iter()
            .find(|r| r.name == "messages_fts")
            .map_or(0, |r| r.rows);
        let mut out = json!(report.messages);
        if let Some(map) = out.as_object_mut() {
            map.insert("requeued".into(), json!(requeued));
            map.insert("rebuilt".into(), json!(report.rebuilt));
        }
        out
    } else {
        json!(search::index::catch_up_session(
            &mut store,
            session,
            None,
            &mut progress
        )?)
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(write_json(&out, args.global.pretty)?)
}

fn index_commits(args: &Args) -> Result<(), Failure> {
    let dir = args
        .at
        .project_dir
        .clone()
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| Failure::input(anyhow!("no project folder: pass --project-dir")))?;
    let root = mc_search_core::gitlog::toplevel(&dir).ok_or_else(|| {
        Failure::input(anyhow!(
            "{} is not in a git repository: there are no commits to index",
            dir.display()
        ))
    })?;
    let config = args.global.load_config(NAME, Some(&dir));
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let project = project_identity(&root);
    let indexed = mc_search_core::gitlog::index_commits(&mut store, &project, &root, now_ms())?;
    let out = match indexed {
        Some(i) => json!({"project": project, "commits": i}),
        None => {
            json!({"project": project, "commits": null, "note": "the repository has no commit yet"})
        }
    };
    Ok(write_json(&out, args.global.pretty)?)
}

/// The configured embeddings provider (its key read from the environment),
/// or why it cannot be used; None when none is configured.
fn embeddings_of(
    config: &mc_base::config::Config,
) -> Option<Result<search::embed::Provider, String>> {
    search::embed::Provider::from_config(config, &|var| std::env::var(var).ok())
        .map_err(|e| e.to_string())
        .transpose()
}

fn index_embeddings(args: &Args) -> Result<(), Failure> {
    let config = args.global.load_config(NAME, None);
    let provider = search::embed::Provider::from_config(&config, &|var| std::env::var(var).ok())?
        .ok_or_else(|| {
        Failure::input(anyhow!(
            "no embeddings model configured: set embeddings.model to \"provider/model\" \
                 (a provider of kind openai) in the user config"
        ))
    })?;
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} texts embedded ({per_sec}, {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let report = search::embed::backfill(
        &mut store,
        &provider,
        &mut |done, total| {
            if let Some(bar) = &bar {
                bar.set_length(total);
                bar.set_position(done);
            }
        },
        &std::thread::sleep,
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(write_json(&json!(report?), args.global.pretty)?)
}
