-- CONTRACT v3 §14 "Schedules": agents that run on a clock. Forward-only.
--
-- A schedule fires by a 5-field cron expression in a time zone, or every N seconds
-- (anchored at the Unix epoch); exactly one of `cron` and `every_secs` is set. The rules of
-- each fire are in src/core/schedule; the scheduler (src/scheduler) records every decision in
-- `schedule_fires` and makes each fire's task with task_id = UUIDv5(schedule_id, fire_at as
-- RFC 3339 UTC), so a fire makes at most one task whatever crashes.
CREATE TABLE schedules (
    schedule_id          uuid PRIMARY KEY,
    -- CONTRACT §15: the tenant the schedule belongs to (its agent's).
    tenant_id            text NOT NULL DEFAULT 'default',
    -- No foreign key, as for tasks: a fire for an agent that is gone makes a task the worker
    -- rejects, with the reason.
    agent_id             uuid NOT NULL,
    name                 text,
    cron                 text,
    every_secs           integer CHECK (every_secs > 0),
    timezone             text NOT NULL DEFAULT 'UTC',
    input                text NOT NULL,
    -- What a task message carries besides task_id, agent_id and input: budget,
    -- constraints, stream, agent_version, channel, priority.
    task_template        jsonb NOT NULL DEFAULT '{}'::jsonb,
    overlap              text NOT NULL DEFAULT 'skip'
                         CHECK (overlap IN ('skip', 'buffer_one', 'allow')),
    catch_up             text NOT NULL DEFAULT 'latest'
                         CHECK (catch_up IN ('latest', 'none', 'all')),
    catch_up_window_secs integer NOT NULL DEFAULT 3600 CHECK (catch_up_window_secs >= 0),
    max_fires_per_day    integer CHECK (max_fires_per_day > 0),
    paused               boolean NOT NULL DEFAULT false,
    -- The first fire not decided yet; null while paused (or when the expression never
    -- fires again).
    next_fire_at         timestamptz,
    -- The fire `buffer_one` keeps until the schedule's previous task ends (its
    -- schedule_fires row says `buffered` meanwhile).
    buffered_fire_at     timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (every_secs IS NULL))
);
-- The scheduler's question each tick: which schedules are due?
CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE NOT paused;
CREATE INDEX schedules_buffered_idx ON schedules (schedule_id)
    WHERE buffered_fire_at IS NOT NULL AND NOT paused;
CREATE INDEX schedules_agent_idx ON schedules (agent_id);

-- Every decision about every fire. A buffered fire's row turns from `buffered` into
-- `enqueued` when it runs. Rows stay when their schedule is deleted (history), and their
-- task_id stays when `agentd prune` removes the task.
CREATE TABLE schedule_fires (
    schedule_id uuid NOT NULL,
    fire_at     timestamptz NOT NULL,
    decision    text NOT NULL CHECK (decision IN ('enqueued', 'triggered', 'skipped_overlap',
                                                  'skipped_missed', 'buffered', 'capped')),
    task_id     uuid,
    tenant_id   text NOT NULL DEFAULT 'default',
    decided_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, fire_at)
);

-- The fire a task was made for (CONTRACT §14); null for every other task.
ALTER TABLE tasks ADD COLUMN schedule_id uuid;
ALTER TABLE tasks ADD COLUMN fire_at timestamptz;
-- A schedule's tasks, by fire time.
CREATE INDEX tasks_schedule_idx ON tasks (schedule_id, fire_at) WHERE schedule_id IS NOT NULL;
-- The overlap check: has the schedule a task that has not ended?
CREATE INDEX tasks_schedule_open_idx ON tasks (schedule_id)
    WHERE schedule_id IS NOT NULL AND status IN ('pending', 'running', 'waiting');
