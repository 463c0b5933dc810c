//! `reduce`: queue tags for dropping on a pass that busts anyway.

use anyhow::anyhow;
use serde_json::Value;

use mc_cli::{Failure, Wait, now_ms};
use mc_transform_core::{self as transform, ReduceRequest};

use crate::common::{Ctx, read_json, session_setup};

/// The reduce request of the flags, else of stdin.
pub(crate) fn reduce_request(
    session: Option<&str>,
    drop: Option<&str>,
    harness: &str,
) -> Result<ReduceRequest, Failure> {
    match (session, drop) {
        (Some(session), Some(drop)) => Ok(ReduceRequest {
            harness: harness.to_string(),
            session_id: session.to_string(),
            drop: transform::reduce::parse_drop(drop).map_err(|e| Failure::input(e.into()))?,
        }),
        (None, None) => {
            ReduceRequest::from_value(read_json()?).map_err(|e| Failure::input(e.into()))
        }
        _ => Err(Failure::input(anyhow!(
            "reduce needs both --session and --drop, or JSON on stdin"
        ))),
    }
}

pub(crate) fn reduce(ctx: &mut Ctx<'_>, request: &ReduceRequest) -> Result<Value, Failure> {
    let setup = session_setup(
        ctx,
        Some((&request.harness, &request.session_id)),
        None,
        Wait::Hook,
    );
    let mut store = setup.store?;
    let result = transform::reduce(&mut store, request, &setup.config.transform, now_ms());
    ctx.stores.keep(store);
    let result = result.map_err(anyhow::Error::from)?;
    Ok(serde_json::to_value(result).map_err(anyhow::Error::from)?)
}
