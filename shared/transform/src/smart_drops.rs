//! Smart drops (`transform.smart_drops`): on a pass that busts anyway, an
//! edit of a file that a later call edits again becomes an edit marker, and
//! spent control-plane outputs go. Pure selection and the marker's input;
//! the pass applies them with the ordinary drop primitives, and the render
//! draws a marker from the call's own input, so a replay gives the same bytes.

use serde_json::{Map, Value};

/// How an edit tool names what it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    /// One file, under this argument.
    Path(&'static str),
    /// Files named inside a patch text (`*** Update File: …`), under this
    /// argument, or the input itself when it is a string.
    Patch(&'static str),
}

/// The edit and write tools of every harness, by the name the model calls.
/// Checked against the pinned harnesses: OpenCode `edit {filePath, oldString,
/// newString, replaceAll}`, `write {filePath, content}`, `apply_patch
/// {patchText}`; Pi `edit {path, edits: [{oldText, newText}]}`, `write
/// {path, content}`; Claude Code `Edit {file_path, old_string, new_string,
/// replace_all}`, `Write {file_path, content}`, `NotebookEdit
/// {notebook_path, new_source, …}`, and `MultiEdit {file_path, edits}` of
/// older releases; Codex `apply_patch` (its patch as the whole input).
/// Through the gateway (Claude Code, Codex) a call is opaque: a marker there
/// changes only its result.
const EDIT_TOOLS: &[(&str, &[Names])] = &[
    ("edit", &[Names::Path("filePath"), Names::Path("path")]),
    ("write", &[Names::Path("filePath"), Names::Path("path")]),
    (
        "apply_patch",
        &[Names::Patch("patchText"), Names::Patch("input")],
    ),
    ("Edit", &[Names::Path("file_path")]),
    ("Write", &[Names::Path("file_path")]),
    ("MultiEdit", &[Names::Path("file_path")]),
    ("NotebookEdit", &[Names::Path("notebook_path")]),
];

/// Tools whose every call rewrites the whole todo list: only the newest
/// call's output still says anything. OpenCode `todowrite`, Claude Code
/// `TodoWrite`, Codex `update_plan` (Pi has none).
pub const TODO_TOOLS: &[&str] = &["todowrite", "TodoWrite", "update_plan"];

/// Tools whose output is spent as soon as it is read: Claude Code's
/// `TaskStop` (and `KillShell`, its older name) answer only that a
/// background task stopped.
const META_TOOLS: &[&str] = &["TaskStop", "KillShell"];

/// The newest this-many `ctx_reduce` results stay, as examples.
pub const CTX_REDUCE_KEEP: usize = 3;

/// Characters of each changed text an edit marker keeps.
pub const REGION_HINT_CHARS: usize = 40;

fn is_mc_tool(name: &str, tool: &str) -> bool {
    name == tool
        || name
            .strip_suffix(tool)
            .is_some_and(|prefix| prefix.ends_with('_'))
}

/// `ctx_reduce`, as the harness names it (`ctx_reduce`, `mcp__mc__ctx_reduce`, …).
pub fn is_ctx_reduce(name: &str) -> bool {
    is_mc_tool(name, "ctx_reduce")
}

pub fn is_todo(name: &str) -> bool {
    TODO_TOOLS.contains(&name)
}

fn names_of(tool: &str) -> Option<&'static [Names]> {
    EDIT_TOOLS
        .iter()
        .find(|(name, _)| *name == tool)
        .map(|(_, names)| *names)
}

pub fn is_edit(tool: &str) -> bool {
    names_of(tool).is_some()
}

