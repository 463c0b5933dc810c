//! JSON over HTTP with ureq: explicit timeouts, no redirects (a key header
//! must not follow one), proxies decided here from the values the binary
//! passed, and non-2xx answers read with their body.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{CallFailure, LlmError, ModelRef, Options, ProxyEnv, excerpt, redact};

/// Bytes of an error body shown in an error message.
const ERROR_BODY_CHARS: usize = 1_000;
/// Largest answer body read (an answer of 128k tokens is far below this).
const MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;

/// A built request: what is sent, and what `mc-historian prompt` shows.
pub(super) struct Request {
    pub url: String,
    /// Header name → value; the API key header is last.
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

impl Request {
    pub(super) fn describe(&self, kind: &str) -> Value {
        let headers: Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(v.as_str())))
            .collect();
        serde_json::json!({
            "kind": kind,
            "method": "POST",
            "url": self.url,
            "headers": headers,
            "body": self.body,
        })
    }
}

/// A provider's answer: status, Retry-After, body text.
pub(super) struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: String,
}

pub(super) struct Http {
    direct: ureq::Agent,
    /// Per proxy URL, an agent that uses it.
    options: Options,
}

impl Http {
    pub(super) fn new(options: &Options) -> Http {
        Http {
            direct: agent(options, None),
            options: options.clone(),
        }
    }

    fn agent_for(&self, url: &str) -> Result<ureq::Agent, String> {
        match proxy_for(url, &self.options.proxy) {
            None => Ok(self.direct.clone()),
            Some(proxy) => {
                let proxy = ureq::Proxy::new(&proxy)
                    .map_err(|e| format!("the proxy from the environment is unusable: {e}"))?;
                Ok(agent(&self.options, Some(proxy)))
            }
        }
    }

    /// POST the request; any HTTP status comes back as an [`Answer`].
    pub(super) fn post(
        &self,
        model: &ModelRef,
        request: &Request,
        secret: Option<&str>,
    ) -> Result<Answer, LlmError> {
        let body = serde_json::to_vec(&request.body).map_err(|e| {
            LlmError::new(
                Some(model),
                CallFailure::Protocol,
                format!("cannot encode the request: {e}"),
            )
        })?;
        let agent = self
            .agent_for(&request.url)
            .map_err(|e| LlmError::new(Some(model), CallFailure::Config, e))?;
        let mut builder = agent.post(&request.url);
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        let response = builder.send(&body[..]);
        self.answer(model, &request.url, response, secret, self.options.timeout)
    }

    /// One JSON request with a whole-call timeout of its own (a harness's
    /// server: short calls around the long one); any HTTP status comes back
    /// as an [`Answer`].
    pub(super) fn send(
        &self,
        model: &ModelRef,
        method: Method,
        url: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Answer, LlmError> {
        let agent = self
            .agent_for(url)
            .map_err(|e| LlmError::new(Some(model), CallFailure::Config, e))?;
        let response = match method {
            Method::Get => agent
                .get(url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .call(),
            Method::Delete => agent
                .delete(url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .call(),
            Method::Post => {
                let bytes = serde_json::to_vec(body.unwrap_or(&Value::Null)).map_err(|e| {
                    LlmError::new(
                        Some(model),
                        CallFailure::Protocol,
                        format!("cannot encode the request: {e}"),
                    )
                })?;
                agent
                    .post(url)
                    .header("content-type", "application/json")
                    .config()
                    .timeout_global(Some(timeout))
                    .build()
                    .send(&bytes[..])
            }
        };
        self.answer(model, url, response, None, timeout)
    }

    fn answer(
        &self,
        model: &ModelRef,
        url: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        secret: Option<&str>,
        timeout: Duration,
    ) -> Result<Answer, LlmError> {
        let mut response =
            response.map_err(|e| transport_error(model, url, e, &self.options, timeout))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(3600.0)));
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_string()
            .map_err(|e| transport_error(model, url, e, &self.options, timeout))?;
        Ok(Answer {
            status,
            retry_after,
            body: redact(&body, secret),
        })
    }
}

/// The methods a harness's server is called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    Get,
    Post,
    Delete,
}

