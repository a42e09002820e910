//! OpenTelemetry export against a real receiver: Arize Phoenix (a PyPI package running an
//! OTLP collector with a REST API), started here on free ports in a scratch directory. A task
//! with a retried LLM call, a tool call and a pause (it leaves the worker and is run again
//! from its checkpoint after the resume) is exported with `[otel] endpoint`; its spans are
//! read back from Phoenix and their tree and attributes checked against the SQL rows.
//!
//! Phoenix comes from `AGENTD_PHOENIX` (the `phoenix` executable), else the venv `.ci/run`
//! makes (`target/phoenix-venv`), else `phoenix` on PATH. Under `CI=true` a missing Phoenix
//! fails the test; elsewhere it is skipped with the reason.
//!
//! Without Phoenix: the real `agentd worker` binary configured only by OpenTelemetry's
//! standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `..._HEADERS`, `OTEL_SERVICE_NAME`)
//! exports its trace to a minimal OTLP/HTTP receiver written here.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::harness::{TestEnv, free_local_addr, http_get, scratch_dir};
use crate::support::process::WorkerProcess;
use crate::support::wait::{self, Says};
use agentd::amqp::control::send_control;
use agentd::contract::ControlMessage;
use agentd::contract::control::{Pause, Resume};
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use uuid::Uuid;

/// Phoenix (a Python server that creates its database first) answers its health check
/// within this after it is started.
const PHOENIX_STARTS_WITHIN: Duration = Duration::from_secs(120);

/// A task's spans are all readable from Phoenix within this after the task ended (the
/// worker exports every 200 ms here; Phoenix ingests in batches).
const SPANS_ARRIVE_WITHIN: Duration = Duration::from_secs(60);

/// How often Phoenix is asked again: each question is a Python request, not a cheap query.
const PHOENIX_POLL: Duration = Duration::from_millis(250);

/// The `phoenix` executable, or None (skipped) outside CI.
fn phoenix() -> Option<String> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/phoenix-venv/bin/phoenix");
    let candidates = [
        std::env::var("AGENTD_PHOENIX").ok(),
        venv.exists().then(|| venv.display().to_string()),
        Some("phoenix".into()),
    ];
    for candidate in candidates.into_iter().flatten() {
        let runs = std::process::Command::new(&candidate)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if matches!(runs, Ok(status) if status.success()) {
            return Some(candidate);
        }
    }
    let message = "Arize Phoenix is not installed (python3 -m venv target/phoenix-venv && \
                   target/phoenix-venv/bin/pip install -r tests/otel/requirements.txt)";
    if std::env::var_os("CI").is_some_and(|v| v == "true") {
        panic!("{message}");
    }
    eprintln!("{message}; skipped (it fails under CI=true)");
    None
}

fn port(addr: &str) -> &str {
    addr.rsplit(':').next().unwrap()
}

/// Starts Phoenix and waits for it to answer (it takes some 20 s on 2 cores).
async fn start_phoenix(executable: &str) -> (Child, String) {
    let http = free_local_addr();
    let grpc = free_local_addr();
    let dir = scratch_dir("phoenix");
    let log = std::fs::File::create(dir.join("phoenix.log")).unwrap();
    let child = Command::new(executable)
        .arg("serve")
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port(&http))
        .env("PHOENIX_GRPC_PORT", port(&grpc))
        .env("PHOENIX_WORKING_DIR", &dir)
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start phoenix");
    let started = Instant::now();
    while http_get(&http, "/healthz").await.0 != 200 {
        assert!(
            started.elapsed() < PHOENIX_STARTS_WITHIN,
            "Phoenix did not start: {}",
            std::fs::read_to_string(dir.join("phoenix.log")).unwrap_or_default()
        );
        tokio::time::sleep(PHOENIX_POLL).await;
    }
    (child, http)
}

/// Nested attribute objects as dotted keys (`{"gen_ai": {"tool": {"name": x}}}` →
/// `gen_ai.tool.name`), whichever way Phoenix returns them.
fn flatten(prefix: &str, value: &Value, into: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, inner, into);
            }
        }
        other => {
            into.insert(prefix.to_owned(), other.clone());
        }
    }
}

struct SpanView {
    name: String,
    span_id: String,
    parent_id: Option<String>,
    status: String,
    attributes: BTreeMap<String, Value>,
    events: Vec<String>,
}

