//! agentd: a worker daemon that consumes chat tasks from RabbitMQ and runs a recursive
//! ReAct agent for each, publishing progress events and writing the full trace to PostgreSQL.
//!
//! # Layout
//!
//! - [`core`]: the recursive ReAct state machine of seeds 000 and 002. Pure: no I/O.
//! - [`ports`]: the traits at the edge (LLM, tool source).
//! - [`config`]: typed settings (config/default.toml, `--config`, `AGENTD__` env).
//! - [`contract`]: the wire types of CONTRACT.md (task and control messages, events).
//! - [`llm`]: the OpenAI-compatible Chat Completions client.
//! - [`tools`]: the tool registry, the built-in tools and MCP tool sources.
//! - [`store`]: PostgreSQL: pool, migrations, trace queries.
//! - [`amqp`]: RabbitMQ: topology, task consumer, confirmed event publisher.
//! - [`cli`]: the commands of the `agentd` binary.
//! - [`scheduler`]: schedules (CONTRACT v3 §14): the fleet's one scheduler and the commands.
//! - [`worker`]: the async driver that runs tasks through the core via the ports.
//! - [`gateway`]: `agentd serve`, the HTTP/SSE interface for front ends and the trace page.
//! - [`cancel`]: cancelling a task wherever it is (shared by the CLI and the gateway).
//! - [`fork`]: forking a task from recursion N (shared by the CLI and the gateway).
//! - [`metrics`]: Prometheus metrics derived from events, `/metrics` `/healthz` `/readyz`.
//! - [`otel`]: OpenTelemetry export: one trace per task, spans from committed steps.
//! - [`ops`]: a worker's sidecars: the metrics listener and the periodic retention prune.
//! - [`scripted_model`]: a scripted OpenAI-compatible model over HTTP: `agentd dev`'s demo
//!   (no LLM account needed), the bench's and the tests' model.
//!
//! docs/architecture.md maps the rooms and says where a change goes.

pub mod amqp;
pub mod cancel;
pub mod cli;
pub mod config;
pub mod contract;
pub mod core;
pub mod fork;
pub mod gateway;
pub mod llm;
pub mod metrics;
pub mod ops;
pub mod otel;
pub mod ports;
pub mod scheduler;
pub mod scripted_model;
pub mod store;
pub mod tools;
pub mod worker;
