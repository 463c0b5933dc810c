//! `tools`: the agent tools mc publishes, with their schemas.

use serde_json::{Value, json};

use mc_cli::{Failure, write_json};
use mc_search_core::tools::{self};

use crate::args::Args;

/// `tools`: every agent tool's name, description and input schema.
pub(crate) fn list_tools(args: &Args) -> Result<(), Failure> {
    let list: Vec<Value> = tools::specs()
        .into_iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    Ok(write_json(&json!({"tools": list}), args.global.pretty)?)
}
