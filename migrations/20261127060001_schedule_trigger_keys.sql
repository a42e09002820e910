-- Idempotency-Key on `POST /v1/schedules/{id}/trigger` (issue 27): the key a manual trigger
-- was made with. A trigger with the same key for the same schedule within a day returns
-- that trigger's fire (and task) instead of firing again; null for every other fire.
ALTER TABLE schedule_fires ADD COLUMN trigger_key text;
-- The lookup of each keyed trigger: this schedule's fires with this key, newest first.
CREATE INDEX schedule_fires_trigger_key_idx ON schedule_fires (schedule_id, trigger_key, decided_at)
    WHERE trigger_key IS NOT NULL;
