//! The dashboard against a real SQLite file filled by real passes: what
//! each page shows, and every refusal of the server (token, Host, CSRF,
//! Origin), through `Server::answer`.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use mc_base::config::{Config, TransformConfig};
use mc_base::domain::envelope::Envelope;
use mc_base::store::{Store, StoreOptions};
use mc_transform_core::run_pass;
use mc_transform_core::testkit::{SESSION, session, warm_now};

use crate::Dashboard;
use crate::server::{Answer, Incoming, Server};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const CSRF: &str = "fedcba9876543210fedcba9876543210";

fn envelope(messages: &[Value], sample: Option<(u64, u64, u64)>, now: i64) -> Envelope {
    Envelope::from_value(json!({
        "harness": "opencode",
        "session_id": SESSION,
        "project_dir": "/nonexistent/mc-dashboard-test",
        "model": {"provider": "anthropic", "id": "claude-sonnet-4-5", "context_limit": 100_000, "output_limit": 0},
        "usage": sample.map(|(i, r, w)| json!({"input": i, "cache_read": r, "cache_write": w, "output": 50})),
        "now_ms": now,
        "messages": messages,
    }))
    .unwrap()
}

struct Fixture {
    server: Server,
    now: i64,
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
}

/// Five real passes: warm, warm, a read that fell with nothing changed, then mc's execute.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mc.db");
    let mut store = Store::open(&db, &StoreOptions::default()).unwrap();
    let config = TransformConfig {
        relief_drop: false,
        ..TransformConfig::default()
    };
    let mut now = 0;
    for (turns, sample) in [
        (3, None),
        (4, Some((100, 0, 30_000))),
        (5, Some((100, 30_000, 2_000))),
        (6, Some((100, 0, 34_000))),
        (7, Some((100, 34_000, 36_000))),
        (8, Some((100, 9_000, 40_000))),
    ] {
        let messages = session(turns);
        now = warm_now(&messages);
        run_pass(&mut store, envelope(&messages, sample, now), &config, now).unwrap();
    }
    let project: String = store
        .conn()
        .query_row("SELECT project_identity FROM sessions", [], |r| r.get(0))
        .unwrap();
    mc_search_core::memory::write(
        &mut store,
        &project,
        "PROJECT_RULES",
        "Tests run with nextest",
        "agent",
        now,
    )
    .unwrap();
    mc_search_core::memory::write(
        &mut store,
        &project,
        "CONFIG_VALUES",
        "key: sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH",
        "user",
        now,
    )
    .unwrap();
    drop(store);
    let dash = Dashboard {
        db: db.clone(),
        store_options: StoreOptions::default(),
        config: Config::default(),
        doctor: mc_doctor_core::Env::default(),
        checks: mc_doctor_core::checks::Options::default(),
        logs: Vec::new(),
        token: TOKEN.into(),
        csrf: CSRF.into(),
        clock: Arc::new(move || now + 60_000),
    };
    let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), dash).unwrap();
    Fixture {
        server,
        now,
        _dir: dir,
        db,
    }
}

impl Fixture {
    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.server.addr().port())
    }

    fn cookie(&self) -> String {
        format!("mc_dashboard_{}={TOKEN}", self.server.addr().port())
    }

    fn get(&mut self, url: &str) -> Answer {
        let headers = vec![
            ("Host".into(), self.host()),
            ("Cookie".into(), self.cookie()),
        ];
        self.server.answer(&Incoming {
            method: "GET",
            url,
            headers,
            body: Vec::new(),
        })
    }

    fn post(&mut self, url: &str, form: &[(&str, &str)], origin: Option<&str>) -> Answer {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish()
            .into_bytes();
        let mut headers = vec![
            ("Host".into(), self.host()),
            ("Cookie".into(), self.cookie()),
            (
                "Content-Type".into(),
                "application/x-www-form-urlencoded".into(),
            ),
        ];
        if let Some(o) = origin {
            headers.push(("Origin".into(), o.into()));
        }
        self.server.answer(&Incoming {
            method: "POST",
            url,
            headers,
            body,
        })
    }

    fn project(&self) -> String {
        let store = Store::open(&self.db, &StoreOptions::default()).unwrap();
        store
            .conn()
            .query_row("SELECT project_identity FROM sessions", [], |r| r.get(0))
            .unwrap()
    }
}

