-- Issue 24 §2: the turns of a conversation run in the order they were recorded.

-- The order in which tasks were first recorded (by a producer such as the gateway or the CLI
-- before it published the message, else by the worker that read it). A sequence, not
-- created_at: a row recorded after another committed always gets a larger number, whatever
-- the clock does. The column is added without a default first, so that existing rows are not
-- rewritten; new rows take the default.
CREATE SEQUENCE tasks_recorded_seq AS bigint;
ALTER TABLE tasks ADD COLUMN recorded_seq bigint;
ALTER TABLE tasks ALTER COLUMN recorded_seq SET DEFAULT nextval('tasks_recorded_seq');
ALTER SEQUENCE tasks_recorded_seq OWNED BY tasks.recorded_seq;

-- When a turn was admitted to run in its conversation (null: never admitted yet). A turn a
-- worker has claimed but not admitted yet holds nothing, so an earlier turn is not parked
-- behind it.
ALTER TABLE tasks ADD COLUMN admitted_at timestamptz;

-- Unended turns of before this migration: numbered in the order they were created, and
-- those that held their conversation marked admitted.
UPDATE tasks SET recorded_seq = ordered.n
FROM (SELECT task_id, row_number() OVER (ORDER BY created_at, task_id) AS n
      FROM tasks
      WHERE conversation_id IS NOT NULL AND status IN ('pending', 'running', 'waiting')) AS ordered
WHERE tasks.task_id = ordered.task_id;
SELECT setval('tasks_recorded_seq', COALESCE((SELECT max(recorded_seq) FROM tasks), 0) + 1, false);
UPDATE tasks SET admitted_at = COALESCE(started_at, now())
WHERE conversation_id IS NOT NULL
  AND (status = 'running'
       OR (status = 'waiting' AND wait_reason IS DISTINCT FROM 'conversation')
       OR (status = 'pending' AND resume_reason IS NOT NULL
           AND resume_reason <> 'conversation'));

-- The unended turns of a conversation, in their order: when they were recorded (by a producer
-- before publishing, or when their message reached the worker that recorded them), then
-- recorded_seq.
CREATE INDEX tasks_conversation_open_idx ON tasks (conversation_id, created_at, recorded_seq)
    WHERE conversation_id IS NOT NULL AND status IN ('pending', 'running', 'waiting');
