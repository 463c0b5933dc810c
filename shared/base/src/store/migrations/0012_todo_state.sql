-- 0012: the todo list survives drops and folds.

-- Per session: the newest todo list a finished todo call wrote (its tool
-- and its arguments as JSON), captured from every pass's input, and the
-- synthetic call a busting pass re-injected after the head, as the bytes
-- every pass until the next bust renders (NULL: none).
CREATE TABLE todo_state (
    session     INTEGER PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    tool        TEXT    NOT NULL,
    state_json  TEXT    NOT NULL,
    captured_ms INTEGER NOT NULL,
    frozen_json TEXT
);
