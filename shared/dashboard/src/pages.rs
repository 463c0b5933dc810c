//! The pages, as HTML strings: each a function of the store, the config
//! and the request's few parameters. Text from sessions, memory and logs
//! is escaped, and every credential-shaped string in it is redacted
//! (`mc_doctor_core::redact::secrets`) before it is shown.

use std::fmt::Write as _;

use rusqlite::Connection;

use mc_base::error::Result;
use mc_doctor_core::redact;
use mc_search_core::memory::{self, Filter, MemoryRecord};
use mc_transform_core::causes::CacheState;
use mc_transform_core::status::CallView;

use crate::Dashboard;
use crate::chart;
use crate::data::{self, SESSION_ROWS, SessionLine, SessionPage};
use crate::html::{Frame, ago, dollars, esc, num, page, percent, short, time, url};
use crate::prices::Tokens;

/// A session whose newest call is this recent reloads by itself.
pub const LIVE_MS: i64 = 15 * 60 * 1000;
/// Seconds between reloads of a live session's page.
pub const LIVE_REFRESH_S: u32 = 5;
/// Memories a page lists at most.
pub const MEMORY_ROWS: usize = 200;

/// Shown text: escaped, credentials redacted.
fn shown(text: &str) -> String {
    esc(&redact::secrets(text))
}

fn frame<'a>(title: &'a str, nav: &'a str, footer: &'a str) -> Frame<'a> {
    Frame {
        title,
        nav,
        refresh: None,
        inline_style: false,
        footer,
    }
}

const FOOTER: &str = "mc dashboard — served on loopback; every number is from mc's own store.";

fn project_label(project: Option<&str>, dir: Option<&str>) -> String {
    match (dir, project) {
        (Some(d), _) => d.rsplit('/').next().unwrap_or(d).to_string(),
        (None, Some(p)) => p.chars().take(16).collect(),
        (None, None) => "—".into(),
    }
}

fn cost_cell(line: &SessionLine) -> String {
    if line.tokens.calls == 0 {
        "—".into()
    } else if line.cost.unpriced && line.cost.dollars == 0.0 {
        "no price".into()
    } else {
        dollars(line.cost.dollars)
    }
}

/// Page `page` (from 1) of the sessions list, filtered by the words of `q`.
pub fn sessions(
    dash: &Dashboard,
    conn: &Connection,
    q: &str,
    page_no: usize,
    export: bool,
) -> Result<String> {
    let all = data::sessions(conn, &dash.config, q)?;
    let page_no = page_no.clamp(1, MAX_PAGE);
    let from = (page_no - 1) * SESSION_ROWS;
    let rest = all.get(from..).unwrap_or_default();
    let lines = rest.get(..SESSION_ROWS).unwrap_or(rest);
    let now = dash.now_ms();
    let mut body = String::new();
    if !export {
        let _ = write!(
            body,
            "<form class=\"filter\" method=\"get\" action=\"/\"><input type=\"search\" name=\"q\" \
             value=\"{}\" placeholder=\"filter: harness, session, project, model\" \
             aria-label=\"filter sessions\"><button>Filter</button></form>",
            esc(q)
        );
    }
    let _ = write!(
        body,
        "<p class=\"note\">{} sessions{}{}. Context % is the newest call whose usage the provider \
         reported, against the usable window; cache hit % is reads over reads, writes and \
         uncached input of the calls whose usage the provider reported.</p>",
        all.len(),
        if all.len() > lines.len() && !lines.is_empty() {
            format!(", {}–{} shown", from + 1, from + lines.len())
        } else if all.len() > lines.len() {
            format!(", none on page {page_no}")
        } else {
            String::new()
        },
        if q.is_empty() {
            String::new()
        } else {
            format!(" matching “{}”", esc(q))
        }
    );
    body.push_str(
        "<div class=\"scroll\"><table class=\"sessions\"><thead><tr><th>Session</th><th>Harness</th>\
         <th>Project</th><th>Last activity</th><th class=\"n\">Context</th><th class=\"n\">Cache hit</th>\
         <th class=\"n\">Calls</th><th class=\"n\">Spend</th></tr></thead><tbody>",
    );
    for l in lines {
        let name = if export {
            shown(&l.session_id)
        } else {
            format!(
                "<a href=\"/session?id={}\">{}</a>",
                l.id,
                shown(&l.session_id)
            )
        };
        let _ = write!(
            body,
            "<tr><td>{name}{}</td><td>{}</td><td>{}</td><td title=\"{}\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            if l.subagent {
                " <span class=\"tag\">subagent</span>"
            } else {
                ""
            },
            esc(&l.harness),
            esc(&project_label(
                l.project.as_deref(),
                l.project_dir.as_deref()
            )),
            time(l.last_ms),
            ago(l.last_ms, now),
            percent(Some(l.usage_percent)),
            percent(l.tokens.hit_percent()),
            num(l.calls),
            cost_cell(l)
        );
    }
    body.push_str("</tbody></table></div>");
    if !export {
        let more = all.len() > from + lines.len();
        body.push_str(&pager(page_no, more, |n| {
            format!("/?q={}&page={n}", url(q))
        }));
    }
    Ok(body)
}

