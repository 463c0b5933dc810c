//! mc's gateway: an HTTP/1.1 server on loopback that a harness (Claude Code)
//! uses as its provider's base URL. Each request goes to the one configured
//! upstream — never anywhere a request names — with its headers as received
//! (less the hop-by-hop ones); a Messages call's body first goes through a
//! [`Pass`](mc_base::domain::gateway::Pass), and the answer streams back event
//! by event while the usage in it is read for the pass.
//!
//! Fail-open: an error or a panic in the pass sends the original bytes. The
//! gateway holds no credential: the client's own goes upstream untouched and
//! never into the pass, an error or a log.
//!
//! Threads, not async: a fixed pool of workers takes accepted connections
//! from a bounded queue, one request per connection (`connection: close`), so
//! a burst queues or gets a quick 503 and never grows the thread count.

// No printing here (and `shared/clippy.toml` refuses the environment,
// stdin/stdout and ureq's environment-reading defaults).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
// Nothing reachable from outside input may panic.
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

mod config;
mod http;
mod server;
mod upstream;
mod usage;

pub use config::{Config, Limits, OPENAI_PREFIX, Upstream, check_listen};
pub use server::{Gateway, STATUS_PATH, Stats};
pub use usage::UsageScanner;
