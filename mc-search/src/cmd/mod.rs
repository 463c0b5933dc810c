//! One module per subcommand; the tool commands share `tool`.

pub(crate) mod index;
pub(crate) mod mcp;
pub(crate) mod profile;
pub(crate) mod session_start;
pub(crate) mod tool;
pub(crate) mod tools;
