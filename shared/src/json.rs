//! Small JSON helpers shared by the codecs and the config loader.

use serde_json::Value;

/// "a string", "an object", ...: for error messages about a wrong JSON type.
pub(crate) fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
