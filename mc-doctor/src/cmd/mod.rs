//! One module per command: the checks (no subcommand), `setup`, `migrate`.

pub(crate) mod check;
pub(crate) mod migrate;
pub(crate) mod setup;
