-- 0008: what mc-search reads and writes — project memory the agent edits,
-- session notes, the raw content behind every tag (for ctx_expand), and a
-- first full-text index over memories, notes and compartments.

-- Exact dedup key: the content lower-cased with every whitespace run made one
-- space. Filled by the writer (rows written before 0008 are keyed on their
-- next write to the project).
ALTER TABLE memories ADD COLUMN content_key TEXT;
-- Who wrote it: historian | agent | user | dream.
ALTER TABLE memories ADD COLUMN source TEXT;
ALTER TABLE memories ADD COLUMN archive_reason TEXT;
-- JSON array of the ids a merge folded into this memory.
ALTER TABLE memories ADD COLUMN merged_from TEXT;
-- Serves: the dedup probe on every write.
CREATE INDEX memories_by_key ON memories (project, category, content_key);

-- The mutation log says why a memory was archived.
ALTER TABLE memory_mutations ADD COLUMN reason TEXT;

-- Notes the agent keeps for itself in a session (ctx_note).
CREATE TABLE notes (
    id           INTEGER PRIMARY KEY,
    session      INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    project      TEXT,
    content      TEXT    NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'dismissed')),
    created_ms   INTEGER NOT NULL,
    updated_ms   INTEGER NOT NULL
);
-- Serves: a session's open notes (ctx_note list).
CREATE INDEX notes_by_session ON notes (session, status, id);

-- The original content of every tagged part, stored when a tool first sees it,
-- so ctx_expand can give back what a drop or a fold took off the wire after
-- the harness moved on. Keyed like tags (part identity); a tag's number finds
-- its row through tags.identity.
CREATE TABLE raw_parts (
    id              INTEGER PRIMARY KEY,
    session         INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    identity        TEXT    NOT NULL,
    ordinal         INTEGER NOT NULL,
    part_index      INTEGER NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('message', 'file', 'tool')),
    tool_name       TEXT,
    -- Text parts: the text. Tools: the input as JSON, then the output. Files:
    -- the name and URL (inline data is not kept).
    tool_input      TEXT,
    content         TEXT    NOT NULL,
    -- Bytes cut off the end of `content` by the size cap (0: kept whole).
    truncated_bytes INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session, identity)
);
-- Serves: expand of an ordinal range (and of a compartment's range).
CREATE INDEX raw_parts_by_ordinal ON raw_parts (session, ordinal, part_index);

-- Full-text search (FTS5, kept in step by triggers). mc-search II replaces
-- these with its own index; until then `query` searches these three.
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, memory_id UNINDEXED, tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO memories_fts (rowid, content, memory_id) SELECT id, content, id FROM memories;
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content, memory_id) VALUES (new.id, new.content, new.id);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF content ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.id;
    INSERT INTO memories_fts (rowid, content, memory_id) VALUES (new.id, new.content, new.id);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.id;
END;

CREATE VIRTUAL TABLE notes_fts USING fts5 (
    content, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER notes_fts_insert AFTER INSERT ON notes BEGIN
    INSERT INTO notes_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER notes_fts_delete AFTER DELETE ON notes BEGIN
    DELETE FROM notes_fts WHERE rowid = old.id;
END;

-- Compartments have no rowid (WITHOUT ROWID): the index keeps the key.
CREATE VIRTUAL TABLE compartments_fts USING fts5 (
    title, body, session UNINDEXED, sequence UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO compartments_fts (title, body, session, sequence)
    SELECT title, p1 || char(10) || p2 || char(10) || p3 || char(10) || p4, session, sequence
    FROM compartments;
CREATE TRIGGER compartments_fts_insert AFTER INSERT ON compartments BEGIN
    INSERT INTO compartments_fts (title, body, session, sequence)
    VALUES (new.title, new.p1 || char(10) || new.p2 || char(10) || new.p3 || char(10) || new.p4,
            new.session, new.sequence);
END;
CREATE TRIGGER compartments_fts_delete AFTER DELETE ON compartments BEGIN
    DELETE FROM compartments_fts WHERE session = old.session AND sequence = old.sequence;
END;
CREATE TRIGGER compartments_fts_update AFTER UPDATE ON compartments BEGIN
    DELETE FROM compartments_fts WHERE session = old.session AND sequence = old.sequence;
    INSERT INTO compartments_fts (title, body, session, sequence)
    VALUES (new.title, new.p1 || char(10) || new.p2 || char(10) || new.p3 || char(10) || new.p4,
            new.session, new.sequence);
END;

-- The session a harness is running in a project folder, as its SessionStart
-- hook last said (Claude Code and Codex tell an MCP server nothing about the
-- session; the server looks it up here by its working directory).
CREATE TABLE current_sessions (
    harness         TEXT    NOT NULL,
    project_dir     TEXT    NOT NULL,
    session_id      TEXT    NOT NULL,
    transcript_path TEXT,
    updated_ms      INTEGER NOT NULL,
    PRIMARY KEY (harness, project_dir)
) WITHOUT ROWID;
