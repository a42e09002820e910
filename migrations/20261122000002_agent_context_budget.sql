-- Per-agent context budget (issue 4): the estimated tokens one LLM request of this agent's
-- tasks may reach before the context is compacted; NULL uses limits.context_budget_tokens.
ALTER TABLE agents
    ADD COLUMN context_budget_tokens integer CHECK (context_budget_tokens > 0);
