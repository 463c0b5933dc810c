//! A small blocking client for a running OpenCode server's HTTP API
//! (`opencode serve`, v1 routes): sessions, their metadata, messages and
//! `prompt_async`.
//!
//! Every request has a connect timeout and an overall timeout. A failure is an
//! [`Error::OpenCode`]: how it failed ([`ServerFailure`]), and a message that
//! names the method and URL and carries the server's answer, so one error line
//! says what went wrong. Proxy variables are honoured, except for a server on a
//! loopback address (where a proxy can only get in the way).

use std::time::Duration;

use serde_json::Value;

use crate::ProxyEnv;
use crate::http::proxy_for;
use mc_base::error::{Error, Result, ServerFailure};

/// The overall time one request may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// The time to open the connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest response body read (a long session's message list can be big).
const BODY_LIMIT: u64 = 512 << 20;
/// How much of an error body goes into the error message.
const ERROR_BODY_CHARS: usize = 600;

#[derive(Debug, Clone)]
pub struct OpenCode {
    base: String,
    directory: Option<String>,
    proxy: Option<ureq::Proxy>,
    timeout: Duration,
    agent: ureq::Agent,
}

impl OpenCode {
    /// A client for the server at `base_url` (`http://127.0.0.1:4096`; a bare
    /// `host:port` means http), through no proxy. Trailing slashes are ignored.
    pub fn new(base_url: &str) -> Self {
        let trimmed = base_url.trim().trim_end_matches('/');
        let base = if trimmed.contains("://") {
            trimmed.to_string()
        } else {
            format!("http://{trimmed}")
        };
        OpenCode {
            base,
            directory: None,
            proxy: None,
            timeout: DEFAULT_TIMEOUT,
            agent: build_agent(None, DEFAULT_TIMEOUT),
        }
    }

    /// Reach a remote server through the proxy `proxies` name for it (never a
    /// loopback one). The caller reads the proxy variables; this crate does not.
    pub fn with_proxies(mut self, proxies: &ProxyEnv) -> Self {
        self.proxy = proxy_for(&self.base, proxies).and_then(|url| ureq::Proxy::new(&url).ok());
        self.agent = build_agent(self.proxy.clone(), self.timeout);
        self
    }

