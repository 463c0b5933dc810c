//! What setup changed, as text, and applying a request: shared by the
//! `setup` command (`cmd/setup.rs`) and the wizard (`wizard.rs`).

use mc_cli::Failure;
use mc_doctor_core::{Env, setup};

pub(crate) fn outcome_text(outcome: &setup::Outcome, dry_run: bool, cron: Option<&str>) -> String {
    let mut text = String::new();
    for change in &outcome.changes {
        text.push_str(&change.diff);
        if let Some(backup) = &change.backup {
            text.push_str(&format!("(backup: {})\n", backup.display()));
        }
    }
    for note in &outcome.notes {
        text.push_str(&format!("{note}\n"));
    }
    if let Some(cron) = cron {
        text.push_str(&format!("cron: {cron}\n"));
    }
    let n = outcome.changes.len();
    text.push_str(&match (dry_run, n) {
        (true, 0) => "Dry run: nothing would change.\n".to_string(),
        (true, n) => format!("Dry run: {n} file(s) would change; nothing was written.\n"),
        (false, 0) => "Nothing to change.\n".to_string(),
        (false, n) => {
            format!("{n} file(s) changed. Restart the harness to load mc; `mc-doctor` checks it.\n")
        }
    });
    text
}

/// For the wizard: apply a request and print what changed.
pub(crate) fn apply(env: &Env, request: &setup::Request) -> Result<setup::Outcome, Failure> {
    setup::setup(env, request).map_err(Failure::from)
}
