//! The agent tools — `ctx_search`, `ctx_memory`, `ctx_note`, `ctx_expand`,
//! `ctx_reduce` — as the model sees them: a description and an input schema
//! each, and one `call` that answers with text. The MCP server and the
//! harness plugins serve exactly these, so every harness gets the same tools.

use serde_json::{Map, Value, json};

use mc_base::config::TransformConfig;
use mc_base::domain::arguments::{Action, Arguments, Caller, Field, Kind};
use mc_base::error::{Error, ErrorKind, Result};
use mc_base::store::Store;
use mc_history::store::CATEGORIES;
use mc_transform_core::reduce::{self, ReduceRequest};

use crate::mcp::{self, Answer, ToolSpec};
use mc_base::domain::sessions;

use super::{Scope, expand, index, memory, notes, query};

/// How many waiting parts one search indexes before it answers.
const CATCH_UP_PER_QUERY: u64 = 2_000;

/// A time as epoch milliseconds, or a `YYYY-MM-DD` day (UTC midnight).
fn time_arg(args: &Value, key: &str) -> Result<Option<i64>> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| {
            Error::input(format!(
                "\"{key}\" must be epoch milliseconds or YYYY-MM-DD"
            ))
        }),
        Some(Value::String(s)) => day_ms(s.trim()).map(Some).ok_or_else(|| {
            Error::input(format!(
                "\"{key}\" must be epoch milliseconds or YYYY-MM-DD, not {s:?}"
            ))
        }),
        Some(_) => Err(Error::input(format!(
            "\"{key}\" must be epoch milliseconds or YYYY-MM-DD"
        ))),
    }
}

/// Midnight UTC of a `YYYY-MM-DD` day, in epoch milliseconds.
fn day_ms(text: &str) -> Option<i64> {
    let mut parts = text.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || !(1970..=9999).contains(&y) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146_097 + doe - 719_468) * 86_400_000)
}

pub const TOOL_NAMES: [&str; 5] = [
    "ctx_search",
    "ctx_memory",
    "ctx_note",
    "ctx_expand",
    "ctx_reduce",
];

/// A category as the memory store spells it (any case, `-` for `_`).
fn category_spelling(text: &str) -> String {
    text.trim().to_ascii_uppercase().replace('-', "_")
}

const SEARCH: Arguments = Arguments {
    tool: "ctx_search",
    fields: &[
        Field::new("query", Kind::String).required(),
        Field::new("sources", Kind::Strings).one_of(&query::SOURCES),
        Field::new("limit", Kind::Integer).range(Some(1), Some(100)),
        Field::new("session", Kind::String).describe("\"current\" or an id"),
        Field::new("since", Kind::Day).describe("YYYY-MM-DD"),
        Field::new("until", Kind::Day).describe("YYYY-MM-DD"),
        Field::new("harness", Kind::String).command_line_only(),
    ],
    actions: &[],
    default_action: None,
};

const MEMORY: Arguments = Arguments {
    tool: "ctx_memory",
    fields: &[
        Field::new("action", Kind::String).required(),
        Field::new("content", Kind::String),
        Field::new("category", Kind::String)
            .one_of(&CATEGORIES)
            .canonical(category_spelling),
        Field::new("id", Kind::Integer),
        Field::new("ids", Kind::Integers),
        Field::new("reason", Kind::String),
        Field::new("text", Kind::String),
        Field::new("limit", Kind::Integer).range(Some(1), None),
        Field::new("status", Kind::String).command_line_only(),
    ],
    actions: &[
        Action {
            name: "write",
            needs: &["content", "category"],
            takes: &[],
        },
        Action {
            name: "update",
            needs: &["id", "content"],
            takes: &[],
        },
        Action {
            name: "archive",
            needs: &["id"],
            takes: &["reason"],
        },
        Action {
            name: "merge",
            needs: &["ids", "content"],
            takes: &["category"],
        },
        Action {
            name: "list",
            needs: &[],
            takes: &["category", "text", "limit", "status"],
        },
        Action {
            name: "show",
            needs: &["id"],
            takes: &[],
        },
    ],
    default_action: None,
};

/// ctx_note without an action: write when content is given, else list.
fn note_default(args: &Map<String, Value>) -> &'static str {
    if args.get("content").is_some_and(|c| !c.is_null()) {
        "write"
    } else {
        "list"
    }
}

