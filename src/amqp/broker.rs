//! A reconnecting handle on the RabbitMQ connection: whoever needs a channel asks the broker,
//! which opens a new connection when the last one was lost (broker restart, network cut,
//! `rabbitmqctl close_all_connections`, a cluster node stopped). Reconnects back off
//! exponentially.
//!
//! `amqp.url` may name several nodes of one cluster, separated by commas. A connection is
//! opened to one of them: the first attempt starts at a random node so that workers spread
//! over the cluster; after a lost connection the next attempt starts at the node after the
//! one that was in use (it may be the node that went away), and each failed node passes the
//! turn to the next. The backoff applies between full rounds over the list.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use backon::{BackoffBuilder, ExponentialBuilder};
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// How long one node of several may take to accept a connection before the next is tried: a
/// node whose host is gone would otherwise hold the turn for the OS's TCP timeout (minutes).
/// With a single URL nothing else could be tried, so no limit is added (as before).
const NODE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The broker URLs and the current connection, if any.
pub struct Broker {
    urls: Vec<String>,
    state: Mutex<State>,
}

/// The live connection and where the next connection attempt starts.
struct State {
    current: Option<Arc<Connection>>,
    rotation: Rotation,
}

impl Broker {
    /// A broker handle on `url`: one AMQP URL, or several nodes of a cluster separated by
    /// commas. Nothing is connected until a channel is asked for.
    pub fn new(url: &str) -> Arc<Self> {
        let urls = split_urls(url);
        let rotation = Rotation::new(urls.len(), random_start(urls.len()));
        Arc::new(Self {
            urls,
            state: Mutex::new(State {
                current: None,
                rotation,
            }),
        })
    }

    /// The live connection, opening a new one when there is none or it was lost: each node
    /// is tried once, in rotation order, and the error names every failure.
    pub async fn connection(&self) -> anyhow::Result<Arc<Connection>> {
        let mut state = self.state.lock().await;
        if let Some(connection) = state.current.as_ref()
            && connection.status().connected()
        {
            return Ok(Arc::clone(connection));
        }
        state.current = None;
        anyhow::ensure!(!self.urls.is_empty(), "amqp.url names no RabbitMQ URL");
        let mut failures = Vec::new();
        for index in state.rotation.order() {
            match self.connect_to(index).await {
                Ok(connection) => {
                    state.rotation.connected(index);
                    let connection = Arc::new(connection);
                    state.current = Some(Arc::clone(&connection));
                    return Ok(connection);
                }
                Err(err) if self.urls.len() == 1 => return Err(err),
                Err(err) => {
                    let url = mask_password(&self.urls[index]);
                    tracing::warn!(%url, error = %format!("{err:#}"),
                        "RabbitMQ node unreachable; trying the next");
                    failures.push(format!("{url}: {err:#}"));
                }
            }
        }
        anyhow::bail!(
            "connecting to RabbitMQ: none of the {} nodes answered ({})",
            self.urls.len(),
            failures.join("; ")
        )
    }

    /// One connection attempt to the node at `index`.
    async fn connect_to(&self, index: usize) -> anyhow::Result<Connection> {
        let properties = ConnectionProperties::default()
            .with_connection_name(format!("agentd-{}", std::process::id()).into());
        let uri = parse_url(&self.urls[index])?;
        let connect = Connection::connect_uri(uri, properties);
        if self.urls.len() == 1 {
            return connect.await.context("connecting to RabbitMQ");
        }
        let connection = tokio::time::timeout(NODE_CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| anyhow::anyhow!("no answer in {NODE_CONNECT_TIMEOUT:?}"))?
            .context("connecting to RabbitMQ")?;
        tracing::info!(url = %mask_password(&self.urls[index]), "connected to RabbitMQ");
        Ok(connection)
    }

