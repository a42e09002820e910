//! Tier `durability`: nothing lost, nothing twice, with the real `agentd worker` binary as
//! a child process killed (SIGKILL), signalled, raced and cut off from its broker and
//! database (`worker_binary`), events nobody confirmed published again and control messages
//! while no worker runs (`delivery`), tasks whose worker died (`orphans`), the exactly-once
//! tool ledger across a kill (`tool_ledger`), and readers on a streaming replica
//! (`pg_replica`, which makes its own replica of the machine's server on a free port).
//!
//! A new test goes here when it kills, restarts or cuts off a process and checks what
//! survives. Each test makes its own database and broker names, so they run in parallel;
//! a test that restarts the machine's RabbitMQ or PostgreSQL goes to `chaos`, one that
//! changes a broker-wide setting to `serial`. `cargo test --test durability [FILTER]`.

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod delivery;
mod orphans;
mod pg_replica;
mod tool_ledger;
mod worker_binary;
