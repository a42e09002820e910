//! Tier `agent_loop`: the recursive ReAct loop run by the real worker in this process
//! against the local RabbitMQ and PostgreSQL and the scripted model over HTTP. A task end to
//! end (`e2e`), tool calls and what comes back from them (`tools`, `mcp_tools` with a real
//! MCP server process), LLM failures and retries (`llm_failures`), the loop of seeds 003
//! and 004 (`loop_features`: parallel calls, timeouts, compaction, streaming), and the
//! one-statement step write (`step_write`).
//!
//! A new test goes here when it is about how one task runs, recursion by recursion; a
//! feature of CONTRACT.md with its own commands or routes goes to `features`.
//! `cargo test --test agent_loop [FILTER]`.

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod e2e;
mod llm_failures;
mod loop_features;
mod mcp_tools;
mod step_write;
mod tools;
