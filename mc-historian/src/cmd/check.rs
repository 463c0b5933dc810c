//! `check`: whether a run is due and why (the transform's own rule), and
//! which model it would use; no model call.

use std::process::ExitCode;

use mc_cli::{Failure, write_json};
use mc_history::historian::{self};

use crate::args::{Args, Source};
use crate::input::{load_input, session_setup};
use crate::model::choose;

pub(crate) fn check(args: &Args, source: &Source) -> Result<ExitCode, Failure> {
    let mut loaded = load_input(args, source)?;
    let (config, store) = session_setup(args, &mut loaded)?;
    let mut report = historian::check(store.conn(), &loaded.input, &config.transform)?;
    report.model = Some(choose(&config, source, &loaded, &store).report());
    write_json(
        &serde_json::to_value(report).map_err(anyhow::Error::from)?,
        args.global.pretty,
    )?;
    Ok(ExitCode::SUCCESS)
}