const NOTE: Arguments = Arguments {
    tool: "ctx_note",
    fields: &[
        Field::new("action", Kind::String),
        Field::new("content", Kind::String),
        Field::new("id", Kind::Integer),
        Field::new("all", Kind::Boolean),
    ],
    actions: &[
        Action {
            name: "write",
            needs: &["content"],
            takes: &[],
        },
        Action {
            name: "list",
            needs: &[],
            takes: &["all"],
        },
        Action {
            name: "dismiss",
            needs: &["id"],
            takes: &[],
        },
    ],
    default_action: Some(note_default),
};

const EXPAND: Arguments = Arguments {
    tool: "ctx_expand",
    fields: &[
        Field::new("target", Kind::Reference).required(),
        Field::new("budget", Kind::Integer).range(Some(100), Some(expand::MAX_BUDGET as i64)),
    ],
    actions: &[],
    default_action: None,
};

const REDUCE: Arguments = Arguments {
    tool: "ctx_reduce",
    fields: &[reduce::DROP],
    actions: &[],
    default_action: None,
};

/// The five tools: what the model reads about each, and its arguments (from
/// which both the published schema and the check of a call come). Every
/// request carries these words: each says what the tool does, when to use
/// it, the formats of its ids and its limits, and nothing the guidance or
/// the schema already says (`fixed_tokens_stay_within_their_bound`).
static TOOLS: [(&str, Arguments); 5] = [
    (
        "Search this project's memory, notes, history summaries, past messages and tool \
        outputs (not those in view) and commits; use it before asking what may be settled. \
        Words match any; \"a phrase\"; -word excludes.",
        SEARCH,
    ),
    (
        "Project memory: durable facts, one self-contained sentence each; a write shows \
        in context later, repeats are harmless. Actions: write (content, category), \
        update (id, content), archive (id, reason), merge (ids, content), list (category, \
        text), show (id).",
        MEMORY,
    ),
    (
        "Session notes (a plan, a caveat, a check), not shown to you: list them when \
        resuming and before finishing. Actions: write (content), list (all: with \
        dismissed), dismiss (id).",
        NOTE,
    ),
    (
        "Get back what left your context: target a tag §12§, a compartment c3 or messages \
        40-52; budget caps tokens (default 15000); a cut answer says where to go on.",
        EXPAND,
    ),
    (
        "Drop messages and tool outputs you no longer need, by §N§ tag. Applied at the \
        next rebuild, never a cache miss; the newest tags are protected; ctx_expand \
        brings them back.",
        REDUCE,
    ),
];

/// What an MCP client is told at `initialize` (Claude Code puts it in its
/// system prompt): one line; the descriptions say the rest.
pub const MCP_INSTRUCTIONS: &str = "mc holds this project's memory and your session's \
    history: search it with ctx_search before asking what may be known.";

/// The declared arguments of tool `name`.
pub fn arguments(name: &str) -> Option<&'static Arguments> {
    TOOLS.iter().map(|(_, a)| a).find(|a| a.tool == name)
}

pub fn specs() -> Vec<ToolSpec> {
    TOOLS
        .iter()
        .map(|(description, arguments)| ToolSpec {
            name: arguments.tool,
            description,
            input_schema: arguments.schema(),
        })
        .collect()
}

/// What a call needs besides its arguments.
pub struct Context<'a> {
    pub scope: &'a Scope,
    /// Who writes memories through this call: `agent` (a tool) or `user` (the CLI).
    pub source: &'static str,
    pub transform: &'a TransformConfig,
    pub now_ms: i64,
    /// The embeddings provider of hybrid search, when one is configured (an
    /// `Err` says why the configured one cannot be used; searches then say so).
    pub embeddings: Option<&'a std::result::Result<super::embed::Provider, String>>,
}

/// Run tool `name`. A failure caused by the arguments or the ids they name is
/// an `Answer` with `is_error` (the model can correct itself); an unknown tool
/// or a failure of mc itself is an `Err`.
pub fn call(store: &mut Store, ctx: &Context<'_>, name: &str, args: &Value) -> Result<Answer> {
    if !TOOL_NAMES.contains(&name) {
        return Err(Error::input(format!(
            "unknown tool {name:?} (one of {})",
            TOOL_NAMES.join(", ")
        )));
    }
    match run(store, ctx, name, args) {
        Ok(answer) => Ok(answer),
        Err(e) if e.kind() == ErrorKind::Input => {
            let mut text = e.to_string();
            for hint in e.hints() {
                text.push_str(&format!(" ({hint})"));
            }
            Ok(failed(&text))
        }
        Err(e) => Err(e),
    }
}