#[test]
fn every_request_needs_the_token_and_the_dashboards_own_host() {
    let mut f = fixture();
    let host = f.host();
    let ask = |f: &mut Fixture, headers: Vec<(String, String)>, url: &str| {
        f.server
            .answer(&Incoming {
                method: "GET",
                url,
                headers,
                body: Vec::new(),
            })
            .status
    };
    assert_eq!(ask(&mut f, vec![("Host".into(), host.clone())], "/"), 401);
    let wrong = format!("mc_dashboard_{}=nope", f.server.addr().port());
    assert_eq!(
        ask(
            &mut f,
            vec![("Host".into(), host.clone()), ("Cookie".into(), wrong)],
            "/"
        ),
        401
    );
    // A page elsewhere whose name resolves to 127.0.0.1 sends its own name.
    let cookie = f.cookie();
    for foreign in ["evil.example", "evil.example:80", "127.0.0.1:1", ""] {
        let headers = vec![
            ("Host".into(), foreign.into()),
            ("Cookie".into(), cookie.clone()),
        ];
        assert_eq!(ask(&mut f, headers, "/"), 403, "{foreign}");
    }
    assert_eq!(
        ask(&mut f, vec![("Cookie".into(), cookie)], "/"),
        403,
        "no Host at all"
    );
    // The token in the address becomes a cookie, and leaves the address.
    let answer = f.server.answer(&Incoming {
        method: "GET",
        url: &format!("/session?id=1&token={TOKEN}"),
        headers: vec![(
            "Host".into(),
            format!("localhost:{}", f.server.addr().port()),
        )],
        body: Vec::new(),
    });
    assert_eq!(answer.status, 303);
    let headers: std::collections::BTreeMap<_, _> = answer.headers.into_iter().collect();
    assert_eq!(headers["Location"], "/session?id=1");
    assert!(headers["Set-Cookie"].contains("HttpOnly; SameSite=Strict"));
    assert_eq!(f.get("/").status, 200);
}

#[test]
fn each_view_shows_what_the_store_holds() {
    let mut f = fixture();
    let list = f.get("/?q=opencode").body;
    assert!(
        list.contains(SESSION) && list.contains("/session?id=1"),
        "{list}"
    );
    assert!(!f.get("/?q=nomatch").body.contains(SESSION));
    let page = f.get("/session?id=1").body;
    assert!(page.contains("<svg class=\"timeline\""), "{page}");
    // The read that fell with nothing changed, and mc's execute at 70 %.
    assert!(page.contains("<b>unknown</b>"), "{page}");
    assert!(page.contains("<b>mc_execute</b> (threshold)"), "{page}");
    assert!(
        page.contains("refresh"),
        "a session active a minute ago reloads by itself"
    );
    let memory = f.get("/memory").body;
    assert!(memory.contains("Tests run with nextest") && memory.contains("written by agent"));
    assert!(
        !memory.contains("sk-ant-api03"),
        "a credential is never shown"
    );
    assert!(memory.contains("not editable here"));
    let spend = f.get("/spend").body;
    assert!(
        spend.contains("Cache saved") && spend.contains('$'),
        "{spend}"
    );
    assert!(f.get("/dream").body.contains("consolidate"));
    assert_eq!(f.get("/session?id=99").status, 404);
    let export = f.get("/export").body;
    assert!(
        export.contains("<style>") && !export.contains("href=\"/") && !export.contains("<script")
    );
    assert!(export.contains("mc_execute"));
}

