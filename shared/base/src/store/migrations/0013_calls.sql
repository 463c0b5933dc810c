-- 0012: the per-call record. One row per pass (one-shot, resident and
-- gateway): what mc decided and why, what the call was made of, and the
-- usage the provider reported for it (which reaches mc with the next call
-- and is written onto this row then). Bounded: the pass prunes by
-- `transform.calls_keep_rows` and `transform.calls_keep_days`.
CREATE TABLE calls (
    id INTEGER PRIMARY KEY,
    session INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    at_ms INTEGER NOT NULL,
    decision TEXT NOT NULL,
    reason TEXT NOT NULL,
    bust TEXT NOT NULL,
    -- What the head did: off, replayed, refreshed, rebuilt (and why).
    head TEXT NOT NULL,
    head_reason TEXT,
    usage_percent REAL NOT NULL,
    context_window INTEGER NOT NULL,
    model TEXT,
    -- Fingerprints of what the harness sent (NULL when it sent none).
    system_print TEXT,
    tools_print TEXT,
    -- The input's message count and first message id: a harness that
    -- rewrites its history (its own compaction) changes them.
    messages INTEGER NOT NULL,
    first_message TEXT,
    -- Tokens of the call by source (estimates; NULL when not known).
    system_tokens INTEGER,
    tools_tokens INTEGER,
    head_tokens INTEGER NOT NULL,
    memory_tokens INTEGER NOT NULL,
    pin_tokens INTEGER NOT NULL,
    conversation_tokens INTEGER NOT NULL,
    tool_tokens INTEGER NOT NULL,
    drops INTEGER NOT NULL,
    -- The usage sample the call arrived with (the previous call's answer).
    sample_input INTEGER,
    sample_cache_read INTEGER,
    sample_cache_write INTEGER,
    sample_output INTEGER,
    -- The provider's usage of this call's own answer, once it is known.
    input INTEGER,
    cache_read INTEGER,
    cache_write INTEGER,
    output INTEGER
);
-- A session's newest calls (status, the dashboard's timeline).
CREATE INDEX calls_by_session ON calls (session, id);
-- Spend per session and per day, read from the index alone (the dashboard);
-- the second also serves pruning by age.
CREATE INDEX calls_usage_by_session ON calls (session, model, input, cache_read, cache_write, output);
CREATE INDEX calls_by_time ON calls (at_ms, model, input, cache_read, cache_write, output);
