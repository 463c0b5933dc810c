-- 0014: recall on demand.

-- Per prompt (a user message a person typed), the one decision of whether a
-- hint naming what mc keeps rides on it: `outcome` hint, none, slow or
-- failed; the hint's bytes every later pass renders again (NULL: none); the
-- names of what it showed (a JSON array: a later hint of the session does
-- not name them again); how long the search took (NULL: not searched).
CREATE TABLE recall_hints (
    session     INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    message_id  TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    hint        TEXT,
    names       TEXT    NOT NULL DEFAULT '[]',
    search_us   INTEGER,
    decided_ms  INTEGER NOT NULL,
    PRIMARY KEY (session, message_id)
);