#[test]
fn a_memory_edit_goes_through_the_mutation_log_and_needs_the_csrf_token() {
    let mut f = fixture();
    let project = f.project();
    let form = [
        ("csrf", CSRF),
        ("project", project.as_str()),
        ("id", "1"),
        ("content", "Tests run with cargo nextest"),
    ];
    let mut bad = form;
    bad[0].1 = "wrong";
    assert_eq!(f.post("/memory/update", &bad, None).status, 403);
    let own = format!("http://{}", f.host());
    assert_eq!(
        f.post("/memory/update", &form, Some("http://evil.example"))
            .status,
        403
    );
    let answer = f.post("/memory/update", &form, Some(&own));
    assert_eq!(answer.status, 303, "{}", answer.body);
    let store = Store::open(&f.db, &StoreOptions::default()).unwrap();
    let record = mc_search_core::memory::show(store.conn(), &project, 1).unwrap();
    assert_eq!(record.content, "Tests run with cargo nextest");
    assert_eq!(
        mc_history::store::memory_epoch(store.conn(), &project).unwrap(),
        0,
        "no cache bust"
    );
    let kinds: Vec<String> = store
        .conn()
        .prepare("SELECT kind FROM memory_mutations WHERE memory = 1")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(kinds, ["update"]);
    assert!(
        f.get("/memory")
            .body
            .contains("Tests run with cargo nextest")
    );
    // Another project's memory is missing, as the agent's tools say.
    let other = [
        ("csrf", CSRF),
        ("project", "git:other"),
        ("id", "1"),
        ("content", "x"),
    ];
    let answer = f.post("/memory/update", &other, None);
    assert_eq!(answer.status, 400);
    assert!(
        answer.body.contains("no memory #1 in this project"),
        "{}",
        answer.body
    );
    let archive = [
        ("csrf", CSRF),
        ("project", project.as_str()),
        ("id", "1"),
        ("reason", "moved"),
    ];
    assert_eq!(f.post("/memory/archive", &archive, None).status, 303);
    let _ = f.now;
}

