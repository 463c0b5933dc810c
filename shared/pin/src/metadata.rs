//! OpenChamber's pins in an OpenCode session's metadata, so OpenChamber's UI
//! and mc share one list:
//!
//! ```json
//! {"openchamber": {
//!    "context_obligatory_messages": [{"id": "msg_…", "createdAt": 1760001200000, "role": "user"}],
//!    "context_obligatory_last_compaction_message_id": "msg_…"}}
//! ```
//!
//! Pure functions over the metadata object. Every writer starts from metadata
//! it has just read and changes only its own keys, so other keys (top-level
//! and inside `openchamber`) survive; the result is the whole object, because
//! OpenCode's PATCH replaces `metadata` wholesale.

use serde_json::{Map, Value, json};

use mc_base::error::{Error, Result};

use super::Pin;

/// OpenChamber's namespace inside the session metadata.
pub const NAMESPACE: &str = "openchamber";
/// The pin list: `[{id, createdAt (ms), role}]`.
pub const PINS_KEY: &str = "context_obligatory_messages";
/// The replay cursor: the id of the last compaction summary whose pins were restored.
pub const CURSOR_KEY: &str = "context_obligatory_last_compaction_message_id";

/// The metadata object of a session as `GET /session/:id` answers it (an
/// empty object when the session has none).
pub fn of_session(session: &Value) -> Value {
    match session.get("metadata") {
        Some(Value::Object(map)) => Value::Object(map.clone()),
        _ => Value::Object(Map::new()),
    }
}

/// A stored entry as OpenChamber's readers accept it: an object with a string
/// `id`, a finite numeric `createdAt` and a role of exactly user or assistant.
fn parse_entry(entry: &Value) -> Option<Pin> {
    let id = entry.get("id")?.as_str()?;
    let created = entry.get("createdAt")?;
    let created_at = created
        .as_i64()
        .or_else(|| created.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))?;
    let role = entry.get("role")?.as_str()?;
    if id.is_empty() || !matches!(role, "user" | "assistant") {
        return None;
    }
    Some(Pin {
        id: id.to_string(),
        created_at,
        role: role.to_string(),
    })
}

fn entries(metadata: &Value) -> impl Iterator<Item = &Value> {
    metadata
        .get(NAMESPACE)
        .and_then(|ns| ns.get(PINS_KEY))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The pins in stored order; malformed entries are ignored, as OpenChamber does.
pub fn pins(metadata: &Value) -> Vec<Pin> {
    entries(metadata).filter_map(parse_entry).collect()
}

/// The replay cursor, if set.
pub fn cursor(metadata: &Value) -> Option<&str> {
    metadata.get(NAMESPACE)?.get(CURSOR_KEY)?.as_str()
}

/// A copy of `metadata` whose namespace object is handed to `edit`. A
/// namespace that is missing or null starts empty; one that is not an object
/// is someone else's data, and is not overwritten.
fn edit_namespace(metadata: &Value, edit: impl FnOnce(&mut Map<String, Value>)) -> Result<Value> {
    let mut root = match metadata {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(Error::Corrupt(format!(
                "the session metadata is {}, not an object; refusing to overwrite it",
                mc_base::json::kind_name(other)
            )));
        }
    };
    let mut ns = match root.remove(NAMESPACE) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(Error::Corrupt(format!(
                "metadata.{NAMESPACE} is {}, not an object; refusing to overwrite it",
                mc_base::json::kind_name(&other)
            )));
        }
    };
    edit(&mut ns);
    root.insert(NAMESPACE.into(), Value::Object(ns));
    Ok(Value::Object(root))
}

/// The well-formed stored entries, kept as stored (extra fields a fork may add
/// survive), minus the one with `id`.
fn kept_entries(metadata: &Value, without: &str) -> Vec<Value> {
    entries(metadata)
        .filter(|e| parse_entry(e).is_some_and(|p| p.id != without))
        .cloned()
        .collect()
}

/// The metadata with `pin` added, or `None` when it is already pinned (a no-op).
pub fn with_pin(metadata: &Value, pin: &Pin) -> Result<Option<Value>> {
    if pins(metadata).iter().any(|p| p.id == pin.id) {
        return Ok(None);
    }
    let mut list = kept_entries(metadata, &pin.id);
    list.push(json!({"id": pin.id, "createdAt": pin.created_at, "role": pin.role}));
    edit_namespace(metadata, |ns| {
        ns.insert(PINS_KEY.into(), Value::Array(list));
    })
    .map(Some)
}

/// The metadata without the pin `id`, or `None` when it is not pinned (a
/// no-op). Removing the last pin keeps the key, as an empty list.
pub fn without_pin(metadata: &Value, id: &str) -> Result<Option<Value>> {
    if !pins(metadata).iter().any(|p| p.id == id) {
        return Ok(None);
    }
    let list = kept_entries(metadata, id);
    edit_namespace(metadata, |ns| {
        ns.insert(PINS_KEY.into(), Value::Array(list));
    })
    .map(Some)
}

