//! The JSON Schema of the config file, generated from the key table.

use serde_json::{Map, Value, json};

use super::keys::{self, KEYS, Kind, SECTIONS, Trust};

/// What a `cache_ttl` string may look like (numbers are handled separately).
const TTL_PATTERN: &str = r"^\s*([0-9]+[smh]?|[Nn][Ee][Vv][Ee][Rr])\s*$";

/// The JSON Schema (draft 2020-12) of an mc config file.
///
/// Generated from the same key table the loader validates with. The copy
/// committed as `shared/schema/config.schema.json` is this value, pretty-printed,
/// and a test keeps the two equal.
pub fn json_schema() -> Value {
    let mut properties = Map::new();
    properties.insert(
        "$schema".into(),
        json!({
            "description": "The JSON Schema this file follows, for editors. mc ignores it.",
            "type": "string",
        }),
    );
    properties.extend(children(""));
    properties.insert("providers".into(), super::providers::schema());

    let mut root = Map::new();
    root.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    root.insert("title".into(), "mc configuration".into());
    root.insert(
        "description".into(),
        "Configuration of mc, the context manager for coding agents. Files are JSONC \
         (JSON with comments and trailing commas). Layers merge in the order built-in \
         defaults, user file, project file (.mc/config.jsonc), override file (MC_CONFIG \
         or --config). An invalid value is reported and replaced by the value of the \
         lower layers. A project file is not trusted: it cannot set user-only keys and \
         cannot lower raise-only ones."
            .into(),
    );
    root.insert("type".into(), "object".into());
    root.insert("properties".into(), Value::Object(properties));
    root.insert("additionalProperties".into(), false.into());
    Value::Object(root)
}

/// The property schemas of the sections and keys directly under `prefix`:
/// sections first, then keys, each in table order.
fn children(prefix: &str) -> Map<String, Value> {
    let mut properties = Map::new();
    for section in SECTIONS.iter().filter(|s| keys::parent(s.path) == prefix) {
        let schema = json!({
            "description": section.description,
            "type": "object",
            "properties": children(section.path),
            "additionalProperties": false,
        });
        properties.insert(keys::last(section.path).into(), schema);
    }
    for key in KEYS.iter().filter(|k| keys::parent(k.path) == prefix) {
        properties.insert(keys::last(key.path).into(), leaf(key));
    }
    properties
}

fn leaf(key: &keys::KeyDef) -> Value {
    let mut description = key.description.to_string();
    match key.trust {
        Trust::Any => {}
        Trust::UserOnly => {
            description.push_str(" User-only: ignored, with a warning, when set in a project file.")
        }
        Trust::RaiseOnly => {
            description.push_str(" A project file may raise this value but not lower it.")
        }
    }
    let mut schema = Map::new();
    schema.insert("description".into(), description.into());
    match key.kind {
        Kind::Float { min, max } => {
            schema.insert("type".into(), "number".into());
            schema.insert("minimum".into(), keys::number(min));
            schema.insert("maximum".into(), keys::number(max));
        }
        Kind::Int { min, max } => {
            schema.insert("type".into(), "integer".into());
            schema.insert("minimum".into(), min.into());
            schema.insert("maximum".into(), max.into());
        }
        Kind::Bool => {
            schema.insert("type".into(), "boolean".into());
        }
        Kind::Model => {
            schema.insert(
                "anyOf".into(),
                json!([
                    {"type": "string", "pattern": keys::MODEL_PATTERN},
                    {"type": "null"},
                ]),
            );
            schema.insert(
                "examples".into(),
                json!(["anthropic/claude-haiku-4-5", "local/qwen3:8b"]),
            );
        }
        Kind::EmbeddingModel => {
            schema.insert(
                "anyOf".into(),
                json!([
                    {"type": "string", "pattern": keys::LOCAL_MODEL_PATTERN},
                    {"type": "string", "pattern": keys::MODEL_PATTERN},
                    {"type": "null"},
                ]),
            );
            schema.insert(
                "examples".into(),
                json!([keys::DEFAULT_EMBEDDINGS_MODEL, "local/nomic-embed-text"]),
            );
        }
        Kind::ModelList => {
            schema.insert("type".into(), "array".into());
            schema.insert(
                "items".into(),
                json!({"type": "string", "pattern": keys::MODEL_PATTERN}),
            );
        }
        Kind::Cron => {
            schema.insert("type".into(), "string".into());
            schema.insert(
                "examples".into(),
                json!(["*/15 * * * *", "0 3 * * *", "30 4 * * SUN", "@daily", "off"]),
            );
        }
        Kind::Url => {
            schema.insert("type".into(), "string".into());
            schema.insert("pattern".into(), keys::URL_PATTERN.into());
            schema.insert("examples".into(), json!(["https://api.anthropic.com"]));
        }
        Kind::Loopback => {
            schema.insert("type".into(), "string".into());
            schema.insert("examples".into(), json!(["127.0.0.1:4141", "[::1]:4141"]));
        }
        Kind::Ttl => {
            schema.insert(
                "anyOf".into(),
                json!([
                    {"type": "string", "pattern": TTL_PATTERN},
                    {"type": "integer", "minimum": 0},
                ]),
            );
            schema.insert("examples".into(), json!(["30s", "5m", "1h", "never"]));
        }
    }
    schema.insert("default".into(), key.default.to_json());
    Value::Object(schema)
}
