//! One module per subcommand: `pins` (pin, unpin, list) and `restore`.

pub(crate) mod pins;
pub(crate) mod restore;