/// Run tool `name`; every failure is an `Err` (the command line reports it
/// with its kind and hints).
pub fn run(store: &mut Store, ctx: &Context<'_>, name: &str, args: &Value) -> Result<Answer> {
    let Some(declared) = arguments(name) else {
        return Err(Error::input(format!(
            "unknown tool {name:?} (one of {})",
            TOOL_NAMES.join(", ")
        )));
    };
    // The command line may send a field of its own (`status`); the agent only
    // what the tool publishes.
    let caller = if ctx.source == "agent" {
        Caller::Agent
    } else {
        Caller::CommandLine
    };
    declared.check(args, caller)?;
    let empty = Value::Object(Default::default());
    let args = if args.is_null() { &empty } else { args };
    match name {
        "ctx_search" => search(store, ctx, args),
        "ctx_memory" => memory_tool(store, ctx, args),
        "ctx_note" => note_tool(store, ctx, args),
        "ctx_expand" => expand_tool(store, ctx, args),
        "ctx_reduce" => reduce_tool(store, ctx, args),
        other => Err(Error::input(format!(
            "unknown tool {other:?} (one of {})",
            TOOL_NAMES.join(", ")
        ))),
    }
}

fn failed(text: &str) -> Answer {
    Answer {
        text: format!("Error: {text}"),
        is_error: true,
        data: json!({"error": text}),
    }
}

fn ok(text: String, data: Value) -> Result<Answer> {
    Ok(Answer {
        text,
        is_error: false,
        data,
    })
}

/// The action the (checked) arguments name, or the tool's default.
fn action_of(declared: &Arguments, args: &Value) -> Result<&'static str> {
    args.as_object()
        .and_then(|map| declared.action(map))
        .map(|a| a.name)
        .ok_or_else(|| Error::input(format!("{} needs \"action\"", declared.tool)))
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::input(format!("\"{key}\" must be a string"))),
    }
}

fn need_str<'a>(args: &'a Value, key: &str, action: &str) -> Result<&'a str> {
    str_arg(args, key)?
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| Error::input(format!("{action} needs \"{key}\"")))
}

fn int_arg(args: &Value, key: &str) -> Result<Option<i64>> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| Error::input(format!("\"{key}\" must be an integer"))),
        // Models often quote numbers; "12" and "#12" mean 12.
        Some(Value::String(s)) => s
            .trim()
            .trim_start_matches('#')
            .parse()
            .map(Some)
            .map_err(|_| Error::input(format!("\"{key}\" must be an integer, not {s:?}"))),
        Some(_) => Err(Error::input(format!("\"{key}\" must be an integer"))),
    }
}

fn need_int(args: &Value, key: &str, action: &str) -> Result<i64> {
    int_arg(args, key)?.ok_or_else(|| Error::input(format!("{action} needs \"{key}\"")))
}

fn bool_arg(args: &Value, key: &str) -> Result<bool> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Error::input(format!("\"{key}\" must be true or false"))),
    }
}

fn limit_arg(args: &Value, default: usize) -> Result<usize> {
    Ok(match int_arg(args, "limit")? {
        Some(n) if n >= 1 => n as usize,
        Some(n) => {
            return Err(Error::input(format!(
                "\"limit\" must be at least 1, not {n}"
            )));
        }
        None => default,
    })
}

