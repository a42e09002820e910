//! The 3-node RabbitMQ cluster of `scripts/broker-cluster.sh`, driven from the test: started
//! fresh (a leftover of a killed run is stopped first), queried with `rabbitmqctl`, one node
//! stopped, and torn down by a Drop guard whatever the test's outcome. Every call names one
//! of the cluster's own nodes; the machine's node is never addressed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// A running cluster; dropping it stops every node and deletes its directory.
pub struct Cluster {
    dir: PathBuf,
    /// Node number (1..=3) → (node name, AMQP port).
    pub nodes: HashMap<usize, (String, u16)>,
}

/// Runs the script with `args`; its stdout, or a panic with its stderr.
fn script(dir: &PathBuf, args: &[&str]) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/broker-cluster.sh");
    let output = Command::new("bash")
        .arg(path)
        .args(args)
        .env("AGENTD_CLUSTER_DIR", dir)
        .output()
        .unwrap_or_else(|err| panic!("broker-cluster.sh {args:?}: {err}"));
    assert!(
        output.status.success(),
        "broker-cluster.sh {args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl Cluster {
    /// Starts the three nodes and clusters them (blocking: about 30 to 50 s).
    pub fn start() -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("broker-cluster");
        script(&dir, &["stop"]);
        let mut cluster = Self {
            dir,
            nodes: HashMap::new(),
        };
        // From here on, a failure still tears down what was started (Drop).
        script(&cluster.dir, &["start"]);
        cluster.nodes = script(&cluster.dir, &["nodes"])
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let n = words.next()?.parse().ok()?;
                let name = words.next()?.to_owned();
                let port = words.next()?.parse().ok()?;
                Some((n, (name, port)))
            })
            .collect();
        assert_eq!(cluster.nodes.len(), 3, "three nodes");
        cluster
    }

    /// `amqp.url` for the cluster: the three nodes, comma-separated.
    pub fn urls(&self) -> String {
        script(&self.dir, &["urls"]).trim().to_owned()
    }

    /// The number of the node called `name`.
    pub fn number_of(&self, name: &str) -> Option<usize> {
        self.nodes
            .iter()
            .find(|(_, (node, _))| node == name)
            .map(|(n, _)| *n)
    }

    /// `rabbitmqctl -n <node n> ARGS --formatter json`, parsed.
    pub fn ctl_json(&self, n: usize, args: &[&str]) -> Value {
        let n = n.to_string();
        let mut all = vec!["ctl", n.as_str(), "-q"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--formatter", "json"]);
        let text = script(&self.dir, &all);
        serde_json::from_str(&text).unwrap_or_else(|err| panic!("{args:?}: {err}: {text}"))
    }

    /// The queue's type, leader and members, as node `n` sees them.
    pub fn queue(&self, n: usize, queue: &str) -> Option<Value> {
        let queues = self.ctl_json(n, &["list_queues", "name", "type", "leader", "members"]);
        queues
            .as_array()?
            .iter()
            .find(|q| q["name"] == queue)
            .cloned()
    }

    /// The queue's (ready, unacknowledged) message counts as node `n` sees them.
    pub fn queue_depth(&self, n: usize, queue: &str) -> (u64, u64) {
        let args = [
            "list_queues",
            "name",
            "messages_ready",
            "messages_unacknowledged",
        ];
        let queues = self.ctl_json(n, &args);
        let found = queues
            .as_array()
            .and_then(|all| all.iter().find(|q| q["name"] == queue).cloned())
            .unwrap_or_default();
        let count = |key: &str| found[key].as_u64().unwrap_or(u64::MAX);
        (count("messages_ready"), count("messages_unacknowledged"))
    }

    /// Connections per node number among those whose client properties mention one of
    /// `names` (the workers' connection names, `agentd-<pid>`).
    pub fn connections_per_node(&self, n: usize, names: &[String]) -> HashMap<usize, usize> {
        let connections = self.ctl_json(n, &["list_connections", "port", "client_properties"]);
        let mut per_node = HashMap::new();
        for connection in connections.as_array().into_iter().flatten() {
            let properties = connection["client_properties"].to_string();
            let port = connection["port"].as_u64().unwrap_or(0);
            let node = self.nodes.iter().find(|(_, (_, p))| u64::from(*p) == port);
            if let Some((node, _)) = node
                && names
                    .iter()
                    .any(|name| properties.contains(&format!("\"{name}\"")))
            {
                *per_node.entry(*node).or_default() += 1;
            }
        }
        per_node
    }

    /// Stops node `n` (`rabbitmqctl stop`: its clients are disconnected, its replicas gone).
    pub fn stop_node(&self, n: usize) {
        script(&self.dir, &["stop-node", &n.to_string()]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // No panic here: this also runs while a failed test unwinds.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/broker-cluster.sh");
        let stopped = Command::new("bash")
            .arg(path)
            .arg("stop")
            .env("AGENTD_CLUSTER_DIR", &self.dir)
            .status();
        if !matches!(stopped, Ok(status) if status.success()) {
            eprintln!(
                "broker-cluster.sh stop failed ({stopped:?}); see {:?}",
                self.dir
            );
        }
    }
}
