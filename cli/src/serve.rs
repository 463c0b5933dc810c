//! The edge of a resident process (`mc-transform serve`): JSON Lines in, one
//! answer line out per request, error lines in the manner of JSON-RPC, a
//! request-size cap, and leaving when the parent does.

use std::io::{self, Write};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::Failure;

/// The largest request line read by default: far above any envelope a
/// harness sends (a 1M-token session is a few MB), small enough that a
/// runaway writer cannot exhaust memory. Beyond it the line is skipped
/// unread and answered with an error; the adapter sends that call through
/// the one-shot command instead.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 << 20;

/// How often the parent is looked for.
pub const PARENT_CHECK: Duration = Duration::from_millis(500);

/// JSON-RPC's codes, as the error lines use them.
pub mod code {
    /// The line is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// JSON, but not a request (not an object, too large).
    pub const INVALID_REQUEST: i64 = -32600;
    /// An unknown `kind`.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The command refused its input (a one-shot command would exit 2).
    pub const INVALID_PARAMS: i64 = -32602;
    /// A bug (a panic) caught while answering.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The command failed at run time (a one-shot command would exit 1).
    pub const SERVER_ERROR: i64 = -32000;
}

/// Request lines, each under a bound: mc-base's reader, which the MCP
/// server reads with too.
pub use mc_base::lines::{Line, Lines};

/// An error line: `{"error": {"code", "message", "exit"?, "hints"?}}`.
/// `exit` is the code the one-shot command would have exited with.
pub fn error_answer(code: i64, message: String, exit: Option<u8>, hints: &[String]) -> Value {
    let mut error = Map::new();
    error.insert("code".into(), json!(code));
    error.insert("message".into(), Value::String(message));
    if let Some(exit) = exit {
        error.insert("exit".into(), json!(exit));
    }
    if !hints.is_empty() {
        error.insert("hints".into(), json!(hints));
    }
    json!({ "error": error })
}

/// The error line of a command's failure: its message and hints, and the
/// exit code the one-shot command would have ended with.
pub fn failure_answer(failure: &Failure) -> Value {
    let code = if failure.code == 2 {
        code::INVALID_PARAMS
    } else {
        code::SERVER_ERROR
    };
    error_answer(
        code,
        format!("{:#}", failure.error),
        Some(failure.code),
        &failure.hints,
    )
}

/// Write `value` as one compact line and flush it: the reader waits for it.
pub fn write_line(out: &mut impl Write, value: &Value) -> io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Leave (exit 0) when the parent process is gone, even if stdin stays open
/// (another process may hold the pipe): checked every [`PARENT_CHECK`] from
/// a thread of its own. Unix only; elsewhere stdin's end is the only signal.
pub fn exit_with_parent() {
    #[cfg(unix)]
    {
        let parent = std::os::unix::process::parent_id();
        let _ = std::thread::Builder::new()
            .name("parent-watch".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(PARENT_CHECK);
                    if std::os::unix::process::parent_id() != parent {
                        // The database is transactional: whatever a request
                        // was doing is rolled back, never half-written.
                        std::process::exit(0);
                    }
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_answers_with_the_one_shot_exit_code() {
        let input = Failure::input(anyhow::anyhow!("bad"));
        let answer = failure_answer(&input);
        assert_eq!(
            answer,
            json!({"error": {"code": code::INVALID_PARAMS, "message": "bad", "exit": 2}})
        );
        let runtime = Failure::runtime(anyhow::anyhow!("down")).with_hints(["retry".to_string()]);
        assert_eq!(
            failure_answer(&runtime),
            json!({"error": {"code": code::SERVER_ERROR, "message": "down", "exit": 1, "hints": ["retry"]}})
        );
    }
}