/// The metadata with the replay cursor set to `summary_id`.
pub fn with_cursor(metadata: &Value, summary_id: &str) -> Result<Value> {
    edit_namespace(metadata, |ns| {
        ns.insert(CURSOR_KEY.into(), json!(summary_id));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(id: &str, created_at: i64, role: &str) -> Pin {
        Pin {
            id: id.into(),
            created_at,
            role: role.into(),
        }
    }

    fn sample() -> Value {
        json!({
            "openchamber": {
                "context_obligatory_messages": [
                    {"id": "msg_b", "createdAt": 20, "role": "assistant"},
                    {"id": "msg_bad", "createdAt": "yesterday", "role": "user"},
                    {"id": "msg_sys", "createdAt": 5, "role": "system"},
                    "junk",
                    {"id": "msg_a", "createdAt": 10.0, "role": "user", "label": "kept"}
                ],
                "goal": {"id": "goal_1"},
                "knowledge_context_delivered": "sig-1"
            },
            "other_app": {"kept": true},
            "title_hint": "x"
        })
    }

    #[test]
    fn reading_drops_malformed_entries() {
        assert_eq!(
            pins(&sample()),
            vec![pin("msg_b", 20, "assistant"), pin("msg_a", 10, "user")]
        );
        assert!(pins(&json!({})).is_empty());
        assert!(pins(&json!({"openchamber": {"context_obligatory_messages": "nope"}})).is_empty());
        assert_eq!(cursor(&sample()), None);
    }

    #[test]
    fn pinning_merges_and_keeps_unrelated_keys() {
        let merged = with_pin(&sample(), &pin("msg_c", 30, "user"))
            .unwrap()
            .unwrap();
        assert_eq!(merged["other_app"], json!({"kept": true}));
        assert_eq!(merged["title_hint"], "x");
        assert_eq!(merged["openchamber"]["goal"], json!({"id": "goal_1"}));
        assert_eq!(
            merged["openchamber"]["knowledge_context_delivered"],
            "sig-1"
        );
        let list = merged["openchamber"]["context_obligatory_messages"]
            .as_array()
            .unwrap();
        assert_eq!(
            list.len(),
            3,
            "malformed entries are not written back: {list:?}"
        );
        assert_eq!(list[1]["label"], "kept", "fields a fork adds survive");
        assert_eq!(
            list[2],
            json!({"id": "msg_c", "createdAt": 30, "role": "user"})
        );
        // Pinning again is a no-op.
        assert_eq!(with_pin(&merged, &pin("msg_c", 30, "user")).unwrap(), None);
    }

    #[test]
    fn pinning_into_empty_metadata_creates_the_namespace() {
        let merged = with_pin(&json!({}), &pin("m", 1, "user")).unwrap().unwrap();
        assert_eq!(
            merged,
            json!({"openchamber": {"context_obligatory_messages": [{"id": "m", "createdAt": 1, "role": "user"}]}})
        );
        let from_null = with_pin(&Value::Null, &pin("m", 1, "user"))
            .unwrap()
            .unwrap();
        assert_eq!(from_null, merged);
    }

    #[test]
    fn unpinning_keeps_an_empty_list_and_is_a_no_op_when_absent() {
        let one = with_pin(&json!({"x": 1}), &pin("m", 1, "user"))
            .unwrap()
            .unwrap();
        let none = without_pin(&one, "m").unwrap().unwrap();
        assert_eq!(
            none,
            json!({"x": 1, "openchamber": {"context_obligatory_messages": []}})
        );
        assert_eq!(without_pin(&none, "m").unwrap(), None);
    }

    #[test]
    fn the_cursor_is_merged_beside_the_pins() {
        let with = with_cursor(&sample(), "msg_summary").unwrap();
        assert_eq!(cursor(&with), Some("msg_summary"));
        assert_eq!(pins(&with), pins(&sample()));
        assert_eq!(with["other_app"], json!({"kept": true}));
        assert_eq!(with["openchamber"]["goal"], json!({"id": "goal_1"}));
    }

    #[test]
    fn a_foreign_namespace_value_is_not_overwritten() {
        let odd = json!({"openchamber": "v1"});
        assert!(with_pin(&odd, &pin("m", 1, "user")).is_err());
        assert!(with_cursor(&odd, "s").is_err());
        assert!(with_cursor(&json!([1]), "s").is_err());
    }

    #[test]
    fn metadata_of_a_session_defaults_to_an_object() {
        assert_eq!(of_session(&json!({"id": "s"})), json!({}));
        assert_eq!(of_session(&json!({"metadata": null})), json!({}));
        assert_eq!(of_session(&json!({"metadata": {"a": 1}})), json!({"a": 1}));
    }
}
