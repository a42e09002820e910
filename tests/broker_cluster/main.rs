//! A broker cluster (issue 15): the tasks queue is a quorum queue, so a RabbitMQ cluster
//! replicates it and a node can go away while tasks run. The test starts three extra
//! RabbitMQ nodes on this machine (`scripts/broker-cluster.sh`: own names, ports and data
//! directories; the machine's node, which the other tests use, is never touched), declares
//! the topology on them, runs worker processes whose `amqp.url` lists the three nodes,
//! publishes tasks, stops the node most workers are connected to once a share of the tasks
//! has ended, and checks that every task still ends exactly once and that a subscriber on
//! the cluster saw every task's whole stream. It prints one JSON line of figures and tears
//! the cluster down (also when it fails).
//!
//! It lives in its own test binary: cargo runs test binaries one after another, so its
//! node stop and its CPU use never overlap another test's run.
//!
//! ```sh
//! cargo test --test broker_cluster -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

#[allow(dead_code)]
#[path = "../chaos/subscriber.rs"]
mod subscriber;

mod cluster;
mod run;
mod verify;

use run::Plan;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_while_tasks_run_loses_and_repeats_nothing() {
    let outcome = run::run(Plan {
        tasks: 60,
        workers: 3,
        concurrency: 4,
        steps: 3,
        llm_delay_ms: 600,
        stop_at: 0.25,
    })
    .await;
    println!("{}", outcome.figures);
    assert!(
        outcome.problems.is_empty(),
        "{} problems, first: {:#?}\nfigures: {}",
        outcome.problems.len(),
        &outcome.problems[..outcome.problems.len().min(10)],
        outcome.figures
    );
}
