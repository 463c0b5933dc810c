//! Typed errors of mc-core. Binaries wrap them with context (anyhow) and map
//! them to exit codes: `Input` is the caller's fault (exit 2), the rest are
//! runtime failures (exit 1) — except in the transform pass, which fails open.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller sent something we cannot work with (bad JSON, bad range...).
    #[error("{0}")]
    Input(String),

    /// The database was written by a newer mc; using it could corrupt it.
    #[error(
        "database {path} has schema version {found}, newer than this mc supports ({supported}); \
         upgrade mc, or point --db/MC_DB at another file"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    #[error("cannot open database {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),

    #[error(transparent)]
    Io(#[from] std::io::Error),

    /// Stored state that contradicts itself (a bug or a hand-edited database).
    #[error("corrupt state: {0}")]
    Corrupt(String),
}

impl Error {
    pub fn input(msg: impl Into<String>) -> Self {
        Error::Input(msg.into())
    }

    /// True when the failure is SQLite being busy or locked by another process.
    pub fn is_busy(&self) -> bool {
        let code = match self {
            Error::Sqlite(e) | Error::Open { source: e, .. } => e.sqlite_error_code(),
            _ => None,
        };
        matches!(
            code,
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
