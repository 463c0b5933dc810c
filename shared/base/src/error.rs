//! Typed errors of mc-core. Every error has a [`ErrorKind`], which decides
//! the exit code of a binary that fails with it (the transform pass fails
//! open instead), and [`hints`](Error::hints): what the user can do about
//! it, as data, never baked into the message. The message says what went
//! wrong; a variant either shows its cause in its message or exposes it as
//! its `source`, never both, so a chain printed as `{:#}` says each thing once.

use std::path::PathBuf;

use serde::Serialize;

/// What kind of failure an error is: who can fix it, and the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The caller sent something unusable: bad JSON, a bad range, a missing
    /// field, a file that is not a transcript. Exit 2.
    Input,
    /// The setup is wrong: the config or the environment lacks what the
    /// command needs. Exit 2.
    Config,
    /// Something mc needs cannot be used now: the database is locked by
    /// another process or newer than this mc, a server or provider does not
    /// answer. Exit 1.
    Unavailable,
    /// Stored state contradicts itself (a damaged or hand-edited database).
    /// Exit 1.
    Corrupt,
    /// A bug in mc. Exit 1.
    Internal,
}

impl ErrorKind {
    /// 2 for bad input or usage (the caller or the setup must change), 1 for
    /// a runtime failure.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Input | ErrorKind::Config => 2,
            ErrorKind::Unavailable | ErrorKind::Corrupt | ErrorKind::Internal => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Input => "input",
            ErrorKind::Config => "config",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Internal => "internal",
        }
    }
}

/// How a request to an OpenCode server failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFailure {
    /// No answer: connection refused or reset, DNS, TLS.
    Unreachable,
    /// No answer within the request's timeout.
    Timeout,
    /// The server does not know the session (404 on it).
    NoSession,
    /// Any other answer outside 2xx.
    Status(u16),
    /// An answer that is not the OpenCode API's JSON (another service, a web
    /// UI's page).
    NotTheApi,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller sent something we cannot work with (bad JSON, bad range...).
    #[error("{0}")]
    Input(String),

    /// The config or the environment lacks what the command needs.
    #[error("{0}")]
    Config(String),

    /// The database was written by a newer mc; using it could corrupt it.
    #[error(
        "database {path} has schema version {found}, newer than this mc supports ({supported})"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    #[error("cannot open database {path}: {cause}")]
    Open {
        path: PathBuf,
        cause: rusqlite::Error,
    },

    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),

    #[error(transparent)]
    Io(#[from] std::io::Error),

    /// A request to an OpenCode server failed. `message` names the method
    /// and URL and carries the server's answer; `base` is the server's URL.
    #[error("{message}")]
    OpenCode {
        failure: ServerFailure,
        base: String,
        message: String,
    },

    /// Stored state that contradicts itself (a bug or a hand-edited database).
    #[error("corrupt state: {0}")]
    Corrupt(String),

    /// A bug in mc (a panic caught at the edge, a broken invariant).
    #[error("internal error: {0}")]
    Internal(String),

    /// `error`, after what it interrupted; kind and hints are `error`'s.
    #[error("{context}: {error}")]
    Context { context: String, error: Box<Error> },

    /// `error`, with one more thing the user can do about it.
    #[error("{error}")]
    Hinted { error: Box<Error>, hint: String },
}

/// Said of every damaged or missing full-text index: the repair, which
/// builds it again from the rows it indexes (nothing is lost).
const INDEX_HINT: &str = "a search index is damaged or missing: run `mc-search index --rebuild` \
    (it builds every index again from the rows it indexes; `mc-doctor --fix` does the same)";

/// Said of every locked or busy database: which setting raises the wait.
const BUSY_HINT: &str = "another mc process held the database longer than this command waits; \
    try again, or raise sqlite.busy_timeout_ms in the user config \
    (sqlite.hook_busy_timeout_ms for a pass, system and reduce)";

impl Error {
    pub fn input(msg: impl Into<String>) -> Self {
        Error::Input(msg.into())
    }

