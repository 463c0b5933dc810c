//! Codecs: each harness's message JSON in, one internal model, the same JSON out.
//!
//! The internal model is a thin typed view over the harness's own objects:
//! every message and part keeps its original JSON map, so a field the codec
//! does not understand is carried through unchanged and in its place. The
//! transform only reads through accessors and edits through setters.

pub mod claude;
pub mod jsonl;
pub mod opencode;

pub use opencode::{Message, Part, PartKind, Role};