/// The files a patch text adds, updates, deletes or moves to.
fn patch_files(patch: &str) -> Vec<String> {
    const HEADERS: [&str; 4] = [
        "*** Update File: ",
        "*** Add File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    patch
        .lines()
        .filter_map(|line| {
            HEADERS
                .iter()
                .find_map(|h| line.strip_prefix(h))
                .map(|path| path.trim().to_string())
        })
        .filter(|path| !path.is_empty())
        .collect()
}

/// The files an edit call changed; `None` for another tool or when its
/// input names none (such a call is never marked).
pub fn edited_files(tool: &str, input: Option<&Value>) -> Option<Vec<String>> {
    let input = input?;
    let files = names_of(tool)?.iter().find_map(|names| match *names {
        Names::Path(key) => input
            .get(key)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(|p| vec![p.to_string()]),
        Names::Patch(key) => input
            .get(key)
            .and_then(Value::as_str)
            .or_else(|| input.as_str())
            .map(patch_files)
            .filter(|files| !files.is_empty()),
    })?;
    Some(files)
}

/// `text` cut to its first [`REGION_HINT_CHARS`] characters, `…` marking a cut.
fn hint(text: &str) -> String {
    match text.char_indices().nth(REGION_HINT_CHARS) {
        Some((end, _)) => format!("{}…", text.get(..end).unwrap_or_default()),
        None => text.to_string(),
    }
}

fn hint_values(value: &mut Value) {
    match value {
        Value::String(s) => *s = hint(s),
        Value::Array(items) => items.iter_mut().for_each(hint_values),
        Value::Object(map) => map.values_mut().for_each(hint_values),
        _ => {}
    }
}

/// A patch as its file headers and each hunk's first line, cut to a hint.
fn patch_hint(patch: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in patch.lines() {
        if line.starts_with("*** ") {
            out.push(line.to_string());
        } else if line.starts_with("@@") {
            out.push(hint(line));
        }
    }
    out.join("\n")
}

/// The input an edit marker shows: the path arguments verbatim, every other
/// text cut to a [`REGION_HINT_CHARS`] hint (a patch: its file headers and
/// hunk lines), numbers and flags as they were. A pure function of the
/// call's input, and idempotent.
pub fn marker_input(tool: &str, input: &Value) -> Value {
    let names = names_of(tool).unwrap_or_default();
    let is_path = |key: &str| {
        names
            .iter()
            .any(|n| matches!(n, Names::Path(k) if *k == key))
    };
    let is_patch = |key: &str| {
        names
            .iter()
            .any(|n| matches!(n, Names::Patch(k) if *k == key))
    };
    match input {
        Value::String(patch) if !names.is_empty() => Value::String(patch_hint(patch)),
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                let mut value = value.clone();
                match &mut value {
                    Value::String(text) if is_patch(key) => *text = patch_hint(text),
                    _ if is_path(key) => {}
                    other => hint_values(other),
                }
                out.insert(key.clone(), value);
            }
            Value::Object(out)
        }
        other => {
            let mut other = other.clone();
            hint_values(&mut other);
            other
        }
    }
}

/// One tool call as the selection sees it.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub number: i64,
    pub tool: &'a str,
    pub input: Option<&'a Value>,
    /// Still on the wire and droppable now (not yet dropped, closed, outside
    /// the protected window, not pinned).
    pub droppable: bool,
}

/// What smart drops does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// An edit superseded by a later one of the same files.
    Marker,
    /// A spent control-plane output.
    Drop,
}

