//! Tier `docs`: what the documentation promises still works. Every `sh check` and
//! `sql check` block of README.md and docs/*.md runs against `agentd dev`
//! (`docs_commands`), and the producer examples in examples/ run against the real worker
//! (`examples`).
//!
//! A new test goes here when it runs something a document or an example shows.
//! `cargo test --test docs [FILTER]`.

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod docs_commands;
mod examples;
