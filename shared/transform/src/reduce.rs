//! `ctx_reduce`: the agent queues tags to drop. Nothing changes on the wire
//! now; the drops ride the next pass that busts the cache anyway.

use serde::Serialize;
use serde_json::Value;

use mc_base::config::TransformConfig;
use mc_base::error::{Error, Result};
use mc_base::store::Store;

use mc_base::domain::arguments::{Arguments, Caller, Field, Kind};
use mc_base::domain::envelope::session_key;
use mc_base::domain::notation::parse_ranges;
use mc_base::domain::{sessions, tags};

#[derive(Debug, Clone, PartialEq)]
pub struct ReduceRequest {
    pub harness: String,
    pub session_id: String,
    pub drop: Vec<i64>,
}

/// The tags to drop: the `drop` of `ctx_reduce` and of `mc-transform reduce`.
pub const DROP: Field = Field::new("drop", Kind::Tags)
    .required()
    .describe("e.g. 3-5,12");

/// What `mc-transform reduce` reads (a harness adds the session to the
/// agent's `drop`).
pub const INPUT: Arguments = Arguments {
    tool: "reduce",
    fields: &[
        Field::new("harness", Kind::String),
        Field::new("session_id", Kind::String).required(),
        DROP,
    ],
    actions: &[],
    default_action: None,
};

impl ReduceRequest {
    /// `{"harness", "session_id", "drop"}` where `drop` is `"3-5,12"` or an
    /// array of numbers and range strings; any other field is refused.
    pub fn from_value(value: Value) -> Result<ReduceRequest> {
        INPUT.check(&value, Caller::Agent)?;
        let Value::Object(map) = value else {
            return Err(Error::input(
                "reduce input must be a JSON object {\"harness\", \"session_id\", \"drop\"}",
            ));
        };
        let (harness, session_id) = session_key(&map, "reduce")?;
        let drop = match map.get("drop") {
            Some(Value::String(spec)) => parse_drop(spec)?,
            Some(Value::Array(items)) => {
                let mut spec = Vec::new();
                for item in items {
                    match item {
                        Value::Number(n) => spec.push(n.to_string()),
                        Value::String(s) => spec.push(s.clone()),
                        _ => {
                            return Err(Error::input(
                                "\"drop\" items must be numbers or range strings",
                            ));
                        }
                    }
                }
                parse_drop(&spec.join(","))?
            }
            _ => return Err(Error::input("reduce input needs \"drop\", e.g. \"3-5,12\"")),
        };
        Ok(ReduceRequest {
            harness,
            session_id,
            drop,
        })
    }
}

pub fn parse_drop(spec: &str) -> Result<Vec<i64>> {
    parse_ranges(spec).map_err(Error::Input)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReduceResult {
    /// Queued; dropped on the next pass that busts the cache anyway.
    pub queued: Vec<i64>,
    /// Inside the protected window (the newest tags): queued too, but they
    /// wait until they leave the window.
    pub protected: Vec<i64>,
    /// No such tag in this session.
    pub unknown: Vec<i64>,
    /// Dropped already, or queued already.
    pub already: Vec<i64>,
}

pub fn reduce(
    store: &mut Store,
    request: &ReduceRequest,
    config: &TransformConfig,
    now_ms: i64,
) -> Result<ReduceResult> {
    store.write(|tx| {
        let mut result = ReduceResult::default();
        let Some(session) = sessions::find_session(tx, &request.harness, &request.session_id)?
        else {
            result.unknown = request.drop.clone();
            return Ok(result);
        };
        let floor = tags::protected_floor(tx, session.id, config.protected_tags)?;
        let rows = tags::load_tags_by_numbers(tx, session.id, &request.drop)?;
        for &number in &request.drop {
            let Some(tag) = rows.iter().find(|t| t.number == number) else {
                result.unknown.push(number);
                continue;
            };
            if tag.dropped.is_some() || !tags::queue_drop(tx, session.id, number, now_ms)? {
                result.already.push(number);
            } else if floor.is_some_and(|f| number >= f) {
                result.protected.push(number);
            } else {
                result.queued.push(number);
            }
        }
        Ok(result)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_forms() {
        let r = ReduceRequest::from_value(json!({"session_id": "s", "drop": "3-4"})).unwrap();
        assert_eq!(
            (r.harness.as_str(), r.drop.clone()),
            ("opencode", vec![3, 4])
        );
        let r = ReduceRequest::from_value(
            json!({"harness": "opencode", "session_id": "s", "drop": [7, "1-2"]}),
        )
        .unwrap();
        assert_eq!(r.drop, vec![1, 2, 7]);
        assert!(ReduceRequest::from_value(json!({"drop": "1"})).is_err());
        assert!(ReduceRequest::from_value(json!({"session_id": "s", "drop": "9-1"})).is_err());
        assert!(ReduceRequest::from_value(json!({"session_id": "s", "drop": [true]})).is_err());
        let misspelled = ReduceRequest::from_value(json!({"session_id": "s", "dorp": "1"}));
        assert_eq!(
            misspelled.unwrap_err().to_string(),
            "reduce has no field \"dorp\" (its fields: harness, session_id, drop)"
        );
    }
}
