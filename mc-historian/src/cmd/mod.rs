//! One module per subcommand.

pub(crate) mod check;
pub(crate) mod hook;
pub(crate) mod prompt;
pub(crate) mod run;
