//! The call to the upstream (ureq): the client's headers as received, less
//! the hop-by-hop ones; the body the pass chose; no redirect followed, no
//! status turned into an error, no decompression asked for.

use mc_base::{Error, Result};
use ureq::config::AutoHeaderValue;
use ureq::http;

use crate::config::{Config, Limits};

/// A ureq agent for `config`'s upstream.
pub(crate) fn agent(config: &Config) -> Result<ureq::Agent> {
    let proxy = match &config.proxy {
        Some(url) => Some(
            ureq::Proxy::new(url)
                .map_err(|e| Error::Config(format!("the gateway's proxy {url:?}: {e}")))?,
        ),
        None => None,
    };
    let Limits {
        upstream_connect,
        upstream_read,
        workers,
        ..
    } = config.limits;
    Ok(ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(proxy)
        .allow_non_standard_methods(true)
        .timeout_connect(Some(upstream_connect))
        .timeout_per_read(Some(upstream_read))
        .timeout_per_write(Some(upstream_read))
        // Nothing of ureq's own: the client's headers are the request's.
        .user_agent(AutoHeaderValue::None)
        .accept(AutoHeaderValue::None)
        // The answer must be readable as it passes (usage, SSE events); the
        // loopback hop gains nothing from compression.
        .accept_encoding(AutoHeaderValue::Provided(std::sync::Arc::new(
            "identity".into(),
        )))
        .max_idle_connections(workers)
        .max_idle_connections_per_host(workers)
        .build()
        .new_agent())
}

/// Why an upstream call gave no answer, as the client is told.
pub(crate) struct Failed {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
}

/// Send one request upstream.
pub(crate) fn send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
) -> std::result::Result<http::Response<ureq::Body>, Failed> {
    let mut builder = http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(name.as_str(), value.as_slice());
    }
    let bad = |e: http::Error| Failed {
        status: 400,
        kind: "invalid_request_error",
        message: format!("the request cannot be forwarded ({e})"),
    };
    let outcome = if body.is_empty() && matches!(method, "GET" | "HEAD" | "OPTIONS" | "DELETE") {
        agent.run(builder.body(()).map_err(bad)?)
    } else {
        agent.run(builder.body(body).map_err(bad)?)
    };
    outcome.map_err(|e| failed(url, &e))
}

fn failed(url: &str, error: &ureq::Error) -> Failed {
    // The URL is the configured upstream's, never a credential; ureq's
    // errors name no header.
    let origin = url.split('/').take(3).collect::<Vec<_>>().join("/");
    match error {
        ureq::Error::Timeout(_) => Failed {
            status: 504,
            kind: "timeout_error",
            message: format!("the upstream {origin} did not answer in time ({error})"),
        },
        _ => Failed {
            status: 502,
            kind: "api_error",
            message: format!(
                "the upstream {origin} could not be reached ({error}); check the gateway's upstream (gateway.anthropic_upstream, or gateway.openai_upstream for /openai) and the network"
            ),
        },
    }
}