#[test]
fn long_lists_come_in_pages_and_spend_counts_every_session() {
    use mc_transform_core::calls::{self, HeadMove, Keep, NewCall, Prompt, Sources};
    use mc_transform_core::{Bust, Decision};

    let mut f = fixture();
    let project = f.project();
    let extra = 520;
    let mut store = Store::open(&f.db, &StoreOptions::default()).unwrap();
    store
        .write(|tx| {
            for k in 0..450 {
                mc_search_core::memory::write_in(
                    tx,
                    &project,
                    "ARCHITECTURE",
                    &format!("Fact number {k} of the paging test"),
                    "historian",
                    f.now,
                )?;
            }
            for k in 0..extra {
                let s = mc_base::domain::sessions::create_session(
                    tx,
                    "opencode",
                    &format!("ses_page_{k:04}"),
                    false,
                    Some(&project),
                    f.now - 1_000_000 + k,
                )?;
                for (at, sample) in [(0, None), (1, Some((10, 2_000, 100)))] {
                    calls::record(
                        tx,
                        &NewCall {
                            session: s.id,
                            at_ms: f.now - 1_000_000 + k + at,
                            decision: Decision::Defer,
                            reason: "cache_warm",
                            bust: Bust::None,
                            head: HeadMove::Replayed,
                            head_reason: None,
                            usage_percent: 5.0,
                            context_window: 200_000,
                            model: Some("anthropic/claude-sonnet-4-5"),
                            prompt: Prompt::default(),
                            messages: 1,
                            first_message: None,
                            sources: Sources::default(),
                            drops: 0,
                            sample: sample.map(|(input, cache_read, cache_write)| {
                                mc_base::domain::envelope::Usage {
                                    input,
                                    cache_read,
                                    cache_write,
                                    output: 5,
                                }
                            }),
                        },
                        Keep {
                            rows: 1_000_000,
                            days: 3650,
                        },
                    )?;
                }
            }
            Ok(())
        })
        .unwrap();
    // Memory: 452 live, 200 a page; the third page holds the last 52.
    let first = f.get(&format!("/memory?project={project}")).body;
    assert!(first.contains("1–200"), "{first}");
    assert!(first.contains("Fact number 0 "), "{first}");
    assert!(!first.contains("Fact number 449 "));
    assert!(first.contains("page=2\">page 2 →"), "{first}");
    let last = f.get(&format!("/memory?project={project}&page=3")).body;
    assert!(last.contains("401–452"), "{last}");
    assert!(last.contains("Fact number 449 "));
    assert!(!last.contains("Fact number 0 "));
    assert!(
        last.contains("← page 2") && !last.contains("page 4"),
        "{last}"
    );
    // A search pages the same way.
    let found = f
        .get(&format!("/memory?project={project}&q=number+44&page=1"))
        .body;
    assert!(
        found.contains("1–14"),
        "44, 144, 244, 344 and 440–449: {found}"
    );
    // Sessions: 521, 200 a page, newest first.
    let list = f.get("/").body;
    assert!(list.contains("521 sessions, 1–200 shown"), "{list}");
    assert!(list.contains("ses_page_0519") && !list.contains("ses_page_0000"));
    let third = f.get("/?page=3").body;
    assert!(third.contains("401–521 shown"), "{third}");
    assert!(third.contains("ses_page_0000") && !third.contains(SESSION));
    assert!(list.contains(SESSION), "the newest first");
    // Spend counts every session, whatever a page of the list shows.
    let conn = store.conn();
    let spend = crate::data::spend(conn, &Config::default()).unwrap();
    let sessions: i64 = spend.sessions.iter().map(|l| l.tokens.calls).sum();
    let projects: i64 = spend.projects.iter().map(|p| p.1.calls).sum();
    assert_eq!(spend.sessions.len(), 1 + extra as usize);
    assert_eq!(sessions, spend.total.0.calls);
    assert_eq!(projects, spend.total.0.calls);
}

#[test]
fn the_context_is_the_newest_reported_call_and_every_call_is_counted() {
    let mut f = fixture();
    let cell = |html: &str, label: &str| -> String {
        let rest = html.split(label).nth(1).unwrap_or_default();
        rest.split("<b>")
            .nth(1)
            .unwrap_or_default()
            .split("</b>")
            .next()
            .unwrap()
            .to_string()
    };
    // Six passes, the last one's usage not come yet: the newest reported
    // call is the fifth, whose usage the sixth pass measured (49,100 of 100k).
    let page = f.get("/session?id=1").body;
    assert_eq!(cell(&page, "<span>Calls</span>"), "6");
    assert_eq!(cell(&page, "<span>Context</span>"), "49.1 %");
    let list = f.get("/").body;
    assert!(list.contains("<td class=\"n\">49.1 %</td>"), "{list}");
    assert!(
        list.contains("<td class=\"n\">6</td>"),
        "every call: {list}"
    );
    // The gateway writes a call's usage when its answer ends: the context
    // is that call's own, before any next pass.
    let mut store = Store::open(&f.db, &StoreOptions::default()).unwrap();
    let usage = mc_base::domain::envelope::Usage {
        input: 100,
        cache_read: 49_000,
        cache_write: 1_000,
        output: 50,
    };
    let newest: i64 = store
        .conn()
        .query_row("SELECT max(id) FROM calls", [], |r| r.get(0))
        .unwrap();
    store
        .write(|tx| mc_transform_core::calls::attach_usage(tx, newest, &usage))
        .unwrap();
    let page = f.get("/session?id=1").body;
    assert_eq!(cell(&page, "<span>Context</span>"), "50.1 %");
    assert!(f.get("/").body.contains("<td class=\"n\">50.1 %</td>"));
}