fn agent(options: &Options, proxy: Option<ureq::Proxy>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(options.connect_timeout))
        .timeout_global(Some(options.timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(proxy)
        .user_agent(concat!("mc/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

fn transport_error(
    model: &ModelRef,
    url: &str,
    error: ureq::Error,
    options: &Options,
    timeout: Duration,
) -> LlmError {
    let timeout_hint = "raise historian.timeout_ms in the user config \
                        (historian.connect_timeout_ms for connecting)";
    match error {
        ureq::Error::Timeout(what) => LlmError::new(
            Some(model),
            CallFailure::Timeout,
            format!(
                "no answer from {url} within {} ms (timeout: {what})",
                match what {
                    ureq::Timeout::Connect => options.connect_timeout.as_millis(),
                    _ => timeout.as_millis(),
                }
            ),
        )
        .with_hint(timeout_hint),
        ureq::Error::BadUri(e) => LlmError::new(
            Some(model),
            CallFailure::Config,
            format!("bad URL {url}: {e}"),
        ),
        ureq::Error::BodyExceedsLimit(n) => LlmError::new(
            Some(model),
            CallFailure::Protocol,
            format!("the answer from {url} is larger than {n} bytes"),
        ),
        // An I/O error can wrap a timeout on some platforms.
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::TimedOut => LlmError::new(
            Some(model),
            CallFailure::Timeout,
            format!("no answer from {url} within the timeout: {e}"),
        )
        .with_hint(timeout_hint),
        other => LlmError::new(
            Some(model),
            CallFailure::Transport,
            format!("cannot reach {url}: {other}"),
        )
        .with_hint(format!(
            "check providers.{}.base_url and the network (HTTPS_PROXY, NO_PROXY)",
            model.provider
        )),
    }
}

/// The error for a non-2xx answer: status, reason and the body.
pub(super) fn status_error(model: &ModelRef, answer: &Answer) -> LlmError {
    let reason = http_reason(answer.status);
    let body = excerpt(&compact_json(&answer.body), ERROR_BODY_CHARS);
    let message = if body.is_empty() {
        format!("HTTP {} {reason} (empty body)", answer.status)
    } else {
        format!("HTTP {} {reason}: {body}", answer.status)
    };
    let provider = &model.provider;
    let hints = match answer.status {
        401 | 403 => vec![format!(
            "check the API key in the variable providers.{provider}.api_key_env names"
        )],
        404 => vec![format!(
            "check the model name and providers.{provider}.base_url"
        )],
        _ => Vec::new(),
    };
    LlmError {
        retry_after: answer.retry_after,
        hints,
        ..LlmError::new(Some(model), CallFailure::Status(answer.status), message)
    }
}

/// A JSON body on one line (error messages are one line); other text as is.
fn compact_json(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(value) => value.to_string(),
        Err(_) => body.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

fn http_reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        300..=399 => "Redirect (not followed)",
        _ => "",
    }
}

/// The answer body as JSON, or a protocol error that quotes it.
pub(super) fn parse_json(model: &ModelRef, answer: &Answer) -> Result<Value, LlmError> {
    serde_json::from_str(&answer.body).map_err(|e| {
        LlmError::new(
            Some(model),
            CallFailure::Protocol,
            format!(
                "the answer is not JSON ({e}): {}",
                excerpt(&answer.body, ERROR_BODY_CHARS)
            ),
        )
    })
}

/// The host of an `http(s)://` URL, lower-cased, without port or brackets.
fn host_of(url: &str) -> Option<(String, bool)> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        (false, url.strip_prefix("http://")?)
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        host_port.split(':').next()?
    };
    Some((host.to_ascii_lowercase(), https))
}

/// The proxy URL to use for `url`, if any: never for loopback hosts or hosts
/// `NO_PROXY` names (`*`, `host`, `.domain`, `*.domain`; a bare domain also
/// covers its subdomains, as curl does).
pub(crate) fn proxy_for(url: &str, env: &ProxyEnv) -> Option<String> {
    let (host, https) = host_of(url)?;
    let loopback = host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return None;
    }
    if let Some(list) = &env.no_proxy {
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let entry = entry.to_ascii_lowercase();
            let entry = entry.split(':').next().unwrap_or("");
            if entry == "*" {
                return None;
            }
            let domain = entry.trim_start_matches('*').trim_start_matches('.');
            if !domain.is_empty() && (host == domain || host.ends_with(&format!(".{domain}"))) {
                return None;
            }
        }
    }
    let specific = if https { &env.https } else { &env.http };
    specific.clone().or_else(|| env.all.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_skip_loopback_and_no_proxy_hosts() {
        let env = ProxyEnv {
            https: Some("http://proxy:3128".into()),
            http: None,
            all: Some("http://all:1".into()),
            no_proxy: Some("internal.example, .corp, *.lab:8080".into()),
        };
        assert_eq!(
            proxy_for("https://api.anthropic.com", &env).as_deref(),
            Some("http://proxy:3128")
        );
        assert_eq!(
            proxy_for("http://ollama.box:11434/v1", &env).as_deref(),
            Some("http://all:1")
        );
        for direct in [
            "http://127.0.0.1:11434/v1",
            "http://localhost:8080",
            "http://[::1]:8080/v1",
            "https://internal.example/v1",
            "https://api.internal.example/v1",
            "https://x.corp",
            "https://gpu.lab/v1",
        ] {
            assert_eq!(proxy_for(direct, &env), None, "{direct}");
        }
        assert_eq!(
            proxy_for("https://notinternal.example", &env).as_deref(),
            Some("http://proxy:3128")
        );
        let everything = ProxyEnv {
            no_proxy: Some("*".into()),
            ..env
        };
        assert_eq!(proxy_for("https://api.openai.com/v1", &everything), None);
        assert_eq!(proxy_for("https://x", &ProxyEnv::default()), None);
    }

    #[test]
    fn status_errors_quote_the_body_on_one_line() {
        let model = ModelRef::parse("a/b").unwrap();
        let answer = Answer {
            status: 429,
            retry_after: Some(Duration::from_secs(2)),
            body: "{\n  \"type\": \"error\",\n  \"error\": {\"type\": \"rate_limit_error\"}\n}"
                .into(),
        };
        let e = status_error(&model, &answer);
        assert_eq!(
            e.to_string(),
            "a/b: HTTP 429 Too Many Requests: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}"
        );
        assert_eq!(e.retry_after, Some(Duration::from_secs(2)));
        assert!(e.is_retryable());
    }
}
