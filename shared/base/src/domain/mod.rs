//! The shared domain under every subsystem: the envelope a call brings
//! (model, usage), sessions, messages and their ordinals, tags with their
//! identity and measurement, the `§N§` notation, and how full the window is.
//!
//! The transform, the history head, the historian and pins all build on it;
//! it depends on none of them (a test in `lib.rs` keeps the layering).

pub mod arguments;
pub mod content;
pub mod envelope;
pub mod gateway;
pub mod measure;
pub mod messages;
pub mod models;
pub mod notation;
pub mod sessions;
pub mod tags;
