//! A `command` provider: a program that reads the prompt on stdin and prints
//! the answer on stdout (`claude -p`, `codex exec`, `llm`, …).
//!
//! The prompt is the system prompt, a blank line, then the user message.
//! `{model}` in an argument becomes the model part of `provider/model`. The
//! program inherits the environment (its own login, its own keys), runs at
//! most the call timeout, and is killed after that. It also gets
//! [`HISTORIAN_CHILD_ENV`]: a harness run as the historian's model (`claude -p`
//! fires its hooks, `pi -p` loads its extensions) carries it to mc's hooks
//! there, which then stay out of the way.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use super::{CallFailure, Completion, LlmError, Prompt, Target, excerpt};
use mc_base::{process, tokens};

/// Set on every program the historian runs. mc's harness hooks and adapters
/// inside that program do nothing when they see it: the historian's own call
/// must not become the folder's current session, receive mc's record, or
/// start another historian.
pub const HISTORIAN_CHILD_ENV: &str = "MC_HISTORIAN_CHILD";

/// The program's standard input for `prompt`.
pub(super) fn stdin_text(prompt: &Prompt) -> String {
    format!(
        "{}\n\n{}\n",
        prompt.system.trim_end(),
        prompt.user.trim_end()
    )
}

fn argv(target: &Target) -> Vec<String> {
    target
        .provider
        .command
        .iter()
        .flatten()
        .map(|arg| arg.replace("{model}", &target.model.model))
        .collect()
}

pub(super) fn describe(target: &Target, prompt: &Prompt) -> Value {
    json!({
        "kind": "command",
        "argv": argv(target),
        "stdin": stdin_text(prompt),
    })
}

pub(super) fn call(
    target: &Target,
    prompt: &Prompt,
    timeout: Duration,
) -> Result<Completion, LlmError> {
    let model = &target.model;
    let argv = argv(target);
    let Some((program, args)) = argv.split_first() else {
        return Err(LlmError::new(
            Some(model),
            CallFailure::Config,
            format!("providers.{}.command is empty", model.provider),
        ));
    };
    let run = process::run_with_deadline(
        Command::new(program)
            .args(args)
            .env(HISTORIAN_CHILD_ENV, "1"),
        Some(stdin_text(prompt).into_bytes()),
        timeout,
    );
    let output = match run {
        Ok(output) => output,
        Err(e) => {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                CallFailure::Unavailable
            } else {
                CallFailure::Command
            };
            return Err(
                LlmError::new(Some(model), kind, format!("cannot run {program:?}: {e}")).with_hint(
                    format!(
                        "check providers.{}.command in the user config",
                        model.provider
                    ),
                ),
            );
        }
    };
    let Some(Output {
        status,
        stdout,
        stderr,
    }) = output
    else {
        return Err(LlmError::new(
            Some(model),
            CallFailure::Timeout,
            format!(
                "{program:?} did not finish within {} ms; killed it",
                timeout.as_millis()
            ),
        )
        .with_hint("raise historian.timeout_ms in the user config"));
    };
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        let code = status
            .code()
            .map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
        return Err(LlmError::new(
            Some(model),
            CallFailure::Command,
            format!(
                "{program:?} exited with {code}{}",
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!(
                        ": {}",
                        excerpt(
                            &stderr.split_whitespace().collect::<Vec<_>>().join(" "),
                            1_000
                        )
                    )
                }
            ),
        ));
    }
    let text = String::from_utf8_lossy(&stdout).into_owned();
    Ok(Completion {
        tokens_in: u64::from(tokens::estimate(&stdin_text(prompt))),
        tokens_out: u64::from(tokens::estimate(&text)),
        text,
        model: model.clone(),
        truncated: false,
    })
}