/// Pick, among `calls` (oldest first), the edits to mark and the spent
/// outputs to drop: every todo list but the newest, every `ctx_reduce`
/// result but the newest [`CTX_REDUCE_KEEP`], `ctx_note` listings and
/// dismissals, [`META_TOOLS`]; an edit each of whose files a later call
/// (dropped or not) edits again. Only droppable calls are picked; the
/// newest of each kind counts whether droppable or not.
pub fn select(calls: &[Call<'_>]) -> Vec<(i64, Choice)> {
    let mut picked = Vec::new();
    let newest_todo = calls
        .iter()
        .rev()
        .find(|c| is_todo(c.tool))
        .map(|c| c.number);
    let kept_reduce: Vec<i64> = calls
        .iter()
        .rev()
        .filter(|c| is_ctx_reduce(c.tool))
        .take(CTX_REDUCE_KEEP)
        .map(|c| c.number)
        .collect();
    let files: Vec<Option<Vec<String>>> = calls
        .iter()
        .map(|c| edited_files(c.tool, c.input))
        .collect();
    for (index, call) in calls.iter().enumerate() {
        if !call.droppable {
            continue;
        }
        let spent = (is_todo(call.tool) && newest_todo != Some(call.number))
            || (is_ctx_reduce(call.tool) && !kept_reduce.contains(&call.number))
            || (is_mc_tool(call.tool, "ctx_note") && note_is_spent(call.input))
            || META_TOOLS.contains(&call.tool);
        if spent {
            picked.push((call.number, Choice::Drop));
            continue;
        }
        let Some(Some(mine)) = files.get(index) else {
            continue;
        };
        let later: Vec<&String> = files.iter().skip(index + 1).flatten().flatten().collect();
        if mine.iter().all(|file| later.contains(&file)) {
            picked.push((call.number, Choice::Marker));
        }
    }
    picked
}

/// A `ctx_note` call that only listed or dismissed notes: its output is
/// spent once read (a write is kept; an unreadable action is kept).
fn note_is_spent(input: Option<&Value>) -> bool {
    matches!(
        input.and_then(|i| i.get("action")).and_then(Value::as_str),
        Some("list" | "dismiss")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call<'a>(number: i64, tool: &'a str, input: &'a Value) -> Call<'a> {
        Call {
            number,
            tool,
            input: Some(input),
            droppable: true,
        }
    }

    #[test]
    fn every_harness_names_its_edited_files() {
        let cases = [
            (
                "edit",
                json!({"filePath": "a.rs", "oldString": "x", "newString": "y"}),
            ),
            ("write", json!({"filePath": "a.rs", "content": "x"})),
            (
                "edit",
                json!({"path": "a.rs", "edits": [{"oldText": "x", "newText": "y"}]}),
            ),
            ("write", json!({"path": "a.rs", "content": "x"})),
            (
                "Edit",
                json!({"file_path": "a.rs", "old_string": "x", "new_string": "y"}),
            ),
            ("Write", json!({"file_path": "a.rs", "content": "x"})),
            ("MultiEdit", json!({"file_path": "a.rs", "edits": []})),
            (
                "NotebookEdit",
                json!({"notebook_path": "a.rs", "new_source": "x"}),
            ),
            (
                "apply_patch",
                json!({"patchText": "*** Begin Patch\n*** Update File: a.rs\n@@\n-x\n+y\n*** End Patch"}),
            ),
            (
                "apply_patch",
                json!("*** Begin Patch\n*** Update File: a.rs\n*** End Patch"),
            ),
        ];
        for (tool, input) in &cases {
            assert_eq!(
                edited_files(tool, Some(input)),
                Some(vec!["a.rs".to_string()]),
                "{tool} {input}"
            );
        }
        assert_eq!(
            edited_files("read", Some(&json!({"filePath": "a.rs"}))),
            None
        );
        assert_eq!(edited_files("edit", Some(&json!({"oldString": "x"}))), None);
        assert_eq!(edited_files("edit", None), None);
    }

    #[test]
    fn a_marker_keeps_the_path_and_a_forty_character_hint() {
        let long = "fn main() { println!(\"hello, world, from a long line\"); }";
        let input = json!({"filePath": "src/a_rather_long_path/main.rs", "oldString": long,
                           "newString": "short", "replaceAll": true});
        let marked = marker_input("edit", &input);
        assert_eq!(
            marked,
            json!({"filePath": "src/a_rather_long_path/main.rs",
                   "oldString": "fn main() { println!(\"hello, world, from…",
                   "newString": "short", "replaceAll": true})
        );
        assert_eq!(marker_input("edit", &marked), marked, "idempotent");
        // Pi's list of edits: each text cut.
        let pi = json!({"path": "a.rs", "edits": [{"oldText": long, "newText": "b"}]});
        assert_eq!(
            marker_input("edit", &pi)["edits"][0]["oldText"],
            json!("fn main() { println!(\"hello, world, from…")
        );
        // A patch keeps its headers and hunk lines, not its body.
        let patch = format!(
            "*** Begin Patch\n*** Update File: a.rs\n@@ {long}\n-{long}\n+y\n*** End Patch"
        );
        assert_eq!(
            marker_input("apply_patch", &json!({ "patchText": patch })),
            json!({"patchText": "*** Begin Patch\n*** Update File: a.rs\n@@ fn main() { println!(\"hello, world, f…\n*** End Patch"})
        );
    }

    #[test]
    fn superseded_edits_are_marked_and_spent_control_plane_outputs_go() {
        let a = json!({"filePath": "a.rs", "oldString": "x", "newString": "y"});
        let b = json!({"filePath": "b.rs", "content": "z"});
        let todo = json!({"todos": []});
        let none = json!({});
        let list = json!({"action": "list"});
        let write = json!({"action": "write", "content": "n"});
        let calls = vec![
            call(1, "edit", &a),
            call(2, "write", &b),
            call(3, "todowrite", &todo),
            call(4, "ctx_reduce", &none),
            call(5, "edit", &a),
            call(6, "ctx_reduce", &none),
            call(7, "ctx_note", &list),
            call(8, "ctx_note", &write),
            call(9, "ctx_reduce", &none),
            call(10, "ctx_reduce", &none),
            call(11, "todowrite", &todo),
            call(12, "read", &a),
        ];
        assert_eq!(
            select(&calls),
            vec![
                (1, Choice::Marker),
                (3, Choice::Drop),
                (4, Choice::Drop),
                (7, Choice::Drop)
            ]
        );
        // A later edit that is no longer droppable still supersedes; a call
        // that is not droppable is never picked.
        let mut frozen = calls.clone();
        frozen[4].droppable = false;
        assert_eq!(select(&frozen), select(&calls));
        frozen[0].droppable = false;
        assert_eq!(
            select(&frozen),
            vec![(3, Choice::Drop), (4, Choice::Drop), (7, Choice::Drop)]
        );
        // A patch over two files is marked only once both are edited again.
        let both =
            json!("*** Begin Patch\n*** Update File: a.rs\n*** Update File: b.rs\n*** End Patch");
        let calls = vec![call(1, "apply_patch", &both), call(2, "edit", &a)];
        assert!(select(&calls).is_empty());
        let calls = vec![
            call(1, "apply_patch", &both),
            call(2, "edit", &a),
            call(3, "write", &b),
        ];
        assert_eq!(select(&calls), vec![(1, Choice::Marker)]);
        // Prefixed mc tools are mc's tools.
        assert!(is_ctx_reduce("mcp__mc__ctx_reduce") && !is_ctx_reduce("notctx_reduce"));
    }
}
