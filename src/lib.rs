//! agentd: a worker daemon that consumes chat tasks from RabbitMQ and runs a recursive
//! ReAct agent for each, publishing progress events and writing the full trace to PostgreSQL.
//!
//! # Layout
//!
//! From the ground up; a room imports only rooms above it in this list (docs/architecture.md
//! draws them, says what each holds and where a change goes).
//!
//! - [`core`]: the recursive ReAct state machine of seeds 000 and 002 and every policy. Pure:
//!   no I/O.
//! - [`ports`]: the traits at the core's edge (LLM, tool source).
//! - [`contract`]: the one door: the wire types of CONTRACT.md (task and control messages,
//!   events) written and read, and the parsing of whatever comes in. Depends on core only.
//! - [`config`]: settings as plain data (config/default.toml, `--config`, `AGENTD__` env);
//!   each adapter reads its own section. Depends on core only.
//! - Adapters, each reading its own section of the settings: [`amqp`] (RabbitMQ, and the one
//!   control publisher), [`store`] (PostgreSQL), [`metrics`] (Prometheus metrics, served as
//!   `/metrics` `/healthz` `/readyz` by a worker), [`otel`] (OpenTelemetry spans from
//!   committed steps), [`llm`] (the OpenAI-compatible client), [`tools`] (the registry,
//!   built-in tools, MCP servers).
//! - [`outbox`]: what a task tells the world (its events, its reply), stored first and
//!   published at least once.
//! - [`lifecycle`]: a task's life between runs (approvals, resolutions, conversations,
//!   delegation, control messages, reconcile, dead letters, the sweeps) and the commands the
//!   CLI and the gateway share (cancel, decide, resolve, fork).
//! - [`scheduler`]: schedules (CONTRACT v3 §14): the fleet's one scheduler and the commands.
//! - [`worker`]: the worker process and the run of a task, from a delivery to its ack.
//! - [`scripted_model`]: a scripted OpenAI-compatible model over HTTP: `agentd dev`'s demo
//!   (no LLM account needed), the bench's and the tests' model.
//! - Faces: [`gateway`] (`agentd serve`, the HTTP/SSE interface and the page), [`cli`] (the
//!   commands of the `agentd` binary).

pub mod amqp;
pub mod cli;
pub mod config;
pub mod contract;
pub mod core;
pub mod gateway;
pub mod lifecycle;
pub mod llm;
pub mod metrics;
pub mod otel;
pub mod outbox;
pub mod ports;
pub mod scheduler;
pub mod scripted_model;
pub mod store;
pub mod tools;
pub mod worker;
