//! The todo list survives drops and folds: every pass captures the newest
//! todo list a finished `todowrite` wrote; a busting pass whose wire no
//! longer shows that call intact (dropped, or folded into the head)
//! re-injects it as a synthetic call and result right after the head, with
//! a content-derived call id, and freezes those bytes, so every pass until
//! the next bust renders the same message. OpenCode only: the gateway never
//! writes a call (Claude Code's `tool_use`, Codex's `update_plan` items), and
//! Pi has no todo tool.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use mc_base::codec::{Message, Role};
use mc_base::error::{Error, Result};

use super::smart_drops;

/// The harness whose todo list is re-injected.
pub const HARNESS: &str = "opencode";

/// The newest finished todo call of `messages`: its tool and arguments.
fn newest_call(messages: &[Message]) -> Option<(&str, &Value)> {
    messages
        .iter()
        .rev()
        .flat_map(|m| m.parts.iter().rev())
        .find_map(|p| {
            let tool = p.tool_name().filter(|t| smart_drops::is_todo(t))?;
            p.tool_output()?;
            Some((tool, p.tool_input()?))
        })
}

/// Store the input's newest todo list, when it has one and it differs
/// from the stored one (an input whose todo calls are all behind a
/// compaction boundary keeps the stored one).
pub fn capture(conn: &Connection, session: i64, messages: &[Message], now_ms: i64) -> Result<()> {
    let Some((tool, input)) = newest_call(messages) else {
        return Ok(());
    };
    let state = input.to_string();
    conn.prepare_cached(
        "INSERT INTO todo_state (session, tool, state_json, captured_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session) DO UPDATE SET tool = excluded.tool, state_json = excluded.state_json,
                                             captured_ms = excluded.captured_ms
         WHERE todo_state.state_json != excluded.state_json OR todo_state.tool != excluded.tool",
    )?
    .execute(params![session, tool, state, now_ms])?;
    Ok(())
}

/// The items of a todo list: `todos` (todowrite, TodoWrite) or `plan` (update_plan).
fn items(input: &Value) -> Option<&Vec<Value>> {
    input
        .get("todos")
        .or_else(|| input.get("plan"))
        .and_then(Value::as_array)
}

/// Items neither completed nor cancelled.
fn open_items(input: &Value) -> usize {
    items(input).map_or(0, |items| {
        items
            .iter()
            .filter(|i| {
                !matches!(
                    i.get("status").and_then(Value::as_str),
                    Some("completed" | "cancelled")
                )
            })
            .count()
    })
}

/// The synthetic call and result, as an OpenCode assistant message: call id
/// `mc_synthetic_todo_` + the first 16 hex digits of SHA-256 of the list's
/// JSON; the model of the newest assistant message of the input (OpenCode
/// compares it with the session's own to decide what metadata to keep).
fn synthetic(session_id: &str, tool: &str, state: &str, messages: &[Message]) -> Option<Value> {
    let input: Value = serde_json::from_str(state).ok()?;
    let todos = input.get("todos")?.clone();
    let digest = Sha256::digest(state.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let id = format!("msg_mc_todo_{hex}");
    let mut info = json!({"id": id, "sessionID": session_id, "role": "assistant",
        "finish": "tool-calls", "time": {"created": 0, "completed": 0}, "syntheticTodo": true});
    if let Some(model) = messages.iter().rev().find(|m| m.role() == Role::Assistant) {
        for key in ["providerID", "modelID"] {
            if let (Some(value), Some(map)) = (model.info().get(key), info.as_object_mut()) {
                map.insert(key.into(), value.clone());
            }
        }
    }
    let open = open_items(&input);
    let output = serde_json::to_string_pretty(&todos).ok()?;
    Some(json!({
        "info": info,
        "parts": [{"id": format!("prt_mc_todo_{hex}"), "sessionID": session_id, "messageID": id,
                   "type": "tool", "callID": format!("mc_synthetic_todo_{hex}"), "tool": tool,
                   "state": {"status": "completed", "input": input, "output": output,
                             "title": format!("{open} todos"),
                             "metadata": {"todos": todos, "truncated": false},
                             "time": {"start": 0, "end": 0}}}]
    }))
}

/// On a busting pass: freeze the synthetic todo message this pass and the
/// passes until the next bust render — the stored list when the rule is
/// on (`enabled`, `transform.todo`), it has open items and the wire does
/// not show its call intact (`on_wire`), else none. Whether the frozen
/// bytes changed.
pub fn refreeze(
    conn: &Connection,
    session: i64,
    session_id: &str,
    messages: &[Message],
    on_wire: bool,
    enabled: bool,
) -> Result<bool> {
    let stored: Option<(String, String, Option<String>)> = conn
        .prepare_cached("SELECT tool, state_json, frozen_json FROM todo_state WHERE session = ?1")?
        .query_row(params![session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((tool, state, frozen)) = stored else {
        return Ok(false);
    };
    let open = serde_json::from_str::<Value>(&state).is_ok_and(|v| open_items(&v) > 0);
    let next = if enabled && open && !on_wire {
        synthetic(session_id, &tool, &state, messages).map(|v| v.to_string())
    } else {
        None
    };
    if next == frozen {
        return Ok(false);
    }
    conn.prepare_cached("UPDATE todo_state SET frozen_json = ?2 WHERE session = ?1")?
        .execute(params![session, next])?;
    Ok(true)
}

/// The frozen synthetic todo message, if any.
pub fn frozen(conn: &Connection, session: i64) -> Result<Option<Message>> {
    let json: Option<String> = conn
        .prepare_cached("SELECT frozen_json FROM todo_state WHERE session = ?1")?
        .query_row(params![session], |r| r.get(0))
        .optional()?
        .flatten();
    match json {
        Some(json) => {
            let value = serde_json::from_str(&json).map_err(|e| {
                Error::Corrupt(format!("the frozen todo call of session {session}: {e}"))
            })?;
            Ok(Some(Message::decode(value)?))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn todo(id: &str, items: Value) -> Message {
        Message::decode(json!({"info": {"id": id, "role": "assistant", "providerID": "p", "modelID": "m"},
            "parts": [{"type": "tool", "callID": id, "tool": "todowrite",
                       "state": {"status": "completed", "input": {"todos": items}, "output": "[]"}}]}))
        .unwrap()
    }

    #[test]
    fn the_synthetic_call_is_named_by_its_content_and_carries_the_list() {
        let items = json!([{"content": "a", "status": "in_progress"}, {"content": "b", "status": "completed"}]);
        let messages = [todo("m1", items.clone())];
        let (tool, input) = newest_call(&messages).unwrap();
        let state = input.to_string();
        let message = synthetic("s", tool, &state, &messages).unwrap();
        let part = &message["parts"][0];
        let call = part["callID"].as_str().unwrap();
        assert!(
            call.starts_with("mc_synthetic_todo_") && call.len() == 18 + 16,
            "{call}"
        );
        assert_eq!(part["state"]["input"]["todos"], items);
        assert_eq!(part["state"]["title"], "1 todos");
        assert_eq!(message["info"]["modelID"], "m");
        // The same list gives the same bytes; another list another id.
        assert_eq!(
            synthetic("s", tool, &state, &messages),
            Some(message.clone())
        );
        let other = synthetic("s", tool, r#"{"todos":[]}"#, &messages).unwrap();
        assert_ne!(other["parts"][0]["callID"], part["callID"]);
        // Only open items count.
        assert_eq!(open_items(&json!({"todos": [{"status": "cancelled"}]})), 0);
        assert_eq!(
            open_items(&json!({"plan": [{"step": "x", "status": "pending"}]})),
            1
        );
    }
}
