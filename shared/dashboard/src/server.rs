//! The dashboard's HTTP side, safe by construction:
//!
//! - it listens on a loopback address only ([`Server::bind`] refuses others);
//! - every request carries the run's token (`?token=` once, then an
//!   `HttpOnly`, `SameSite=Strict` cookie), else 401;
//! - the `Host` header must name this loopback address and port, else 403:
//!   a web page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding)
//!   sends its own name and is refused;
//! - a change is a POST of a form with the run's CSRF token (and, when the
//!   browser sends one, an `Origin` of this address), else 403;
//! - every answer carries a Content-Security-Policy that lets the page load
//!   nothing but this server's stylesheet (no script at all, no other
//!   origin), `nosniff`, no referrer, no framing, no caching; the stylesheet
//!   is compiled in.

use std::io::Read;
use std::net::SocketAddr;

use tiny_http::{Header, Method, Request, Response};

use mc_base::error::{Error, ErrorKind, Result};
use mc_base::store::Store;

use crate::Dashboard;
use crate::html::STYLE;
use crate::pages::{self, MemoryQuery};

/// The largest form body read.
pub const MAX_FORM_BYTES: usize = 64 * 1024;
/// How many sessions the export draws in full.
pub const EXPORT_SESSIONS: usize = 10;

/// Every answer's policy: nothing but this server's stylesheet, no script.
pub const CSP: &str = "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub struct Server {
    http: tiny_http::Server,
    addr: SocketAddr,
    dash: Dashboard,
    store: Store,
}

/// An answer before it is sent.
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    pub headers: Vec<(&'static str, String)>,
}

impl Answer {
    fn html(status: u16, body: String) -> Answer {
        Answer {
            status,
            content_type: "text/html; charset=utf-8",
            body,
            headers: Vec::new(),
        }
    }

    fn redirect(to: &str) -> Answer {
        Answer {
            status: 303,
            content_type: "text/plain; charset=utf-8",
            body: String::new(),
            headers: vec![("Location", to.to_string())],
        }
    }

    fn refused(status: u16, why: &str) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{why}\n"),
            headers: Vec::new(),
        }
    }
}

/// What the server needs of a request (tiny_http's, or a test's).
pub struct Incoming<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Incoming<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Equal without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn split_url(url: &str) -> (&str, Vec<(String, String)>) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let pairs = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    (path, pairs)
}

