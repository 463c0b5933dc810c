-- 0002: what the prompt's head is rendered from (compartments, memories, the
-- user profile, pins) and the per-session cache of the rendered head.

-- Historian output: one summary of a range of a session, at four tiers.
CREATE TABLE compartments (
    session          INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    sequence         INTEGER NOT NULL,
    start_ordinal    INTEGER NOT NULL,
    end_ordinal      INTEGER NOT NULL,
    start_message_id TEXT    NOT NULL,
    end_message_id   TEXT    NOT NULL,
    start_ms         INTEGER,
    end_ms           INTEGER,
    title            TEXT    NOT NULL,
    p1               TEXT    NOT NULL,
    p2               TEXT    NOT NULL,
    p3               TEXT    NOT NULL,
    p4               TEXT    NOT NULL,
    importance       INTEGER NOT NULL DEFAULT 50 CHECK (importance BETWEEN 0 AND 100),
    episode          TEXT,
    created_ms       INTEGER NOT NULL,
    PRIMARY KEY (session, sequence),
    CHECK (start_ordinal <= end_ordinal)
) WITHOUT ROWID;

-- Structural edits of published compartments (delete, merge, recompute): each
-- is a reason to rebuild m[0], which renders them.
CREATE TABLE compartment_edits (
    id         INTEGER PRIMARY KEY,
    session    INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL CHECK (kind IN ('delete', 'merge', 'recompute')),
    sequence   INTEGER,
    created_ms INTEGER NOT NULL
);
-- Serves: max(id) per session on every busting pass.
CREATE INDEX compartment_edits_by_session ON compartment_edits (session, id);

-- Durable project facts, scoped by project identity.
CREATE TABLE memories (
    id            INTEGER PRIMARY KEY,
    project       TEXT    NOT NULL,
    category      TEXT    NOT NULL CHECK (category IN
                      ('PROJECT_RULES', 'ARCHITECTURE', 'CONSTRAINTS', 'CONFIG_VALUES', 'NAMING')),
    content       TEXT    NOT NULL,
    status        TEXT    NOT NULL DEFAULT 'active'
                      CHECK (status IN ('active', 'permanent', 'archived', 'superseded')),
    importance    INTEGER,
    superseded_by INTEGER REFERENCES memories(id),
    expires_ms    INTEGER,
    created_ms    INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL
);
-- Serves: exact dedup on write, and the live memories of a project.
CREATE UNIQUE INDEX memories_live_content ON memories (project, category, content)
    WHERE status IN ('active', 'permanent');
CREATE INDEX memories_by_project ON memories (project, id);

-- Every non-additive change to a memory, so a cached head can show it as a
-- delta (m[1]) instead of rebuilding.
CREATE TABLE memory_mutations (
    id            INTEGER PRIMARY KEY,
    project       TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('update', 'archive', 'superseded')),
    memory        INTEGER NOT NULL,
    superseded_by INTEGER,
    content       TEXT,
    created_ms    INTEGER NOT NULL
);
CREATE INDEX memory_mutations_by_project ON memory_mutations (project, id);

-- Per-project counters. memory_epoch is bumped only by edits from outside a
-- session (a reason to rebuild every cached head of the project).
CREATE TABLE projects (
    project      TEXT PRIMARY KEY,
    memory_epoch INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- What the user is like, across projects (rendered in every head).
CREATE TABLE user_profile (
    id         INTEGER PRIMARY KEY,
    content    TEXT    NOT NULL,
    status     TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    created_ms INTEGER NOT NULL
);

-- Pinned messages (shared with mc-pin): never dropped, stripped or spliced away.
CREATE TABLE pins (
    session    INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    message_id TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (session, message_id)
) WITHOUT ROWID;

-- The rendered head of a session: m[0] (frozen baseline) and m[1] (delta),
-- with the markers that say what they cover. Replayed verbatim on defer passes.
CREATE TABLE heads (
    session                INTEGER PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    m0                     TEXT    NOT NULL,
    m1                     TEXT    NOT NULL,
    m0_tokens              INTEGER NOT NULL,
    m1_tokens              INTEGER NOT NULL,
    materialized_ms        INTEGER NOT NULL,
    reason                 TEXT    NOT NULL,
    model_key              TEXT,
    system_hash            TEXT,
    render_key             TEXT    NOT NULL,
    project                TEXT,
    -- Raw messages up to this ordinal are covered by m[0]/m[1] and leave the wire.
    covered_through        INTEGER NOT NULL DEFAULT 0,
    m0_covered_through     INTEGER NOT NULL DEFAULT 0,
    max_compartment_seq    INTEGER NOT NULL DEFAULT 0,
    max_memory_id          INTEGER NOT NULL DEFAULT 0,
    max_memory_mutation_id INTEGER NOT NULL DEFAULT 0,
    max_edit_id            INTEGER NOT NULL DEFAULT 0,
    max_profile_id         INTEGER NOT NULL DEFAULT 0,
    memory_epoch           INTEGER NOT NULL DEFAULT 0,
    -- JSON arrays: memory ids rendered in m[0]; pinned message ids rendered in m[0].
    memory_ids             TEXT    NOT NULL DEFAULT '[]',
    pinned_ids             TEXT    NOT NULL DEFAULT '[]',
    -- JSON object: tier number -> compartments rendered at it in m[0].
    tiers                  TEXT    NOT NULL DEFAULT '{}',
    m1_memory_updates      INTEGER NOT NULL DEFAULT 0
);

-- Set when a pinned message's reasoning was exempt as the clearing watermark passed it.
ALTER TABLE messages ADD COLUMN keep_reasoning INTEGER NOT NULL DEFAULT 0;

ALTER TABLE tags ADD COLUMN caveman_depth INTEGER NOT NULL DEFAULT 0;
-- Channel 1 reduce nudge appended to this tag's tool output (replayed).
ALTER TABLE tags ADD COLUMN nudge TEXT;

ALTER TABLE sessions ADD COLUMN today_line TEXT;
ALTER TABLE sessions ADD COLUMN last_emergency_sample INTEGER;
-- Channel 2: a synthetic reminder inserted after this message (replayed), and
-- whether one may be sent again.
ALTER TABLE sessions ADD COLUMN nudge2_after TEXT;
ALTER TABLE sessions ADD COLUMN nudge2_text TEXT;
ALTER TABLE sessions ADD COLUMN nudge2_armed INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sessions ADD COLUMN nudge1_level INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN nudge1_reducible INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN passes_materialized INTEGER NOT NULL DEFAULT 0;
