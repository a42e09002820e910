//! Tier `features`: CONTRACT.md's features end to end with the real worker, RabbitMQ,
//! PostgreSQL and the scripted model: approvals, budgets and steering, cancel wherever a
//! task is (`cancel`), conversations, delegation, fork, replay, replies, rate limits, agent
//! versions, the record of every model call, reruns from it, stall detection, unknown outcomes,
//! schedules, who may steer, tenants and fair shares, and retention
//! (`prune`) with the trace tables' time partitions (`partitions`).
//!
//! A new test goes here when it is about a feature a producer or an operator uses (a
//! message field, a control message, a command or route together with what the worker does
//! with it): in the feature's file, or a new file named after it.
//! `cargo test --test features [FILTER]`.

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod agent_versions;
mod approvals;
mod budgets_and_steering;
mod cancel;
mod conversations;
mod delegation;
mod evals;
mod fair_shares;
mod fork;
mod llm_record;
mod partitions;
mod prune;
mod rate_limits;
mod replay;
mod replies;
mod reruns;
mod schedules;
mod stalls;
mod tenants;
mod unknown_outcomes;
mod version_pins;
mod who_may_steer;