    /// A new channel on the live connection.
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let connection = self.connection().await?;
        connection
            .create_channel()
            .await
            .context("opening a RabbitMQ channel")
    }

    /// Like [`Broker::channel`], retrying with backoff (100 ms doubling to 5 s) until it
    /// works or `stop` fires (then `None`).
    pub async fn channel_with_retry(&self, stop: &CancellationToken) -> Option<Channel> {
        let mut delays = reconnect_delays();
        loop {
            match self.channel().await {
                Ok(channel) => return Some(channel),
                Err(err) => {
                    let delay = delays.next().unwrap_or(Duration::from_secs(5));
                    tracing::warn!(error = %format!("{err:#}"), retry_in_ms = delay.as_millis() as u64,
                        "RabbitMQ unavailable");
                    tokio::select! {
                        () = stop.cancelled() => return None,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// Whether a connection is open right now (readiness probes; never connects).
    pub async fn is_connected(&self) -> bool {
        let state = self.state.lock().await;
        state
            .current
            .as_ref()
            .is_some_and(|c| c.status().connected())
    }

    /// Closes the connection, if open.
    pub async fn close(&self) {
        if let Some(connection) = self.state.lock().await.current.take() {
            let _ = connection.close(200, "agentd stopping".into()).await;
        }
    }
}

/// How long a channel may take to close at shutdown.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Closes a channel at shutdown and waits (bounded) for the broker's close-ok. A channel
/// that is merely dropped is closed in the background, and a connection closed while one is
/// still closing makes lapin log a connection error on a clean stop; so consumers and the
/// publisher close their channels before the connection is closed.
pub async fn close_channel(channel: &Channel) {
    if !channel.status().connected() {
        return;
    }
    match tokio::time::timeout(CLOSE_WAIT, channel.close(200, "agentd stopping".into())).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(error = %err, "closing a channel"),
        Err(_) => tracing::debug!("a channel did not close in time"),
    }
}

/// The URLs of an `amqp.url` value: split at commas, trimmed, empty entries dropped. A comma
/// inside a password must be percent-encoded (`%2C`), as URL syntax wants anyway.
pub fn split_urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Checks `amqp.url` as the broker will read it: at least one URL, and each one parses (the
/// error names the key and hides passwords).
pub fn check_urls(list: &str) -> anyhow::Result<()> {
    let urls = split_urls(list);
    anyhow::ensure!(!urls.is_empty(), "amqp.url names no RabbitMQ URL");
    for url in urls {
        parse_url(&url).context("amqp.url")?;
    }
    Ok(())
}

/// Parses one AMQP URL; the error never shows its password.
pub fn parse_url(url: &str) -> anyhow::Result<AMQPUri> {
    url.parse::<AMQPUri>().map_err(|err| {
        let masked = mask_password(url);
        // The parser quotes the whole URL in some of its messages.
        anyhow::anyhow!(
            "invalid RabbitMQ URL {masked}: {}",
            err.replace(url, &masked)
        )
    })
}

/// `url` with its password (if any) replaced by `***`, for logs and error messages.
pub fn mask_password(url: &str) -> String {
    let authority_start = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let Some(colon) = authority[..at].find(':') else {
        return url.to_owned();
    };
    let password_start = authority_start + colon + 1;
    let password_end = authority_start + at;
    format!("{}***{}", &url[..password_start], &url[password_end..])
}

/// The order in which the nodes are tried: from `next` round the list once; after a
/// connection to node k the next round starts at k + 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rotation {
    next: usize,
    len: usize,
}

impl Rotation {
    fn new(len: usize, start: usize) -> Self {
        Self {
            next: start % len.max(1),
            len,
        }
    }

    /// The indices of one full round, starting at `next`.
    fn order(&self) -> impl Iterator<Item = usize> + use<> {
        let (next, len) = (self.next, self.len);
        (0..len).map(move |step| (next + step) % len)
    }

    /// A connection to node `index` was opened: when it is lost, start at the one after.
    fn connected(&mut self, index: usize) {
        self.next = (index + 1) % self.len.max(1);
    }
}

/// A random index below `len` (no dependency: std's hasher keys are random per process).
fn random_start(len: usize) -> usize {
    use std::hash::{BuildHasher, Hasher};
    if len <= 1 {
        return 0;
    }
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    usize::try_from(hasher.finish() % len as u64).unwrap_or(0)
}

/// The delays between reconnect attempts: 100 ms doubling, capped at 5 s, forever.
fn reconnect_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_url_is_one_url() {
        let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
        assert_eq!(split_urls(url), [url]);
    }

    #[test]
    fn several_urls_are_split_at_commas_and_trimmed() {
        let list = " amqp://a:1@h1:5673/%2f, amqp://a:1@h2:5674/%2f ,,amqp://h3/vhost?heartbeat=5,";
        assert_eq!(
            split_urls(list),
            [
                "amqp://a:1@h1:5673/%2f",
                "amqp://a:1@h2:5674/%2f",
                "amqp://h3/vhost?heartbeat=5"
            ]
        );
        assert!(split_urls(" , ").is_empty());
    }

    #[test]
    fn passwords_are_masked() {
        let cases = [
            (
                "amqp://guest:guest@127.0.0.1:5672/%2f",
                "amqp://guest:***@127.0.0.1:5672/%2f",
            ),
            ("amqps://u:p%40ss@h:5671", "amqps://u:***@h:5671"),
            ("amqp://u:p@ss@h/v?x=a:b@c", "amqp://u:***@h/v?x=a:b@c"),
            ("amqp://user@h/%2f", "amqp://user@h/%2f"),
            ("amqp://h:5672/%2f?a=b@c:d", "amqp://h:5672/%2f?a=b@c:d"),
            ("amqp://localhost", "amqp://localhost"),
        ];
        for (url, masked) in cases {
            assert_eq!(mask_password(url), masked, "{url}");
        }
    }

    #[test]
    fn url_errors_do_not_show_the_password() {
        let err = parse_url("amqp:secret@").expect_err("not a base URL");
        assert!(!format!("{err:#}").contains("secret"), "{err:#}");
        let err = parse_url("amqp://u:secret@h:notaport/%2f").expect_err("bad port");
        assert!(!format!("{err:#}").contains("secret"), "{err:#}");
        assert!(parse_url("amqp://guest:guest@127.0.0.1:5673/%2f").is_ok());
    }

    #[test]
    fn a_round_tries_every_node_once_from_the_start() {
        let rotation = Rotation::new(3, 1);
        assert_eq!(rotation.order().collect::<Vec<_>>(), [1, 2, 0]);
        assert_eq!(Rotation::new(3, 5).order().collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(Rotation::new(1, 0).order().collect::<Vec<_>>(), [0]);
        assert_eq!(Rotation::new(0, 0).order().count(), 0);
    }

    /// The node a round connects to when only the nodes in `up` accept connections.
    fn connect(rotation: &mut Rotation, up: &[usize]) -> Option<usize> {
        let index = rotation.order().find(|index| up.contains(index))?;
        rotation.connected(index);
        Some(index)
    }

    #[test]
    fn after_a_loss_the_next_node_is_tried_first_and_dead_nodes_are_skipped() {
        let mut rotation = Rotation::new(3, 0);
        assert_eq!(connect(&mut rotation, &[0, 1, 2]), Some(0));
        // Node 0 went away: the round starts at node 1.
        assert_eq!(connect(&mut rotation, &[1, 2]), Some(1));
        // Node 1 went away too while node 2 is down: 2 is skipped, 0 is back.
        assert_eq!(connect(&mut rotation, &[0]), Some(0));
        assert_eq!(rotation.order().collect::<Vec<_>>(), [1, 2, 0]);
        assert_eq!(connect(&mut rotation, &[]), None);
        // A failed round leaves the start where it was.
        assert_eq!(rotation.order().next(), Some(1));
    }

    #[test]
    fn a_single_url_is_always_retried_itself() {
        let mut rotation = Rotation::new(1, random_start(1));
        for _ in 0..3 {
            assert_eq!(connect(&mut rotation, &[0]), Some(0));
        }
    }

    #[test]
    fn workers_start_at_spread_nodes() {
        let starts: std::collections::HashSet<usize> = (0..64).map(|_| random_start(3)).collect();
        assert!(starts.iter().all(|start| *start < 3));
        assert!(starts.len() > 1, "64 starts all at one node: {starts:?}");
    }
}