fn search(store: &mut Store, ctx: &Context<'_>, args: &Value) -> Result<Answer> {
    let text = need_str(args, "query", "ctx_search")?;
    let sources: Vec<String> = match args.get("sources") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::input("\"sources\" must be strings"))
            })
            .collect::<Result<_>>()?,
        Some(Value::String(s)) => s.split(',').map(|x| x.trim().to_string()).collect(),
        Some(_) => return Err(Error::input("\"sources\" must be a list of source names")),
    };
    let limit = limit_arg(args, 10)?;
    let since_ms = time_arg(args, "since")?;
    let until_ms = time_arg(args, "until")?;
    let harness = str_arg(args, "harness")?;
    let this_session = match str_arg(args, "session")? {
        None => None,
        Some("current" | "this") => Some(ctx.scope.session_id("a search of this session")?),
        Some(id) => Some(id),
    };
    // New raw content is indexed here, off the pass's path, in a bounded step.
    let caught = index::catch_up(store, Some(CATCH_UP_PER_QUERY), &mut |_, _| {})?;
    let (provider, mut warnings) = match ctx.embeddings {
        None => (None, Vec::new()),
        Some(Ok(p)) => (Some(p), Vec::new()),
        Some(Err(e)) => (
            None,
            vec![format!(
                "embeddings not used: {e}; ranked by full text only"
            )],
        ),
    };
    let searched = query::search_with(
        store.conn(),
        &query::Request {
            project: &ctx.scope.project,
            text,
            sources: &sources,
            limit,
            session: this_session.map(|id| (harness.unwrap_or(&ctx.scope.harness), id)),
            harness,
            since_ms,
            until_ms,
            // The agent is spared what it sees; a user on the command line sees all.
            asking: ctx
                .scope
                .session_id
                .as_deref()
                .filter(|_| ctx.source == "agent")
                .map(|id| (ctx.scope.harness.as_str(), id)),
        },
        provider,
    )?;
    let hits = searched.hits;
    warnings.extend(searched.warnings);
    if caught.pending > 0 {
        warnings.push(format!(
            "{} message parts are not indexed yet (run `mc-search index`); their hits are missing",
            caught.pending
        ));
    }
    let matched: Vec<i64> = hits
        .iter()
        .filter(|h| h.source == query::Source::Memory)
        .map(|h| h.id)
        .collect();
    if !matched.is_empty() {
        // Best effort: a busy database must not fail the search. What it
        // records (when a memory was last matched) only steers archive-stale.
        let _ = store.write(|tx| {
            mc_history::store::mark_memories_used(tx, &ctx.scope.project, &matched, ctx.now_ms)
        });
    }
    let data = json!({"query": text, "hits": hits, "warnings": warnings});
    if hits.is_empty() {
        return ok(
            format!(
                "No results for {text:?} in memories, notes, compartments, messages or commits."
            ),
            data,
        );
    }
    let mut lines = vec![format!("Found {} result(s) for {text:?}:", hits.len())];
    for (i, hit) in hits.iter().enumerate() {
        let mut head = format!(
            "[{}] [{}] {} score={:.3}",
            i + 1,
            hit.source,
            hit.reference,
            hit.score
        );
        if let Some(c) = &hit.category {
            head.push_str(&format!(" category={c}"));
        }
        if let Some(s) = &hit.session_id
            && ctx.scope.session_id.as_deref() != Some(s)
        {
            head.push_str(&format!(" session={s}"));
        }
        lines.push(head);
        lines.push(format!("    {}", hit.snippet));
    }
    if let Some(hit) = hits.iter().find(|h| h.source == query::Source::Message) {
        let target = match (hit.tag, hit.ordinal) {
            (Some(tag), _) => format!("\"§{tag}§\""),
            (None, Some(o)) => format!("\"{}-{}\"", (o - 2).max(1), o + 2),
            _ => "a message range".into(),
        };
        lines.push(format!(
            "Open a message hit of this session with ctx_expand (e.g. target {target})."
        ));
    }
    lines.extend(warnings.iter().map(|w| format!("Note: {w}")));
    ok(lines.join("\n"), data)
}

