-- CONTRACT v3 §12: the exact record of every model call.
--
-- Every attempt keeps (unless llm.record = off) the lowercase hex SHA-256 of the exact
-- request body bytes it sent (request_sha256) and of the request's canonical form
-- (request_key, volatile values masked: docs/record.md). With llm.record = full it also
-- keeps the request as the ordered list of its parts (request_parts) and the response.
--
-- A request body is stored as parts whose concatenation is the body's JSON text: the
-- structural glue, each message, each fixed part of the system prompt template and the
-- state snapshot between them, the tools. A part is stored once per task, addressed by the
-- first 16 bytes of the SHA-256 of its stored text, so a task's requests, which repeat most
-- of the request before, cost their new parts and 16 bytes per part reference.
ALTER TABLE llm_calls
    ADD COLUMN request_sha256 text,
    ADD COLUMN request_key text,
    ADD COLUMN request_parts uuid[],
    ADD COLUMN response jsonb;

CREATE INDEX llm_calls_request_key_idx ON llm_calls (request_key)
    WHERE request_key IS NOT NULL;

CREATE TABLE llm_request_parts (
    task_id uuid NOT NULL,
    part_id uuid NOT NULL,
    content text NOT NULL,
    PRIMARY KEY (task_id, part_id)
);

-- The request text of an attempt: its parts in order (NULL when one is missing).
CREATE FUNCTION llm_request_text(p_task_id uuid, p_parts uuid[]) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN count(p.part_id) = cardinality(p_parts)
                THEN string_agg(p.content, '' ORDER BY r.ord) END
    FROM unnest(p_parts) WITH ORDINALITY AS r (part_id, ord)
    LEFT JOIN llm_request_parts p ON p.task_id = p_task_id AND p.part_id = r.part_id
$$;

-- `text` as jsonb, or NULL when it is not JSON (a redaction can never make it so, but a
-- view must not fail a whole query for one row).
CREATE FUNCTION llm_try_jsonb(text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN $1::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;

CREATE VIEW llm_call_bodies AS
SELECT c.id AS llm_call_id,
       c.task_id,
       c.iteration,
       c.attempt,
       llm_try_jsonb(llm_request_text(c.task_id, c.request_parts)) AS request,
       c.response
FROM llm_calls c
WHERE c.request_parts IS NOT NULL;
