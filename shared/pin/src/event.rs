//! What `mc-pin restore` was given on stdin: an OpenCode event (bare, wrapped
//! as on `/global/event`, or as a plugin's `{event}`), or a Claude Code /
//! Codex hook input. Only a compaction means work.

use std::path::PathBuf;

use serde_json::Value;

use mc_base::error::{Error, Result};

/// OpenCode's `session.compacted`: the summary step of a compaction finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactedEvent {
    pub session_id: String,
    /// The instance's folder (`properties.directory`, else the global envelope's).
    pub directory: Option<String>,
    pub event_id: Option<String>,
}

/// A `SessionStart` hook input (Claude Code, Codex). Which harness sent it is
/// not told by its fields (Codex's has no `turn_id` here, Claude Code's may
/// lack `prompt_id`): the caller says, or the transcript does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookInput {
    pub session_id: String,
    /// Codex may send null.
    pub transcript_path: Option<PathBuf>,
    pub cwd: Option<String>,
    /// `startup`, `resume`, `clear`, `compact` (or another the harness adds).
    pub source: String,
    /// Claude Code's id of the prompt the hook fires in (2.1.196+): the same
    /// in every hook of one compaction, new for the next one.
    pub prompt_id: Option<String>,
}

impl HookInput {
    pub fn is_compact(&self) -> bool {
        self.source == "compact"
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Compacted(CompactedEvent),
    /// A `SessionStart` hook input, of any source.
    SessionStart(HookInput),
    /// Another hook input (another event): nothing to do, and nothing may be
    /// printed (the harness reads stdout).
    OtherHook {
        event: String,
    },
    /// Another OpenCode event (`session.idle`, `session.status`, …): nothing to do.
    OtherEvent {
        kind: String,
    },
}

/// Tell what `value` is. Not an object, an object that is neither an event nor
/// a hook input, or a compaction without its session id: an input error.
pub fn classify(value: &Value) -> Result<Event> {
    classify_in(value, None)
}

fn classify_in(value: &Value, directory_hint: Option<&str>) -> Result<Event> {
    let Value::Object(map) = value else {
        return Err(Error::input(format!(
            "the event is {}, not a JSON object",
            mc_base::json::kind_name(value)
        )));
    };
    let str_of = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);

