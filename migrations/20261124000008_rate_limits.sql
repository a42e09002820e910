-- Issue 15 (CONTRACT v2 §10): provider rate limits shared by every worker.

-- The requests sent under each `[[llm.limits]]` bucket in its current window (older rows
-- are deleted as the window slides), with their tokens: estimated when sent, the
-- provider's count once it answered.
CREATE TABLE llm_rate_log (
    id bigserial PRIMARY KEY,
    bucket text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    tokens bigint NOT NULL DEFAULT 0
);
CREATE INDEX llm_rate_log_bucket_idx ON llm_rate_log (bucket, at);

-- A 429 with Retry-After holds the whole bucket until then.
CREATE TABLE llm_rate_blocks (
    bucket text PRIMARY KEY,
    until timestamptz NOT NULL
);

-- How long an attempt waited for its provider's rate limit, in milliseconds.
ALTER TABLE llm_calls ADD COLUMN queued_ms bigint;
