//! The recursive ReAct machine (seed 000's state machine, seed 002's schemas). Nothing in
//! here performs I/O: the driver feeds it LLM replies and tool results and carries out the
//! steps it asks for.

pub mod action;
pub mod approval;
pub mod bounded;
pub mod budget;
pub mod call_record;
pub mod compact;
pub mod eval;
mod extract;
pub mod fair_share;
mod fields;
pub mod inbound;
pub mod limits;
pub mod listing;
pub mod machine;
pub mod outcome;
pub mod partitions;
mod plan;
pub mod prompt;
#[cfg(test)]
mod prop_tests;
pub mod rate_limit;
pub mod read_route;
mod reasoning;
pub mod record;
pub mod reply_error;
pub mod request_key;
pub mod rerun;
pub mod retry;
pub mod schedule;
pub mod scopes;
pub mod signing;
pub mod stall;
pub mod state;
pub mod storable;
pub mod tenancy;
pub mod text;
pub mod types;
pub mod unknown;
pub mod versions;
