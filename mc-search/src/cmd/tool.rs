//! The tool commands (`memory`, `note`, `expand`, `query`, `reduce`) and
//! `call`: one `search::tools` call with its fields from flags or stdin.

use std::io::IsTerminal;

use anyhow::anyhow;
use serde_json::{Map, Value, json};

use mc_cli::{Failure, Wait, now_ms, write_json};
use mc_search_core::tools::{self};

use crate::args::{Args, Command, MemoryCommand, NAME, NoteCommand, Where};
use crate::common::{embeddings_of, project_dir, scope_of};

/// Fields from the flags; when none was given, from JSON on stdin.
pub(crate) fn fields(flags: Map<String, Value>, at: &Where) -> Result<Map<String, Value>, Failure> {
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

pub(crate) fn flag_map(pairs: &[(&str, Option<Value>)]) -> Map<String, Value> {
    pairs
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
        .collect()
}

/// A time flag: epoch milliseconds as a number, anything else as text.
pub(crate) fn time_value(text: &str) -> Value {
    text.trim()
        .parse::<i64>()
        .map_or_else(|_| Value::String(text.to_string()), Value::from)
}

pub(crate) fn s(v: &Option<String>) -> Option<Value> {
    v.clone().map(Value::String)
}

pub(crate) fn n<T: Into<Value> + Copy>(v: &Option<T>) -> Option<Value> {
    v.map(Into::into)
}

/// The tool and its arguments a command stands for.
pub(crate) fn as_tool(command: &Command, at: &Where) -> Option<(&'static str, Map<String, Value>)> {
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
pub(crate) const SCOPE_KEYS: [&str; 3] = ["harness", "session_id", "project_dir"];

/// A tool command (`memory`, `note`, `expand`, `query`, `reduce`) or
/// `call`: one agent tool run with its fields from flags or stdin.
pub(crate) fn run(args: &Args) -> Result<(), Failure> {
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

/// Run one tool. From a subcommand, the structured result is printed and a
/// failed call is an error (exit 2); from `call`, the whole answer is printed.
pub(crate) fn call_tool(
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