    /// A shorter overall timeout per request (tests against hostile servers).
    #[cfg(any(test, feature = "testkit"))]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.agent = build_agent(self.proxy.clone(), timeout);
        self
    }

    /// Address the instance serving `directory` (`?directory=` on every call).
    pub fn with_directory(mut self, directory: Option<&str>) -> Self {
        self.directory = directory.filter(|d| !d.is_empty()).map(str::to_string);
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub fn directory(&self) -> Option<&str> {
        self.directory.as_deref()
    }

    /// `GET`/`PATCH /session/:id`.
    pub fn session_url(&self, session_id: &str) -> String {
        self.url(&["session", session_id], &[])
    }

    /// `POST /session/:id/prompt_async`.
    pub fn prompt_async_url(&self, session_id: &str) -> String {
        self.url(&["session", session_id, "prompt_async"], &[])
    }

    /// `GET /session/:id`: the session object (with `metadata`, `parentID`, …).
    pub fn get_session(&self, session_id: &str) -> Result<Value> {
        let url = self.session_url(session_id);
        match self.send("GET", &url, None)? {
            (404, body) => Err(self.error(
                ServerFailure::NoSession,
                format!(
                    "OpenCode has no session {session_id:?} (GET {url} answered 404: {})",
                    excerpt(&body)
                ),
            )),
            (status, body) => self.json_answer("GET", &url, status, &body),
        }
    }

    /// `PATCH /session/:id` with `{"metadata": metadata}`. OpenCode replaces
    /// the metadata wholesale, so `metadata` must be the whole merged object.
    pub fn patch_session_metadata(&self, session_id: &str, metadata: &Value) -> Result<Value> {
        let url = self.session_url(session_id);
        let body = serde_json::json!({ "metadata": metadata });
        let (status, text) = self.send("PATCH", &url, Some(&body))?;
        self.json_answer("PATCH", &url, status, &text)
    }

    /// `GET /session/:id/message/:messageID`: `{info, parts}`, or `None` when
    /// the server does not know the message (404).
    pub fn get_message(&self, session_id: &str, message_id: &str) -> Result<Option<Value>> {
        let url = self.url(&["session", session_id, "message", message_id], &[]);
        match self.send("GET", &url, None)? {
            (404, _) => Ok(None),
            (status, body) => self.json_answer("GET", &url, status, &body).map(Some),
        }
    }

    /// `GET /session/:id/message`: every message of the session, oldest first.
    pub fn list_messages(&self, session_id: &str) -> Result<Vec<Value>> {
        self.messages(session_id, &[])
    }

    /// The newest `limit` messages of the session, oldest first.
    pub fn list_recent_messages(&self, session_id: &str, limit: usize) -> Result<Vec<Value>> {
        self.messages(session_id, &[("limit", &limit.to_string())])
    }

    /// `POST /session/:id/prompt_async`. OpenCode answers 204 at once; any
    /// other 2xx is accepted only with an empty or JSON body (a web UI's HTML
    /// fallback page is not the OpenCode API and does not count as sent).
    pub fn prompt_async(&self, session_id: &str, body: &Value) -> Result<()> {
        let url = self.prompt_async_url(session_id);
        let (status, text) = self.send("POST", &url, Some(body))?;
        if !(200..300).contains(&status) {
            return Err(self.status_error("POST", &url, status, &text));
        }
        if !text.trim().is_empty() && serde_json::from_str::<Value>(&text).is_err() {
            return Err(self.not_the_api("POST", &url, status, &text));
        }
        Ok(())
    }

    fn messages(&self, session_id: &str, query: &[(&str, &str)]) -> Result<Vec<Value>> {
        let url = self.url(&["session", session_id, "message"], query);
        let (status, body) = self.send("GET", &url, None)?;
        match self.json_answer("GET", &url, status, &body)? {
            Value::Array(messages) => Ok(messages),
            other => Err(self.not_the_api("GET", &url, status, &other.to_string())),
        }
    }

    /// The absolute URL of a route: path segments percent-encoded, then the
    /// query, then `directory` when set.
    fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> String {
        let mut url = self.base.clone();
        for segment in segments {
            url.push('/');
            url.push_str(&encode(segment));
        }
        let directory = self.directory.as_deref().map(|d| ("directory", d));
        for (i, (key, value)) in query.iter().copied().chain(directory).enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&encode(key));
            url.push('=');
            url.push_str(&encode(value));
        }
        url
    }

    /// One request; answers the status and the body text whatever the status.
    fn send(&self, method: &str, url: &str, body: Option<&Value>) -> Result<(u16, String)> {
        let result = match (method, body) {
            ("GET", _) => self.agent.get(url).call(),
            ("PATCH", Some(body)) => self.agent.patch(url).send_json(body),
            ("POST", Some(body)) => self.agent.post(url).send_json(body),
            _ => unreachable!("no such request in this client: {method}"),
        };
        let mut response = result.map_err(|e| self.transport_error(method, url, e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(BODY_LIMIT)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| self.transport_error(method, url, e))?;
        Ok((status, text))
    }

    fn json_answer(&self, method: &str, url: &str, status: u16, body: &str) -> Result<Value> {
        if !(200..300).contains(&status) {
            return Err(self.status_error(method, url, status, body));
        }
        serde_json::from_str(body).map_err(|_| self.not_the_api(method, url, status, body))
    }

    fn error(&self, failure: ServerFailure, message: String) -> Error {
        Error::OpenCode {
            failure,
            base: self.base.clone(),
            message,
        }
    }

    fn transport_error(&self, method: &str, url: &str, error: ureq::Error) -> Error {
        let timed_out = match &error {
            ureq::Error::Timeout(_) => true,
            ureq::Error::Io(e) => e.kind() == std::io::ErrorKind::TimedOut,
            _ => false,
        };
        let (failure, what) = if timed_out {
            (
                ServerFailure::Timeout,
                format!("timed out after {:?}", self.timeout),
            )
        } else {
            (ServerFailure::Unreachable, error.to_string())
        };
        self.error(
            failure,
            format!("cannot reach OpenCode: {method} {url}: {what}"),
        )
    }

    fn status_error(&self, method: &str, url: &str, status: u16, body: &str) -> Error {
        self.error(
            ServerFailure::Status(status),
            format!(
                "OpenCode {method} {url} answered {status}: {}",
                excerpt(body)
            ),
        )
    }

    fn not_the_api(&self, method: &str, url: &str, status: u16, body: &str) -> Error {
        self.error(
            ServerFailure::NotTheApi,
            format!(
                "OpenCode {method} {url} answered {status} with something that is not the \
                 OpenCode API's JSON: {}",
                excerpt(body)
            ),
        )
    }
}

