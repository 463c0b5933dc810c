//! Pins in mc's database: the only store for harnesses without a server (and
//! for OpenCode when no server URL is given), and always the mirror the
//! transform reads to keep pinned messages out of every drop.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use mc_base::codec::{GroupedMessage, claude, codex};
use mc_base::domain::sessions;
use mc_base::error::{Error, Result};
use mc_base::identity::project_identity;
use mc_base::store::Store;
use mc_history::store as history;

use super::{Action, Pin, PinOutcome, PinRequest, Target, check_role, message_text};

/// The session's row id, if mc knows the session.
pub fn session_row(conn: &Connection, harness: &str, session_id: &str) -> Result<Option<i64>> {
    Ok(sessions::find_session(conn, harness, session_id)?.map(|s| s.id))
}

/// The session's row id, creating the row when mc has not seen the session.
/// `project_dir` names the folder whose project identity a new row gets (the
/// transform derives it only when it creates the row, so a row created here
/// must carry it); it is resolved outside the write lock, as it may run git.
pub fn ensure_session(
    store: &mut Store,
    harness: &str,
    session_id: &str,
    project_dir: Option<&Path>,
    now_ms: i64,
) -> Result<i64> {
    if let Some(row) = session_row(store.conn(), harness, session_id)? {
        return Ok(row);
    }
    let identity = project_dir.map(project_identity);
    store.write(|tx| match session_row(tx, harness, session_id)? {
        Some(row) => Ok(row),
        None => Ok(sessions::create_session(
            tx,
            harness,
            session_id,
            false,
            identity.as_deref(),
            now_ms,
        )?
        .id),
    })
}

/// The session's row, created or given `project_dir`'s project when it has
/// none: what a pass that cannot see the folder (the gateway's) then reads,
/// so the head it renders carries that project's memory.
pub fn ensure_project(
    store: &mut Store,
    harness: &str,
    session_id: &str,
    project_dir: &Path,
    now_ms: i64,
) -> Result<i64> {
    let known = sessions::find_session(store.conn(), harness, session_id)?;
    if known.as_ref().is_some_and(|s| s.project_identity.is_some()) {
        return Ok(known.map_or(0, |s| s.id));
    }
    let identity = project_identity(project_dir);
    let dir = project_dir.display().to_string();
    store.write(|tx| {
        let row = match sessions::find_session(tx, harness, session_id)? {
            Some(row) => row.id,
            None => {
                sessions::create_session(tx, harness, session_id, false, Some(&identity), now_ms)?
                    .id
            }
        };
        sessions::adopt_project(tx, row, &identity, &dir)?;
        Ok(row)
    })
}

/// The session's pins, chronological; none when mc does not know the session.
pub fn list(conn: &Connection, harness: &str, session_id: &str) -> Result<Vec<Pin>> {
    match session_row(conn, harness, session_id)? {
        Some(row) => history::pins(conn, row),
        None => Ok(Vec::new()),
    }
}

/// What [`mirror`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mirrored {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

/// Make the session's pins in the database exactly `pins` (the list a
/// server holds, which wins).
pub fn mirror(conn: &Connection, session: i64, pins: &[Pin]) -> Result<Mirrored> {
    let stored = history::pins(conn, session)?;
    let mut changes = Mirrored::default();
    for old in &stored {
        match pins.iter().find(|p| p.id == old.id) {
            Some(new) if new == old => {}
            Some(_) => {
                history::unpin(conn, session, &old.id)?;
            }
            None => {
                history::unpin(conn, session, &old.id)?;
                changes.removed.push(old.id.clone());
            }
        }
    }
    for pin in pins {
        if history::pin(conn, session, &pin.id, &pin.role, pin.created_at)?
            && !stored.iter().any(|s| s.id == pin.id)
        {
            changes.added.push(pin.id.clone());
        }
    }
    Ok(changes)
}

