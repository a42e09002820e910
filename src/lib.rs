//! agentd: a worker daemon that consumes chat tasks from RabbitMQ and runs a recursive
//! ReAct agent for each, publishing progress events and writing the full trace to PostgreSQL.
//!
//! # Layout
//!
//! - [`core`]: the recursive ReAct state machine of seeds 000 and 002. Pure: no I/O.
//! - [`ports`]: the traits at the edge (LLM, tool source).
//! - [`config`]: typed settings (config/default.toml, `--config`, `AGENTD__` env).
//! - [`llm`]: the OpenAI-compatible Chat Completions client.
//! - [`tools`]: the tool registry and the built-in tools.
//! - [`store`]: PostgreSQL: pool, migrations, trace queries.
//! - [`amqp`]: RabbitMQ: topology, task consumer, confirmed event publisher.
//! - [`cli`]: the commands of the `agentd` binary.
//! - [`worker`]: the async driver that runs tasks through the core via the ports.

pub mod amqp;
pub mod cli;
pub mod config;
pub mod core;
pub mod llm;
pub mod ports;
pub mod store;
pub mod tools;
pub mod worker;
