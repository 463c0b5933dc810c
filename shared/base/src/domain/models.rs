//! What mc learned about a model: the context limit a provider stated when
//! it rejected a request as too long (`model_limits`), and the model as every
//! pass and historian run then sees it.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::Result;

use super::envelope::ModelInfo;

/// The newest limit a provider stated for a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LearnedLimit {
    /// provider/model, as the envelope names it.
    pub model: String,
    pub context_limit: u64,
    pub source: String,
    pub learned_ms: i64,
}

pub fn learned_limit(conn: &Connection, model_key: &str) -> Result<Option<LearnedLimit>> {
    Ok(conn
        .prepare_cached(
            "SELECT context_limit, source, learned_ms FROM model_limits WHERE model_key = ?1",
        )?
        .query_row(params![model_key], |r| {
            Ok(LearnedLimit {
                model: model_key.to_string(),
                context_limit: r.get::<_, i64>(0)?.max(0) as u64,
                source: r.get(1)?,
                learned_ms: r.get(2)?,
            })
        })
        .optional()?)
}

/// `model` with its context limit at most `learned`'s (a model without one
/// takes the learned limit).
pub fn cap(model: &ModelInfo, learned: Option<&LearnedLimit>) -> ModelInfo {
    let mut model = model.clone();
    if let Some(learned) = learned {
        let limit = model
            .context_limit
            .filter(|&c| c > 0)
            .map_or(learned.context_limit, |c| c.min(learned.context_limit));
        model.context_limit = Some(limit);
    }
    model
}