fn param<'p>(pairs: &'p [(String, String)], name: &str) -> Option<&'p str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `?page=N` (from 1; anything else is the first page).
fn page_param(pairs: &[(String, String)]) -> usize {
    param(pairs, "page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
}

impl Server {
    /// Listen on `addr` (loopback only; port 0 picks a free one).
    pub fn bind(addr: SocketAddr, dash: Dashboard) -> Result<Server> {
        if !addr.ip().is_loopback() {
            return Err(Error::input(format!(
                "the dashboard listens on loopback only, not {addr}"
            )));
        }
        let store = Store::open(&dash.db, &dash.store_options)?;
        let http = tiny_http::Server::http(addr).map_err(|e| {
            Error::input(format!("cannot listen on {addr}: {e}"))
                .with_hint("pick another port with --port, or --port 0 for a free one")
        })?;
        let addr = http
            .server_addr()
            .to_ip()
            .ok_or_else(|| Error::input("the dashboard's listener has no IP address"))?;
        Ok(Server {
            http,
            addr,
            dash,
            store,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address to open: with the token, which the page then keeps in a cookie.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.dash.token)
    }

    /// Answer requests one at a time, for ever.
    pub fn run(mut self) {
        while let Ok(mut request) = self.http.recv() {
            let answer = self.answer_request(&mut request);
            let _ = request.respond(response(answer));
        }
    }

    fn answer_request(&mut self, request: &mut Request) -> Answer {
        let method = match request.method() {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            _ => return Answer::refused(405, "only GET and POST"),
        };
        let mut body = Vec::new();
        if method == "POST" {
            let read = request
                .as_reader()
                .take(MAX_FORM_BYTES as u64 + 1)
                .read_to_end(&mut body);
            if read.is_err() {
                return Answer::refused(400, "the request body could not be read");
            }
            if body.len() > MAX_FORM_BYTES {
                return Answer::refused(413, "the form is too large");
            }
        }
        let headers = request
            .headers()
            .iter()
            .map(|h| {
                (
                    h.field.as_str().as_str().to_string(),
                    h.value.as_str().to_string(),
                )
            })
            .collect();
        let url = request.url().to_string();
        self.answer(&Incoming {
            method,
            url: &url,
            headers,
            body,
        })
    }

    /// The hosts a request may name: this port on a loopback name.
    fn host_allowed(&self, host: &str) -> bool {
        let port = self.addr.port();
        [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]
        .iter()
        .any(|h| h.eq_ignore_ascii_case(host))
    }

    fn cookie_name(&self) -> String {
        format!("mc_dashboard_{}", self.addr.port())
    }

    fn token_of(&self, req: &Incoming<'_>, pairs: &[(String, String)]) -> (bool, bool) {
        let from_query = param(pairs, "token").is_some_and(|t| same(t, &self.dash.token));
        let name = self.cookie_name();
        let from_cookie = req.header("cookie").is_some_and(|c| {
            c.split(';')
                .filter_map(|kv| kv.trim().split_once('='))
                .any(|(k, v)| k == name && same(v, &self.dash.token))
        });
        (from_query, from_cookie)
    }

    /// The whole decision on one request.
    pub fn answer(&mut self, req: &Incoming<'_>) -> Answer {
        match req.header("host") {
            Some(host) if self.host_allowed(host) => {}
            _ => {
                return Answer::refused(
                    403,
                    "this dashboard answers only to its own loopback address",
                );
            }
        }
        let (path, pairs) = split_url(req.url);
        let (query_token, cookie_token) = self.token_of(req, &pairs);
        if !query_token && !cookie_token {
            return Answer::refused(
                401,
                "this dashboard needs its token: open the address mc-doctor dashboard printed",
            );
        }
        if query_token && req.method != "POST" {
            // Keep the token in a cookie and take it out of the address.
            let rest: Vec<String> = pairs
                .iter()
                .filter(|(k, _)| k != "token")
                .map(|(k, v)| format!("{}={}", crate::html::url(k), crate::html::url(v)))
                .collect();
            let to = if rest.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", rest.join("&"))
            };
            let mut answer = Answer::redirect(&to);
            answer.headers.push((
                "Set-Cookie",
                format!(
                    "{}={}; HttpOnly; SameSite=Strict; Path=/",
                    self.cookie_name(),
                    self.dash.token
                ),
            ));
            return answer;
        }
        if req.method == "POST" {
            return self.post(req, path);
        }
        match self.get(path, &pairs) {
            Ok(answer) => answer,
            Err(e) => failure(&e),
        }
    }

    fn get(&mut self, path: &str, pairs: &[(String, String)]) -> Result<Answer> {
        let conn = self.store.conn();
        let dash = &self.dash;
        Ok(match path {
            "/" => Answer::html(
                200,
                pages::sessions_page(
                    dash,
                    conn,
                    param(pairs, "q").unwrap_or(""),
                    page_param(pairs),
                )?,
            ),
            "/session" => {
                let id = param(pairs, "id").and_then(|i| i.parse::<i64>().ok());
                match id
                    .map(|id| pages::session_page(dash, conn, id))
                    .transpose()?
                    .flatten()
                {
                    Some(page) => Answer::html(200, page),
                    None => Answer::html(
                        404,
                        pages::problem(
                            "No such session",
                            "no session with that id in this database",
                            &[],
                        ),
                    ),
                }
            }
            "/memory" => {
                let query = MemoryQuery {
                    project: param(pairs, "project").map(str::to_string),
                    q: param(pairs, "q").unwrap_or("").to_string(),
                    status: param(pairs, "status").unwrap_or("").to_string(),
                    done: param(pairs, "done").map(str::to_string),
                    page: page_param(pairs),
                };
                Answer::html(200, pages::memory_page(dash, conn, &query)?)
            }
            "/dream" => Answer::html(200, pages::dream_page(dash, conn)?),
            "/spend" => Answer::html(200, pages::spend_page(dash, conn)?),
            "/doctor" => Answer::html(200, pages::doctor_page(dash)),
            "/export" => {
                let mut answer = Answer::html(200, pages::export(dash, conn, EXPORT_SESSIONS)?);
                answer.headers.push((
                    "Content-Disposition",
                    "attachment; filename=\"mc-dashboard.html\"".into(),
                ));
                answer
            }
            "/assets/style.css" => Answer {
                status: 200,
                content_type: "text/css; charset=utf-8",
                body: STYLE.to_string(),
                headers: Vec::new(),
            },
            _ => Answer::html(404, pages::problem("Not found", "no such page", &[])),
        })
    }

    fn post(&mut self, req: &Incoming<'_>, path: &str) -> Answer {
        if let Some(origin) = req.header("origin") {
            let own = origin
                .strip_prefix("http://")
                .is_some_and(|host| self.host_allowed(host));
            if !own {
                return Answer::refused(403, "a change must come from the dashboard's own page");
            }
        }
        let form_type = req
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
        if !form_type {
            return Answer::refused(
                415,
                "a change is a form (application/x-www-form-urlencoded)",
            );
        }
        let form: Vec<(String, String)> = form_urlencoded::parse(&req.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if !param(&form, "csrf").is_some_and(|t| same(t, &self.dash.csrf)) {
            return Answer::refused(
                403,
                "the form's CSRF token is missing or wrong: reload the page",
            );
        }
        let project = param(&form, "project").unwrap_or("").to_string();
        let now = self.dash.now_ms();
        let id = param(&form, "id").and_then(|i| i.trim().parse::<i64>().ok());
        let result = match (path, id) {
            ("/memory/update", Some(id)) => mc_search_core::memory::update(
                &mut self.store,
                &project,
                id,
                param(&form, "content").unwrap_or(""),
                now,
            )
            .map(|m| format!("memory #{} saved", m.id)),
            ("/memory/archive", Some(id)) => mc_search_core::memory::archive(
                &mut self.store,
                &project,
                id,
                param(&form, "reason"),
                now,
            )
            .map(|m| format!("memory #{} archived", m.id)),
            ("/memory/merge", _) => {
                let ids: std::result::Result<Vec<i64>, _> = param(&form, "ids")
                    .unwrap_or("")
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|s| !s.is_empty())
                    .map(|s| s.trim_start_matches('#').parse::<i64>())
                    .collect();
                match ids {
                    Ok(ids) => mc_search_core::memory::merge(
                        &mut self.store,
                        &project,
                        &ids,
                        param(&form, "content").unwrap_or(""),
                        None,
                        now,
                    )
                    .map(|m| format!("merged into memory #{}", m.id)),
                    Err(_) => Err(Error::input("the ids to merge are numbers, e.g. 3, 7")),
                }
            }
            ("/memory/update" | "/memory/archive", None) => {
                Err(Error::input("the form names no memory id"))
            }
            _ => return Answer::refused(404, "no such action"),
        };
        match result {
            Ok(done) => Answer::redirect(&pages::memory_address(&project, &done)),
            Err(e) => failure(&e),
        }
    }
}

fn failure(e: &Error) -> Answer {
    let status = match e.kind() {
        ErrorKind::Input | ErrorKind::Config => 400,
        _ => 500,
    };
    Answer::html(
        status,
        pages::problem("That did not work", &e.to_string(), &e.hints()),
    )
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn response(answer: Answer) -> Response<std::io::Cursor<Vec<u8>>> {
    let mut response =
        Response::from_data(answer.body.into_bytes()).with_status_code(answer.status);
    let fixed = [
        ("Content-Type", answer.content_type),
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
        ("Cache-Control", "no-store"),
    ];
    for (name, value) in fixed {
        if let Some(h) = header(name, value) {
            response.add_header(h);
        }
    }
    for (name, value) in &answer.headers {
        if let Some(h) = header(name, value) {
            response.add_header(h);
        }
    }
    response
}
