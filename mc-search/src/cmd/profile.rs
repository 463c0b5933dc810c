//! `profile`: the user profile (add, list, archive).

use anyhow::anyhow;
use serde_json::{Value, json};

use mc_cli::{Failure, now_ms, write_json};
use mc_search_core::memory;

use crate::args::{Args, NAME, ProfileCommand};
use crate::cmd::tool::{fields, flag_map, n, s};
use crate::common::field;

pub(crate) fn profile(args: &Args, command: &ProfileCommand) -> Result<(), Failure> {
    let flags = match command {
        ProfileCommand::Add { content } => flag_map(&[("content", s(content))]),
        ProfileCommand::List { all } => flag_map(&[("all", all.then_some(json!(true)))]),
        ProfileCommand::Archive { id } => flag_map(&[("id", n(id))]),
    };
    let fields = fields(flags, &args.at)?;
    let config = args.global.load_config(NAME, None);
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let value = match command {
        ProfileCommand::Add { .. } => {
            let content = field(&fields, "content")
                .ok_or_else(|| Failure::input(anyhow!("profile add needs --content")))?;
            json!(memory::profile_add(&mut store, content, now_ms())?)
        }
        ProfileCommand::List { .. } => {
            let all = fields.get("all").and_then(Value::as_bool).unwrap_or(false);
            json!({"profile": memory::profile_list(store.conn(), all)?})
        }
        ProfileCommand::Archive { .. } => {
            let id = fields
                .get("id")
                .and_then(Value::as_i64)
                .ok_or_else(|| Failure::input(anyhow!("profile archive needs --id")))?;
            json!(memory::profile_archive(&mut store, id)?)
        }
    };
    Ok(write_json(&value, args.global.pretty)?)
}
