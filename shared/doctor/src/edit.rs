//! Edits of the files the doctor wires: JSONC (comments, order and
//! formatting kept: a concrete syntax tree is edited, never a re-serialised
//! value), TOML (through `toml_edit`, comments kept the same way), and the
//! unified diff printed for every change.

use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use serde_json::Value;

use mc_base::config::jsonc_options;
use mc_base::error::{Error, Result};

/// `text` (JSONC) as a value; an empty or comments-only text is `{}`.
pub fn json_value(text: &str, what: &str) -> Result<Value> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match jsonc_parser::parse_to_serde_value(text, &jsonc_options()) {
        Ok(Value::Null) if text.trim().is_empty() || is_comments_only(text) => {
            Ok(Value::Object(Default::default()))
        }
        Ok(value) => Ok(value),
        Err(e) => Err(
            Error::Input(format!("{what} is not valid JSONC: {e}")).with_hint(format!(
                "fix {what} by hand (the error says where), then run again"
            )),
        ),
    }
}

fn is_comments_only(text: &str) -> bool {
    matches!(
        jsonc_parser::parse_to_value(text, &jsonc_options()),
        Ok(None)
    )
}

/// The value at `keys` of a JSON value, if every step exists.
pub fn get<'a>(value: &'a Value, keys: &[String]) -> Option<&'a Value> {
    keys.iter().try_fold(value, |v, k| v.get(k.as_str()))
}

fn root(text: &str, what: &str) -> Result<CstRootNode> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    CstRootNode::parse(text, &jsonc_options()).map_err(|e| {
        Error::Input(format!("{what} is not valid JSONC: {e}")).with_hint(format!(
            "fix {what} by hand (the error says where), then run again"
        ))
    })
}

fn input(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(items) => CstInputValue::Array(items.iter().map(input).collect()),
        Value::Object(map) => {
            CstInputValue::Object(map.iter().map(|(k, v)| (k.clone(), input(v))).collect())
        }
    }
}

/// The object at `keys` (created as needed), and how many of `keys` already
/// existed before (so an undo knows which containers it created).
fn object_at(root: &CstRootNode, keys: &[String], what: &str) -> Result<(CstObject, usize)> {
    let top = match root.value() {
        None => root.object_value_or_set(),
        Some(node) => node.as_object().ok_or_else(|| {
            Error::Input(format!("{what}: the top level is not an object"))
                .with_hint(format!("fix {what} by hand, then run again"))
        })?,
    };
    let mut object = top;
    let mut existed = 0;
    let mut creating = false;
    for (depth, key) in keys.iter().enumerate() {
        match object.get(key) {
            Some(prop) if !creating => {
                let next = prop.value().and_then(|v| v.as_object()).ok_or_else(|| {
                    Error::Input(format!(
                        "{what}: `{}` is not an object",
                        keys.get(..=depth).unwrap_or(keys).join(".")
                    ))
                    .with_hint(format!("fix {what} by hand, then run again"))
                })?;
                existed = depth + 1;
                object = next;
            }
            _ => {
                creating = true;
                object = object.object_value_or_set(key);
            }
        }
    }
    Ok((object, existed))
}

/// `text` with the value at `keys` set to `value` (added at the end of its
/// object when missing); the rest of the text, comments included, unchanged.
pub fn json_set(text: &str, keys: &[String], value: &Value, what: &str) -> Result<String> {
    let Some((last, parents)) = keys.split_last() else {
        return Err(Error::Internal("json_set without a key".into()));
    };
    let root = root(text, what)?;
    let (object, _) = object_at(&root, parents, what)?;
    match object.get(last) {
        Some(prop) => prop.set_value(input(value)),
        None => {
            object.append(last, input(value));
        }
    }
    Ok(root.to_string())
}

/// `text` without the member at `keys` (unchanged when it is not there);
/// then each parent object that became empty, up to (not including) the
/// first `keep` keys, is removed too.
pub fn json_remove(text: &str, keys: &[String], keep: usize, what: &str) -> Result<String> {
    let root = root(text, what)?;
    let Some(top) = root.value().and_then(|v| v.as_object()) else {
        return Ok(text.to_string());
    };
    remove_in(&top, keys, keep, 0);
    Ok(root.to_string())
}