/// The spans of one trace as Phoenix has them, once `expected` have arrived.
async fn spans_of(phoenix: &str, trace_id: &str, expected: usize) -> Vec<SpanView> {
    let started = Instant::now();
    loop {
        let (status, body) = http_get(
            phoenix,
            &format!("/v1/projects/default/spans?trace_id={trace_id}&limit=1000"),
        )
        .await;
        let spans: Vec<SpanView> = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|span| {
                let mut attributes = BTreeMap::new();
                flatten("", &span["attributes"], &mut attributes);
                SpanView {
                    name: span["name"].as_str().unwrap_or_default().to_owned(),
                    span_id: span["context"]["span_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    parent_id: span["parent_id"].as_str().map(str::to_owned),
                    status: span["status_code"].as_str().unwrap_or_default().to_owned(),
                    attributes,
                    events: span["events"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|e| e["name"].as_str().map(str::to_owned))
                        .collect(),
                }
            })
            .collect();
        if spans.len() >= expected {
            return spans;
        }
        assert!(
            started.elapsed() < SPANS_ARRIVE_WITHIN,
            "Phoenix has {} of {expected} spans of {trace_id} (status {status}): {body}",
            spans.len()
        );
        tokio::time::sleep(PHOENIX_POLL).await;
    }
}

#[tokio::test]
async fn a_task_is_one_trace_in_phoenix_with_the_genai_tree_and_attributes() {
    let Some(executable) = phoenix() else {
        return;
    };
    let (mut phoenix, phoenix_addr) = start_phoenix(&executable).await;
    let endpoint = format!("http://{phoenix_addr}/v1/traces");
    let env = TestEnv::start_with(|settings| {
        settings.otel.endpoint = endpoint;
        settings.otel.export_interval_ms = 200;
    })
    .await;
    let agent = env.agent(None, None).await;
    let marker = "otel-phoenix";
    env.fake.script(
        marker,
        vec![
            ModelReply::status(500, "overloaded"),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))])
                .with_delay(Duration::from_millis(400)),
            answer_reply("42"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    // Paused while the retried call runs: recursion 1 commits, the task leaves the worker.
    env.wait_asked(marker, 2).await;
    let (publisher, names) = (&env.publisher, &env.settings.amqp);
    let pause = ControlMessage::Pause(Pause { task_id });
    send_control(publisher, names, &pause).await.unwrap();
    env.wait_status(task_id, "waiting").await;
    let resume = ControlMessage::Resume(Resume {
        task_id,
        budget: None,
    });
    send_control(publisher, names, &resume).await.unwrap();
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");

    // 1 task + 2 recursions + 3 LLM attempts + 1 tool call.
    let trace_id = task_id.simple().to_string();
    let spans = spans_of(&phoenix_addr, &trace_id, 7).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    eprintln!("Phoenix's spans of trace {trace_id}:");
    for span in &spans {
        let keys: Vec<&str> = span.attributes.keys().map(String::as_str).collect();
        eprintln!(
            "  {:<28} span {} parent {:<16} {:<5} events {:?}\n      {}",
            span.name,
            span.span_id,
            span.parent_id.as_deref().unwrap_or("-"),
            span.status,
            span.events,
            keys.join(" ")
        );
    }
    assert_eq!(spans.len(), 7, "{names:?}");
    let named = |prefix: &str| -> Vec<&SpanView> {
        spans
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect()
    };

    let root = named("invoke_agent");
    assert_eq!(root.len(), 1, "{names:?}");
    let root = root[0];
    assert_eq!(root.parent_id, None);
    assert_eq!(root.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(root.attributes["gen_ai.agent.id"], agent.to_string());
    assert_eq!(root.attributes["agentd.status"], "completed");
    assert_eq!(root.attributes["agentd.iterations"], 2);

    // Recursions: children of the task, joined to SQL by their trace_id, before and after
    // the pause alike.
    let rows: Vec<(Uuid, i32)> = sqlx::query_as(
        "SELECT trace_id, iteration FROM recursions WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let recursions = named("recursion");
    assert_eq!(recursions.len(), 2, "{names:?}");
    for (trace, iteration) in &rows {
        let span = recursions
            .iter()
            .find(|s| s.attributes["agentd.trace_id"] == trace.to_string())
            .unwrap_or_else(|| panic!("no span for recursion {iteration}"));
        assert_eq!(span.parent_id.as_deref(), Some(root.span_id.as_str()));
        assert_eq!(span.attributes["agentd.iteration"], *iteration);
        assert_eq!(span.name, format!("recursion {iteration}"));
    }
    let first = recursions
        .iter()
        .find(|s| s.attributes["agentd.iteration"] == 1)
        .unwrap();
    assert_eq!(first.attributes["agentd.action_type"], "CALL_TOOL");

    // LLM attempts: chat spans under their recursion; the failed one an error, the retry an
    // event.
    let chats = named("chat");
    assert_eq!(chats.len(), 3, "{names:?}");
    for chat in &chats {
        assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
        assert!(chat.attributes.contains_key("gen_ai.request.model"));
        assert!(
            recursions
                .iter()
                .any(|r| Some(&r.span_id) == chat.parent_id.as_ref())
        );
    }
    let failed: Vec<_> = chats.iter().filter(|c| c.status == "ERROR").collect();
    assert_eq!(failed.len(), 1, "one failed attempt");
    assert_eq!(failed[0].attributes["agentd.llm.attempt"], 1);
    let retried: Vec<_> = chats
        .iter()
        .filter(|c| c.events.iter().any(|e| e == "gen_ai.retry"))
        .collect();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].attributes["agentd.llm.attempt"], 2);
    assert!(retried[0].attributes["gen_ai.usage.input_tokens"].as_i64() > Some(0));
    assert_eq!(retried[0].parent_id.as_ref(), Some(&first.span_id));

    // The tool call under recursion 1.
    let tools = named("execute_tool");
    assert_eq!(tools.len(), 1, "{names:?}");
    let tool = tools[0];
    assert_eq!(tool.name, "execute_tool calculate");
    assert_eq!(tool.attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool.attributes["gen_ai.tool.name"], "calculate");
    assert_eq!(tool.attributes["agentd.tool.effect"], "read_only");
    assert_eq!(tool.attributes["agentd.tool.success"], true);
    assert_eq!(tool.parent_id.as_ref(), Some(&first.span_id));

    env.stop().await;
    let _ = phoenix.start_kill();
    let _ = phoenix.wait().await;
}