pub fn sessions_page(
    dash: &Dashboard,
    conn: &Connection,
    q: &str,
    page_no: usize,
) -> Result<String> {
    let body = sessions(dash, conn, q, page_no, false)?;
    Ok(page(&frame("Sessions", "/", FOOTER), &body))
}

fn stat(label: &str, value: &str) -> String {
    format!("<div class=\"stat\"><span>{label}</span><b>{value}</b></div>")
}

fn busts_table(calls: &[CallView]) -> String {
    let busts: Vec<&CallView> = calls.iter().filter(|c| c.cache.state.is_bust()).collect();
    if busts.is_empty() {
        return "<p class=\"empty\">No cache bust among these calls.</p>".into();
    }
    let mut out = String::from(
        "<div class=\"scroll\"><table class=\"busts\"><thead><tr><th>Call</th><th>Time</th>\
         <th>State</th><th>Cause</th><th>Whose</th><th class=\"n\">Expected read</th>\
         <th class=\"n\">Read</th><th>Evidence</th></tr></thead><tbody>",
    );
    for c in busts.iter().rev() {
        let cause = c.cache.cause;
        let _ = write!(
            out,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td><b>{}</b>{}</td><td>{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            if c.cache.state == CacheState::Full {
                "full"
            } else {
                "partial"
            },
            c.call.id,
            time(c.call.at_ms),
            c.cache.state.as_str(),
            cause.map_or("unknown", |c| c.as_str()),
            c.cache
                .trigger
                .as_deref()
                .map(|t| format!(" ({})", esc(t)))
                .unwrap_or_default(),
            cause.map_or("unknown", |c| c.whose()),
            c.cache.expected_read.map_or("—".into(), |n| num(n as i64)),
            c.cache.cache_read.map_or("—".into(), |n| num(n as i64)),
            shown(&c.cache.evidence)
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

fn calls_table(calls: &[CallView]) -> String {
    let mut out = String::from(
        "<details><summary>Every call shown above</summary><div class=\"scroll\"><table class=\"calls\">\
         <thead><tr><th>Call</th><th>Time</th><th>Decision</th><th>Bust</th><th>Head</th>\
         <th class=\"n\">Context</th><th class=\"n\">Drops</th><th class=\"n\">Input</th>\
         <th class=\"n\">Cache read</th><th class=\"n\">Cache write</th><th class=\"n\">Output</th>\
         <th>Cache</th></tr></thead><tbody>",
    );
    for c in calls.iter().rev() {
        let u = c.call.usage;
        let n = |f: fn(&mc_base::domain::envelope::Usage) -> u64| {
            u.map_or("—".to_string(), |u| num(f(&u) as i64))
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{} ({})</td><td>{}</td><td>{}{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{}</td></tr>",
            c.call.id,
            time(c.call.at_ms),
            esc(&c.call.decision),
            esc(&c.call.reason),
            esc(&c.call.bust),
            c.call.head.as_str(),
            c.call
                .head_reason
                .as_deref()
                .map(|r| format!(" ({})", esc(r)))
                .unwrap_or_default(),
            percent(Some(c.call.usage_percent)),
            c.call.drops,
            n(|u| u.input),
            n(|u| u.cache_read),
            n(|u| u.cache_write),
            n(|u| u.output),
            c.cache.state.as_str()
        );
    }
    out.push_str("</tbody></table></div></details>");
    out
}

/// The session's body (shared by its page and the export).
pub fn session_body(dash: &Dashboard, s: &SessionPage, export: bool) -> String {
    let now = dash.now_ms();
    let l = &s.line;
    let mut body = String::new();
    let last = s.calls.last();
    let _ = write!(
        body,
        "<div class=\"stats\">{}{}{}{}{}{}{}{}</div>",
        stat("Harness", &esc(&l.harness)),
        stat(
            "Project",
            &esc(&project_label(
                l.project.as_deref(),
                l.project_dir.as_deref()
            ))
        ),
        stat("Model", &esc(l.model.as_deref().unwrap_or("—"))),
        stat("Last activity", &ago(l.last_ms, now)),
        stat("Context", &percent(Some(l.usage_percent))),
        stat("Cache hit", &percent(l.tokens.hit_percent())),
        stat("Calls", &num(l.calls)),
        stat("Spend", &cost_cell(l)),
    );
    if let Some(last) = last {
        let c = &last.call;
        let parts = [
            ("system", "s-system", c.system_tokens.unwrap_or(0)),
            ("tools", "s-tools", c.tools_tokens.unwrap_or(0)),
            ("head", "s-head", c.sources.head),
            ("memory", "s-memory", c.sources.memory),
            ("pins", "s-pins", c.sources.pins),
            ("conversation", "s-conv", c.sources.conversation),
            ("tool output", "s-tool", c.sources.tool_output),
        ];
        let total: i64 = parts.iter().map(|p| p.2).sum();
        let _ = write!(
            body,
            "<h2>Context now</h2><p class=\"note\">The newest call: {} of the {} window by mc's count \
             ({} as the provider measured the call before it).{}</p>{}",
            num(total),
            short(c.context_window),
            percent(Some(c.usage_percent)),
            if c.system_tokens.is_none() {
                " The harness hands mc no system prompt or tool set on this path: they are not counted."
            } else {
                ""
            },
            chart::fill(&parts, c.context_window)
        );
        body.push_str("<ul class=\"legend\">");
        for (label, class, value) in parts {
            let _ = write!(
                body,
                "<li><i class=\"{class}\"></i>{label} {}</li>",
                short(value)
            );
        }
        body.push_str("</ul>");
    }
    let _ = write!(
        body,
        "<h2>Timeline</h2><p class=\"note\">The newest {} calls: tokens by source against the \
         model's window, what the provider read from and wrote to its cache, and a red mark on \
         every call whose cache read fell, with its cause.</p>{}",
        s.calls.len(),
        chart::timeline(&s.calls)
    );
    body.push_str("<h2>Cache busts</h2>");
    body.push_str(&busts_table(&s.calls));
    body.push_str(&calls_table(&s.calls));
    body.push_str("<h2>The head as the model sees it now</h2>");
    match &s.head {
        None => body.push_str("<p class=\"empty\">No head yet (a subagent, or no pass).</p>"),
        Some(h) => {
            let _ = write!(
                body,
                "<p class=\"note\">m[0] {} tokens, rebuilt {} ({}); m[1] {} tokens. It covers the \
                 raw history through message {}. {} compartments ({}), {} memories in m[0], {} pins.</p>",
                num(h.m0_tokens),
                ago(h.materialized_ms, now),
                esc(&h.reason),
                num(h.m1_tokens),
                h.covered_through,
                s.compartments,
                esc(&tiers(&h.tiers)),
                h.memory_ids.len(),
                s.pins
            );
            if !export {
                let _ = write!(
                    body,
                    "<details><summary>m[0]</summary><pre>{}</pre></details>\
                     <details><summary>m[1]</summary><pre>{}</pre></details>",
                    shown(&h.m0),
                    shown(&h.m1)
                );
            }
        }
    }
    body.push_str(&drops_and_runs(s));
    body
}

/// The session's drops and historian runs.
fn drops_and_runs(s: &SessionPage) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        "<h2>Drops</h2><p class=\"note\">{} tags dropped.</p>",
        s.dropped_total
    );
    if !s.dropped.is_empty() {
        body.push_str(
            "<div class=\"scroll\"><table><thead><tr><th>Tag</th><th>Kind</th><th>Tool</th>\
             <th class=\"n\">Tokens</th><th>Mode</th><th>Cause</th><th>When</th></tr></thead><tbody>",
        );
        for d in &s.dropped {
            let _ = write!(
                body,
                "<tr><td>§{}§</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                d.number,
                esc(&d.kind),
                esc(d.tool.as_deref().unwrap_or("")),
                num(d.tokens),
                esc(d.mode.as_deref().unwrap_or("")),
                esc(d.cause.as_deref().unwrap_or("")),
                d.at_ms.map(time).unwrap_or_default()
            );
        }
        body.push_str("</tbody></table></div>");
    }
    body.push_str("<h2>Historian runs</h2>");
    if s.runs.is_empty() {
        body.push_str("<p class=\"empty\">The historian has not run for this session.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table><thead><tr><th>Started</th><th>Status</th><th>Model</th>\
             <th class=\"n\">Tokens in</th><th class=\"n\">Tokens out</th><th class=\"n\">Duration</th>\
             <th class=\"n\">Compartments</th><th class=\"n\">Facts</th><th>Failure</th></tr></thead><tbody>",
        );
        for r in &s.runs {
            let _ = write!(
                body,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                if r.status.as_deref() == Some("failed") {
                    "failed"
                } else {
                    ""
                },
                time(r.started_ms),
                esc(r.status.as_deref().unwrap_or("running")),
                esc(r.model.as_deref().unwrap_or("—")),
                num(r.tokens_in),
                num(r.tokens_out),
                r.finished_ms
                    .map(|f| format!("{:.1}s", (f - r.started_ms) as f64 / 1000.0))
                    .unwrap_or_else(|| "—".into()),
                r.compartments,
                r.facts,
                shown(r.error.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</tbody></table></div>");
    }
    body
}

fn tiers(json: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let Some(map) = value.as_object() else {
        return "no tiers".into();
    };
    if map.is_empty() {
        return "none rendered".into();
    }
    map.iter()
        .map(|(tier, n)| format!("tier {tier}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn session_page(dash: &Dashboard, conn: &Connection, id: i64) -> Result<Option<String>> {
    let Some(s) = data::session(conn, &dash.config, id)? else {
        return Ok(None);
    };
    let live = dash.now_ms() - s.line.last_ms < LIVE_MS;
    let title = format!("Session {}", redact::secrets(&s.line.session_id));
    let body = session_body(dash, &s, false);
    let mut f = frame(&title, "/", FOOTER);
    if live {
        f.refresh = Some(LIVE_REFRESH_S);
    }
    Ok(Some(page(&f, &body)))
}

/// The memory page's request.
#[derive(Debug, Clone, Default)]
pub struct MemoryQuery {
    pub project: Option<String>,
    pub q: String,
    pub status: String,
    /// What the last change did (after a POST's redirect).
    pub done: Option<String>,
    /// Which [`MEMORY_ROWS`] of the list, from 1.
    pub page: usize,
}

/// The highest page a list goes to (a bound on what a request can ask).
pub const MAX_PAGE: usize = 1_000;

fn hidden(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
        esc(value)
    )
}

fn memory_row(dash: &Dashboard, project: &str, m: &MemoryRecord) -> String {
    let live = m.status == "active" || m.status == "permanent";
    let redacted = redact::secrets(&m.content);
    let mut out = String::new();
    let _ = write!(
        out,
        "<article class=\"memory {}\" id=\"m{}\"><header><b>#{}</b> <span class=\"tag\">{}</span> \
         <span class=\"tag\">{}</span> <span class=\"prov\">written by {} · {} · updated {}</span></header>\
         <p class=\"content\">{}</p>",
        esc(&m.status),
        m.id,
        m.id,
        esc(&m.category),
        esc(&m.status),
        esc(m.source.as_deref().unwrap_or("unknown")),
        time(m.created_ms),
        time(m.updated_ms),
        esc(&redacted)
    );
    if !m.merged_from.is_empty() {
        let ids: Vec<String> = m.merged_from.iter().map(|i| format!("#{i}")).collect();
        let _ = write!(out, "<p class=\"note\">merged from {}</p>", ids.join(", "));
    }
    if let Some(r) = &m.archive_reason {
        let _ = write!(out, "<p class=\"note\">archived: {}</p>", shown(r));
    }
    if let Some(by) = m.superseded_by {
        let _ = write!(out, "<p class=\"note\">superseded by #{by}</p>");
    }
    if live && redacted != m.content {
        out.push_str(
            "<p class=\"note\">It holds what looks like a credential, so it is not editable here: \
             use <code>mc-search memory</code>.</p>",
        );
    } else if live {
        let common = format!(
            "{}{}{}",
            hidden("csrf", &dash.csrf),
            hidden("project", project),
            hidden("id", &m.id.to_string())
        );
        let _ = write!(
            out,
            "<details><summary>Edit or archive</summary>\
             <form method=\"post\" action=\"/memory/update\">{common}\
             <textarea name=\"content\" rows=\"3\" aria-label=\"content of memory {}\">{}</textarea>\
             <button>Save</button></form>\
             <form method=\"post\" action=\"/memory/archive\">{common}\
             <input name=\"reason\" placeholder=\"why (optional)\" aria-label=\"archive reason\">\
             <button>Archive</button></form></details>",
            m.id,
            esc(&m.content)
        );
    }
    out.push_str("</article>");
    out
}

/// Links to the page before and after `page` (`more`: there is one after).
fn pager(page: usize, more: bool, link: impl Fn(usize) -> String) -> String {
    if page <= 1 && !more {
        return String::new();
    }
    let mut out = String::from("<p class=\"pager\">");
    if page > 1 {
        let _ = write!(
            out,
            "<a href=\"{}\">← page {}</a> ",
            esc(&link(page - 1)),
            page - 1
        );
    }
    let _ = write!(out, "<span>page {page}</span>");
    if more && page < MAX_PAGE {
        let _ = write!(
            out,
            " <a href=\"{}\">page {} →</a>",
            esc(&link(page + 1)),
            page + 1
        );
    }
    out.push_str("</p>");
    out
}

pub fn memory_page(dash: &Dashboard, conn: &Connection, query: &MemoryQuery) -> Result<String> {
    let projects = data::memory_projects(conn)?;
    let project = query
        .project
        .clone()
        .or_else(|| projects.first().map(|p| p.0.clone()));
    let mut body = String::new();
    if let Some(done) = &query.done {
        let _ = write!(body, "<p class=\"done\">{}</p>", esc(done));
    }
    body.push_str(
        "<p class=\"note\">Edits go through mc-search's own rules: the mutation log, never a cache \
         bust — a change reaches the model in m[1] at the next pass that busts anyway.</p>",
    );
    let _ = write!(
        body,
        "<form class=\"filter\" method=\"get\" action=\"/memory\"><select name=\"project\" aria-label=\"project\">"
    );
    for (p, live, all) in &projects {
        let _ = write!(
            body,
            "<option value=\"{}\"{}>{} ({live} live, {all} in all)</option>",
            esc(p),
            if Some(p) == project.as_ref() {
                " selected"
            } else {
                ""
            },
            esc(p)
        );
    }
    let _ = write!(
        body,
        "</select><input type=\"search\" name=\"q\" value=\"{}\" placeholder=\"words\" aria-label=\"search memory\">\
         <select name=\"status\" aria-label=\"status\">",
        esc(&query.q)
    );
    for s in [
        "live",
        "all",
        "active",
        "permanent",
        "archived",
        "superseded",
    ] {
        let _ = write!(
            body,
            "<option{}>{s}</option>",
            if query.status == s || (query.status.is_empty() && s == "live") {
                " selected"
            } else {
                ""
            }
        );
    }
    body.push_str("</select><button>Show</button></form>");
    let page_no = query.page.clamp(1, MAX_PAGE);
    let Some(project) = project else {
        body.push_str("<p class=\"empty\">No project has memories yet.</p>");
        return Ok(page(&frame("Project memory", "/memory", FOOTER), &body));
    };
    let filter = Filter {
        category: None,
        status: Some(if query.status.is_empty() {
            "live".into()
        } else {
            query.status.clone()
        }),
        text: (!query.q.trim().is_empty()).then(|| query.q.clone()),
        // One more than the page shows: whether a next page exists.
        limit: Some(page_no * MEMORY_ROWS + 1),
    };
    let mut list = memory::list(conn, &project, &filter)?;
    let more = list.len() > page_no * MEMORY_ROWS;
    list.truncate(page_no * MEMORY_ROWS);
    let shown_from = (page_no - 1) * MEMORY_ROWS;
    let list = list.get(shown_from..).unwrap_or_default();
    let _ = write!(
        body,
        "<p class=\"note\">{} memories shown ({MEMORY_ROWS} a page, oldest first).</p>",
        if list.is_empty() {
            "No".to_string()
        } else {
            format!("{}–{}", shown_from + 1, shown_from + list.len())
        }
    );
    for m in list {
        body.push_str(&memory_row(dash, &project, m));
    }
    let link = |n: usize| {
        format!(
            "/memory?project={}&q={}&status={}&page={n}",
            url(&project),
            url(&query.q),
            url(&query.status)
        )
    };
    body.push_str(&pager(page_no, more, link));
    let _ = write!(
        body,
        "<h2>Merge</h2><form class=\"merge\" method=\"post\" action=\"/memory/merge\">{}{}\
         <input name=\"ids\" placeholder=\"ids, e.g. 3, 7\" aria-label=\"ids to merge\">\
         <textarea name=\"content\" rows=\"2\" placeholder=\"the merged text\" aria-label=\"merged text\"></textarea>\
         <button>Merge</button></form>",
        hidden("csrf", &dash.csrf),
        hidden("project", &project)
    );
    body.push_str("<h2>Mutation log</h2>");
    let log = data::mutations(conn, &project, 50)?;
    if log.is_empty() {
        body.push_str("<p class=\"empty\">No edits yet.</p>");
    } else {
        body.push_str("<div class=\"scroll\"><table><thead><tr><th>#</th><th>When</th><th>Kind</th><th>Memory</th><th>Text</th></tr></thead><tbody>");
        for m in &log {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>#{}{}</td><td>{}</td></tr>",
                m.id,
                time(m.at_ms),
                esc(&m.kind),
                m.memory,
                m.superseded_by
                    .map(|b| format!(" → #{b}"))
                    .unwrap_or_default(),
                shown(m.content.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</tbody></table></div>");
    }
    Ok(page(&frame("Project memory", "/memory", FOOTER), &body))
}

pub fn dream_page(dash: &Dashboard, conn: &Connection) -> Result<String> {
    let (tasks, runs) = data::dream(conn, 100)?;
    let mut body = String::new();
    body.push_str("<h2>Schedules</h2><div class=\"scroll\"><table><thead><tr><th>Task</th><th>Schedule</th></tr></thead><tbody>");
    for task in mc_dream_core::Task::ALL {
        let _ = write!(
            body,
            "<tr><td>{}</td><td><code>{}</code></td></tr>",
            task.name(),
            esc(task.schedule(&dash.config.dream).unwrap_or("off"))
        );
    }
    let _ = write!(
        body,
        "</tbody></table></div><p class=\"note\">Model: {}.</p>",
        esc(dash
            .config
            .dream
            .model
            .as_deref()
            .unwrap_or("none set: the model tasks do not run"))
    );
    body.push_str("<h2>Tasks</h2>");
    if tasks.is_empty() {
        body.push_str("<p class=\"empty\">mc-dream has not run yet.</p>");
    } else {
        body.push_str("<div class=\"scroll\"><table><thead><tr><th>Project</th><th>Task</th><th>Last success</th><th>Last attempt</th><th>Result</th><th class=\"n\">Failures in a row</th><th>Last error</th></tr></thead><tbody>");
        for t in &tasks {
            let _ = write!(
                body,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                if t.failures > 0 { "failed" } else { "" },
                esc(&project_label(Some(&t.project), None)),
                esc(&t.task),
                t.last_run_ms.map(time).unwrap_or_else(|| "never".into()),
                t.last_attempt_ms
                    .map(time)
                    .unwrap_or_else(|| "never".into()),
                esc(t.last_result.as_deref().unwrap_or("—")),
                t.failures,
                shown(t.last_error.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</tbody></table></div>");
    }
    body.push_str("<h2>Runs</h2>");
    if runs.is_empty() {
        body.push_str("<p class=\"empty\">No runs yet.</p>");
    } else {
        body.push_str("<div class=\"scroll\"><table><thead><tr><th>Started</th><th>Task</th><th>Status</th><th>Model</th><th class=\"n\">Tokens</th><th class=\"n\">Duration</th><th>What it changed</th></tr></thead><tbody>");
        for r in &runs {
            let _ = write!(
                body,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{} / {}</td><td class=\"n\">{}</td><td><code>{}</code></td></tr>",
                if r.status.as_deref() == Some("failed") {
                    "failed"
                } else {
                    ""
                },
                time(r.started_ms),
                esc(&r.task),
                esc(r.status.as_deref().unwrap_or("running")),
                esc(r.model.as_deref().unwrap_or("—")),
                num(r.tokens_in),
                num(r.tokens_out),
                r.finished_ms
                    .map(|f| format!("{:.1}s", (f - r.started_ms) as f64 / 1000.0))
                    .unwrap_or_else(|| "—".into()),
                shown(r.detail.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</tbody></table></div>");
    }
    Ok(page(&frame("Dreamer", "/dream", FOOTER), &body))
}

fn spend_row(label: &str, t: &Tokens, c: &crate::prices::Cost) -> String {
    format!(
        "<tr><td>{label}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}{}</td></tr>",
        num(t.calls),
        short(t.input),
        short(t.cache_read),
        short(t.cache_write),
        short(t.output),
        percent(t.hit_percent()),
        dollars(c.saved),
        dollars(c.dollars),
        if c.unpriced { " *" } else { "" }
    )
}

const SPEND_HEAD: &str = "<thead><tr><th></th><th class=\"n\">Calls</th><th class=\"n\">Input</th>\
    <th class=\"n\">Cache read</th><th class=\"n\">Cache write</th><th class=\"n\">Output</th>\
    <th class=\"n\">Cache hit</th><th class=\"n\">Cache saved</th><th class=\"n\">Cost</th></tr></thead>";

/// Spend per day, project and session (shared by its page and the export).
pub fn spend_body(dash: &Dashboard, conn: &Connection) -> Result<String> {
    let spend = data::spend(conn, &dash.config)?;
    let mut body = String::new();
    let _ = write!(
        body,
        "<p class=\"note\">From the usage providers reported for mc's calls, priced from the \
         built-in table of list prices (dollars per million tokens) or the config's \
         <code>dashboard.price_*</code>. “Cache saved” is what the cache reads would have cost as \
         uncached input. * some calls were of a model without a known price.</p>\
         <div class=\"stats\">{}{}{}</div>",
        stat("Total", &dollars(spend.total.1.dollars)),
        stat("Cache saved", &dollars(spend.total.1.saved)),
        stat("Cache hit", &percent(spend.total.0.hit_percent()))
    );
    body.push_str("<h2>Per day (UTC)</h2><div class=\"scroll\"><table class=\"spend\">");
    body.push_str(SPEND_HEAD);
    body.push_str("<tbody>");
    for (day, t, c) in spend.days.iter().take(90) {
        body.push_str(&spend_row(
            &time(*day).chars().take(10).collect::<String>(),
            t,
            c,
        ));
    }
    body.push_str(
        "</tbody></table></div><h2>Per project</h2><div class=\"scroll\"><table class=\"spend\">",
    );
    body.push_str(SPEND_HEAD);
    body.push_str("<tbody>");
    for (p, t, c) in &spend.projects {
        body.push_str(&spend_row(&esc(&project_label(Some(p), None)), t, c));
    }
    body.push_str("</tbody></table></div><h2>Per session (the 50 costliest)</h2><div class=\"scroll\"><table class=\"spend\">");
    body.push_str(SPEND_HEAD);
    body.push_str("<tbody>");
    for l in spend.sessions.iter().take(50) {
        body.push_str(&spend_row(&shown(&l.session_id), &l.tokens, &l.cost));
    }
    body.push_str("</tbody></table></div>");
    Ok(body)
}

pub fn spend_page(dash: &Dashboard, conn: &Connection) -> Result<String> {
    let body = spend_body(dash, conn)?;
    Ok(page(&frame("Spend", "/spend", FOOTER), &body))
}

/// The doctor's checks (no provider is called) and the redacted issue report.
pub fn doctor_page(dash: &Dashboard) -> String {
    let mut env = dash.doctor.clone();
    env.now_ms = dash.now_ms();
    let options = mc_doctor_core::checks::Options {
        probes: false,
        ..dash.checks.clone()
    };
    let checks = mc_doctor_core::checks::run(&env, &options);
    let mut body = String::from(
        "<p class=\"note\">mc-doctor's checks, without calling any provider. The report below is \
         what <code>mc-doctor --issue</code> writes: paths and credentials redacted.</p>\
         <div class=\"scroll\"><table class=\"checks\"><thead><tr><th>Status</th><th>Check</th><th>What</th><th>Fix</th></tr></thead><tbody>",
    );
    for c in &checks {
        let _ = write!(
            body,
            "<tr class=\"{}\"><td><b>{}</b></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            c.status.as_str().to_lowercase(),
            c.status.as_str(),
            esc(&c.id),
            esc(&redact::all(&env, &c.what)),
            esc(&redact::all(&env, c.fix.as_deref().unwrap_or("")))
        );
    }
    let report = mc_doctor_core::issue::report(&env, &checks, &dash.logs);
    let _ = write!(
        body,
        "</tbody></table></div><h2>Issue report</h2><pre class=\"report\">{}</pre>",
        esc(&report)
    );
    page(&frame("Doctor", "/doctor", FOOTER), &body)
}

/// One self-contained HTML file for sharing: the sessions, spend, and the
/// timeline and busts of the newest sessions; no link, no script, the
/// stylesheet inline; paths and credentials redacted as `--issue` does.
pub fn export(dash: &Dashboard, conn: &Connection, sessions_shown: usize) -> Result<String> {
    let mut body = String::new();
    let _ = write!(
        body,
        "<p class=\"note\">Exported {}: paths and credentials redacted.</p><h2>Sessions</h2>",
        time(dash.now_ms())
    );
    body.push_str(&sessions(dash, conn, "", 1, true)?);
    body.push_str("<h2>Spend</h2>");
    body.push_str(&spend_body(dash, conn)?);
    for line in data::sessions(conn, &dash.config, "")?
        .iter()
        .take(sessions_shown)
    {
        if let Some(s) = data::session(conn, &dash.config, line.id)? {
            let _ = write!(
                body,
                "<section class=\"export-session\"><h2>Session {}</h2>",
                shown(&line.session_id)
            );
            body.push_str(&session_body(dash, &s, true));
            body.push_str("</section>");
        }
    }
    let html = page(
        &Frame {
            title: "mc dashboard export",
            nav: "",
            refresh: None,
            inline_style: true,
            footer: FOOTER,
        },
        &body,
    );
    Ok(redact::all(&dash.doctor, &html))
}

/// A page that says what went wrong.
pub fn problem(title: &str, message: &str, hints: &[String]) -> String {
    let mut body = format!("<p class=\"problem\">{}</p>", shown(message));
    for h in hints {
        let _ = write!(body, "<p class=\"note\">{}</p>", shown(h));
    }
    body.push_str("<p><a href=\"/\">Back to the sessions</a></p>");
    page(&frame(title, "", FOOTER), &body)
}

/// The memory page's address for a project, after a change.
pub fn memory_address(project: &str, done: &str) -> String {
    format!("/memory?project={}&done={}", url(project), url(done))
}
