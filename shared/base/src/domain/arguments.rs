//! A tool's arguments, declared once: the fields, their types, enums, ranges,
//! which are required (and which each action needs and takes). The JSON
//! Schema a tool publishes and the check its arguments pass before it runs
//! both come from that declaration, so they cannot drift.
//!
//! A small checker of our own rather than a JSON Schema crate: the types are a
//! closed set, the conditional rules (an action's fields) are not expressible
//! in the schemas harnesses accept, and the errors name the field and what is
//! allowed in words a model acts on.

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};

/// What a field holds. A few accept a second spelling models use, which the
/// published schema does not advertise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    /// An integer; a string of one too ("12", "#12": models quote numbers).
    Integer,
    Boolean,
    /// A list of strings; one comma-separated string too.
    Strings,
    /// A list of integers (each as [`Kind::Integer`]).
    Integers,
    /// A day `YYYY-MM-DD`, or epoch milliseconds as an integer (published as a string).
    Day,
    /// A string, or an integer standing for its digits (published as a string).
    Reference,
    /// Tags `"3-5,12"`, or a list of numbers and range strings (published as a string).
    Tags,
}

impl Kind {
    fn published(self) -> &'static str {
        match self {
            Kind::String | Kind::Day | Kind::Reference | Kind::Tags => "string",
            Kind::Integer => "integer",
            Kind::Boolean => "boolean",
            Kind::Strings | Kind::Integers => "array",
        }
    }

    fn wanted(self) -> &'static str {
        match self {
            Kind::String => "a string",
            Kind::Integer => "an integer",
            Kind::Boolean => "true or false",
            Kind::Strings => "a list of strings",
            Kind::Integers => "a list of integers",
            Kind::Day => "a day YYYY-MM-DD (or epoch milliseconds)",
            Kind::Reference => "a string",
            Kind::Tags => "tags as a string, e.g. \"3-5,12\"",
        }
    }
}

/// One field of a tool's arguments.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    /// The allowed values (of the string, or of each item of a list).
    pub values: &'static [&'static str],
    /// How a value is spelled before it is compared with `values` (e.g. any case).
    pub canonical: Option<fn(&str) -> String>,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub description: Option<&'static str>,
    /// Left out of the published schema and refused from the agent: a field
    /// only the command line sends.
    pub command_line_only: bool,
}

impl Field {
    pub const fn new(name: &'static str, kind: Kind) -> Field {
        Field {
            name,
            kind,
            required: false,
            values: &[],
            canonical: None,
            min: None,
            max: None,
            description: None,
            command_line_only: false,
        }
    }
    pub const fn required(mut self) -> Field {
        self.required = true;
        self
    }
    pub const fn one_of(mut self, values: &'static [&'static str]) -> Field {
        self.values = values;
        self
    }
    pub const fn canonical(mut self, spelling: fn(&str) -> String) -> Field {
        self.canonical = Some(spelling);
        self
    }
    pub const fn range(mut self, min: Option<i64>, max: Option<i64>) -> Field {
        self.min = min;
        self.max = max;
        self
    }
    pub const fn describe(mut self, text: &'static str) -> Field {
        self.description = Some(text);
        self
    }
    pub const fn command_line_only(mut self) -> Field {
        self.command_line_only = true;
        self
    }

    fn schema(&self, values: &[&str]) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), json!(self.kind.published()));
        match self.kind {
            Kind::Strings if values.is_empty() => {
                out.insert("items".into(), json!({"type": "string"}));
            }
            Kind::Strings => {
                out.insert("items".into(), json!({"type": "string", "enum": values}));
            }
            Kind::Integers => {
                out.insert("items".into(), json!({"type": "integer"}));
            }
            _ if !values.is_empty() => {
                out.insert("enum".into(), json!(values));
            }
            _ => {}
        }
        if let Some(min) = self.min {
            out.insert("minimum".into(), json!(min));
        }
        if let Some(max) = self.max {
            out.insert("maximum".into(), json!(max));
        }
        if let Some(text) = self.description {
            out.insert("description".into(), json!(text));
        }
        Value::Object(out)
    }
}

