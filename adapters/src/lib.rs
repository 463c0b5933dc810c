//! mc's harness adapters, as the files `mc-doctor setup` installs. They are
//! built from `adapters/source/` (one core shared by both, `npm run build`);
//! the built files are committed, and CI checks that they are fresh.

/// The OpenCode plugin (`~/.config/opencode/plugin/mc.js`).
pub const OPENCODE_PLUGIN: &str = include_str!("../opencode/mc.js");

/// The Pi extension (`~/.pi/agent/extensions/mc.ts`).
pub const PI_EXTENSION: &str = include_str!("../pi/mc.ts");
