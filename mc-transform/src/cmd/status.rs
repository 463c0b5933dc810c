//! `status`: what mc keeps for a session.

use anyhow::anyhow;
use serde_json::Value;

use mc_cli::{Failure, Wait};
use mc_history::historian::choice;
use mc_transform_core as transform;

use crate::common::{Ctx, session_setup};

/// How many of the newest calls `status` shows unless told.
pub(crate) const DEFAULT_CALLS: usize = 20;

pub(crate) fn status(
    ctx: &mut Ctx<'_>,
    harness: &str,
    session: &str,
    calls: usize,
) -> Result<Value, Failure> {
    let setup = session_setup(ctx, Some((harness, session)), None, Wait::Background);
    let store = setup.store?;
    let ttl = setup.config.transform.cache_ttl;
    let report = transform::status::status_with_calls(&store, harness, session, ttl, calls);
    let path = store.path().display().to_string();
    ctx.stores.keep(store);
    match report.map_err(anyhow::Error::from)? {
        Some(mut report) => {
            // The model a historian run would use: no server is at hand here,
            // so an OpenCode session's is the one mc's plugin would pass.
            let model = report
                .model
                .as_deref()
                .map(choice::model_from_key)
                .unwrap_or_default();
            let config = &setup.config;
            let env = mc_cli::harness_env(None, true);
            report.historian_model = Some(
                choice::choose(&config.historian, &config.providers, harness, &model, &env)
                    .report(),
            );
            Ok(serde_json::to_value(report).map_err(anyhow::Error::from)?)
        }
        None => Err(Failure::runtime(anyhow!(
            "no session {session:?} for harness {harness:?} in {path} (no pass has seen it yet)"
        ))),
    }
}
