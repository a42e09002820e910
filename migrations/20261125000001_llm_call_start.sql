-- Issue 14 (pictures on the page): when each LLM attempt started, for the task timeline
-- (its end is started_at + latency_ms). Null for attempts recorded before this column.
ALTER TABLE llm_calls ADD COLUMN started_at timestamptz;