/// What a minimal OTLP/HTTP receiver got: each export request's path, headers and body.
type Exports = Arc<Mutex<Vec<Export>>>;

/// Starts a receiver that accepts every export; returns its base URL and what it got.
async fn start_receiver() -> (String, Exports) {
    let exports: Exports = Arc::default();
    let recorded = Arc::clone(&exports);
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let recorded = Arc::clone(&recorded);
            async move {
                let export = (uri.path().to_owned(), headers, body.to_vec());
                recorded.lock().unwrap().push(export);
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), exports)
}

/// How long the worker binary may take to start and run a task, and then its trace to
/// arrive (the batch is sent every 100 ms here).
const EXPORT_WAIT: Duration = Duration::from_secs(20);

/// One export request: its path, headers and body.
type Export = (String, axum::http::HeaderMap, Vec<u8>);

/// Runs a task on the worker binary started with `variables` (and the `config` file, if
/// any) and returns the export holding its trace, and every export received.
async fn export_of_a_task(
    variables: &[(&str, &str)],
    config: Option<&Path>,
) -> (Export, Vec<Export>) {
    let (base, exports) = start_receiver().await;
    let env = TestEnv::without_worker(|_| {}).await;
    let mut all = vec![
        ("AGENTD__OTEL__EXPORT_INTERVAL_MS", "100"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
        // Blank whatever the test process has: these would take precedence.
        ("AGENTD__OTEL__ENDPOINT", ""),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", ""),
    ];
    // The test's own come last: they win.
    all.extend_from_slice(variables);
    let worker = WorkerProcess::spawn_with_config(&env.settings, config, &all);
    let agent = env.agent(None, None).await;
    env.fake.script("otel-env", vec![answer_reply("done")]);
    let task_id = env.submit(agent, "otel-env").await;
    let task = env.wait_terminal_within(task_id, EXPORT_WAIT).await;
    assert_eq!(task.status, "completed", "{}", worker.log());
    let trace_id = *task_id.as_bytes();
    let what = Says(|| format!("an export holds the task's trace: {}", worker.log()));
    let export = wait::until(what, EXPORT_WAIT, || {
        let received = exports.lock().unwrap().clone();
        let found = received
            .into_iter()
            .find(|(_, _, body)| contains(body, &trace_id));
        async move { found }
    })
    .await;
    drop(worker);
    env.stop().await;
    let received = exports.lock().unwrap().clone();
    (export, received)
}

#[tokio::test]
async fn the_standard_otel_variables_alone_make_the_worker_export() {
    let service = format!("otel-env-{}", Uuid::new_v4().simple());
    let variables = [
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k%20e%2Cy"),
        ("OTEL_SERVICE_NAME", service.as_str()),
    ];
    let ((path, headers, _), received) = export_of_a_task(&variables, None).await;
    // The endpoint variable is a base URL: the traces path was appended.
    assert_eq!(path, "/v1/traces");
    assert_eq!(headers["x-collector-key"], "k e,y");
    assert!(
        received
            .iter()
            .any(|(_, _, body)| contains(body, service.as_bytes())),
        "no export carries service.name {service}"
    );
}

#[tokio::test]
async fn otel_headers_of_the_configuration_win_over_the_variable() {
    let dir = scratch_dir("otel-headers");
    let config = dir.join("otel.toml");
    std::fs::write(
        &config,
        "[otel]\nheaders = { \"x-collector-key\" = \"own\" }\n",
    )
    .unwrap();
    // The traces variable is the one the OTLP library itself reads first and applies last.
    let variables = [(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "x-collector-key=from-env,x-other=1",
    )];
    let ((_, headers, _), _) = export_of_a_task(&variables, Some(&config)).await;
    let keys: Vec<_> = headers.get_all("x-collector-key").iter().collect();
    assert_eq!(keys, ["own"], "the configured header is sent, once");
    assert_eq!(headers["x-other"], "1");
    let _ = std::fs::remove_dir_all(dir);
}

/// Whether `needle` occurs in `haystack` (protobuf keeps strings and trace ids as raw bytes).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}