fn memory_tool(store: &mut Store, ctx: &Context<'_>, args: &Value) -> Result<Answer> {
    let action = action_of(&MEMORY, args)?;
    let project = ctx.scope.project.as_str();
    match action {
        "write" => {
            let content = need_str(args, "content", "write")?;
            let category = need_str(args, "category", "write")?;
            let w = memory::write(store, project, category, content, ctx.source, ctx.now_ms)?;
            let text = if w.result == memory::Written::Created {
                format!(
                    "Saved memory #{} in {}. It joins your context at the next rebuild.",
                    w.id, w.category
                )
            } else {
                format!(
                    "Memory #{} in {} already says this; nothing written.",
                    w.id, w.category
                )
            };
            ok(text, serde_json::to_value(&w).unwrap_or_default())
        }
        "update" => {
            let id = need_int(args, "id", "update")?;
            let content = need_str(args, "content", "update")?;
            let m = memory::update(store, project, id, content, ctx.now_ms)?;
            ok(format!("Updated memory #{}.", m.id), record(&m))
        }
        "archive" => {
            let id = need_int(args, "id", "archive")?;
            let m = memory::archive(store, project, id, str_arg(args, "reason")?, ctx.now_ms)?;
            ok(format!("Archived memory #{}.", m.id), record(&m))
        }
        "merge" => {
            let ids: Vec<i64> = match args.get("ids") {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        int_arg(&json!({"id": v}), "id")
                            .and_then(|x| x.ok_or_else(|| Error::input("\"ids\" must be integers")))
                    })
                    .collect::<Result<_>>()?,
                _ => return Err(Error::input("merge needs \"ids\", a list of memory ids")),
            };
            let content = need_str(args, "content", "merge")?;
            let m = memory::merge(
                store,
                project,
                &ids,
                content,
                str_arg(args, "category")?,
                ctx.now_ms,
            )?;
            ok(
                format!(
                    "Merged {} into memory #{} ({}).",
                    join_ids(&m.merged_from),
                    m.id,
                    m.category
                ),
                record(&m),
            )
        }
        "list" => {
            let filter = memory::Filter {
                category: str_arg(args, "category")?.map(str::to_string),
                status: str_arg(args, "status")?.map(str::to_string),
                text: str_arg(args, "text")?.map(str::to_string),
                limit: Some(limit_arg(args, 50)?),
            };
            let list = memory::list(store.conn(), project, &filter)?;
            let data = json!({"memories": list});
            if list.is_empty() {
                return ok("No memories match.".into(), data);
            }
            let lines: Vec<String> = list
                .iter()
                .map(|m| {
                    format!(
                        "#{} [{}] {}{}",
                        m.id,
                        m.category,
                        super::preview(&m.content, 300),
                        if m.status == "active" {
                            String::new()
                        } else {
                            format!(" ({})", m.status)
                        }
                    )
                })
                .collect();
            ok(lines.join("\n"), data)
        }
        "show" => {
            let id = need_int(args, "id", "show")?;
            let m = memory::show(store.conn(), project, id)?;
            let mut text = format!("#{} [{}] ({}): {}", m.id, m.category, m.status, m.content);
            if let Some(by) = m.superseded_by {
                text.push_str(&format!("\nMerged into #{by}."));
            }
            if let Some(reason) = &m.archive_reason {
                text.push_str(&format!("\nArchived: {reason}"));
            }
            ok(text, record(&m))
        }
        other => Err(Error::input(format!(
            "unknown ctx_memory action {other:?} (write, update, archive, merge, list, show)"
        ))),
    }
}

fn record(m: &memory::MemoryRecord) -> Value {
    serde_json::to_value(m).unwrap_or_default()
}