    if let Some(name) = map.get("hook_event_name").and_then(Value::as_str) {
        let source = map.get("source").and_then(Value::as_str);
        if name != "SessionStart" {
            let event = match source {
                Some(source) => format!("{name}:{source}"),
                None => name.to_string(),
            };
            return Ok(Event::OtherHook { event });
        }
        let session_id = str_of(map.get("session_id"))
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Error::input("the SessionStart hook input has no \"session_id\""))?;
        return Ok(Event::SessionStart(HookInput {
            session_id,
            transcript_path: str_of(map.get("transcript_path"))
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            cwd: str_of(map.get("cwd")).filter(|c| !c.is_empty()),
            source: source.unwrap_or("startup").to_string(),
            prompt_id: str_of(map.get("prompt_id")).filter(|p| !p.is_empty()),
        }));
    }

    // The global stream's envelope: {directory, project?, payload: Event}.
    if let Some(payload @ Value::Object(_)) = map.get("payload") {
        let directory = map
            .get("directory")
            .and_then(Value::as_str)
            .filter(|d| *d != "global" && !d.is_empty());
        return classify_in(payload, directory.or(directory_hint));
    }
    // A plugin's event hook argument: {event: Event}.
    if let Some(event @ Value::Object(inner)) = map.get("event")
        && inner.contains_key("type")
    {
        return classify_in(event, directory_hint);
    }

    let Some(kind) = map.get("type").and_then(Value::as_str) else {
        return Err(Error::input(
            "not an event: expected an OpenCode event {\"type\", \"properties\"} (bare or as \
             {\"directory\", \"payload\"}) or a hook input {\"hook_event_name\", …}",
        ));
    };
    if kind != "session.compacted" {
        return Ok(Event::OtherEvent {
            kind: kind.to_string(),
        });
    }
    let properties = map.get("properties");
    let session_id = str_of(properties.and_then(|p| p.get("sessionID")))
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Error::input("the session.compacted event has no \"properties.sessionID\"")
        })?;
    let directory = str_of(properties.and_then(|p| p.get("directory")))
        .filter(|d| !d.is_empty())
        .or_else(|| directory_hint.map(str::to_string));
    Ok(Event::Compacted(CompactedEvent {
        session_id,
        directory,
        event_id: str_of(map.get("id")),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn compaction_events_bare_and_wrapped() {
        let bare = json!({"id": "evt_5", "type": "session.compacted", "properties": {"sessionID": "ses_1"}});
        let expected = CompactedEvent {
            session_id: "ses_1".into(),
            directory: None,
            event_id: Some("evt_5".into()),
        };
        assert_eq!(classify(&bare).unwrap(), Event::Compacted(expected.clone()));
        let wrapped = json!({"directory": "/home/me/repo", "project": "p1", "payload": bare});
        assert_eq!(
            classify(&wrapped).unwrap(),
            Event::Compacted(CompactedEvent {
                directory: Some("/home/me/repo".into()),
                ..expected.clone()
            })
        );
        let global = json!({"directory": "global", "payload": bare});
        assert_eq!(
            classify(&global).unwrap(),
            Event::Compacted(expected.clone())
        );
        let plugin = json!({"event": bare});
        assert_eq!(classify(&plugin).unwrap(), Event::Compacted(expected));
        let pi = json!({"type": "session.compacted", "properties": {"sessionID": "s", "directory": "/d"}});
        assert!(
            matches!(classify(&pi).unwrap(), Event::Compacted(e) if e.directory.as_deref() == Some("/d"))
        );
    }

    #[test]
    fn other_events_and_hooks_are_no_work() {
        let idle = json!({"type": "session.idle", "properties": {"sessionID": "ses_1"}});
        assert_eq!(
            classify(&idle).unwrap(),
            Event::OtherEvent {
                kind: "session.idle".into()
            }
        );
        let status = json!({"directory": "/r", "payload": {"type": "session.status",
                            "properties": {"sessionID": "s", "status": {"type": "idle"}}}});
        assert!(matches!(
            classify(&status).unwrap(),
            Event::OtherEvent { .. }
        ));
        let startup = json!({"session_id": "s", "transcript_path": "/t", "cwd": "/c",
                             "hook_event_name": "SessionStart", "source": "startup"});
        let e = classify(&startup).unwrap();
        assert!(
            matches!(e, Event::SessionStart(HookInput { ref source, .. }) if source == "startup")
        );
        let stop = json!({"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": false});
        assert!(matches!(classify(&stop).unwrap(), Event::OtherHook { event } if event == "Stop"));
    }

    #[test]
    fn a_compact_session_start_is_a_restore() {
        let input = json!({"session_id": "e93c", "transcript_path": "/p/e93c.jsonl", "cwd": "/p",
                           "prompt_id": "9f1", "hook_event_name": "SessionStart", "source": "compact",
                           "model": "claude-opus-4-8"});
        let parsed = classify(&input).unwrap();
        assert_eq!(
            parsed,
            Event::SessionStart(HookInput {
                session_id: "e93c".into(),
                transcript_path: Some("/p/e93c.jsonl".into()),
                cwd: Some("/p".into()),
                source: "compact".into(),
                prompt_id: Some("9f1".into()),
            })
        );
        // Codex's compact SessionStart has no turn_id, and a null transcript may come.
        let codex = json!({"session_id": "019a", "transcript_path": null,
                           "hook_event_name": "SessionStart", "source": "compact"});
        assert!(matches!(
            classify(&codex).unwrap(),
            Event::SessionStart(HookInput { transcript_path: None, prompt_id: None, ref source, .. })
                if source == "compact"
        ));
    }

    #[test]
    fn malformed_events_are_input_errors() {
        for bad in [
            json!([1]),
            json!("session.compacted"),
            json!({"hello": "world"}),
            json!({"type": "session.compacted", "properties": {}}),
            json!({"type": "session.compacted"}),
            json!({"hook_event_name": "SessionStart", "source": "compact"}),
        ] {
            assert!(matches!(classify(&bad), Err(Error::Input(_))), "{bad}");
        }
    }
}