/// The agent, with its proxy set explicitly: ureq's default would read the
/// proxy variables from the environment, which this crate never does.
fn build_agent(proxy: Option<ureq::Proxy>, timeout: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .timeout_global(Some(timeout))
        .user_agent(concat!("mc/", env!("CARGO_PKG_VERSION")))
        .proxy(proxy)
        .build();
    ureq::Agent::new_with_config(config)
}

/// Percent-encode everything but RFC 3986 unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The start of a response body, on one line, for an error message.
fn excerpt(body: &str) -> String {
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        return "(empty body)".into();
    }
    match flat
        .char_indices()
        .nth(ERROR_BODY_CHARS)
        .and_then(|(cut, _)| flat.get(..cut))
    {
        Some(kept) => format!("{kept}…"),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_segments_and_the_directory() {
        let api = OpenCode::new("127.0.0.1:4096/").with_directory(Some("/home/me/my repo"));
        assert_eq!(api.base_url(), "http://127.0.0.1:4096");
        assert_eq!(
            api.session_url("ses_1"),
            "http://127.0.0.1:4096/session/ses_1?directory=%2Fhome%2Fme%2Fmy%20repo"
        );
        assert_eq!(
            api.url(&["session", "a/b", "message"], &[("limit", "20")]),
            "http://127.0.0.1:4096/session/a%2Fb/message?limit=20&directory=%2Fhome%2Fme%2Fmy%20repo"
        );
        let plain = OpenCode::new("https://oc.example.com");
        assert_eq!(
            plain.prompt_async_url("ses_1"),
            "https://oc.example.com/session/ses_1/prompt_async"
        );
    }

    #[test]
    fn only_remote_servers_go_through_the_proxy() {
        let proxies = ProxyEnv {
            all: Some("http://proxy.example:3128".into()),
            ..ProxyEnv::default()
        };
        for url in [
            "http://127.0.0.1:4096",
            "http://localhost:4096/x",
            "http://[::1]:4096",
            "http://user:pw@127.0.0.2",
        ] {
            assert_eq!(proxy_for(url, &proxies), None, "{url}");
        }
        for url in [
            "http://10.0.0.1:4096",
            "https://oc.example.com",
            "http://localhost.evil.com",
        ] {
            assert!(proxy_for(url, &proxies).is_some(), "{url}");
        }
    }

    #[test]
    fn error_excerpts_are_one_line_and_bounded() {
        assert_eq!(excerpt("  a\n b  "), "a b");
        assert_eq!(excerpt(""), "(empty body)");
        let long = "x".repeat(ERROR_BODY_CHARS + 50);
        assert_eq!(excerpt(&long).chars().count(), ERROR_BODY_CHARS + 1);
    }

    #[test]
    fn an_unreachable_server_is_an_error_naming_the_url() {
        // Bind then drop a listener: nothing answers on that port now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let api = OpenCode::new(&format!("http://127.0.0.1:{port}"));
        let error = api.get_session("ses_1").unwrap_err();
        let err = error.to_string();
        assert!(
            err.contains(&format!("127.0.0.1:{port}/session/ses_1")),
            "{err}"
        );
        assert!(err.starts_with("cannot reach OpenCode"), "{err}");
        // Its own kind, not an I/O error, and what to check as a hint.
        assert!(matches!(
            error,
            Error::OpenCode {
                failure: ServerFailure::Unreachable,
                ..
            }
        ));
        assert_eq!(error.kind(), mc_base::error::ErrorKind::Unavailable);
        assert!(error.hints()[0].contains(&format!("http://127.0.0.1:{port}")));
    }
}
