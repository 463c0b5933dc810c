-- 0007: recovery from a context overflow the estimate missed.

-- Context limits stated by providers in their overflow errors ("prompt is too
-- long: 210000 tokens > 200000 maximum"), per model as the envelope names it
-- (provider/model). A pass on that model uses the smaller of this and the
-- harness's own limit.
CREATE TABLE model_limits (
    model_key     TEXT    PRIMARY KEY,
    context_limit INTEGER NOT NULL,
    -- Whose wording stated it: anthropic | openai | copilot.
    source        TEXT    NOT NULL,
    -- The error text it was read from.
    message       TEXT    NOT NULL,
    learned_ms    INTEGER NOT NULL
);

-- A provider rejected this session's prompt as too long at this time; the
-- next pass recovers (an emergency) and clears it.
ALTER TABLE sessions ADD COLUMN overflow_ms INTEGER;
-- The size of the rejected prompt, when the error stated it.
ALTER TABLE sessions ADD COLUMN overflow_tokens INTEGER;
