//! `mc-doctor dashboard`: a local web page of what mc does.
//!
//! A small HTTP server on loopback (tiny_http: a plain request/answer
//! server is all a page needs, and the gateway's server is a streaming
//! proxy built around its pass) serving pages written here as HTML with
//! server-side SVG charts: sessions, one session's calls against its window
//! with the cause of every cache bust, project memory (edited through
//! mc-search's own functions), the dreamer, spend, the doctor's checks and
//! the redacted issue report; and one self-contained, redacted HTML file
//! for sharing ([`export`]).
//!
//! Safe by construction ([`server`]): loopback only, a token on every
//! request, the `Host` header checked, changes only by POST with a CSRF
//! token, every asset compiled in, a Content-Security-Policy that lets the
//! page fetch nothing but itself, and no credential on any page.

#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

pub mod chart;
pub mod data;
pub mod html;
pub mod pages;
pub mod prices;
pub mod server;

use std::path::PathBuf;
use std::sync::Arc;

use mc_base::config::Config;
use mc_base::store::StoreOptions;

pub use pages::export;
pub use server::Server;

/// Everything the dashboard is handed by its binary: where the store is,
/// the config, the doctor's view of the environment, the secrets of this
/// run and the clock.
#[derive(Clone)]
pub struct Dashboard {
    pub db: PathBuf,
    pub store_options: StoreOptions,
    pub config: Config,
    pub doctor: mc_doctor_core::Env,
    pub checks: mc_doctor_core::checks::Options,
    /// The logs the issue report tails.
    pub logs: Vec<PathBuf>,
    /// Asked on every request (cookie or `?token=`): random, from the binary.
    pub token: String,
    /// Carried by every form and checked on every POST.
    pub csrf: String,
    pub clock: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl Dashboard {
    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }
}

#[cfg(test)]
mod tests;
