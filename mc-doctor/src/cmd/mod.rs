//! One module per command: the checks (no subcommand), `setup`, `migrate`,
//! `dashboard`.

pub(crate) mod check;
pub(crate) mod dashboard;
pub(crate) mod migrate;
pub(crate) mod setup;
