//! `system`: the system hook's part.

use anyhow::anyhow;
use serde_json::{Value, json};

use mc_cli::{Failure, Wait};
use mc_transform_core::{self as transform, SystemRequest};

use crate::common::{Ctx, NAME, hints_of, session_setup};

pub(crate) fn system(ctx: &mut Ctx<'_>, value: Value) -> Result<Value, Failure> {
    let request = SystemRequest::from_value(value).map_err(|e| Failure::input(e.into()))?;
    let setup = session_setup(
        ctx,
        Some((&request.harness, &request.session_id)),
        None,
        Wait::Hook,
    );
    let mut warnings = setup.warnings;
    let config = setup.config;
    let mut store = setup.store;
    let result = mc_cli::catch_panic(|| {
        let store = store.as_mut().map_err(|e| anyhow!("{e:#}"))?;
        Ok(transform::system_hook(store, &request, &config.transform)?)
    });
    let mut output = match result {
        Ok(output) => serde_json::to_value(output).map_err(anyhow::Error::from)?,
        Err(error) => {
            // Fail open, as the pass does: the model call must go on.
            let message = format!("{error:#}");
            eprintln!("mc-transform: warning: system left unchanged: {message}");
            mc_cli::hint(NAME, &hints_of(&store, &error));
            warnings.push(message);
            json!({"system": request.system, "known_session": false, "guidance": false, "today": null})
        }
    };
    ctx.stores.keep_result(store);
    output["warnings"] = json!(warnings);
    Ok(output)
}
