//! `overflow`: learn a provider's context-overflow error.

use serde_json::Value;

use mc_cli::{Failure, Wait, now_ms};
use mc_transform_core::{self as transform, OverflowRequest};

use crate::common::{Ctx, session_setup};

pub(crate) fn overflow(ctx: &mut Ctx<'_>, value: Value) -> Result<Value, Failure> {
    let request = OverflowRequest::from_value(value).map_err(|e| Failure::input(e.into()))?;
    // Sent from an error event, not on the model call's path: the long wait.
    let session = request.session_id.as_deref();
    let setup = session_setup(
        ctx,
        session.map(|id| (request.harness.as_str(), id)),
        None,
        Wait::Background,
    );
    let mut store = setup.store?;
    let answer = transform::overflow::report(&mut store, &request, now_ms());
    ctx.stores.keep(store);
    Ok(answer.map_err(anyhow::Error::from)?.into_value())
}
