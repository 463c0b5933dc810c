//! What the gateway is started with: where it listens (loopback only), the
//! one upstream it forwards to, and its bounds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mc_base::{Error, Result};

/// The provider every request goes to: `scheme://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Without a trailing `/`.
    base: String,
    /// `host[:port]`, to check every URL built against it.
    authority: String,
}

impl Upstream {
    /// Check an upstream URL (`gateway.anthropic_upstream`): `http` or
    /// `https`, a host, no credentials, no query or fragment.
    pub fn parse(text: &str) -> Result<Upstream> {
        Upstream::parse_key(
            text,
            "gateway.anthropic_upstream",
            "https://api.anthropic.com",
        )
    }

    /// [`Upstream::parse`] of `gateway.openai_upstream`, Codex's.
    pub fn parse_openai(text: &str) -> Result<Upstream> {
        Upstream::parse_key(text, "gateway.openai_upstream", "https://api.openai.com/v1")
    }

    fn parse_key(text: &str, key: &str, example: &str) -> Result<Upstream> {
        let bad = |why: &str| {
            Error::Config(format!(
                "{key} is {text:?}: {why}; give a base URL such as {example}"
            ))
        };
        let rest = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"))
            .ok_or_else(|| bad("it must start with https:// or http://"))?;
        if rest.contains(['?', '#']) {
            return Err(bad("a base URL has no query or fragment"));
        }
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(bad("it names no host"));
        }
        if authority.contains('@') {
            return Err(bad("credentials do not belong in the URL"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it holds spaces or control characters"));
        }
        Ok(Upstream {
            base: text.trim_end_matches('/').to_string(),
            authority: authority.to_string(),
        })
    }

    /// The base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `host[:port]` of the upstream.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The upstream URL of a request target in origin form (`/v1/messages?beta=true`).
    pub(crate) fn url_for(&self, target: &str) -> Option<String> {
        target
            .starts_with('/')
            .then(|| format!("{}{target}", self.base))
    }
}

/// The gateway's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Worker threads: the most requests served at once (a streaming answer
    /// holds one for its whole length).
    pub workers: usize,
    /// Accepted connections waiting for a worker; past it a client gets 503.
    pub queue: usize,
    /// The largest request body, in bytes; a larger one gets 413 unread.
    pub max_body: usize,
    /// The largest request head (request line and headers).
    pub max_head: usize,
    /// How long a client may take to send its request, per read.
    pub client_read: Duration,
    /// How long a write to a client may block (a client that stopped reading).
    pub client_write: Duration,
    /// Connecting to the upstream.
    pub upstream_connect: Duration,
    /// Silence from the upstream, per read, before the call is given up.
    pub upstream_read: Duration,
    /// The most of an error body kept for the pass.
    pub error_prefix: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            workers: 32,
            queue: 1024,
            // Anthropic's own limit for a Messages request is 32 MB; a larger
            // body would be refused upstream anyway.
            max_body: 32 * 1024 * 1024,
            max_head: 64 * 1024,
            client_read: Duration::from_secs(60),
            client_write: Duration::from_secs(300),
            upstream_connect: Duration::from_secs(10),
            // Claude Code gives a call 600 s; Anthropic pings a live stream
            // far more often than that.
            upstream_read: Duration::from_secs(600),
            error_prefix: 64 * 1024,
        }
    }
}

/// Everything the gateway starts with. The binary reads it from mc's user
/// config and the command line; the clock is injected.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub upstream: Upstream,
    /// Where requests under [`OPENAI_PREFIX`] go (Codex's Responses calls),
    /// the prefix taken off; `None`: those paths go to `upstream` too.
    pub openai_upstream: Option<Upstream>,
    pub limits: Limits,
    /// The harness the requests come from (`claude-code`), for the pass.
    pub harness: String,
    /// A proxy for the upstream connection (`http://host:port`), if any.
    pub proxy: Option<String>,
    /// Now, in milliseconds since the epoch.
    pub clock: Arc<dyn Fn() -> i64 + Send + Sync>,
}

/// The path prefix of Codex's requests: its provider's base URL is the
/// gateway's address and this prefix, so `POST /openai/responses` is a
/// Responses call, and every other path an Anthropic one.
pub const OPENAI_PREFIX: &str = "/openai";

/// Refuse a listening address that is not loopback: the gateway carries the
/// user's credentials and must not be reachable from the network.
pub fn check_listen(addr: &SocketAddr) -> Result<()> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{addr} is not a loopback address: the gateway listens on loopback only \
             (127.0.0.1 or [::1]), since every request through it carries a credential; \
             use 127.0.0.1:PORT (--listen or gateway.listen)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_is_a_plain_base_url() {
        let up = Upstream::parse("https://api.anthropic.com/").unwrap();
        assert_eq!(up.base(), "https://api.anthropic.com");
        assert_eq!(up.authority(), "api.anthropic.com");
        assert_eq!(
            up.url_for("/v1/messages?beta=true").unwrap(),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        let prefixed = Upstream::parse("http://127.0.0.1:9/proxy").unwrap();
        assert_eq!(
            prefixed.url_for("/v1/x").unwrap(),
            "http://127.0.0.1:9/proxy/v1/x"
        );
        for bad in [
            "api.anthropic.com",
            "ftp://x",
            "https://",
            "https://user:pw@x",
            "https://x/?a=1",
            "https://x/a b",
        ] {
            let err = Upstream::parse(bad).unwrap_err().to_string();
            assert!(err.contains("gateway.anthropic_upstream"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_openai_upstream_names_its_own_key() {
        let up = Upstream::parse_openai("https://api.openai.com/v1/").unwrap();
        assert_eq!(
            up.url_for("/responses").unwrap(),
            "https://api.openai.com/v1/responses"
        );
        let err = Upstream::parse_openai("https://k@x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("gateway.openai_upstream"), "{err}");
    }

    #[test]
    fn a_target_not_in_origin_form_gets_no_url() {
        let up = Upstream::parse("https://api.anthropic.com").unwrap();
        assert_eq!(up.url_for("http://evil.example/v1/messages"), None);
        assert_eq!(up.url_for("*"), None);
        assert_eq!(up.url_for("evil.example:443"), None);
    }

    #[test]
    fn only_loopback_may_listen() {
        assert!(check_listen(&"127.0.0.1:0".parse().unwrap()).is_ok());
        assert!(check_listen(&"[::1]:8080".parse().unwrap()).is_ok());
        for addr in ["0.0.0.0:8080", "192.168.1.2:80", "[::]:80"] {
            let err = check_listen(&addr.parse().unwrap()).unwrap_err();
            assert!(err.to_string().contains("loopback only"), "{addr}: {err}");
        }
    }
}
