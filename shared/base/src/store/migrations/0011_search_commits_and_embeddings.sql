-- 0011: mc-search II — git commits as a search source, the message index
-- on a stemming tokenizer, and the optional embedding vectors of hybrid
-- search.

-- The message index again, with Porter stemming over unicode61 (measured on
-- the benchmark's QA set: "uploads" finds "upload", "compacted" finds
-- "compacts"). Every kept part is queued: the next catch-up rebuilds it.
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    body, content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
DELETE FROM message_index_queue;
INSERT INTO message_index_queue (raw_part) SELECT id FROM raw_parts;

-- The commit index's full text (contentless: the text lives in git_commits),
-- kept in step with git_commits by triggers, keyed by git_commits.id. The
-- hash column holds the full and the short object name.
CREATE VIRTUAL TABLE commits_fts USING fts5 (
    subject, body, paths, hash,
    content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
INSERT INTO commits_fts (rowid, subject, body, paths, hash)
    SELECT id, subject, body, paths, hash || ' ' || short_hash FROM git_commits;
CREATE TRIGGER git_commits_fts_insert AFTER INSERT ON git_commits BEGIN
    INSERT INTO commits_fts (rowid, subject, body, paths, hash)
    VALUES (new.id, new.subject, new.body, new.paths, new.hash || ' ' || new.short_hash);
END;
CREATE TRIGGER git_commits_fts_update AFTER UPDATE ON git_commits BEGIN
    DELETE FROM commits_fts WHERE rowid = old.id;
    INSERT INTO commits_fts (rowid, subject, body, paths, hash)
    VALUES (new.id, new.subject, new.body, new.paths, new.hash || ' ' || new.short_hash);
END;
CREATE TRIGGER git_commits_fts_delete AFTER DELETE ON git_commits BEGIN
    DELETE FROM commits_fts WHERE rowid = old.id;
END;

-- Embedding vectors of hybrid search (optional, `embeddings.model`): one per
-- (model, SHA-256 of the embedded text), so a text is embedded once however
-- many items hold it, and an edited item's new text gets a new vector. The
-- vector is unit length, little-endian f32. A model's vector length is
-- recorded with its first vectors; answers of another length are refused.
CREATE TABLE embedding_models (
    model      TEXT    PRIMARY KEY,
    dimensions INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE embeddings (
    model  TEXT NOT NULL,
    hash   BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, hash)
) WITHOUT ROWID;
