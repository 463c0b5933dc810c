//! `recount`: measure a session's tags again.

use serde_json::{Value, json};

use mc_cli::{Failure, Wait};
use mc_transform_core::{self as transform, Envelope};

use crate::common::{Ctx, session_setup};

pub(crate) fn recount(ctx: &mut Ctx<'_>, value: Value) -> Result<Value, Failure> {
    let envelope = Envelope::from_value(value).map_err(|e| Failure::input(e.into()))?;
    let session_id = envelope.session_hint();
    let setup = session_setup(
        ctx,
        session_id
            .as_deref()
            .map(|id| (envelope.harness.as_str(), id)),
        envelope.project_dir.as_deref(),
        Wait::Background,
    );
    let mut store = setup.store?;
    let result = transform::recount::recount(&mut store, envelope);
    ctx.stores.keep(store);
    Ok(json!(result.map_err(anyhow::Error::from)?))
}
