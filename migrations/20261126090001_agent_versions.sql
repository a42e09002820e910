-- CONTRACT v3 §11: agents' instructions, immutable versions and channels; every task pinned
-- to the version it started on. Forward-only.

-- The agent's own brief, rendered verbatim once in the system message (mirrors stable).
ALTER TABLE agents ADD COLUMN instructions text;

-- The version a task runs on, chosen once at intake (null: not taken up yet).
ALTER TABLE tasks ADD COLUMN agent_version int;

-- An agent's definition, one immutable row per version.
CREATE TABLE agent_versions (
    agent_id uuid NOT NULL REFERENCES agents (agent_id) ON DELETE CASCADE,
    version int NOT NULL CHECK (version >= 1),
    instructions text,
    model text NOT NULL,
    tools text[],
    max_iteration int NOT NULL CHECK (max_iteration > 0),
    budget jsonb,
    approval_tools text[],
    approval_timeout_secs int CHECK (approval_timeout_secs > 0),
    on_approval_expiry text CHECK (on_approval_expiry IN ('reject', 'fail')),
    conversation_policy text CHECK (conversation_policy IN ('enqueue', 'reject')),
    delegates uuid[],
    context_budget_tokens int CHECK (context_budget_tokens > 0),
    -- Request parameters merged into every LLM request body of this version.
    params jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(params) = 'object'),
    note text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, version)
);

-- Versions never change once written.
CREATE FUNCTION agent_versions_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'agent_versions rows are immutable: publish a new version instead';
END $$;
CREATE TRIGGER agent_versions_immutable BEFORE UPDATE ON agent_versions
    FOR EACH ROW EXECUTE FUNCTION agent_versions_immutable();

-- Which version a channel serves. `stable` is the default; `canary` takes `weight` % of
-- the tasks that name no version or channel. `previous_version`: what `rollback` returns to.
CREATE TABLE agent_channels (
    agent_id uuid NOT NULL,
    channel text NOT NULL CHECK (length(channel) BETWEEN 1 AND 100),
    version int NOT NULL,
    weight int NOT NULL DEFAULT 100 CHECK (weight BETWEEN 0 AND 100),
    previous_version int,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, channel),
    FOREIGN KEY (agent_id, version) REFERENCES agent_versions (agent_id, version)
        ON DELETE CASCADE
);

-- An agent made the v1/v2 way (a plain INSERT INTO agents) gets version 1 and the stable
-- channel at once.
CREATE FUNCTION agents_first_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_versions (agent_id, version, instructions, model, tools, max_iteration,
        budget, approval_tools, approval_timeout_secs, on_approval_expiry,
        conversation_policy, delegates, context_budget_tokens, note, created_at)
    VALUES (NEW.agent_id, 1, NEW.instructions, NEW.model, NEW.tools, NEW.max_iteration,
        NEW.budget, NEW.approval_tools, NEW.approval_timeout_secs, NEW.on_approval_expiry,
        NEW.conversation_policy, NEW.delegates, NEW.context_budget_tokens, NULL,
        NEW.created_at)
    ON CONFLICT DO NOTHING;
    INSERT INTO agent_channels (agent_id, channel, version, weight)
    VALUES (NEW.agent_id, 'stable', 1, 100)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER agents_first_version AFTER INSERT ON agents
    FOR EACH ROW EXECUTE FUNCTION agents_first_version();

-- `agents` mirrors the stable version. A direct UPDATE of its definition (the v1/v2 way of
-- changing an agent) that makes it differ from stable publishes it as a new version and
-- promotes it, so versions stay immutable and new tasks see the change; a promote's own
-- mirror write matches stable and does nothing.
CREATE FUNCTION agents_edit_publishes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    stable agent_versions%ROWTYPE;
    next_version int;
BEGIN
    SELECT v.* INTO stable FROM agent_channels c
        JOIN agent_versions v ON v.agent_id = c.agent_id AND v.version = c.version
        WHERE c.agent_id = NEW.agent_id AND c.channel = 'stable';
    IF FOUND AND (NEW.instructions, NEW.model, NEW.tools, NEW.max_iteration, NEW.budget,
            NEW.approval_tools, NEW.approval_timeout_secs, NEW.on_approval_expiry,
            NEW.conversation_policy, NEW.delegates, NEW.context_budget_tokens)
        IS NOT DISTINCT FROM (stable.instructions, stable.model, stable.tools,
            stable.max_iteration, stable.budget, stable.approval_tools,
            stable.approval_timeout_secs, stable.on_approval_expiry,
            stable.conversation_policy, stable.delegates, stable.context_budget_tokens) THEN
        RETURN NULL;
    END IF;
    -- One edit at a time per agent: versions are numbered without gaps.
    PERFORM pg_advisory_xact_lock(hashtextextended('agent_versions:' || NEW.agent_id::text, 0));
    SELECT COALESCE(max(version), 0) + 1 INTO next_version
        FROM agent_versions WHERE agent_id = NEW.agent_id;
    INSERT INTO agent_versions (agent_id, version, instructions, model, tools, max_iteration,
        budget, approval_tools, approval_timeout_secs, on_approval_expiry,
        conversation_policy, delegates, context_budget_tokens, params, note)
    VALUES (NEW.agent_id, next_version, NEW.instructions, NEW.model, NEW.tools,
        NEW.max_iteration, NEW.budget, NEW.approval_tools, NEW.approval_timeout_secs,
        NEW.on_approval_expiry, NEW.conversation_policy, NEW.delegates,
        NEW.context_budget_tokens, COALESCE(stable.params, '{}'),
        'edited in the agents table');
    INSERT INTO agent_channels (agent_id, channel, version, weight)
    VALUES (NEW.agent_id, 'stable', next_version, 100)
    ON CONFLICT (agent_id, channel) DO UPDATE
        SET previous_version = agent_channels.version, version = EXCLUDED.version,
            updated_at = now();
    RETURN NULL;
END $$;
CREATE TRIGGER agents_edit_publishes AFTER UPDATE ON agents
    FOR EACH ROW EXECUTE FUNCTION agents_edit_publishes();

-- Every agent that exists gets its version 1 and the stable channel.
INSERT INTO agent_versions (agent_id, version, instructions, model, tools, max_iteration,
    budget, approval_tools, approval_timeout_secs, on_approval_expiry, conversation_policy,
    delegates, context_budget_tokens, created_at)
SELECT agent_id, 1, instructions, model, tools, max_iteration, budget, approval_tools,
    approval_timeout_secs, on_approval_expiry, conversation_policy, delegates,
    context_budget_tokens, created_at
FROM agents;
INSERT INTO agent_channels (agent_id, channel, version, weight)
SELECT agent_id, 'stable', 1, 100 FROM agents;