/// Role and creation time of a message a transform pass has seen.
fn seen_message(
    conn: &Connection,
    session: i64,
    message_id: &str,
) -> Result<Option<(String, Option<i64>)>> {
    Ok(conn
        .query_row(
            "SELECT role, created_ms FROM messages WHERE session = ?1 AND message_id = ?2",
            params![session, message_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// The newest message of `role` a transform pass has seen: (id, created).
fn newest_seen(
    conn: &Connection,
    session: i64,
    role: &str,
) -> Result<Option<(String, Option<i64>)>> {
    Ok(conn
        .query_row(
            "SELECT message_id, created_ms FROM messages WHERE session = ?1 AND role = ?2
             ORDER BY ordinal DESC LIMIT 1",
            params![session, role],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// The last compaction whose pins were restored (Claude Code, Codex).
pub fn cursor(conn: &Connection, session: i64) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT cursor FROM pin_cursors WHERE session = ?1",
            params![session],
            |r| r.get(0),
        )
        .optional()?)
}

pub fn set_cursor(conn: &Connection, session: i64, cursor: &str, now_ms: i64) -> Result<()> {
    conn.execute(
        "INSERT INTO pin_cursors (session, cursor, updated_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (session) DO UPDATE SET cursor = excluded.cursor, updated_ms = excluded.updated_ms",
        params![session, cursor, now_ms],
    )?;
    Ok(())
}

/// The lines of a transcript, as its harness writes them.
#[derive(Debug, Clone)]
pub enum Lines {
    /// A Claude Code session JSONL.
    Claude(Vec<claude::Entry>),
    /// A Codex rollout.
    Codex(Vec<codex::Line>),
    /// A Pi session file.
    Pi(mc_base::codec::pi::SessionFile),
}

/// A session transcript (Claude Code's JSONL or Codex's rollout), read for
/// pinning or restoring.
#[derive(Debug, Clone)]
pub struct Transcript {
    pub lines: Lines,
    pub messages: Vec<GroupedMessage>,
    /// Lines that could not be read (a line being written while we read).
    pub warnings: Vec<String>,
}

impl Transcript {
    /// Read the transcript at `path`: a regular file of at most `max_bytes`,
    /// line by line (see [`mc_base::codec::jsonl::read_objects`]). A line that
    /// cannot be read is skipped with a warning; the file itself must be
    /// readable. Which harness wrote it is told by its first line (a Codex
    /// rollout starts with `session_meta`), so a wrong `--harness` cannot make
    /// a rollout look empty. A transcript of another session is refused.
    pub fn load(path: &Path, session_id: &str, max_bytes: u64) -> Result<Transcript> {
        let objects = mc_base::codec::jsonl::read_objects(path, max_bytes, "transcript")?;
        let rollout = objects
            .lines
            .first()
            .is_some_and(|(_, v)| v.get("type").and_then(|t| t.as_str()) == Some("session_meta"));
        let pi_file = objects
            .lines
            .first()
            .is_some_and(|(_, v)| mc_base::codec::pi::is_header(v));
        let transcript = if pi_file {
            let file = mc_base::codec::pi::SessionFile::from_lines(objects.lines);
            if let Some(owner) = &file.id
                && owner != session_id
            {
                return Err(other_session(path, owner, session_id));
            }
            // Every message of the branch: a pin's text outlives Pi's compactions.
            Transcript {
                messages: mc_base::codec::pi::to_grouped_messages(&file, session_id, true),
                lines: Lines::Pi(file),
                warnings: objects.warnings,
            }
        } else if rollout {
            let lines = codex::lines_from(objects.lines);
            if let Some(owner) = codex::session_id(&lines)
                && owner != session_id
            {
                return Err(other_session(path, &owner, session_id));
            }
            Transcript {
                messages: codex::to_grouped_messages(&lines, session_id),
                lines: Lines::Codex(lines),
                warnings: objects.warnings,
            }
        } else {
            let entries = claude::entries_from(objects.lines);
            let mut owners = entries.iter().filter_map(|e| e.session_id.as_deref());
            if let Some(owner) = owners.clone().next()
                && !owners.any(|o| o == session_id)
            {
                return Err(other_session(path, owner, session_id));
            }
            Transcript {
                messages: claude::to_grouped_messages(&entries, session_id),
                lines: Lines::Claude(entries),
                warnings: objects.warnings,
            }
        };
        Ok(transcript)
    }

    /// Which harness wrote it.
    pub fn harness(&self) -> super::Harness {
        match self.lines {
            Lines::Claude(_) => super::Harness::ClaudeCode,
            Lines::Codex(_) => super::Harness::Codex,
            Lines::Pi(_) => super::Harness::Pi,
        }
    }

    /// The message a line id belongs to (a reply spans several lines).
    pub fn message_of(&self, uuid: &str) -> Option<&GroupedMessage> {
        self.messages
            .iter()
            .find(|m| m.uuids.iter().any(|u| u == uuid))
    }

    /// The working directory the session ran in.
    pub fn cwd(&self) -> Option<String> {
        match &self.lines {
            Lines::Claude(entries) => entries
                .iter()
                .find_map(|e| e.raw.get("cwd").and_then(|c| c.as_str()))
                .map(str::to_string),
            Lines::Codex(lines) => codex::cwd(lines),
            Lines::Pi(file) => file.cwd.clone(),
        }
    }
}

fn other_session(path: &Path, owner: &str, wanted: &str) -> Error {
    Error::input(format!(
        "transcript {} belongs to session {owner}, not {wanted}",
        path.display()
    ))
    .with_hint("pass the transcript of the session you name (or leave --session out)")
}

/// `pin`, `unpin` or `list` against mc's database alone. Role and creation
/// time come from the request, else the transcript, else the messages the
/// transform has seen. `project_dir` is the folder a new session row is
/// attributed to when the transcript does not say.
pub fn run(
    store: &mut Store,
    action: Action,
    request: &PinRequest,
    dry_run: bool,
    now_ms: i64,
    project_dir: Option<&Path>,
) -> Result<PinOutcome> {
    let harness = request.harness.as_str();
    let session_id = request.session_id.as_str();
    // The transcript is read only by the actions that need it.
    let load = || -> Result<(Option<Transcript>, Vec<String>)> {
        match &request.transcript {
            Some(path) => {
                let t = Transcript::load(path, session_id, request.max_transcript_bytes)?;
                let warnings = t.warnings.clone();
                Ok((Some(t), warnings))
            }
            None => Ok((None, Vec::new())),
        }
    };
    let row = session_row(store.conn(), harness, session_id)?;
    let current = match row {
        Some(row) => history::pins(store.conn(), row)?,
        None => Vec::new(),
    };
    let outcome = |pins: Vec<Pin>, warnings: Vec<String>| PinOutcome {
        pins,
        dry_run,
        requests: Vec::new(),
        warnings,
    };
    match action {
        Action::List => Ok(outcome(current, Vec::new())),
        Action::Unpin => {
            let Some(Target::Id(given)) = &request.target else {
                return Err(Error::input(
                    "unpin needs the id of the message (--message)",
                ));
            };
            // An id pinned as given, or no pins at all, needs no lookup.
            let (transcript, warnings) =
                if current.is_empty() || current.iter().any(|p| &p.id == given) {
                    (None, Vec::new())
                } else {
                    load()?
                };
            // Pins made through a transcript carry the id of the reply's first
            // line; one made with flags carries the id as given.
            let normalized = transcript
                .as_ref()
                .and_then(|t| t.message_of(given))
                .map(|m| m.id.clone());
            let id = normalized
                .filter(|n| current.iter().any(|p| &p.id == n))
                .unwrap_or_else(|| given.clone());
            let pinned = current.iter().any(|p| p.id == id);
            let mut warnings = warnings;
            if !pinned {
                warnings.push(match &transcript {
                    Some(_) => format!("no pin of session {session_id:?} has id {given:?}; nothing unpinned"),
                    None => format!(
                        "no pin of session {session_id:?} has id {given:?}; nothing unpinned (a line \
                         of a reply other than its first is found with --transcript FILE)"
                    ),
                });
            }
            match row {
                Some(row) if pinned && !dry_run => {
                    store.write(|tx| history::unpin(tx, row, &id))?;
                    Ok(outcome(history::pins(store.conn(), row)?, warnings))
                }
                _ => Ok(outcome(
                    current.into_iter().filter(|p| p.id != id).collect(),
                    warnings,
                )),
            }
        }
        Action::Pin => {
            let (transcript, warnings) = load()?;
            let pin = resolve(store.conn(), row, request, transcript.as_ref())?;
            if current.iter().any(|p| p.id == pin.id) {
                return Ok(outcome(current, warnings));
            }
            if dry_run {
                let mut pins = current;
                pins.push(pin);
                super::sort_chronologically(&mut pins);
                return Ok(outcome(pins, warnings));
            }
            let cwd = transcript.as_ref().and_then(Transcript::cwd);
            let dir = cwd.as_deref().map(Path::new).or(project_dir);
            let row = ensure_session(store, harness, session_id, dir, now_ms)?;
            store.write(|tx| history::pin(tx, row, &pin.id, &pin.role, pin.created_at))?;
            Ok(outcome(history::pins(store.conn(), row)?, warnings))
        }
    }
}

/// The pin a request describes: its id, role and creation time.
fn resolve(
    conn: &Connection,
    row: Option<i64>,
    request: &PinRequest,
    transcript: Option<&Transcript>,
) -> Result<Pin> {
    let session = &request.session_id;
    let (id, mut role, mut created) = match &request.target {
        Some(Target::Id(id)) => match transcript.and_then(|t| t.message_of(id)) {
            Some(m) => {
                if let Some(what) = not_pinnable(&m.message) {
                    return Err(Error::input(format!(
                        "message {id:?} is {what}, not a message of the conversation"
                    ))
                    .with_hint("pin a message the user or the agent wrote"));
                }
                (m.id.clone(), Some(m.role.to_string()), m.created_ms)
            }
            None => {
                if transcript.is_some() {
                    return Err(Error::input(format!(
                        "the transcript has no message with id {id:?}"
                    )));
                }
                let seen = match row {
                    Some(row) => seen_message(conn, row, id)?,
                    None => None,
                };
                match seen {
                    Some((role, created)) => (id.clone(), Some(role), created),
                    None => (id.clone(), None, None),
                }
            }
        },
        Some(Target::Last(role)) => {
            let found = match transcript {
                Some(t) => {
                    // Slash-command echoes (`/pin` itself, say) are not what anyone pins.
                    let values: Vec<serde_json::Value> = t
                        .messages
                        .iter()
                        .filter(|m| !is_command_echo(&m.message))
                        .map(|m| m.message.clone())
                        .collect();
                    super::newest_pinnable(&values, role)
                        .and_then(|v| v.pointer("/info/id").and_then(|id| id.as_str()))
                        .and_then(|id| t.message_of(id))
                        .map(|m| (m.id.clone(), m.created_ms))
                }
                None => match row {
                    Some(row) => newest_seen(conn, row, role)?,
                    None => None,
                },
            };
            let (id, created) = found.ok_or_else(|| {
                Error::input(format!("no {role} message known for session {session:?}")).with_hint(
                    if transcript.is_none() {
                        "pass --message ID or --transcript FILE"
                    } else {
                        "pass --message ID"
                    },
                )
            })?;
            (id, Some(role.to_string()), created)
        }
        None => {
            return Err(Error::input(
                "pin needs --message ID or --last user|assistant",
            ));
        }
    };
    if let Some(r) = &request.role {
        role = Some(r.clone());
    }
    if let Some(c) = request.created_at {
        created = Some(c);
    }
    let role = role.ok_or_else(|| {
        Error::input(format!("cannot tell the role of message {id:?}"))
            .with_hint("pass --role user|assistant (or --transcript FILE)")
    })?;
    let role = check_role(&role)?;
    let created_at = created.ok_or_else(|| {
        Error::input(format!("cannot tell when message {id:?} was created"))
            .with_hint("pass --created-at MS (or --transcript FILE)")
    })?;
    Ok(Pin {
        id,
        created_at,
        role: role.to_string(),
    })
}

/// A user line Claude Code writes for a slash command, a `!` shell command
/// or their output (`mc-pin` run from inside the session, say).
fn is_command_echo(message: &serde_json::Value) -> bool {
    let text = message_text(message);
    message.pointer("/info/role").and_then(|r| r.as_str()) == Some("user")
        && ["<command-", "<local-command-", "<bash-"]
            .iter()
            .any(|p| text.starts_with(p))
}

/// What a message the harness wrote itself is, when it is not the user's or
/// the agent's: a compaction summary or mark, a stand-in reply, context text.
fn not_pinnable(message: &serde_json::Value) -> Option<&'static str> {
    if message.pointer("/info/summary").and_then(|s| s.as_bool()) == Some(true) {
        return Some("the harness's compaction summary");
    }
    let parts = message
        .get("parts")
        .and_then(|p| p.as_array())
        .map_or(&[][..], Vec::as_slice);
    let kind = |p: &serde_json::Value| p.get("type").and_then(|t| t.as_str()).map(str::to_string);
    if parts
        .iter()
        .any(|p| kind(p).as_deref() == Some("compaction"))
    {
        return Some("the harness's compaction mark");
    }
    let texts: Vec<&serde_json::Value> = parts
        .iter()
        .filter(|p| kind(p).as_deref() == Some("text"))
        .collect();
    if !texts.is_empty()
        && texts
            .iter()
            .all(|p| p.get("synthetic").and_then(|s| s.as_bool()) == Some(true))
    {
        return Some("text the harness wrote itself");
    }
    if message_text(message).is_empty() {
        return Some("a message without text");
    }
    None
}

/// The text of each pin found in the transcript, chronological; the ids of the
/// pins it lacks (or whose message has no text) are returned apart.
pub fn texts_from_transcript(
    transcript: &Transcript,
    pins: &[Pin],
) -> (Vec<super::PinnedText>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for pin in pins {
        let text = transcript
            .message_of(&pin.id)
            .map(|m| message_text(&m.message))
            .unwrap_or_default();
        if text.is_empty() {
            missing.push(pin.id.clone());
        } else {
            found.push(super::PinnedText {
                id: pin.id.clone(),
                role: pin.role.clone(),
                created_at: pin.created_at,
                text,
            });
        }
    }
    super::text::sort(&mut found);
    (found, missing)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::Harness;

    const SESSION: &str = "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b";

    fn pin(id: &str, created_at: i64, role: &str) -> Pin {
        Pin {
            id: id.into(),
            created_at,
            role: role.into(),
        }
    }

    fn request(harness: Harness, target: Option<Target>) -> PinRequest {
        PinRequest {
            harness,
            session_id: SESSION.into(),
            target,
            role: None,
            created_at: None,
            transcript: None,
            max_transcript_bytes: mc_base::codec::jsonl::DEFAULT_MAX_BYTES,
        }
    }

    fn line(kind: &str, uuid: &str, ts: &str, extra: Value) -> String {
        let mut v = json!({"type": kind, "uuid": uuid, "parentUuid": null, "isSidechain": false,
                           "timestamp": ts, "sessionId": SESSION, "cwd": "/home/dev/shop"});
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v.to_string()
    }

    fn assistant(uuid: &str, ts: &str, api_id: &str, text: &str) -> String {
        line(
            "assistant",
            uuid,
            ts,
            json!({"message": {"id": api_id, "role": "assistant", "model": "claude-opus-4-8",
            "content": [{"type": "text", "text": text}], "stop_reason": null}}),
        )
    }

    fn transcript_file(dir: &Path) -> std::path::PathBuf {
        let text = [
            line("user", "u1", "2026-03-02T10:00:00.000Z",
                 json!({"message": {"role": "user", "content": "Rule: keep answers short."}})),
            assistant("a1", "2026-03-02T10:00:01.000Z", "msg_A", "Noted."),
            assistant("a2", "2026-03-02T10:00:01.500Z", "msg_A", "Anything else?"),
            line("user", "u2", "2026-03-02T10:00:05.000Z",
                 json!({"message": {"role": "user", "content": "Second request."}})),
            line("user", "m1", "2026-03-02T10:00:06.000Z",
                 json!({"isMeta": true, "message": {"role": "user", "content": "<local-command-caveat>x</local-command-caveat>"}})),
            line("user", "c1", "2026-03-02T10:00:07.000Z",
                 json!({"message": {"role": "user", "content": "<command-message>pin</command-message>\n<command-name>/pin</command-name>"}})),
        ]
        .join("\n");
        let path = dir.join("t.jsonl");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn mirror_makes_the_database_match_the_list() {
        let mut store = Store::open_in_memory().unwrap();
        let row = ensure_session(&mut store, "opencode", SESSION, None, 1).unwrap();
        store
            .write(|tx| {
                history::pin(tx, row, "old", "user", 1)?;
                history::pin(tx, row, "moved", "user", 2)
            })
            .unwrap();
        let list = [pin("moved", 3, "assistant"), pin("new", 4, "user")];
        let changes = store.write(|tx| mirror(tx, row, &list)).unwrap();
        assert_eq!(changes.added, ["new"]);
        assert_eq!(changes.removed, ["old"]);
        assert_eq!(history::pins(store.conn(), row).unwrap(), list);
        let again = store.write(|tx| mirror(tx, row, &list)).unwrap();
        assert_eq!(again, Mirrored::default());
    }

    #[test]
    fn a_new_session_row_gets_the_project_identity() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open_in_memory().unwrap();
        let row = ensure_session(&mut store, "claude-code", SESSION, Some(dir.path()), 1).unwrap();
        let found = sessions::find_session(store.conn(), "claude-code", SESSION)
            .unwrap()
            .unwrap();
        assert_eq!(found.id, row);
        assert_eq!(found.project_identity, Some(project_identity(dir.path())));
        assert_eq!(
            ensure_session(&mut store, "claude-code", SESSION, None, 2).unwrap(),
            row
        );
    }

    #[test]
    fn cursors_are_upserted() {
        let mut store = Store::open_in_memory().unwrap();
        let row = ensure_session(&mut store, "claude-code", SESSION, None, 1).unwrap();
        assert_eq!(cursor(store.conn(), row).unwrap(), None);
        store.write(|tx| set_cursor(tx, row, "s-1", 5)).unwrap();
        store.write(|tx| set_cursor(tx, row, "s-2", 6)).unwrap();
        assert_eq!(cursor(store.conn(), row).unwrap().as_deref(), Some("s-2"));
    }

    #[test]
    fn pins_from_a_transcript_take_role_time_and_the_whole_reply() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open_in_memory().unwrap();
        let mut req = request(Harness::ClaudeCode, Some(Target::Id("a2".into())));
        req.transcript = Some(transcript_file(dir.path()));
        let out = run(&mut store, Action::Pin, &req, false, 9, None).unwrap();
        let a1 = mc_base::codec::claude::parse_timestamp("2026-03-02T10:00:01.000Z").unwrap();
        assert_eq!(
            out.pins,
            [pin("a1", a1, "assistant")],
            "a line of a reply pins the reply"
        );

        req.target = Some(Target::Last("user"));
        let out = run(&mut store, Action::Pin, &req, false, 9, None).unwrap();
        assert_eq!(out.pins[1].id, "u2", "not the meta line nor the /pin echo");

        // A dry run answers the list it would make and writes nothing.
        req.target = Some(Target::Id("u1".into()));
        let dry = run(&mut store, Action::Pin, &req, true, 9, None).unwrap();
        assert_eq!(dry.pins.len(), 3);
        assert_eq!(dry.pins[0].id, "u1");
        assert_eq!(list(store.conn(), "claude-code", SESSION).unwrap().len(), 2);

        // Unpinning by any line of the reply unpins it; again is a no-op.
        req.target = Some(Target::Id("a2".into()));
        let out = run(&mut store, Action::Unpin, &req, false, 9, None).unwrap();
        assert_eq!(
            out.pins.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            ["u2"]
        );
        assert_eq!(
            run(&mut store, Action::Unpin, &req, false, 9, None)
                .unwrap()
                .pins,
            out.pins
        );

        // The new session row is attributed to the transcript's working folder.
        let row = sessions::find_session(store.conn(), "claude-code", SESSION)
            .unwrap()
            .unwrap();
        assert_eq!(
            row.project_identity,
            Some(project_identity(Path::new("/home/dev/shop")))
        );

        req.target = Some(Target::Id("nope".into()));
        assert!(matches!(
            run(&mut store, Action::Pin, &req, false, 9, None),
            Err(Error::Input(_))
        ));
    }

    #[test]
    fn list_and_unpin_by_a_pinned_id_do_not_read_the_transcript() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open_in_memory().unwrap();
        let mut req = request(Harness::ClaudeCode, Some(Target::Id("a1".into())));
        req.transcript = Some(transcript_file(dir.path()));
        run(&mut store, Action::Pin, &req, false, 9, None).unwrap();
        // The path now names something that must not be read (a folder).
        req.transcript = Some(dir.path().to_path_buf());
        req.target = None;
        assert_eq!(
            run(&mut store, Action::List, &req, false, 9, None)
                .unwrap()
                .pins
                .len(),
            1
        );
        // A line of the reply other than its first needs the transcript to be
        // told apart: that reads it, and the folder is refused.
        req.target = Some(Target::Id("a2".into()));
        let err = run(&mut store, Action::Unpin, &req, false, 9, None).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.contains("not a regular file")),
            "{err}"
        );
        req.target = Some(Target::Id("a1".into()));
        let out = run(&mut store, Action::Unpin, &req, false, 9, None).unwrap();
        assert!(out.pins.is_empty());
        // With no pins left, unpinning anything reads nothing either.
        req.target = Some(Target::Id("a2".into()));
        assert!(run(&mut store, Action::Unpin, &req, false, 9, None).is_ok());
    }

    #[test]
    fn pins_without_a_transcript_use_what_the_transform_saw_or_the_flags() {
        let mut store = Store::open_in_memory().unwrap();
        let row = ensure_session(&mut store, "opencode", SESSION, None, 1).unwrap();
        store
            .write(|tx| {
                mc_base::domain::messages::insert_message(tx, row, "msg_1", 1, "user", Some(100))?;
                mc_base::domain::messages::insert_message(
                    tx,
                    row,
                    "msg_2",
                    2,
                    "assistant",
                    Some(200),
                )?;
                mc_base::domain::messages::insert_message(
                    tx,
                    row,
                    "msg_3",
                    3,
                    "assistant",
                    Some(300),
                )?;
                mc_base::domain::messages::insert_message(tx, row, "msg_4", 4, "user", None)
            })
            .unwrap();
        let out = run(
            &mut store,
            Action::Pin,
            &request(Harness::OpenCode, Some(Target::Id("msg_1".into()))),
            false,
            9,
            None,
        )
        .unwrap();
        assert_eq!(out.pins, [pin("msg_1", 100, "user")]);
        let out = run(
            &mut store,
            Action::Pin,
            &request(Harness::OpenCode, Some(Target::Last("assistant"))),
            false,
            9,
            None,
        )
        .unwrap();
        assert_eq!(out.pins[1], pin("msg_3", 300, "assistant"));

        // Unknown time or role: the caller must say.
        let mut req = request(Harness::OpenCode, Some(Target::Id("msg_4".into())));
        let err = run(&mut store, Action::Pin, &req, false, 9, None).unwrap_err();
        assert_eq!(err.kind(), mc_base::error::ErrorKind::Input);
        assert!(err.hints()[0].contains("--created-at"), "{err}");
        req.target = Some(Target::Id("msg_unseen".into()));
        let err = run(&mut store, Action::Pin, &req, false, 9, None).unwrap_err();
        assert_eq!(err.kind(), mc_base::error::ErrorKind::Input);
        assert!(err.hints()[0].contains("--role"), "{err}");
        req.role = Some("assistant".into());
        req.created_at = Some(150);
        let out = run(&mut store, Action::Pin, &req, false, 9, None).unwrap();
        let ids: Vec<&str> = out.pins.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["msg_1", "msg_unseen", "msg_3"]);
    }
}
