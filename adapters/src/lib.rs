//! mc's harness adapters, as the files `mc-doctor setup` installs: their
//! owner is this package, not a binary's folder.

/// The OpenCode plugin (`~/.config/opencode/plugin/mc.js`).
pub const OPENCODE_PLUGIN: &str = include_str!("../opencode/mc.js");

/// The Pi extension (`~/.pi/agent/extensions/mc.ts`).
pub const PI_EXTENSION: &str = include_str!("../pi/mc.ts");