fn remove_in(object: &CstObject, keys: &[String], keep: usize, depth: usize) {
    let Some((first, rest)) = keys.split_first() else {
        return;
    };
    let Some(prop) = object.get(first) else {
        return;
    };
    if rest.is_empty() {
        prop.remove();
        return;
    }
    if let Some(child) = prop.value().and_then(|v| v.as_object()) {
        remove_in(&child, rest, keep, depth + 1);
        if depth + 1 > keep && child.properties().is_empty() {
            prop.remove();
        }
    }
}

/// `text` with `item` appended to the array at `keys` (created as needed).
pub fn json_push(text: &str, keys: &[String], item: &Value, what: &str) -> Result<String> {
    let Some((last, parents)) = keys.split_last() else {
        return Err(Error::Internal("json_push without a key".into()));
    };
    let root = root(text, what)?;
    let (object, _) = object_at(&root, parents, what)?;
    let array = match object.get(last) {
        Some(prop) => prop.value().and_then(|v| v.as_array()).ok_or_else(|| {
            Error::Input(format!("{what}: `{}` is not an array", keys.join(".")))
                .with_hint(format!("fix {what} by hand, then run again"))
        })?,
        None => object.array_value_or_set(last),
    };
    array.append(input(item));
    array.ensure_multiline();
    Ok(root.to_string())
}

/// `text` with every element of the array at `keys` that `matches` removed;
/// an array left empty is removed, and so is each parent object left empty,
/// down to (not including) the first `keep` keys.
pub fn json_pull(
    text: &str,
    keys: &[String],
    matches: &dyn Fn(&Value) -> bool,
    keep: usize,
    what: &str,
) -> Result<String> {
    let root = root(text, what)?;
    let Some(top) = root.value().and_then(|v| v.as_object()) else {
        return Ok(text.to_string());
    };
    let Some((last, parents)) = keys.split_last() else {
        return Ok(text.to_string());
    };
    let mut object = top.clone();
    for key in parents {
        match object
            .get(key)
            .and_then(|p| p.value())
            .and_then(|v| v.as_object())
        {
            Some(next) => object = next,
            None => return Ok(text.to_string()),
        }
    }
    let Some(prop) = object.get(last) else {
        return Ok(text.to_string());
    };
    let Some(array) = prop.value().and_then(|v| v.as_array()) else {
        return Ok(text.to_string());
    };
    for element in array.elements() {
        if element.to_serde_value().is_some_and(|v| matches(&v)) {
            element.remove();
        }
    }
    if array.elements().is_empty() && keys.len() > keep {
        let text = root.to_string();
        return json_remove(&text, keys, keep, what);
    }
    Ok(root.to_string())
}

/// A TOML document's value at `keys` as JSON (tables as objects).
pub fn toml_get(text: &str, keys: &[String], what: &str) -> Result<Option<Value>> {
    let doc = toml_doc(text, what)?;
    let mut item = doc.as_item();
    for key in keys {
        match item.get(key.as_str()) {
            Some(next) => item = next,
            None => return Ok(None),
        }
    }
    Ok(Some(toml_to_json(item)))
}

fn toml_doc(text: &str, what: &str) -> Result<toml_edit::DocumentMut> {
    text.parse::<toml_edit::DocumentMut>().map_err(|e| {
        Error::Input(format!(
            "{what} is not valid TOML: {}",
            e.to_string().trim()
        ))
        .with_hint(format!(
            "fix {what} by hand (the error says where), then run again"
        ))
    })
}

fn toml_to_json(item: &toml_edit::Item) -> Value {
    match item {
        toml_edit::Item::None => Value::Null,
        toml_edit::Item::Value(v) => toml_value_to_json(v),
        toml_edit::Item::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), toml_to_json(v)))
                .collect(),
        ),
        toml_edit::Item::ArrayOfTables(a) => Value::Array(
            a.iter()
                .map(|t| toml_to_json(&toml_edit::Item::Table(t.clone())))
                .collect(),
        ),
    }
}

