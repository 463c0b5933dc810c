-- 0006: restorations claim their compaction before anything is sent.

-- One row per compaction a restorer took on. The row is inserted with
-- INSERT ... ON CONFLICT DO NOTHING inside one write transaction, so exactly
-- one process wins a compaction; the others see its row and send nothing.
-- `sending`: the winner is sending (a failed send deletes the row, so the next
-- event can try again; a row older than the claim timeout is a crashed holder's
-- and may be taken over). `done`: restored. Keyed by the harness's own session
-- id, not a session row: an OpenCode session may have no row in mc's database.
CREATE TABLE restore_claims (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    harness    TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    -- OpenCode: the summary message id. Claude Code/Codex: the compaction's
    -- boundary (else summary) uuid, or `at:<ms>` when the transcript shows none.
    compaction TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('sending', 'done')),
    claimed_ms INTEGER NOT NULL,
    done_ms    INTEGER,
    UNIQUE (harness, session_id, compaction)
);
