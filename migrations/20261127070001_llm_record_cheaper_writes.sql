-- Issue 26 (CONTRACT v3 §12): the record's writes made cheaper, nothing read changes.
--
-- `llm_calls.request_key` is compared per task and iteration (reruns, evaluation runs:
-- `llm_calls_task_idx`), never looked up across tasks on a hot path. Its own index cost
-- every model call a B-tree insert at a random place; a search by key across tasks (which
-- tasks sent this exact request) reads the partitions of the days it names instead.
DROP INDEX IF EXISTS llm_calls_request_key_idx;

-- A request part (a state snapshot, a history message: 1 to 5 KB of JSON text) is
-- compressed as it is stored. lz4 compresses it several times faster than pglz, the
-- default, for a few percent more bytes. New partitions take the parent's setting; the
-- existing ones are set one by one. A server built without lz4 keeps pglz.
DO $$
DECLARE
    part regclass;
BEGIN
    ALTER TABLE llm_request_parts ALTER COLUMN content SET COMPRESSION lz4;
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                WHERE inhparent = 'llm_request_parts'::regclass LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN content SET COMPRESSION lz4', part);
    END LOOP;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this PostgreSQL has no lz4: request parts stay compressed with pglz';
END $$;
