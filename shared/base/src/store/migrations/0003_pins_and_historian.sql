-- 0003: where pin restoration left off, and the historian's lease and runs.

-- The last compaction whose pins were restored (Claude Code, Codex; OpenCode
-- keeps its cursor in the session metadata). A replayed event is a no-op.
CREATE TABLE pin_cursors (
    session    INTEGER PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    cursor     TEXT    NOT NULL,
    updated_ms INTEGER NOT NULL
);

-- At most one historian per session: a lease that expires if its holder died.
CREATE TABLE historian_leases (
    session     INTEGER PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    holder      TEXT    NOT NULL,
    acquired_ms INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL
);

-- Every historian run: what it did, or why it failed.
CREATE TABLE historian_runs (
    id           INTEGER PRIMARY KEY,
    session      INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    started_ms   INTEGER NOT NULL,
    finished_ms  INTEGER,
    status       TEXT CHECK (status IN ('published', 'nothing_to_do', 'failed')),
    model        TEXT,
    tokens_in    INTEGER NOT NULL DEFAULT 0,
    tokens_out   INTEGER NOT NULL DEFAULT 0,
    compartments INTEGER NOT NULL DEFAULT 0,
    facts        INTEGER NOT NULL DEFAULT 0,
    error        TEXT
);
-- Serves: the latest run of a session (status, check).
CREATE INDEX historian_runs_by_session ON historian_runs (session, id);
