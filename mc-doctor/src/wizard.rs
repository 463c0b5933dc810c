//! The setup wizard on a terminal: which harnesses, which historian model,
//! whether to add the cron line; then the diff of every change, one
//! confirmation, and the same writes as `setup --yes`.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use anyhow::anyhow;

use mc_cli::Failure;
use mc_doctor_core::harness::{self, HarnessId};
use mc_doctor_core::{Env, setup};

struct Terminal {
    lines: std::io::StdinLock<'static>,
}

impl Terminal {
    fn ask(&mut self, question: &str) -> Result<String, Failure> {
        let mut out = std::io::stdout().lock();
        write!(out, "{question}").map_err(|e| Failure::runtime(e.into()))?;
        out.flush().map_err(|e| Failure::runtime(e.into()))?;
        let mut line = String::new();
        let n = self
            .lines
            .read_line(&mut line)
            .map_err(|e| Failure::runtime(e.into()))?;
        if n == 0 {
            return Err(Failure::input(anyhow!("setup cancelled (end of input)")));
        }
        Ok(line.trim().to_string())
    }

    fn yes(&mut self, question: &str, default: bool) -> Result<bool, Failure> {
        let answer = self.ask(&format!(
            "{question} [{}] ",
            if default { "Y/n" } else { "y/N" }
        ))?;
        Ok(match answer.to_ascii_lowercase().as_str() {
            "" => default,
            a => a.starts_with('y'),
        })
    }
}

fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

pub fn run(env: &Env, preselected: Vec<HarnessId>) -> Result<ExitCode, Failure> {
    let mut t = Terminal {
        lines: std::io::stdin().lock(),
    };
    say("mc setup: wires mc into your coding harnesses.\n\n");
    for integration in harness::integrations(env) {
        say(&format!(
            "  {:<12} {}\n",
            integration.id.title(),
            integration.detected.as_deref().unwrap_or("not found")
        ));
    }
    let default: Vec<&str> = preselected.iter().map(|h| h.as_str()).collect();
    let harnesses = loop {
        let answer = t.ask(&format!(
            "\nWire which harnesses? (opencode, claude-code, codex, pi; comma-separated) [{}] ",
            default.join(",")
        ))?;
        if answer.is_empty() {
            break preselected.clone();
        }
        let parsed: Option<Vec<HarnessId>> = answer
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(HarnessId::parse)
            .collect();
        match parsed {
            Some(list) => break list,
            None => say("  unknown harness; try again\n"),
        }
    };
    let model =
        t.ask("Historian model as PROVIDER/MODEL (empty: fold with the harness's own model) [] ")?;
    let historian = if model.is_empty() {
        None
    } else {
        let name = model.split('/').next().unwrap_or_default();
        let default_kind = if name == "openai" {
            "openai"
        } else {
            "anthropic"
        };
        let kind = t.ask(&format!(
            "  Provider kind: anthropic, openai or command (a program such as `claude -p`) [{default_kind}] "
        ))?;
        let kind = if kind.is_empty() {
            default_kind.to_string()
        } else {
            kind
        };
        let mut choice = setup::Historian {
            model: model.clone(),
            kind: Some(kind.clone()),
            ..setup::Historian::default()
        };
        if kind == "command" {
            let command = t.ask("  Command (the prompt goes to its stdin) [claude -p] ")?;
            let command = if command.is_empty() {
                "claude -p".into()
            } else {
                command
            };
            choice.command = Some(command.split_whitespace().map(str::to_string).collect());
        } else {
            let url = t.ask("  Base URL (empty: the provider's default) [] ")?;
            choice.base_url = (!url.is_empty()).then_some(url);
            let default_var = if kind == "openai" {
                "OPENAI_API_KEY"
            } else {
                "ANTHROPIC_API_KEY"
            };
            let var = t.ask(&format!(
                "  Name of the variable holding the key (never the key itself) [{default_var}] "
            ))?;
            choice.key_env = Some(if var.is_empty() {
                default_var.into()
            } else {
                var
            });
        }
        Some(choice)
    };
    let cron = t.yes(
        "Add the cron line that runs `mc-dream tick` every 15 minutes?",
        false,
    )?;
    let fetch = match setup::embeddings_to_fetch(env) {
        Some(model) => t.yes(
            &format!(
                "Fetch the local embedding model {} ({:.0} MB, {} license) into {}, so search \
                 also finds what was meant in other words?",
                model.spec.name,
                model.spec.files.iter().map(|f| f.size).sum::<u64>() as f64 / 1e6,
                model.spec.license,
                env.tilde(&model.dir)
            ),
            true,
        )?,
        None => false,
    };
    let mut request = setup::Request {
        harnesses,
        historian,
        dry_run: true,
    };
    let preview = setup::setup(env, &request).map_err(Failure::from)?;
    say("\n");
    say(&crate::outcome::outcome_text(&preview, true, None));
    if preview.changes.is_empty() && !cron && !fetch {
        say("Everything is in place already.\n");
        return Ok(ExitCode::SUCCESS);
    }
    if !t.yes(
        "Write these changes (each old file is backed up beside it)?",
        true,
    )? {
        say("Nothing written.\n");
        return Ok(ExitCode::SUCCESS);
    }
    request.dry_run = false;
    let outcome = crate::outcome::apply(env, &request)?;
    let cron_line = if cron {
        Some(setup::install_cron(env, false).map_err(Failure::from)?)
    } else {
        None
    };
    let mut text = String::new();
    for change in &outcome.changes {
        text.push_str(&format!(
            "{} {}{}\n",
            change.kind,
            env.tilde(&change.path),
            change
                .backup
                .as_ref()
                .map(|b| format!(" (backup {})", env.tilde(b)))
                .unwrap_or_default()
        ));
    }
    if let Some(line) = cron_line {
        text.push_str(&format!("cron: {line}\n"));
    }
    if fetch {
        text.push_str(&crate::cmd::setup::fetch_embeddings(env, false)?);
        text.push('\n');
    }
    text.push_str("Done. Restart the harness to load mc; run `mc-doctor` to check.\n");
    say(&text);
    Ok(ExitCode::SUCCESS)
}
