-- 0004: the system prompt of harnesses that hand it to a hook of its own,
-- and Channel 2 reminders that stay where they were placed.

-- OpenCode builds the system prompt after the messages hook. The newest
-- `Today's date:` line that hook saw: a busting pass moves the frozen date on to it.
ALTER TABLE sessions ADD COLUMN seen_today_line TEXT;

-- Every Channel 2 reminder placed, after the message it follows. A new one
-- joins the old ones: moving one would change bytes the provider has cached.
CREATE TABLE channel2_reminders (
    session          INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    after_message_id TEXT    NOT NULL,
    text             TEXT    NOT NULL,
    placed_ms        INTEGER NOT NULL,
    PRIMARY KEY (session, after_message_id)
);
INSERT INTO channel2_reminders (session, after_message_id, text, placed_ms)
    SELECT id, nudge2_after, nudge2_text, updated_ms FROM sessions
    WHERE nudge2_after IS NOT NULL AND nudge2_text IS NOT NULL;
ALTER TABLE sessions DROP COLUMN nudge2_after;
ALTER TABLE sessions DROP COLUMN nudge2_text;
