-- 0001: what the per-call transform must remember between passes.
-- Each pass is a fresh process, so everything the pass derives once (tag
-- numbers, message ordinals, drops, watermarks) lives here and is replayed.

-- One row per (harness, session): counters, the last usage sample, the frozen
-- verdicts and watermarks that make later passes reproduce earlier bytes.
CREATE TABLE sessions (
    id                        INTEGER PRIMARY KEY,
    harness                   TEXT    NOT NULL,
    session_id                TEXT    NOT NULL,
    project_identity          TEXT,
    is_subagent               INTEGER NOT NULL DEFAULT 0,
    -- Frozen verdict: may the agent call ctx_reduce in this session? NULL until
    -- the first user message was seen. Decides whether §N§ prefixes are shown.
    reduce_callable           INTEGER,
    tag_counter               INTEGER NOT NULL DEFAULT 0,
    ordinal_counter           INTEGER NOT NULL DEFAULT 0,
    -- Last time the provider answered (ms), the reference point for the cache TTL.
    last_response_ms          INTEGER NOT NULL DEFAULT 0,
    last_execute_ms           INTEGER NOT NULL DEFAULT 0,
    last_input_tokens         INTEGER NOT NULL DEFAULT 0,
    last_usage_percent        REAL    NOT NULL DEFAULT 0,
    last_context_limit        INTEGER NOT NULL DEFAULT 0,
    last_model_key            TEXT,
    -- Id of the user message whose turn already had its heuristic cleanup.
    heuristics_turn_id        TEXT,
    -- Tool tags at or below this number may be reclaimed by age (advanced on
    -- every execute pass, so an output becomes eligible one execute later).
    tool_reclaim_watermark    INTEGER NOT NULL DEFAULT 0,
    -- Reasoning of messages whose newest tag is at or below this is cleared.
    reasoning_cleared_through INTEGER NOT NULL DEFAULT 0,
    -- Set when an execute was owed but deferred because a turn was mid-tool-use.
    deferred_execute_ms       INTEGER,
    last_decision             TEXT,
    last_reason               TEXT,
    last_bust                 TEXT,
    last_bust_cause           TEXT,
    last_bust_ms              INTEGER,
    passes_defer              INTEGER NOT NULL DEFAULT 0,
    passes_execute            INTEGER NOT NULL DEFAULT 0,
    passes_passthrough        INTEGER NOT NULL DEFAULT 0,
    last_error                TEXT,
    created_ms                INTEGER NOT NULL,
    updated_ms                INTEGER NOT NULL,
    UNIQUE (harness, session_id)
);

-- Every observed message gets a stable ordinal, in order of first sight.
CREATE TABLE messages (
    session    INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    message_id TEXT    NOT NULL,
    ordinal    INTEGER NOT NULL,
    role       TEXT    NOT NULL,
    created_ms INTEGER,
    PRIMARY KEY (session, message_id)
) WITHOUT ROWID;
-- Serves: the range scan "messages from the first visible one on" of each pass.
CREATE UNIQUE INDEX messages_by_ordinal ON messages (session, ordinal);

-- One row per tagged unit: a text part, a file part, or a tool call's output.
CREATE TABLE tags (
    session        INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    number         INTEGER NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('message', 'file', 'tool')),
    -- message: '<message id>:p<part index>'; file: '<message id>:file<part index>';
    -- tool: '<call id>@<owning assistant message id>' (call ids are reused by harnesses).
    identity       TEXT    NOT NULL,
    message_id     TEXT    NOT NULL,
    ordinal        INTEGER NOT NULL,
    status         TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'dropped')),
    -- Frozen at drop time so replays never change shape: 'full' removes a tool
    -- call with its result, 'skeleton' keeps the call with a placeholder output.
    drop_mode      TEXT CHECK (drop_mode IN ('full', 'skeleton')),
    dropped_ms     INTEGER,
    drop_cause     TEXT,
    tool_name      TEXT,
    byte_size      INTEGER NOT NULL,
    tokens         INTEGER NOT NULL,
    -- 0 while `tokens` is the fast estimate, 1 once recounted with the reference tokenizer.
    tokens_exact   INTEGER NOT NULL DEFAULT 0,
    input_bytes    INTEGER NOT NULL DEFAULT 0,
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    reasoning_bytes INTEGER NOT NULL DEFAULT 0,
    created_ms     INTEGER NOT NULL,
    PRIMARY KEY (session, number)
) WITHOUT ROWID;
-- Serves: binding a part to its existing tag on every pass.
CREATE UNIQUE INDEX tags_by_identity ON tags (session, identity);
-- Serves: loading the tags of the visible window (ordinal >= first visible).
CREATE INDEX tags_by_ordinal ON tags (session, ordinal);

-- Drops the agent asked for (ctx_reduce) that wait for a pass that busts anyway.
CREATE TABLE pending_drops (
    session   INTEGER NOT NULL,
    tag       INTEGER NOT NULL,
    queued_ms INTEGER NOT NULL,
    PRIMARY KEY (session, tag),
    FOREIGN KEY (session, tag) REFERENCES tags (session, number) ON DELETE CASCADE
) WITHOUT ROWID;