    /// This error, after `context` (what it interrupted).
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context {
            context: context.into(),
            error: Box::new(self),
        }
    }

    /// This error, with `hint` (what the user can do) after its own hints.
    pub fn with_hint(self, hint: impl Into<String>) -> Self {
        Error::Hinted {
            error: Box::new(self),
            hint: hint.into(),
        }
    }

    /// What kind of failure this is; a binary exits with its
    /// [`exit_code`](ErrorKind::exit_code).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Input(_) => ErrorKind::Input,
            Error::Config(_) => ErrorKind::Config,
            Error::SchemaTooNew { .. } | Error::Io(_) => ErrorKind::Unavailable,
            Error::Open { cause, .. } => match sqlite_kind(cause) {
                ErrorKind::Internal => ErrorKind::Unavailable,
                kind => kind,
            },
            Error::Sqlite(e) => sqlite_kind(e),
            Error::OpenCode { failure, .. } => match failure {
                ServerFailure::NoSession => ErrorKind::Input,
                _ => ErrorKind::Unavailable,
            },
            Error::Corrupt(_) => ErrorKind::Corrupt,
            Error::Internal(_) => ErrorKind::Internal,
            Error::Context { error, .. } | Error::Hinted { error, .. } => error.kind(),
        }
    }

    /// What the user can do about it, one line each (a binary prints them as
    /// `name: hint: …` after its error line).
    pub fn hints(&self) -> Vec<String> {
        match self {
            Error::SchemaTooNew { .. } => {
                vec!["upgrade mc, or point --db (or MC_DB) at another file".into()]
            }
            Error::Open { cause, .. } if is_busy(cause) => vec![BUSY_HINT.into()],
            Error::Open { .. } => vec![
                "check that the path names a file mc may write, or point --db (or MC_DB) at \
                 another file"
                    .into(),
            ],
            Error::Sqlite(e) if is_busy(e) => vec![BUSY_HINT.into()],
            Error::Sqlite(e) if is_index_damage(e) => vec![INDEX_HINT.into()],
            Error::Sqlite(e) => match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) => {
                    vec![
                        "the file is damaged or not mc's database: restore it from a backup, \
                         or point --db (or MC_DB) at another file"
                            .into(),
                    ]
                }
                Some(rusqlite::ErrorCode::DiskFull) => vec!["free some disk space".into()],
                _ => Vec::new(),
            },
            Error::OpenCode { failure, base, .. } => server_hints(*failure, base),
            Error::Internal(_) => vec!["this is a bug in mc; please report it".into()],
            Error::Context { error, .. } => error.hints(),
            Error::Hinted { error, hint } => {
                let mut hints = error.hints();
                hints.push(hint.clone());
                hints
            }
            Error::Input(_) | Error::Config(_) | Error::Io(_) | Error::Corrupt(_) => Vec::new(),
        }
    }

    /// True when the failure is SQLite being busy or locked by another process.
    pub fn is_busy(&self) -> bool {
        match self {
            Error::Sqlite(e) | Error::Open { cause: e, .. } => is_busy(e),
            Error::Context { error, .. } | Error::Hinted { error, .. } => error.is_busy(),
            _ => false,
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Sqlite(e)
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// mc's full-text indexes by name: the FTS5 tables the migrations create.
/// mc-search-core's `fts::INDEXES` describes each (a test there keeps the
/// two lists equal); the error kind needs only the names.
pub const FTS_INDEXES: [&str; 5] = [
    "messages_fts",
    "memories_fts",
    "notes_fts",
    "compartments_fts",
    "commits_fts",
];

/// True when SQLite failed on a damaged full-text index (FTS5 reports
/// `SQLITE_CORRUPT_VTAB`) or on one of mc's that is gone (`no such table`,
/// from a search or from the trigger that keeps it in step).
fn is_index_damage(e: &rusqlite::Error) -> bool {
    const SQLITE_CORRUPT_VTAB: i32 = 267;
    let missing_table = |message: &str| {
        // Also "error in trigger memories_fts_insert: no such table: …".
        message
            .split_once("no such table: ")
            .map(|(_, name)| name.strip_prefix("main.").unwrap_or(name))
            .is_some_and(|name| FTS_INDEXES.contains(&name))
    };
    match e {
        rusqlite::Error::SqliteFailure(failure, message) => {
            failure.extended_code == SQLITE_CORRUPT_VTAB
                || message.as_deref().is_some_and(missing_table)
        }
        rusqlite::Error::SqlInputError { msg, .. } => missing_table(msg),
        _ => false,
    }
}

/// The kind of a SQLite failure: another process or the machine
/// (unavailable), the file or its rows (corrupt), else mc's own SQL (internal).
fn sqlite_kind(e: &rusqlite::Error) -> ErrorKind {
    use rusqlite::ErrorCode as Code;
    if is_index_damage(e) {
        return ErrorKind::Corrupt;
    }
    match e {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            Code::DatabaseBusy
            | Code::DatabaseLocked
            | Code::PermissionDenied
            | Code::ReadOnly
            | Code::SystemIoFailure
            | Code::DiskFull
            | Code::CannotOpen
            | Code::FileLockingProtocolFailed
            | Code::OutOfMemory
            | Code::NoLargeFileSupport => ErrorKind::Unavailable,
            Code::DatabaseCorrupt | Code::NotADatabase | Code::ConstraintViolation => {
                ErrorKind::Corrupt
            }
            _ => ErrorKind::Internal,
        },
        // A stored value of a type or range mc never writes.
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::Utf8Error(..) => ErrorKind::Corrupt,
        _ => ErrorKind::Internal,
    }
}

fn server_hints(failure: ServerFailure, base: &str) -> Vec<String> {
    match failure {
        ServerFailure::Unreachable | ServerFailure::Timeout => vec![format!(
            "is OpenCode running and serving {base}? Check the URL (--opencode-url; mc-pin also \
             reads OPENCODE_URL)"
        )],
        ServerFailure::NotTheApi => vec![format!(
            "is {base} the URL of the OpenCode server itself (opencode serve)? Check \
             --opencode-url (mc-pin also reads OPENCODE_URL)"
        )],
        ServerFailure::NoSession => vec![
            "check the session id, and the project folder the server is asked about \
             (?directory=)"
                .into(),
        ],
        ServerFailure::Status(_) => Vec::new(),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The error and its sources, as anyhow's `{:#}` prints them.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut line = error.to_string();
        let mut cause = error.source();
        while let Some(e) = cause {
            line.push_str(&format!(": {e}"));
            cause = e.source();
        }
        line
    }

    fn busy() -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".into()),
        )
    }

    #[test]
    fn kinds_map_to_exit_codes() {
        let cases = [
            (Error::input("bad"), ErrorKind::Input, 2),
            (Error::Config("no path".into()), ErrorKind::Config, 2),
            (Error::Sqlite(busy()), ErrorKind::Unavailable, 1),
            (
                Error::SchemaTooNew {
                    path: "db".into(),
                    found: 9,
                    supported: 1,
                },
                ErrorKind::Unavailable,
                1,
            ),
            (Error::Corrupt("x".into()), ErrorKind::Corrupt, 1),
            (Error::Internal("x".into()), ErrorKind::Internal, 1),
            (
                Error::OpenCode {
                    failure: ServerFailure::Unreachable,
                    base: "http://127.0.0.1:9".into(),
                    message: "cannot reach OpenCode".into(),
                },
                ErrorKind::Unavailable,
                1,
            ),
            (
                Error::OpenCode {
                    failure: ServerFailure::NoSession,
                    base: "http://127.0.0.1:9".into(),
                    message: "OpenCode has no session".into(),
                },
                ErrorKind::Input,
                2,
            ),
            // Wrappers keep the kind of what they wrap.
            (
                Error::input("bad").context("reading the event"),
                ErrorKind::Input,
                2,
            ),
            (
                Error::Sqlite(busy()).with_hint("wait"),
                ErrorKind::Unavailable,
                1,
            ),
        ];
        for (error, kind, code) in cases {
            assert_eq!(error.kind(), kind, "{error}");
            assert_eq!(error.kind().exit_code(), code, "{error}");
        }
        let constraint = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
            None,
        );
        assert_eq!(Error::from(constraint).kind(), ErrorKind::Corrupt);
        assert_eq!(
            Error::from(rusqlite::Error::InvalidQuery).kind(),
            ErrorKind::Internal
        );
    }

    #[test]
    fn a_locked_database_says_it_once_and_hints_at_the_wait() {
        let error = Error::from(busy());
        // The cause is in the message, not also a source: one mention.
        assert_eq!(chain(&error), "database error: database is locked");
        let error = Error::from(busy());
        assert!(error.is_busy());
        let hints = error.hints();
        assert_eq!(hints.len(), 1);
        assert!(hints[0].contains("sqlite.busy_timeout_ms"), "{hints:?}");
        assert!(
            hints[0].contains("sqlite.hook_busy_timeout_ms"),
            "{hints:?}"
        );
        let open = Error::Open {
            path: "/x/db".into(),
            cause: busy(),
        };
        assert_eq!(
            chain(&open),
            "cannot open database /x/db: database is locked"
        );
    }

    #[test]
    fn hints_are_data_not_message_text() {
        let too_new = Error::SchemaTooNew {
            path: "/x/db".into(),
            found: 9,
            supported: 7,
        };
        assert!(!too_new.to_string().contains("upgrade"), "{too_new}");
        assert!(too_new.hints()[0].starts_with("upgrade mc"));
        let unreachable = Error::OpenCode {
            failure: ServerFailure::Unreachable,
            base: "http://127.0.0.1:9".into(),
            message: "cannot reach OpenCode: GET http://127.0.0.1:9/session/s".into(),
        };
        assert!(unreachable.hints()[0].contains("http://127.0.0.1:9"));
        assert!(unreachable.hints()[0].contains("OPENCODE_URL"));
        // Wrappers add to the hints of what they wrap, and keep its message.
        let hinted = too_new.with_hint("or ask for help").context("opening");
        assert_eq!(hinted.hints().len(), 2);
        assert_eq!(hinted.hints()[1], "or ask for help");
        assert!(
            hinted
                .to_string()
                .starts_with("opening: database /x/db has schema")
        );
        assert!(Error::input("bad").hints().is_empty());
        assert!(Error::Internal("x".into()).hints()[0].contains("bug"));
    }

    /// A damaged or missing search index names its repair, not a backup.
    #[test]
    fn a_damaged_search_index_names_the_rebuild() {
        let store = crate::store::Store::open_in_memory().unwrap();
        let conn = store.conn();
        conn.execute_batch(
            "INSERT INTO memories (project, category, content, created_ms, updated_ms)
             VALUES ('p', 'NAMING', 'lease', 1, 1);
             DELETE FROM memories_fts_data WHERE id = 10;",
        )
        .unwrap();
        let corrupt = Error::from(
            conn.execute_batch("SELECT * FROM memories_fts WHERE memories_fts MATCH 'lease'")
                .unwrap_err(),
        );
        conn.execute_batch("DROP TABLE memories_fts").unwrap();
        let missing = Error::from(
            conn.execute(
                "INSERT INTO memories (project, category, content, created_ms, updated_ms)
                 VALUES ('p', 'NAMING', 'wal', 1, 1)",
                [],
            )
            .unwrap_err(),
        );
        for error in [corrupt, missing] {
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            let hints = error.hints();
            assert_eq!(hints.len(), 1, "{error}: {hints:?}");
            assert!(
                hints[0].contains("`mc-search index --rebuild`"),
                "{hints:?}"
            );
        }
        // Any other missing table is still mc's own bug.
        let other = Error::from(conn.execute_batch("SELECT * FROM no_such").unwrap_err());
        assert_eq!(other.kind(), ErrorKind::Internal);
    }
}
