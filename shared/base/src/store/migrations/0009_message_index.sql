-- 0009: the raw-message index of search. A pass only queues the parts it
-- kept (one integer row each, in its own transaction); the text is indexed
-- off the critical path — by the next query, or `mc-search index`.

CREATE TABLE message_index_queue (
    raw_part INTEGER PRIMARY KEY
);
CREATE TRIGGER raw_parts_queue AFTER INSERT ON raw_parts BEGIN
    INSERT INTO message_index_queue (raw_part) VALUES (new.id);
END;

-- Contentless: the text lives in raw_parts once; the index keeps only what
-- MATCH and bm25 need, keyed by raw_parts.id.
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    body, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER raw_parts_unindex AFTER DELETE ON raw_parts BEGIN
    DELETE FROM message_index_queue WHERE raw_part = old.id;
    DELETE FROM messages_fts WHERE rowid = old.id;
END;

INSERT INTO message_index_queue (raw_part) SELECT id FROM raw_parts;