/// One action of a tool with an `action` field: the fields it needs and the
/// others it takes besides.
#[derive(Debug, Clone, Copy)]
pub struct Action {
    pub name: &'static str,
    pub needs: &'static [&'static str],
    pub takes: &'static [&'static str],
}

/// The action of arguments that name none.
pub type DefaultAction = fn(&Map<String, Value>) -> &'static str;

/// A tool's arguments: its fields, and its actions when it has an `action`.
#[derive(Debug, Clone, Copy)]
pub struct Arguments {
    pub tool: &'static str,
    pub fields: &'static [Field],
    /// Empty: the tool has no actions.
    pub actions: &'static [Action],
    /// The action when none is named (`None`: `action` is required).
    pub default_action: Option<DefaultAction>,
}

/// Who sends the arguments: the agent sees only the published fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Agent,
    CommandLine,
}

const ACTION: &str = "action";

/// A value given: present and not `null` (models send `null` for "not given").
fn given<'a>(args: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    args.get(name).filter(|v| !v.is_null())
}

impl Arguments {
    fn action_names(&self) -> Vec<&'static str> {
        self.actions.iter().map(|a| a.name).collect()
    }

    fn values_of(&self, field: &Field) -> Vec<&'static str> {
        if field.name == ACTION && !self.actions.is_empty() {
            self.action_names()
        } else {
            field.values.to_vec()
        }
    }

    /// The JSON Schema the tool publishes (`tools`, MCP `tools/list`).
    pub fn schema(&self) -> Value {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for field in self.fields.iter().filter(|f| !f.command_line_only) {
            properties.insert(field.name.into(), field.schema(&self.values_of(field)));
            if field.required {
                required.push(field.name);
            }
        }
        let mut schema = Map::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            schema.insert("required".into(), json!(required));
        }
        Value::Object(schema)
    }

    fn visible(&self, caller: Caller) -> impl Iterator<Item = &Field> {
        self.fields
            .iter()
            .filter(move |f| caller == Caller::CommandLine || !f.command_line_only)
    }

    fn names(&self, caller: Caller) -> String {
        let names: Vec<&str> = self.visible(caller).map(|f| f.name).collect();
        names.join(", ")
    }

    /// The action the arguments name, or the default; `None` when there is
    /// no action (or it is not one of the tool's, which [`Arguments::check`] refuses).
    pub fn action(&self, args: &Map<String, Value>) -> Option<&'static Action> {
        let name = match given(args, ACTION) {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return None,
            None => (self.default_action?)(args),
        };
        self.actions.iter().find(|a| a.name == name)
    }

    /// Check `args` against the declaration: an object, no unknown field,
    /// every value of its field's type, enum and range, the required fields
    /// and the action's. The error names the field and what is allowed.
    pub fn check(&self, args: &Value, caller: Caller) -> Result<()> {
        let tool = self.tool;
        let empty = Map::new();
        let args = match args {
            Value::Null => &empty,
            Value::Object(map) => map,
            other => {
                return Err(Error::input(format!(
                    "{tool}'s arguments must be a JSON object of {}, not {}",
                    self.names(caller),
                    kind_of(other)
                )));
            }
        };
        for name in args.keys() {
            if !self.visible(caller).any(|f| f.name == name) {
                return Err(Error::input(format!(
                    "{tool} has no field {name:?} (its fields: {})",
                    self.names(caller)
                )));
            }
        }
        for field in self.visible(caller) {
            if let Some(value) = given(args, field.name) {
                self.check_value(field, value)?;
            }
        }
        for field in self.visible(caller).filter(|f| f.required) {
            if given(args, field.name).is_none() {
                return Err(Error::input(format!(
                    "{tool} needs {:?} ({})",
                    field.name,
                    self.allowed(field)
                )));
            }
        }
        if self.actions.is_empty() {
            return Ok(());
        }
        let Some(action) = self.action(args) else {
            // Checked above: a named action is one of the tool's.
            return Ok(());
        };
        for name in action.needs {
            if given(args, name).is_none() {
                let wanted = self
                    .fields
                    .iter()
                    .find(|f| f.name == *name)
                    .map_or_else(|| "a value".to_string(), |f| self.allowed(f));
                return Err(Error::input(format!(
                    "{tool} {} needs {name:?} ({wanted}; {})",
                    action.name,
                    self.takes(action, caller)
                )));
            }
        }
        for name in args.keys() {
            let used = name == ACTION
                || action.needs.contains(&name.as_str())
                || action.takes.contains(&name.as_str());
            if !used && given(args, name).is_some() {
                return Err(Error::input(format!(
                    "{tool} {} does not take {name:?} ({})",
                    action.name,
                    self.takes(action, caller)
                )));
            }
        }
        Ok(())
    }

    /// What a field allows, in words: its values, else its kind.
    fn allowed(&self, field: &Field) -> String {
        let values = self.values_of(field);
        if values.is_empty() {
            field.kind.wanted().to_string()
        } else {
            format!("one of {}", values.join(", "))
        }
    }

    fn takes(&self, action: &Action, caller: Caller) -> String {
        let optional: Vec<&str> = action
            .takes
            .iter()
            .copied()
            .filter(|name| self.visible(caller).any(|f| f.name == *name))
            .collect();
        let mut text = format!("{} needs {}", action.name, quoted(action.needs));
        if !optional.is_empty() {
            text.push_str(&format!(", takes {}", quoted(&optional)));
        }
        text
    }

    fn check_value(&self, field: &Field, value: &Value) -> Result<()> {
        let tool = self.tool;
        let name = field.name;
        let wrong = || {
            Error::input(format!(
                "{tool} {name:?} must be {}, not {}",
                field.kind.wanted(),
                shown(value)
            ))
        };
        let values = self.values_of(field);
        let in_enum = |text: &str| -> Result<()> {
            let spelled = field
                .canonical
                .map_or_else(|| text.to_string(), |f| f(text));
            if values.is_empty() || values.contains(&spelled.as_str()) {
                Ok(())
            } else {
                Err(Error::input(format!(
                    "{tool} {name:?} must be one of {}, not {text:?}",
                    values.join(", ")
                )))
            }
        };
        let in_range = |n: i64| -> Result<()> {
            let low = field.min.is_some_and(|min| n < min);
            let high = field.max.is_some_and(|max| n > max);
            if !low && !high {
                return Ok(());
            }
            let range = match (field.min, field.max) {
                (Some(min), Some(max)) => format!("from {min} to {max}"),
                (Some(min), None) => format!("at least {min}"),
                (None, Some(max)) => format!("at most {max}"),
                (None, None) => String::new(),
            };
            Err(Error::input(format!(
                "{tool} {name:?} must be {range}, not {n}"
            )))
        };
        match field.kind {
            Kind::String => in_enum(value.as_str().ok_or_else(wrong)?),
            Kind::Integer => in_range(integer(value).ok_or_else(wrong)?),
            Kind::Boolean => value.as_bool().map(|_| ()).ok_or_else(wrong),
            Kind::Strings => match value {
                Value::String(s) => s.split(',').try_for_each(|item| in_enum(item.trim())),
                Value::Array(items) => items
                    .iter()
                    .try_for_each(|item| in_enum(item.as_str().ok_or_else(wrong)?)),
                _ => Err(wrong()),
            },
            Kind::Integers => match value {
                Value::Array(items) => items
                    .iter()
                    .try_for_each(|item| in_range(integer(item).ok_or_else(wrong)?)),
                _ => Err(wrong()),
            },
            Kind::Day => match value {
                Value::String(_) => Ok(()),
                Value::Number(n) if n.is_i64() => Ok(()),
                _ => Err(wrong()),
            },
            Kind::Reference => match value {
                Value::String(_) => Ok(()),
                Value::Number(n) if n.is_i64() => Ok(()),
                _ => Err(wrong()),
            },
            Kind::Tags => match value {
                Value::String(_) => Ok(()),
                Value::Array(items)
                    if items
                        .iter()
                        .all(|i| i.is_string() || i.is_i64() || i.is_u64()) =>
                {
                    Ok(())
                }
                _ => Err(wrong()),
            },
        }
    }
}

