//! The contract between the gateway's HTTP side and mc's pass on a provider
//! request, so the server (which speaks HTTP and streams) and the pass (which
//! decides what the model sees) are built and tested apart.
//!
//! The server hands the pass a [`Call`]: the request body's bytes and the few
//! request facts the pass may use — never a credential. The pass answers with
//! new body bytes, or `None` to forward the request untouched (a side request,
//! or nothing to change). After the upstream answered, the server reports an
//! [`Answer`]: the status, the usage the provider streamed back, and the error
//! body of a failed call, so the next pass learns from them.
//!
//! Fail-open is the server's job: an `Err` from the pass, or a panic inside
//! it, sends the original bytes upstream.

use crate::domain::envelope::Usage;

/// The provider wire a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages (`POST /v1/messages`), as Claude Code sends it.
    AnthropicMessages,
    /// OpenAI Responses (`POST /responses`), as Codex sends it.
    OpenAiResponses,
}

/// One request on its way upstream.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub api: Api,
    /// The harness the request came from (`claude-code`, `codex`).
    pub harness: &'a str,
    /// The session the harness names in its headers, when it does
    /// (Claude Code: `x-claude-code-session-id`).
    pub session_id: Option<&'a str>,
    /// The request path and query as received (`/v1/messages?beta=true`).
    pub path: &'a str,
    /// The request's headers that are not credentials, lower-cased names,
    /// in the order received. `x-api-key`, `authorization`, cookies and
    /// anything else that carries a secret never reach the pass.
    pub headers: &'a [(String, String)],
    /// The body exactly as received.
    pub body: &'a [u8],
    /// Now, in milliseconds since the epoch (the server's clock, injected).
    pub now_ms: i64,
}

impl Call<'_> {
    /// The first value of a header, by its lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the pass made of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// Send the original bytes (a side request, or nothing to change).
    Untouched,
    /// Send these bytes instead.
    Body(Vec<u8>),
    /// The pass failed: send these bytes (what the pass last sent for the
    /// session and what the request adds to it) rather than the original.
    Fallback(Vec<u8>),
}

/// What came back for a call the pass saw.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// The upstream's HTTP status.
    pub status: u16,
    /// The usage the provider reported for this call (streamed or not), when
    /// it did.
    pub usage: Option<Usage>,
    /// The body of an error answer (status ≥ 400), at most a bounded prefix.
    pub error_body: Option<&'a [u8]>,
}

/// mc's pass as the gateway's server drives it. Implementations keep their
/// own per-session state and must be usable from several request threads.
pub trait Pass: Send + Sync {
    /// Decide the body of one request. `Err` and panics mean: forward the
    /// original bytes.
    fn request(&self, call: &Call<'_>) -> crate::Result<Forward>;

    /// Learn from the upstream's answer to a call (usage for the next pass, a
    /// context-overflow error as the model's limit). Never fails the call.
    fn answered(&self, call: &Call<'_>, answer: &Answer<'_>);
}

/// The pass that changes nothing: every request goes upstream as it came.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl Pass for Identity {
    fn request(&self, _call: &Call<'_>) -> crate::Result<Forward> {
        Ok(Forward::Untouched)
    }

    fn answered(&self, _call: &Call<'_>, _answer: &Answer<'_>) {}
}

/// One gateway, two wires: each call goes to the pass of its [`Api`].
pub struct ByApi {
    pub anthropic: std::sync::Arc<dyn Pass>,
    pub responses: std::sync::Arc<dyn Pass>,
}

impl ByApi {
    fn of(&self, api: Api) -> &dyn Pass {
        match api {
            Api::AnthropicMessages => self.anthropic.as_ref(),
            Api::OpenAiResponses => self.responses.as_ref(),
        }
    }
}

impl Pass for ByApi {
    fn request(&self, call: &Call<'_>) -> crate::Result<Forward> {
        self.of(call.api).request(call)
    }

    fn answered(&self, call: &Call<'_>, answer: &Answer<'_>) {
        self.of(call.api).answered(call, answer);
    }
}
