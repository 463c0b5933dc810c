//! One module per subcommand.

pub(crate) mod cron;
pub(crate) mod export;
pub(crate) mod import;
pub(crate) mod private;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod tick;
