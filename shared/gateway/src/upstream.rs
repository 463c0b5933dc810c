//! The call to the upstream (ureq): the client's headers as received, less
//! the hop-by-hop ones; the body the pass chose; no redirect followed, no
//! status turned into an error, no decompression asked for; the upstream's
//! address looked up once a minute, not on every call.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use mc_base::{Error, Result};
use ureq::config::AutoHeaderValue;
use ureq::http;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

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
    let config = ureq::Agent::config_builder()
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
        .build();
    Ok(ureq::Agent::with_parts(
        config,
        DefaultConnector::default(),
        Remembering::new(DefaultResolver::default()),
    ))
}

/// How long a looked-up upstream address is used before it is looked up again.
const REMEMBERED_FOR: Duration = Duration::from_secs(60);

/// A resolver that remembers each upstream's addresses for
/// [`REMEMBERED_FOR`]. ureq looks the host up before it reuses a pooled
/// connection, so without it every call to `api.anthropic.com` waited on a
/// blocking DNS lookup first.
#[derive(Debug)]
struct Remembering<R> {
    inner: R,
    /// `scheme://authority`, its addresses, when they were looked up.
    known: Mutex<Vec<(String, ResolvedSocketAddrs, Instant)>>,
}

impl<R: Resolver> Remembering<R> {
    fn new(inner: R) -> Remembering<R> {
        Remembering {
            inner,
            known: Mutex::new(Vec::new()),
        }
    }
}

impl<R: Resolver> Resolver for Remembering<R> {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> std::result::Result<ResolvedSocketAddrs, ureq::Error> {
        let key = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or_default(),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        {
            let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            known.retain(|(_, _, at)| at.elapsed() < REMEMBERED_FOR);
            if let Some((_, addrs, _)) = known.iter().find(|(k, _, _)| *k == key) {
                return Ok(addrs.clone());
            }
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.retain(|(k, _, _)| *k != key);
        known.push((key, addrs.clone(), Instant::now()));
        Ok(addrs)
    }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its lookups; answers 127.0.0.1 on the URI's port.
    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);

    impl Resolver for Counting {
        fn resolve(
            &self,
            uri: &http::Uri,
            _config: &ureq::config::Config,
            _timeout: NextTimeout,
        ) -> std::result::Result<ResolvedSocketAddrs, ureq::Error> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let mut addrs = self.empty();
            addrs.push(std::net::SocketAddr::from((
                [127, 0, 0, 1],
                uri.port_u16().unwrap_or(443),
            )));
            Ok(addrs)
        }
    }

    #[test]
    fn an_upstream_is_looked_up_once_not_on_every_call() {
        let resolver = Remembering::new(Counting::default());
        let config = ureq::config::Config::default();
        let api: http::Uri = "https://api.anthropic.com/v1/messages".parse().unwrap();
        let other: http::Uri = "https://api.openai.com/v1/responses".parse().unwrap();
        for _ in 0..3 {
            let addrs = resolver
                .resolve(&api, &config, NextTimeout::default())
                .unwrap();
            assert_eq!(addrs.len(), 1);
            assert_eq!(addrs.first().map(|a| a.port()), Some(443));
        }
        assert_eq!(resolver.inner.0.load(Ordering::SeqCst), 1);
        resolver
            .resolve(&other, &config, NextTimeout::default())
            .unwrap();
        assert_eq!(
            resolver.inner.0.load(Ordering::SeqCst),
            2,
            "one lookup per host"
        );
        // Once it is older than a minute, it is looked up again.
        resolver
            .known
            .lock()
            .unwrap()
            .iter_mut()
            .for_each(|(_, _, at)| {
                *at = Instant::now().checked_sub(REMEMBERED_FOR).unwrap();
            });
        resolver
            .resolve(&api, &config, NextTimeout::default())
            .unwrap();
        assert_eq!(resolver.inner.0.load(Ordering::SeqCst), 3);
    }
}