fn toml_value_to_json(value: &toml_edit::Value) -> Value {
    use toml_edit::Value as V;
    match value {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(i) => Value::from(*i.value()),
        V::Float(f) => serde_json::Number::from_f64(*f.value()).map_or(Value::Null, Value::Number),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(d.value().to_string()),
        V::Array(a) => Value::Array(a.iter().map(toml_value_to_json).collect()),
        V::InlineTable(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), toml_value_to_json(v)))
                .collect(),
        ),
    }
}

fn json_to_toml_value(value: &Value) -> toml_edit::Value {
    match value {
        Value::Bool(b) => toml_edit::Value::from(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml_edit::Value::from(i),
            None => toml_edit::Value::from(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => toml_edit::Value::from(s.as_str()),
        Value::Array(items) => {
            toml_edit::Value::Array(items.iter().map(json_to_toml_value).collect())
        }
        Value::Object(map) => {
            let mut table = toml_edit::InlineTable::new();
            for (k, v) in map {
                table.insert(k, json_to_toml_value(v));
            }
            toml_edit::Value::InlineTable(table)
        }
        Value::Null => toml_edit::Value::from(""),
    }
}

/// An object becomes a `[table]` of its own; anything else a value.
fn json_to_toml_item(value: &Value) -> toml_edit::Item {
    match value {
        Value::Object(map) => {
            let mut table = toml_edit::Table::new();
            for (k, v) in map {
                table.insert(k, json_to_toml_item(v));
            }
            toml_edit::Item::Table(table)
        }
        other => toml_edit::Item::Value(json_to_toml_value(other)),
    }
}

/// `text` (TOML) with `keys` set to `value`; missing parent tables are
/// created implicit (no empty `[parent]` header), everything else kept.
pub fn toml_set(text: &str, keys: &[String], value: &Value, what: &str) -> Result<String> {
    let Some((last, parents)) = keys.split_last() else {
        return Err(Error::Internal("toml_set without a key".into()));
    };
    let mut doc = toml_doc(text, what)?;
    let mut table = doc.as_table_mut();
    for key in parents {
        if !table.contains_key(key) {
            let mut new = toml_edit::Table::new();
            new.set_implicit(true);
            table.insert(key, toml_edit::Item::Table(new));
        }
        table = match table.get_mut(key).and_then(|i| i.as_table_mut()) {
            Some(t) => t,
            None => {
                return Err(Error::Input(format!("{what}: `{key}` is not a table"))
                    .with_hint(format!("fix {what} by hand, then run again")));
            }
        };
    }
    match (table.get_mut(last), value) {
        (Some(toml_edit::Item::Value(existing)), v) if !v.is_object() => {
            let decor = existing.decor().clone();
            *existing = json_to_toml_value(v);
            *existing.decor_mut() = decor;
        }
        _ => {
            table.insert(last, json_to_toml_item(value));
        }
    }
    Ok(doc.to_string())
}

/// `text` (TOML) without `keys`; parent tables left empty are removed down
/// to (not including) the first `keep` keys.
pub fn toml_remove(text: &str, keys: &[String], keep: usize, what: &str) -> Result<String> {
    let mut doc = toml_doc(text, what)?;
    remove_toml_in(doc.as_table_mut(), keys, keep, 0);
    Ok(doc.to_string())
}

fn remove_toml_in(table: &mut toml_edit::Table, keys: &[String], keep: usize, depth: usize) {
    let Some((first, rest)) = keys.split_first() else {
        return;
    };
    if rest.is_empty() {
        table.remove(first);
        return;
    }
    let empty = match table.get_mut(first).and_then(|i| i.as_table_mut()) {
        Some(child) => {
            remove_toml_in(child, rest, keep, depth + 1);
            child.is_empty()
        }
        None => false,
    };
    if empty && depth + 1 > keep {
        table.remove(first);
    }
}

/// Files longer than this are summarised in a diff, not printed.
pub const MAX_DIFF_LINES: usize = 200;

/// A unified diff of `old` to `new` with `name` in the headers; empty when
/// they are equal.
pub fn diff(name: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    // A whole file of mc's (a plugin) is named, not printed.
    let (a, b) = (old.lines().count(), new.lines().count());
    if a.max(b) > MAX_DIFF_LINES {
        return match (a, b) {
            (0, b) => format!("--- /dev/null\n+++ b/{name}\n(new file, {b} lines)\n"),
            (a, 0) => format!("--- a/{name}\n+++ /dev/null\n(removed, {a} lines)\n"),
            (a, b) => format!("--- a/{name}\n+++ b/{name}\n(replaced: {a} lines → {b} lines)\n"),
        };
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(path: &str) -> Vec<String> {
        path.split('.').map(str::to_string).collect()
    }

    #[test]
    fn json_set_keeps_comments_and_order() {
        let text = "{\n  // the model\n  \"model\": \"a/b\", /* trailing */\n  \"compaction\": {\"auto\": true}\n}\n";
        let out = json_set(text, &keys("compaction.auto"), &json!(false), "f").unwrap();
        assert!(out.contains("// the model"), "{out}");
        assert!(out.contains("/* trailing */"), "{out}");
        assert_eq!(
            json_value(&out, "f").unwrap()["compaction"]["auto"],
            json!(false)
        );
        assert!(out.find("model").unwrap() < out.find("compaction").unwrap());
        // Setting it again changes nothing.
        assert_eq!(
            json_set(&out, &keys("compaction.auto"), &json!(false), "f").unwrap(),
            out
        );
    }

    #[test]
    fn json_set_creates_parents_and_remove_prunes_them() {
        let text = "{\n  // keep me\n  \"a\": 1\n}\n";
        let out = json_set(text, &keys("x.y.z"), &json!("v"), "f").unwrap();
        assert_eq!(json_value(&out, "f").unwrap()["x"]["y"]["z"], json!("v"));
        let back = json_remove(&out, &keys("x.y.z"), 0, "f").unwrap();
        assert_eq!(json_value(&back, "f").unwrap(), json!({"a": 1}));
        assert!(back.contains("// keep me"));
    }

    #[test]
    fn json_push_and_pull() {
        let text = "{\"hooks\": {\"Stop\": [{\"x\": 1}]}}";
        let out = json_push(text, &keys("hooks.Stop"), &json!({"y": 2}), "f").unwrap();
        assert_eq!(
            json_value(&out, "f").unwrap()["hooks"]["Stop"],
            json!([{"x": 1}, {"y": 2}])
        );
        let back = json_pull(
            &out,
            &keys("hooks.Stop"),
            &|v| v == &json!({"y": 2}),
            0,
            "f",
        )
        .unwrap();
        assert_eq!(
            json_value(&back, "f").unwrap()["hooks"]["Stop"],
            json!([{"x": 1}])
        );
        let gone = json_pull(&back, &keys("hooks.Stop"), &|_| true, 0, "f").unwrap();
        assert_eq!(json_value(&gone, "f").unwrap(), json!({}));
    }

    #[test]
    fn json_errors_name_the_place() {
        let err = json_set("{\n  \"a\": 1,,\n}", &keys("b"), &json!(1), "x.json").unwrap_err();
        assert!(err.to_string().contains("x.json"), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn toml_set_keeps_comments_and_removes_cleanly() {
        let text = "# my codex\nmodel = \"o3\" # fast\n\n[features]\nother = 1\n";
        let out = toml_set(text, &keys("features.hooks"), &json!(true), "c").unwrap();
        let out = toml_set(
            &out,
            &keys("mcp_servers.mc"),
            &json!({"command": "mc-search", "args": ["mcp"]}),
            "c",
        )
        .unwrap();
        assert!(
            out.contains("# my codex") && out.contains("# fast"),
            "{out}"
        );
        assert!(out.contains("[mcp_servers.mc]"), "{out}");
        assert!(!out.contains("[mcp_servers]\n"), "{out}");
        assert_eq!(
            toml_get(&out, &keys("mcp_servers.mc.args"), "c").unwrap(),
            Some(json!(["mcp"]))
        );
        let back = toml_remove(&out, &keys("mcp_servers.mc"), 0, "c").unwrap();
        let back = toml_remove(&back, &keys("features.hooks"), 1, "c").unwrap();
        assert_eq!(back, text);
    }
}
