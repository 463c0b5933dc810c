//! What the commands share: the binary's name, what a command needs from its
//! process, reading the input, the session setup, the hints of a failure.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use mc_base::codec::Message;
use mc_base::codec::opencode;

use mc_cli::{Failure, GlobalArgs, SessionSetup, Stores, Wait};

pub(crate) const NAME: &str = "mc-transform";

/// What a command needs from its process: the global flags, and the store a
/// resident process keeps between requests.
pub(crate) struct Ctx<'a> {
    pub global: &'a GlobalArgs,
    pub stores: &'a mut Stores,
}

pub(crate) fn read_stdin() -> Result<String, Failure> {
    mc_cli::read_stdin("expected JSON on stdin (see mc-transform --help)")
}

pub(crate) fn parse_json(text: &str) -> Result<Value, Failure> {
    mc_cli::parse_json(text, "input")
}

/// An envelope's text as JSON, with its OpenCode messages decoded while
/// they are read when they all decode (`codec::opencode::parse_envelope`);
/// the errors of [`parse_json`].
pub(crate) fn parse_envelope(text: &str) -> Result<(Value, Option<Vec<Message>>), Failure> {
    let text = mc_base::json::repair_lone_surrogates(text);
    opencode::parse_envelope(&text)
        .context("input is not JSON")
        .map_err(Failure::input)
}

pub(crate) fn read_json() -> Result<Value, Failure> {
    parse_json(&read_stdin()?)
}

pub(crate) fn session_setup(
    ctx: &mut Ctx<'_>,
    session: Option<(&str, &str)>,
    project_dir: Option<&Path>,
    wait: Wait,
) -> SessionSetup {
    mc_cli::session_setup_in(ctx.stores, NAME, ctx.global, session, project_dir, wait)
}

/// The hints for a command that failed open: the store's when it could not be
/// opened (the error then only carries its text), else the error's.
pub(crate) fn hints_of<T>(store: &anyhow::Result<T>, error: &anyhow::Error) -> Vec<String> {
    match store {
        Err(opening) => mc_cli::hints(opening),
        Ok(_) => mc_cli::hints(error),
    }
}
