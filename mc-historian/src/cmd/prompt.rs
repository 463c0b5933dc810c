//! `prompt`: the exact request a run would send first; no call, nothing
//! written.

use std::process::ExitCode;

use mc_cli::{Failure, write_json};
use mc_history::historian::{self, Settings};

use crate::args::{Args, NAME, Source};
use crate::input::{load_input, session_setup};
use crate::model::{choose, client};

pub(crate) fn prompt(args: &Args, source: &Source) -> Result<ExitCode, Failure> {
    let mut loaded = load_input(args, source)?;
    let (config, store) = session_setup(args, &mut loaded)?;
    let choice = choose(&config, source, &loaded, &store);
    let client = match client(&config, &choice, source, &loaded.input) {
        Ok(client) => Some(client),
        Err(error) => {
            eprintln!("mc-historian: warning: {error}; showing the prompt without a request");
            mc_cli::hint(NAME, &error.hints);
            None
        }
    };
    let settings = Settings {
        historian: &config.historian,
        transform: &config.transform,
    };
    let now = loaded.now_ms.unwrap_or_else(mc_cli::now_ms);
    let mut report =
        historian::prompt(store.conn(), &loaded.input, &settings, client.as_ref(), now)?;
    report.model_source = Some(choice.source);
    report.model_reason = Some(choice.reason);
    write_json(
        &serde_json::to_value(report).map_err(anyhow::Error::from)?,
        args.global.pretty,
    )?;
    Ok(ExitCode::SUCCESS)
}