fn join_ids(ids: &[i64]) -> String {
    ids.iter()
        .map(|i| format!("#{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn note_tool(store: &mut Store, ctx: &Context<'_>, args: &Value) -> Result<Answer> {
    let action = action_of(&NOTE, args)?;
    match action {
        "write" => {
            let content = need_str(args, "content", "write")?;
            let note = notes::write(store, ctx.scope, content, ctx.now_ms)?;
            ok(
                format!("Noted as #{}.", note.id),
                serde_json::to_value(&note).unwrap_or_default(),
            )
        }
        "list" => {
            let list = notes::list(store.conn(), ctx.scope, bool_arg(args, "all")?)?;
            let data = json!({"notes": list});
            if list.is_empty() {
                return ok("No open notes in this session.".into(), data);
            }
            let mut lines: Vec<String> = list
                .iter()
                .map(|n| {
                    let status = if n.status == "open" {
                        String::new()
                    } else {
                        format!(" ({})", n.status)
                    };
                    format!("#{}{status}: {}", n.id, n.content)
                })
                .collect();
            lines.push("Dismiss a note that is done with action dismiss and its id.".into());
            ok(lines.join("\n"), data)
        }
        "dismiss" => {
            let id = need_int(args, "id", "dismiss")?;
            let note = notes::dismiss(store, ctx.scope, id, ctx.now_ms)?;
            ok(
                format!("Dismissed note #{}.", note.id),
                serde_json::to_value(&note).unwrap_or_default(),
            )
        }
        other => Err(Error::input(format!(
            "unknown ctx_note action {other:?} (write, list, dismiss)"
        ))),
    }
}

fn expand_tool(store: &mut Store, ctx: &Context<'_>, args: &Value) -> Result<Answer> {
    let target = match (
        str_arg(args, "target").ok().flatten(),
        int_arg(args, "target").ok().flatten(),
    ) {
        (Some(spec), _) => expand::parse_target(spec)?,
        (None, Some(n)) => expand::parse_target(&n.to_string())?,
        _ => {
            return Err(Error::input(
                "ctx_expand needs \"target\": \"§12§\", \"c3\" or \"40-52\"",
            ));
        }
    };
    // Checked against the declared range already.
    let budget = int_arg(args, "budget")?.map_or(expand::DEFAULT_BUDGET, |b| b.max(0) as u64);
    let expanded = expand::expand(store.conn(), ctx.scope, target, budget)?;
    let data = serde_json::to_value(&expanded).unwrap_or_default();
    ok(expanded.text, data)
}

fn reduce_tool(store: &mut Store, ctx: &Context<'_>, args: &Value) -> Result<Answer> {
    let session_id = ctx.scope.session_id("ctx_reduce")?;
    let drop = args
        .get("drop")
        .cloned()
        .ok_or_else(|| Error::input("ctx_reduce needs \"drop\", e.g. \"3-5,12\""))?;
    let request = ReduceRequest::from_value(json!({
        "harness": ctx.scope.harness, "session_id": session_id, "drop": drop
    }))?;
    let result = reduce::reduce(store, &request, ctx.transform, ctx.now_ms)?;
    let mut parts = Vec::new();
    if !result.queued.is_empty() {
        parts.push(format!(
            "Queued {} to drop at the next context rebuild.",
            tag_list(&result.queued)
        ));
    }
    if !result.protected.is_empty() {
        parts.push(format!(
            "{} are among the newest tags and drop once they leave the protected window.",
            tag_list(&result.protected)
        ));
    }
    if !result.already.is_empty() {
        parts.push(format!(
            "{} were dropped or queued already.",
            tag_list(&result.already)
        ));
    }
    if !result.unknown.is_empty() {
        parts.push(format!(
            "{} are not tags of this session.",
            tag_list(&result.unknown)
        ));
    }
    ok(
        parts.join(" "),
        serde_json::to_value(&result).unwrap_or_default(),
    )
}

fn tag_list(tags: &[i64]) -> String {
    tags.iter()
        .map(|t| format!("§{t}§"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where an MCP server finds the session a call is about.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionSource {
    /// Named when the server started (`--session`), or none at all.
    Fixed(Option<String>),
    /// Named by the harness in the server's environment when it started the
    /// server (Claude Code: [`session_variable`]). mc creates the session's
    /// row on the first call if it has not seen the session yet.
    Harness { session_id: String },
    /// The session the harness last started in this folder (recorded by its
    /// SessionStart hook through `mc-search session-start`), looked up per call.
    Current { project_dir: String },
}

/// The environment variable in which `harness` tells the MCP servers it
/// starts which session they serve, if it does. Claude Code sets
/// `CLAUDE_CODE_SESSION_ID` (with `CLAUDE_PROJECT_DIR`) in the environment of
/// every stdio MCP server; it is fixed when the server starts.
pub fn session_variable(harness: &str) -> Option<&'static str> {
    match harness {
        "claude-code" => Some("CLAUDE_CODE_SESSION_ID"),
        _ => None,
    }
}

/// The session a harness names in a `tools/call`'s `_meta`, if it does.
/// Codex (observed with 0.169.0) sends `_meta["x-codex-turn-metadata"]` with
/// the `session_id` (and `thread_id`) of every call, so one server serves
/// every session of its folder.
pub fn session_from_meta(harness: &str, meta: &Value) -> Option<String> {
    match harness {
        "codex" => {
            let turn = meta.get("x-codex-turn-metadata")?;
            turn.get("session_id")
                .or_else(|| turn.get("thread_id"))
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .map(str::to_string)
        }
        _ => None,
    }
}

/// The tools served over MCP for one project and harness.
pub struct ToolServer<'a> {
    pub store: Store,
    pub project: String,
    pub harness: String,
    pub session: SessionSource,
    pub transform: TransformConfig,
    pub clock: &'a dyn Fn() -> i64,
    /// See [`Context::embeddings`].
    pub embeddings: Option<std::result::Result<super::embed::Provider, String>>,
}

impl mcp::Tools for ToolServer<'_> {
    fn specs(&self) -> Vec<ToolSpec> {
        specs()
    }

    fn call(&mut self, name: &str, arguments: &Value) -> Result<Answer> {
        self.call_with_meta(name, arguments, &Value::Null)
    }

    fn call_with_meta(&mut self, name: &str, arguments: &Value, meta: &Value) -> Result<Answer> {
        let now_ms = (self.clock)();
        // The call's own word on its session (Codex) comes after --session.
        let from_meta = match &self.session {
            SessionSource::Fixed(Some(_)) => None,
            _ => session_from_meta(&self.harness, meta),
        };
        let named = from_meta.is_some() || matches!(self.session, SessionSource::Harness { .. });
        let session_id = match (&self.session, from_meta) {
            (_, Some(id)) => Some(id),
            (SessionSource::Fixed(id), None) => id.clone(),
            (SessionSource::Harness { session_id }, None) => Some(session_id.clone()),
            (SessionSource::Current { project_dir }, None) => {
                sessions::current_session(self.store.conn(), &self.harness, project_dir)?
                    .map(|c| c.session_id)
            }
        };
        let scope = Scope {
            project: self.project.clone(),
            harness: self.harness.clone(),
            session_id,
        };
        if named && TOOL_NAMES.contains(&name) {
            super::ensure_session(&mut self.store, &scope, now_ms)?;
        }
        let ctx = Context {
            scope: &scope,
            source: "agent",
            transform: &self.transform,
            now_ms,
            embeddings: self.embeddings.as_ref(),
        };
        call(&mut self.store, &ctx, name, arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Tools;

    fn server(session: SessionSource) -> ToolServer<'static> {
        ToolServer {
            store: Store::open_in_memory().unwrap(),
            project: "git:p".into(),
            harness: "claude-code".into(),
            session,
            transform: TransformConfig::default(),
            clock: &|| 1_000,
            embeddings: None,
        }
    }

    fn note(server: &mut ToolServer<'_>, content: &str) -> Answer {
        server
            .call("ctx_note", &json!({"action": "write", "content": content}))
            .unwrap()
    }

    /// The most o200k tokens mc's fixed additions to every request may take:
    /// the five tools, each as a harness sends it to an Anthropic-style API
    /// (`{"name", "description", "input_schema"}`), plus the larger of the
    /// system-prompt guidance (OpenCode, Pi) and the MCP instructions (Claude
    /// Code, Codex). At this bound OpenCode's first request carries at most
    /// 3,500 bytes more than without mc (issue 32; `bench-opencode` prints it).
    const FIXED_TOKENS: u32 = 725;

    #[test]
    fn fixed_tokens_stay_within_their_bound() {
        use mc_base::tokens::exact;
        let tools: u32 = specs()
            .iter()
            .map(|s| {
                let entry = json!({
                    "name": s.name,
                    "description": s.description,
                    "input_schema": s.input_schema,
                });
                exact(&entry.to_string())
            })
            .sum();
        let guidance = exact(&mc_transform_core::system::guidance(true));
        let instructions = exact(MCP_INSTRUCTIONS);
        let total = tools + guidance.max(instructions);
        assert!(
            total <= FIXED_TOKENS,
            "mc's fixed tokens grew to {total} (tools {tools}, guidance {guidance}, MCP \
             instructions {instructions}), over the bound of {FIXED_TOKENS}: say it shorter"
        );
    }

    #[test]
    fn each_description_names_its_actions_and_the_formats_of_its_ids() {
        for (description, declared) in &TOOLS {
            for action in declared.actions {
                assert!(
                    description.contains(&format!("{} (", action.name)),
                    "{}: {}",
                    declared.tool,
                    action.name
                );
            }
        }
        let of = |tool: &str| TOOLS.iter().find(|(_, a)| a.tool == tool).unwrap().0;
        for id in ["§12§", "c3", "40-52"] {
            assert!(of("ctx_expand").contains(id), "{id}");
        }
        assert!(of("ctx_reduce").contains("§N§"));
        assert!(of("ctx_search").contains("\"a phrase\"") && of("ctx_search").contains("-word"));
    }

    #[test]
    fn every_tool_is_declared_once_and_its_actions_name_declared_fields() {
        let names: Vec<&str> = TOOLS.iter().map(|(_, a)| a.tool).collect();
        assert_eq!(names, TOOL_NAMES);
        for (_, declared) in &TOOLS {
            for action in declared.actions {
                for name in action.needs.iter().chain(action.takes) {
                    assert!(
                        declared.fields.iter().any(|f| f.name == *name),
                        "{} {}: {name}",
                        declared.tool,
                        action.name
                    );
                }
            }
        }
    }

    #[test]
    fn the_command_line_s_own_field_reaches_the_tool_but_not_from_the_agent() {
        let mut store = Store::open_in_memory().unwrap();
        let scope = Scope {
            project: "git:p".into(),
            harness: "opencode".into(),
            session_id: None,
        };
        let transform = TransformConfig::default();
        let ctx = |source| Context {
            scope: &scope,
            source,
            transform: &transform,
            now_ms: 1,
            embeddings: None,
        };
        let args = json!({"action": "list", "status": "all"});
        assert!(run(&mut store, &ctx("user"), "ctx_memory", &args).is_ok());
        let refused = call(&mut store, &ctx("agent"), "ctx_memory", &args).unwrap();
        assert!(refused.is_error && refused.text.contains("no field \"status\""));
    }

    #[test]
    fn a_session_the_harness_names_is_served_and_created_on_first_use() {
        let mut s = server(SessionSource::Harness {
            session_id: "cc-1".into(),
        });
        let answer = note(&mut s, "check the lock");
        assert!(!answer.is_error, "{}", answer.text);
        let row = sessions::find_session(s.store.conn(), "claude-code", "cc-1")
            .unwrap()
            .expect("the session row was created");
        assert_eq!(row.project_identity.as_deref(), Some("git:p"));
        // A folder's recorded session does not override the harness's word.
        sessions::record_current(s.store.conn(), "claude-code", "/p", "other", None, 1).unwrap();
        note(&mut s, "second");
        let listed = s.call("ctx_note", &json!({"action": "list"})).unwrap();
        assert!(
            listed.text.contains("check the lock") && listed.text.contains("second"),
            "{}",
            listed.text
        );
    }

    #[test]
    fn without_the_harness_word_the_folder_s_recorded_session_is_served() {
        let mut s = server(SessionSource::Current {
            project_dir: "/p".into(),
        });
        let before = note(&mut s, "too early");
        assert!(before.is_error, "no session yet: {}", before.text);
        let scope = Scope {
            project: "git:p".into(),
            harness: "claude-code".into(),
            session_id: Some("cc-2".into()),
        };
        crate::record_session_start(&mut s.store, &scope, "/p", None, 1).unwrap();
        assert!(!note(&mut s, "now").is_error);
        assert_eq!(
            session_variable("claude-code"),
            Some("CLAUDE_CODE_SESSION_ID")
        );
        assert_eq!(session_variable("opencode"), None);
    }

    #[test]
    fn codex_names_the_session_of_each_call_in_its_meta() {
        use crate::mcp::Tools;
        let mut s = server(SessionSource::Current {
            project_dir: "/p".into(),
        });
        s.harness = "codex".into();
        let meta = |sid: &str| json!({"callId": "call_1", "x-codex-turn-metadata": {"session_id": sid, "thread_id": sid}});
        let write = json!({"action": "write", "content": "note of A"});
        let a = s
            .call_with_meta("ctx_note", &write, &meta("thread-a"))
            .unwrap();
        assert!(!a.is_error, "{}", a.text);
        let write = json!({"action": "write", "content": "note of B"});
        assert!(
            !s.call_with_meta("ctx_note", &write, &meta("thread-b"))
                .unwrap()
                .is_error
        );
        let list = json!({"action": "list"});
        let listed = s
            .call_with_meta("ctx_note", &list, &meta("thread-a"))
            .unwrap();
        assert!(
            listed.text.contains("note of A") && !listed.text.contains("note of B"),
            "{}",
            listed.text
        );
        for sid in ["thread-a", "thread-b"] {
            let row = sessions::find_session(s.store.conn(), "codex", sid).unwrap();
            assert_eq!(row.unwrap().project_identity.as_deref(), Some("git:p"));
        }
        assert_eq!(session_from_meta("claude-code", &meta("x")), None);
        assert_eq!(session_from_meta("codex", &json!({"callId": "c"})), None);
    }
}