/// An integer, or a string of one ("12", "#12").
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().trim_start_matches('#').parse().ok(),
        _ => None,
    }
}

fn quoted(names: &[&str]) -> String {
    if names.is_empty() {
        return "nothing".into();
    }
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A value as an error shows it: short values whole, others by their kind.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 40 {
        text
    } else {
        kind_of(value).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: &[Field] = &[
        Field::new("action", Kind::String),
        Field::new("content", Kind::String),
        Field::new("id", Kind::Integer).range(Some(1), None),
        Field::new("tags", Kind::Strings).one_of(&["a", "b"]),
        Field::new("status", Kind::String).command_line_only(),
    ];
    const TOOL: Arguments = Arguments {
        tool: "t",
        fields: FIELDS,
        actions: &[
            Action {
                name: "write",
                needs: &["content"],
                takes: &["tags"],
            },
            Action {
                name: "show",
                needs: &["id"],
                takes: &[],
            },
            Action {
                name: "list",
                needs: &[],
                takes: &["status"],
            },
        ],
        default_action: None,
    };

    fn refused(args: Value, caller: Caller) -> String {
        TOOL.check(&args, caller).unwrap_err().to_string()
    }

    #[test]
    fn the_schema_lists_the_agent_s_fields_and_the_actions_as_the_enum() {
        let schema = TOOL.schema();
        let properties = schema["properties"].as_object().unwrap();
        let names: Vec<&str> = properties.keys().map(String::as_str).collect();
        assert_eq!(names, ["action", "content", "id", "tags"]);
        assert_eq!(
            schema["properties"]["action"]["enum"],
            json!(["write", "show", "list"])
        );
        assert_eq!(schema["properties"]["id"]["minimum"], 1);
        assert_eq!(schema.get("required"), None);
    }

    #[test]
    fn every_rule_is_checked_and_its_error_names_the_field_and_what_is_allowed() {
        let agent = Caller::Agent;
        assert_eq!(
            refused(json!({"action": "show", "idd": 3}), agent),
            "t has no field \"idd\" (its fields: action, content, id, tags)"
        );
        assert_eq!(
            refused(json!({"action": "show", "id": "x"}), agent),
            "t \"id\" must be an integer, not \"x\""
        );
        assert_eq!(
            refused(json!({"action": "show", "id": 0}), agent),
            "t \"id\" must be at least 1, not 0"
        );
        assert_eq!(
            refused(json!({"action": "shw"}), agent),
            "t \"action\" must be one of write, show, list, not \"shw\""
        );
        assert_eq!(
            refused(json!({"action": "write", "tags": ["c"]}), agent),
            "t \"tags\" must be one of a, b, not \"c\""
        );
        assert_eq!(
            refused(json!({"action": "write"}), agent),
            "t write needs \"content\" (a string; write needs \"content\", takes \"tags\")"
        );
        assert_eq!(
            refused(json!({"action": "show", "id": 2, "content": "x"}), agent),
            "t show does not take \"content\" (show needs \"id\")"
        );
        assert_eq!(
            refused(json!([1]), agent),
            "t's arguments must be a JSON object of action, content, id, tags, not a list"
        );
        // The command line's own field: the agent may not send it.
        assert!(refused(json!({"action": "list", "status": "all"}), agent).contains("no field"));
        TOOL.check(
            &json!({"action": "list", "status": "all"}),
            Caller::CommandLine,
        )
        .unwrap();
        // Quoted numbers, a comma list and nulls for "not given" pass.
        TOOL.check(
            &json!({"action": "show", "id": "#4", "content": null}),
            agent,
        )
        .unwrap();
        TOOL.check(
            &json!({"action": "write", "content": "x", "tags": "a, b"}),
            agent,
        )
        .unwrap();
    }

    #[test]
    fn a_required_field_names_its_values() {
        const REQUIRED: Arguments = Arguments {
            tool: "t",
            fields: &[Field::new("action", Kind::String).required()],
            actions: &[Action {
                name: "list",
                needs: &[],
                takes: &[],
            }],
            default_action: None,
        };
        let error = REQUIRED.check(&json!({}), Caller::Agent).unwrap_err();
        assert_eq!(error.to_string(), "t needs \"action\" (one of list)");
        assert_eq!(REQUIRED.schema()["required"], json!(["action"]));
    }
}
