//! The arguments: clap's types for every subcommand.

use clap::{Parser, Subcommand};

use mc_cli::GlobalArgs;

const ABOUT: &str = "Per-call context transform for coding agents.

With no subcommand, reads one envelope (JSON) on stdin — the harness's messages plus
model, usage and session — and writes {\"messages\", \"system\", \"pass\"} on stdout.
Every message and tool output is tagged §N§; drops the agent queued with `reduce`
and age-based cleanup are applied only on passes that bust the prompt cache anyway,
and replayed byte-for-byte on every other pass.

The pass fails open: on any internal error it prints the input messages unchanged
with \"decision\": \"passthrough\" and exits 0. Input that is not JSON or has no
\"messages\" exits 2.";

#[derive(Parser, Debug)]
#[command(name = "mc-transform", version, about = ABOUT)]
pub struct Args {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one pass (the default): envelope on stdin, transformed messages on stdout
    Pass,
    /// Queue tags for dropping (the agent's ctx_reduce). Nothing changes on the
    /// wire until a pass that busts the cache anyway.
    ///
    /// Answers {"queued", "protected", "unknown", "already"}. Protected tags (the
    /// newest ones) are queued too but wait until they leave the protected window.
    /// Without flags, reads {"harness", "session_id", "drop"} on stdin.
    Reduce {
        /// Session id
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Tags to drop, e.g. 3-5,12 (§ signs are ignored)
        #[arg(long, value_name = "SPEC")]
        drop: Option<String>,
        /// Harness of the session
        #[arg(long, default_value = "opencode")]
        harness: String,
    },
    /// Show what the store knows about a session: tags, tokens, pending drops,
    /// last decision and bust, pass counts, and its newest calls with the
    /// cause of every cache bust
    Status {
        /// Session id
        #[arg(long, value_name = "ID")]
        session: String,
        /// Harness of the session
        #[arg(long, default_value = "opencode")]
        harness: String,
        /// How many of the newest recorded calls to show (0: none)
        #[arg(long, value_name = "N", default_value_t = crate::cmd::status::DEFAULT_CALLS)]
        calls: usize,
    },
    /// Replace estimated token counts with exact ones for the parts of the
    /// envelope on stdin (loads the tokenizer: run it off the per-call path)
    Recount,
    /// Render one call's system prompt, for harnesses that hand it to a hook of
    /// its own after the messages pass (OpenCode's experimental.chat.system.transform)
    ///
    /// Reads {"harness", "session_id", "system": ["..."]} and writes {"system",
    /// "known_session", "guidance", "today"}: the guidance about §N§ tags appended
    /// once, and the `Today's date:` line frozen until a pass that busts the cache
    /// anyway. A session no pass has seen comes back unchanged. Fails open like
    /// the pass: on an internal error the input parts come back with a warning.
    System,
    /// Learn from a provider's context-overflow error (the harness's session
    /// error event): reads {"harness", "session_id", "model": {"provider", "id"},
    /// "error": <the error text or object>}
    ///
    /// Recognises the wordings of Anthropic ("prompt is too long: N tokens > M
    /// maximum"), OpenAI-compatible servers ("maximum context length is M
    /// tokens", context_length_exceeded) and GitHub Copilot ("prompt token
    /// count of N exceeds the limit of M"). Stores the limit for the model (every
    /// later pass on it uses at most that) and makes the session's next pass an
    /// emergency. Answers {"recognised": false} for anything else, also exit 0.
    Overflow,
    /// Stay resident: read one request per line on stdin, write one answer per
    /// line on stdout, until stdin ends or the parent process goes away
    ///
    /// A request is what a command reads on stdin, as one JSON line, with
    /// "kind": "pass" (the default), "system", "reduce", "status" (with
    /// "session_id" and "harness"), "recount" or "overflow"; its answer is
    /// exactly the line that command prints. A failure, or a line that is no
    /// request, is answered {"error": {"code", "message", "exit"?, "hints"?}}
    /// and the process stays up. A pass request may carry "incremental" (see
    /// the README): then it is answered relative to the previous call.
    Serve {
        /// Longest request line read; a longer one is skipped and answered
        /// with an error
        #[arg(long, value_name = "BYTES", default_value_t = mc_cli::serve::DEFAULT_MAX_REQUEST_BYTES)]
        max_request_bytes: usize,
        /// Sessions whose incremental baselines are kept (least recently used dropped)
        #[arg(long, value_name = "N", default_value_t = mc_transform_core::incremental::DEFAULT_SESSIONS)]
        sessions: usize,
    },
    /// Serve as Claude Code's and Codex's provider: a local HTTP server that
    /// forwards every request to its upstream and streams the answer back
    ///
    /// Point Claude Code at it with ANTHROPIC_BASE_URL=http://ADDRESS. Every
    /// request goes to gateway.anthropic_upstream (mc's user config; default
    /// https://api.anthropic.com) with its headers as received — the API key or
    /// the subscription login included, never stored or printed — and the
    /// answer streams back as it comes, status and errors unchanged. Messages
    /// calls (POST /v1/messages) go through mc's pass first; any failure in it
    /// sends the original bytes. It listens on loopback only, refuses targets
    /// that name another host, bodies over 32 MiB (413) and, when every
    /// worker is busy, answers 503. Codex's provider has base_url
    /// http://ADDRESS/openai: paths under /openai go, the prefix taken off, to
    /// gateway.openai_upstream (default https://api.openai.com/v1; with a
    /// ChatGPT login https://chatgpt.com/backend-api/codex), and POST
    /// /openai/responses through mc's pass for the Responses API. Runs until
    /// killed; a taken port exits 1.
    ///
    /// With --ensure it returns at once instead: 0 when mc's gateway answers
    /// at the address, the one there or one it started in the background
    /// (detached); 2, with the reason, when none can be had (a hook's
    /// "block": Claude Code and Codex then hold the prompt back and show the
    /// reason). Their SessionStart and UserPromptSubmit hooks run it
    /// (mc-doctor setup).
    Gateway {
        /// Address to listen on, loopback only [default: gateway.listen, 127.0.0.1:4141]
        #[arg(long, value_name = "ADDRESS")]
        listen: Option<String>,
        /// Make sure one answers (start it detached when none does), then exit
        #[arg(long)]
        ensure: bool,
    },
    /// Run Claude Code through the gateway, or straight to the provider when
    /// no gateway can be had
    ///
    /// Finds mc's gateway at gateway.listen, starts one in the background when
    /// none answers, and runs `claude ARGS…` (MC_CLAUDE_BIN, else claude on
    /// PATH) with ANTHROPIC_BASE_URL at it. While Claude Code runs, a gateway
    /// that stopped is started again (Claude Code retries a refused connection
    /// for minutes, so a call in flight is delayed, not lost). When no gateway
    /// can be started, or ANTHROPIC_BASE_URL names another provider than
    /// gateway.anthropic_upstream, Claude Code runs unchanged, with a warning.
    /// Exits with Claude Code's exit code.
    Claude {
        /// Claude Code's own arguments
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// Run Codex through the gateway, or on its own provider when no gateway
    /// can be had
    ///
    /// Finds mc's gateway at gateway.listen, starts one in the background when
    /// none answers, and runs `codex ARGS…` (MC_CODEX_BIN, else codex on PATH)
    /// with a provider of mc's for this run only: `-c` overrides selecting
    /// model_providers.mc-gateway (wire_api "responses", base_url the
    /// gateway's /openai, the key from OPENAI_API_KEY when set, else the
    /// ChatGPT login). Requests go on to gateway.openai_upstream. Codex's
    /// config is not written; when no gateway can be started, Codex runs as
    /// configured, with a warning. While Codex runs, a gateway that stopped is
    /// started again (Codex waits for a closed port rather than failing).
    /// Exits with Codex's exit code.
    Codex {
        /// Codex's own arguments
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
}
