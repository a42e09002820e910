//! The Grafana dashboard (`docs/grafana/agentd.json`) and the Prometheus alert rules
//! (`docs/prometheus/agentd-alerts.yml`) checked against the worker. Both files are parsed;
//! every PromQL expression in them (panel targets, template variables, alert `expr`) is
//! scanned by a small tokenizer that also rejects unbalanced brackets and unterminated
//! strings. The metric names found must be exported by a real worker: one runs tasks that
//! create every labelled series (an LLM retry, a built-in and an MCP tool call, a compaction,
//! a dead letter, an MCP server restart, a periodic prune), and its `/metrics` must declare
//! each name as a family in a `# TYPE` line (`_bucket`, `_sum`, `_count` map to their
//! histogram). The label names the expressions match on or group by must be labels of those
//! series, or `job` / `instance`, which Prometheus adds. The only other metric allowed is
//! Prometheus' own `up`. The same names and labels must exist, at 0, on a fresh worker (the
//! real binary, a process of its own) before it ran any task, so that `increase()` sees the
//! first event.
//!
//! The tokenizer is no PromQL parser: it knows enough of the grammar to tell metric names
//! from functions, aggregations, keywords, label names, strings, durations and Grafana
//! variables, and it fails on what it does not understand (a `{__name__=...}` selector)
//! rather than skip a name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::support::harness::{self, TestEnv};
use crate::support::process::WorkerProcess;
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply};
use serde_json::{Value, json};
use uuid::Uuid;
use yaml_rust2::{Yaml, YamlLoader};

const DASHBOARD: &str = "docs/grafana/agentd.json";
const ALERTS: &str = "docs/prometheus/agentd-alerts.yml";
/// Metrics that are not the worker's but may be named: Prometheus' scrape health.
const FOREIGN_METRICS: [&str; 1] = ["up"];
/// Labels Prometheus attaches to every scraped series (the target's job and address).
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

// ---- A PromQL tokenizer ---------------------------------------------------------------------

/// What an expression names.
#[derive(Debug, Default, PartialEq)]
struct Names {
    /// Each metric selector: the name as written (with any `_bucket` suffix) and the label
    /// names of its matchers.
    selectors: Vec<(String, Vec<String>)>,
    /// The label names of `by`, `without`, `on`, `ignoring`, `group_left` and `group_right`.
    grouping: Vec<String>,
}

const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Binary operators and modifiers spelled as words; `inf` and `nan` are numbers.
const KEYWORDS: [&str; 6] = ["and", "or", "unless", "bool", "offset", "atan2"];

struct Scanner {
    chars: Vec<char>,
    at: usize,
}

impl Scanner {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    /// The next non-blank character, without consuming it.
    fn next_solid(&mut self) -> Option<char> {
        self.skip_space();
        self.peek()
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let start = self.at;
        while self.peek().is_some_and(&keep) {
            self.at += 1;
        }
        self.chars[start..self.at].iter().collect()
    }

    fn identifier(&mut self) -> String {
        self.take_while(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    /// Skips a string literal starting at the current quote.
    fn string(&mut self) -> Result<(), String> {
        let quote = self.chars[self.at];
        let start = self.at;
        self.at += 1;
        while let Some(c) = self.peek() {
            self.at += 1;
            if c == '\\' && quote != '`' {
                self.at += 1;
            } else if c == quote {
                return Ok(());
            }
        }
        Err(format!("unterminated string at {start}"))
    }

    /// A `{label op "value", ...}` list at the current `{`: the label names.
    fn matchers(&mut self) -> Result<Vec<String>, String> {
        self.at += 1;
        let mut labels = Vec::new();
        loop {
            match self.next_solid() {
                Some('}') => {
                    self.at += 1;
                    return Ok(labels);
                }
                Some(',') => self.at += 1,
                Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                    labels.push(self.identifier());
                    self.skip_space();
                    let op = self.take_while(|c| matches!(c, '=' | '!' | '~'));
                    if !matches!(op.as_str(), "=" | "!=" | "=~" | "!~") {
                        return Err(format!("bad matcher operator '{op}' at {}", self.at));
                    }
                    match self.next_solid() {
                        Some('"' | '\'' | '`') => self.string()?,
                        _ => return Err(format!("matcher without a string at {}", self.at)),
                    }
                }
                Some(c) => return Err(format!("unexpected '{c}' in a selector at {}", self.at)),
                None => return Err("unclosed '{'".to_owned()),
            }
        }
    }

    /// A `(label, ...)` list at the current `(`.
    fn label_list(&mut self) -> Result<Vec<String>, String> {
        self.at += 1;
        let mut labels = Vec::new();
        loop {
            match self.next_solid() {
                Some(')') => {
                    self.at += 1;
                    return Ok(labels);
                }
                Some(',') => self.at += 1,
                Some(c) if c.is_ascii_alphabetic() || c == '_' => labels.push(self.identifier()),
                Some(c) => return Err(format!("unexpected '{c}' in a label list at {}", self.at)),
                None => return Err("unclosed label list".to_owned()),
            }
        }
    }
}

/// Scans a PromQL expression (Grafana variables allowed): the metrics and labels it names.
/// Fails on unbalanced brackets, unterminated strings and selectors it cannot read.
fn scan(expr: &str) -> Result<Names, String> {
    let mut s = Scanner {
        chars: expr.chars().collect(),
        at: 0,
    };
    let mut names = Names::default();
    let mut parens = Vec::new();
    while let Some(c) = s.next_solid() {
        match c {
            '#' => {
                s.take_while(|c| c != '\n');
            }
            '"' | '\'' | '`' => s.string()?,
            '(' => {
                parens.push(s.at);
                s.at += 1;
            }
            ')' => {
                parens
                    .pop()
                    .ok_or_else(|| format!("unbalanced ')' at {}", s.at))?;
                s.at += 1;
            }
            // A range or subquery: durations and Grafana variables, nothing named.
            '[' => {
                let start = s.at;
                s.at += 1;
                s.take_while(|c| c != ']' && c != '[');
                if s.peek() != Some(']') {
                    return Err(format!("unclosed '[' at {start}"));
                }
                s.at += 1;
            }
            ']' | '}' => return Err(format!("unbalanced '{c}' at {}", s.at)),
            // A selector without a metric name: only `{__name__=...}` could name one, and
            // that is not read here, so it is refused rather than skipped.
            '{' => {
                let labels = s.matchers()?;
                if labels.iter().any(|l| l == "__name__") {
                    return Err("a {__name__=...} selector: name the metric instead".to_owned());
                }
            }
            // Grafana variables: `$name`, `${name}`, `${name:format}`.
            '$' => {
                s.at += 1;
                if s.peek() == Some('{') {
                    s.take_while(|c| c != '}');
                    s.at += 1;
                } else {
                    s.identifier();
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // Numbers and durations (`0.95`, `1e-3`, `5m`, `1h30m`).
                s.take_while(|c| c.is_ascii_alphanumeric() || c == '.');
                if matches!(s.peek(), Some('+' | '-'))
                    && s.chars[s.at - 1].eq_ignore_ascii_case(&'e')
                {
                    s.at += 1;
                    s.take_while(|c| c.is_ascii_digit());
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let word = s.identifier();
                let lower = word.to_ascii_lowercase();
                if GROUPING.contains(&word.as_str()) {
                    if s.next_solid() == Some('(') {
                        names.grouping.extend(s.label_list()?);
                    }
                } else if AGGREGATIONS.contains(&word.as_str())
                    || KEYWORDS.contains(&word.as_str())
                    || lower == "inf"
                    || lower == "nan"
                    || s.next_solid() == Some('(')
                {
                    // An aggregation, a keyword, a number or a function call.
                } else {
                    let labels = match s.next_solid() {
                        Some('{') => s.matchers()?,
                        _ => Vec::new(),
                    };
                    names.selectors.push((word, labels));
                }
            }
            _ => s.at += 1,
        }
    }
    if let Some(open) = parens.pop() {
        return Err(format!("unclosed '(' at {open}"));
    }
    if names.selectors.is_empty() {
        return Err("names no metric".to_owned());
    }
    Ok(names)
}

// ---- The expressions of the two files ------------------------------------------------------

/// One PromQL expression and where it comes from.
#[derive(Debug)]
struct Query {
    origin: String,
    expr: String,
    /// Label names the expression needs beyond its own (a `label_values` variable's label).
    extra_labels: Vec<String>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// The panel targets and template variable queries of the dashboard, after checking its
/// structure: panels with targets, unique ids, every data source the `datasource` variable.
fn dashboard_queries() -> Vec<Query> {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    assert!(dashboard["id"].is_null(), "no instance id: it is imported");
    // A data source UID differs per Grafana: hard-coded ones break the import.
    assert_datasources(&dashboard, "$");
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    assert!(
        variables.iter().any(|v| v["type"] == "datasource"
            && v["name"] == "datasource"
            && v["query"] == "prometheus"),
        "a `datasource` variable of type prometheus"
    );
    let mut queries = Vec::new();
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let text = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .expect("a variable query");
        let inner = text
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {}: only label_values(...)", variable["name"]));
        let (expr, label) = inner.rsplit_once(',').expect("label_values(metric, label)");
        queries.push(Query {
            origin: format!("variable {}", variable["name"]),
            expr: expr.to_owned(),
            extra_labels: vec![label.trim().to_owned()],
        });
    }
    let mut ids = BTreeSet::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(ids.insert(panel["id"].as_u64()), "duplicate id: {title}");
        if panel["type"] == "row" {
            panels.extend(panel["panels"].as_array().into_iter().flatten());
            continue;
        }
        let targets = panel["targets"].as_array().map(Vec::as_slice);
        let targets = targets.unwrap_or_default();
        assert!(!targets.is_empty(), "panel '{title}' has no query");
        let mut refs = BTreeSet::new();
        for target in targets {
            let id = target["refId"].as_str().expect("a refId");
            assert!(refs.insert(id), "'{title}': duplicate refId {id}");
            let expr = target["expr"].as_str().unwrap_or_default();
            queries.push(Query {
                origin: format!("panel '{title}' {}", target["refId"]),
                expr: expr.to_owned(),
                extra_labels: Vec::new(),
            });
        }
    }
    queries
}

/// Every `datasource` in the dashboard is the Prometheus data source variable.
fn assert_datasources(value: &Value, path: &str) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let path = format!("{path}.{key}");
                if key == "datasource" {
                    assert_eq!(
                        inner,
                        &json!({"type": "prometheus", "uid": "${datasource}"}),
                        "{path}"
                    );
                } else {
                    assert_datasources(inner, &path);
                }
            }
        }
        Value::Array(items) => {
            for (index, inner) in items.iter().enumerate() {
                assert_datasources(inner, &format!("{path}[{index}]"));
            }
        }
        _ => {}
    }
}

/// The `expr` of every alert rule, after checking each has what an on-call person needs.
fn alert_queries() -> Vec<Query> {
    let docs = YamlLoader::load_from_str(&read(ALERTS)).expect("the alert rules are YAML");
    let [rules_file] = docs.as_slice() else {
        panic!("one YAML document");
    };
    let groups = rules_file["groups"].as_vec().expect("groups");
    let mut names = BTreeSet::new();
    let mut queries = Vec::new();
    for group in groups {
        assert!(group["name"].as_str().is_some(), "a group name");
        for rule in group["rules"].as_vec().expect("rules") {
            let alert = rule["alert"].as_str().expect("only alerting rules");
            assert!(names.insert(alert), "duplicate alert {alert}");
            let text = |value: &Yaml, what: &str| {
                let text = value.as_str().unwrap_or_default().trim().to_owned();
                assert!(!text.is_empty(), "{alert}: {what}");
                text
            };
            let wait = text(&rule["for"], "for");
            assert!(
                wait.ends_with(['s', 'm', 'h']) && wait.starts_with(|c: char| c.is_ascii_digit()),
                "{alert}: for: {wait}"
            );
            let severity = text(&rule["labels"]["severity"], "labels.severity");
            assert!(
                ["critical", "warning", "info"].contains(&severity.as_str()),
                "{alert}: severity {severity}"
            );
            text(&rule["annotations"]["summary"], "annotations.summary");
            text(
                &rule["annotations"]["description"],
                "annotations.description",
            );
            queries.push(Query {
                origin: format!("alert {alert}"),
                expr: text(&rule["expr"], "expr"),
                extra_labels: Vec::new(),
            });
        }
    }
    assert!(!queries.is_empty(), "no alert rule");
    queries
}

/// Scans every query; panics listing each that does not scan.
fn scanned(queries: &[Query]) -> Vec<(&Query, Names)> {
    let mut bad = Vec::new();
    let mut good = Vec::new();
    for query in queries {
        match scan(&query.expr) {
            Ok(names) => good.push((query, names)),
            Err(why) => bad.push(format!("{}: {why}: {}", query.origin, query.expr)),
        }
    }
    assert!(bad.is_empty(), "implausible PromQL:\n{}", bad.join("\n"));
    good
}

// ---- What a worker exports -----------------------------------------------------------------

/// The families of a `/metrics` text: name → (type, label names seen on its samples).
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), (kind.trim().to_owned(), BTreeSet::new())))
        .collect();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels)) = line.split_once('{') else {
            continue;
        };
        let Some(family) = family_of(name, &families) else {
            continue;
        };
        let mut scanner = Scanner {
            chars: format!("{{{labels}").chars().collect(),
            at: 0,
        };
        let labels = scanner.matchers().expect("a sample's labels");
        if let Some((_, known)) = families.get_mut(&family) {
            known.extend(labels);
        }
    }
    families
}

/// The family a series name belongs to: itself, or the histogram or summary it is the
/// `_bucket`, `_sum` or `_count` of.
fn family_of<T>(name: &str, families: &BTreeMap<String, (String, T)>) -> Option<String> {
    if families.contains_key(name) {
        return Some(name.to_owned());
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        let (kind, _) = families.get(base)?;
        matches!(kind.as_str(), "histogram" | "summary").then(|| base.to_owned())
    })
}

/// What the queries name that `exported` lacks: unknown metrics and unknown labels.
fn missing(
    queries: &[(&Query, Names)],
    exported: &BTreeMap<String, (String, BTreeSet<String>)>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (query, names) in queries {
        let mut known: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        for (name, labels) in &names.selectors {
            let own = if FOREIGN_METRICS.contains(&name.as_str()) {
                BTreeSet::new()
            } else if let Some(family) = family_of(name, exported) {
                exported[&family].1.clone()
            } else {
                problems.push(format!("{}: {name} is not exported", query.origin));
                continue;
            };
            for label in labels {
                if !own.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                    problems.push(format!("{}: {name} has no label {label}", query.origin));
                }
            }
            known.extend(own);
        }
        for label in names.grouping.iter().chain(&query.extra_labels) {
            if !known.contains(label) {
                problems.push(format!(
                    "{}: no metric it names has the label {label}",
                    query.origin
                ));
            }
        }
    }
    problems
}

// ---- Tests ----------------------------------------------------------------------------------

#[test]
fn the_tokenizer_finds_metrics_and_labels_and_nothing_else() {
    let names = scan(
        r#"histogram_quantile(0.95, sum by (le, result) (rate(agentd_llm_call_duration_seconds_bucket{job=~"$job", result!="a}b,c"}[$__rate_interval])))
          / on (job) group_left (kind) max without(instance) (up offset 1h30m) > 1e-3 and bool inf # agentd_in_a_comment"#,
    )
    .expect("scans");
    assert_eq!(
        names,
        Names {
            selectors: vec![
                (
                    "agentd_llm_call_duration_seconds_bucket".to_owned(),
                    vec!["job".to_owned(), "result".to_owned()]
                ),
                ("up".to_owned(), vec![]),
            ],
            grouping: ["le", "result", "job", "kind", "instance"]
                .map(str::to_owned)
                .to_vec(),
        }
    );
    // A name the dashboards must not use is still found, so the scrape check can refuse it.
    let bogus = scan("sum(rate(agentd_bogus_total[5m])) / sum(node_cpu_seconds_total)").unwrap();
    let found: Vec<&str> = bogus.selectors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(found, ["agentd_bogus_total", "node_cpu_seconds_total"]);
    for broken in [
        "sum(rate(agentd_x_total[5m])",
        "sum(rate(agentd_x_total[5m])))",
        "rate(agentd_x_total[5m)",
        "agentd_x_total{a=\"b\"",
        "agentd_x_total{a=\"b}",
        "agentd_x_total]",
        "{__name__=~\"agentd_.*\"}",
        "sum(rate(5m))",
    ] {
        assert!(scan(broken).is_err(), "accepted: {broken}");
    }
}

#[test]
fn the_scrape_check_refuses_unknown_metrics_and_labels() {
    let exported = families(
        "# TYPE agentd_a_seconds histogram\nagentd_a_seconds_bucket{result=\"ok\",le=\"1\"} 1\n\
         # TYPE agentd_b_total counter\nagentd_b_total 3\n",
    );
    let query = |expr: &str| Query {
        origin: expr.to_owned(),
        expr: expr.to_owned(),
        extra_labels: Vec::new(),
    };
    let good = [
        query("sum by (le, result) (rate(agentd_a_seconds_bucket[5m]))"),
        query("agentd_a_seconds_count{result=\"ok\"} + on (instance) agentd_b_total"),
        query("up{job=\"agentd\"} == 0"),
    ];
    assert_eq!(missing(&scanned(&good), &exported), Vec::<String>::new());
    for bad in [
        "rate(agentd_c_total[5m])",
        "rate(agentd_b_total_count[5m])",
        "agentd_b_total{result=\"ok\"}",
        "sum by (tool) (agentd_a_seconds_sum)",
        "node_load1",
    ] {
        let problems = missing(&scanned(&[query(bad)]), &exported);
        assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
    }
}

/// The files parse and every expression scans; runs without a worker.
#[test]
fn the_dashboard_and_the_alert_rules_are_well_formed() {
    let dashboard = dashboard_queries();
    let alerts = alert_queries();
    let (dashboard, alerts) = (scanned(&dashboard), scanned(&alerts));
    assert!(
        dashboard.len() >= 20,
        "{} dashboard queries",
        dashboard.len()
    );
    for (query, names) in dashboard.iter().chain(&alerts) {
        for (name, _) in &names.selectors {
            assert!(
                name.starts_with("agentd_") || FOREIGN_METRICS.contains(&name.as_str()),
                "{}: {name} is neither agentd's nor allowed",
                query.origin
            );
        }
    }
}

/// The whole check: a worker that ran tasks exports every metric and label named.
#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_name_is_exported() {
    let all: Vec<Query> = dashboard_queries()
        .into_iter()
        .chain(alert_queries())
        .collect();
    let queries = scanned(&all);

    let dir = harness::scratch_dir("dashboards");
    let pid_file = dir.join("mcp.pid");
    let server = harness::test_mcp_server("dashsrv", &[("AGENTD_TEST_MCP_PID_FILE", &pid_file)]);
    let addr = harness::free_local_addr();
    let env = TestEnv::start_with(|s| {
        s.metrics.bind = addr.clone();
        s.tools.mcp = vec![server];
        s.tools.restart_initial_delay_ms = 100;
        s.tools.restart_max_delay_ms = 300;
        // Every second, so that the prune metrics exist; 30 days old removes nothing here.
        s.retention.interval_secs = 1;
        s.retention.older_than = "30d".to_owned();
        // Below any request's size: the first recursion compacts (and sends the floor).
        s.limits.context_budget_tokens = 50;
    })
    .await;
    run_tasks(&env).await;
    kill_the_mcp_server(&pid_file);

    // Some series appear a moment after the task ends (the dead letter, the prune, the
    // restart): scrape until nothing is missing, or report what still is.
    let deadline = tokio::time::Instant::now() + SERIES_APPEAR_WITHIN;
    let problems = loop {
        let (status, body) = harness::http_get(&addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        let problems = missing(&queries, &families(&body));
        if problems.is_empty() || tokio::time::Instant::now() > deadline {
            break problems;
        }
        tokio::time::sleep(SCRAPE_EVERY).await;
    };
    assert!(
        problems.is_empty(),
        "the dashboard or the alerts name what the worker does not export:\n{}",
        problems.join("\n")
    );
    env.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// How long a fresh worker may take to serve its first complete scrape.
const FIRST_SCRAPE_WAIT: Duration = Duration::from_secs(20);

/// Series born a moment after the tasks end (the dead letter, the prune, the MCP server's
/// restart) are exported within this.
const SERIES_APPEAR_WITHIN: Duration = Duration::from_secs(20);

/// How often `/metrics` is scraped again while series are missing (each scrape renders
/// every series).
const SCRAPE_EVERY: Duration = Duration::from_millis(100);

/// Before any task: every metric and label the files name is exported by a fresh worker,
/// every counter and histogram at 0 (a series born at its first event has no `increase()`).
#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_name_exists_at_zero_before_any_task() {
    let all: Vec<Query> = dashboard_queries()
        .into_iter()
        .chain(alert_queries())
        .collect();
    let queries = scanned(&all);
    let env = TestEnv::without_worker(|_| {}).await;
    let dir = harness::scratch_dir("dashboards-fresh");
    let addr = harness::free_local_addr();
    let config = dir.join("fresh.toml");
    let toml = format!(
        "[metrics]\nbind = \"{addr}\"\n\n[[tools.mcp]]\nname = \"freshsrv\"\ncommand = \"{}\"\n",
        harness::test_mcp_server_bin()
    );
    std::fs::write(&config, toml).expect("config file");
    let worker = WorkerProcess::spawn_with_config(&env.settings, Some(&config), &[]);
    let deadline = tokio::time::Instant::now() + FIRST_SCRAPE_WAIT;
    let (problems, body) = loop {
        let (status, body) = harness::http_get(&addr, "/metrics").await;
        let problems = if status == 200 {
            missing(&queries, &families(&body))
        } else {
            vec![format!("/metrics answered {status}")]
        };
        if problems.is_empty() || tokio::time::Instant::now() > deadline {
            break (problems, body);
        }
        tokio::time::sleep(SCRAPE_EVERY).await;
    };
    assert!(
        problems.is_empty(),
        "a fresh worker lacks what the dashboard or the alerts name:\n{}\n{}",
        problems.join("\n"),
        worker.log()
    );
    let exported = families(&body);
    let named: BTreeSet<String> = queries
        .iter()
        .flat_map(|(_, names)| &names.selectors)
        .filter_map(|(name, _)| family_of(name, &exported))
        .collect();
    let moved: Vec<&str> = body
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            family_of(name, &exported)
                .is_some_and(|family| named.contains(&family) && exported[&family].0 != "gauge")
        })
        .filter(|line| line.rsplit(' ').next() != Some("0"))
        .collect();
    assert!(moved.is_empty(), "not 0 before any task: {moved:?}");
    drop(worker);
    env.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A task with an LLM retry, a built-in and an MCP tool call, and an answer (compacted on
/// the way); and a message for an unknown agent, rejected and dead-lettered.
async fn run_tasks(env: &TestEnv) {
    let agent = env.agent(None, Some(&["calculate", "dashsrv__add"])).await;
    env.fake.script(
        "dashboards-run",
        vec![
            ModelReply::status(500, "overloaded"),
            call_tool_reply(vec![
                ("calculate", json!({"expression": "6*7"})),
                ("dashsrv__add", json!({"a": 40, "b": 2})),
            ]),
            answer_reply("42"),
        ],
    );
    let task_id = env.submit(agent, "dashboards-run").await;
    let rejected = Uuid::now_v7();
    let body = json!({"task_id": rejected, "agent_id": Uuid::now_v7(), "input": "nobody"});
    env.publish_raw(body.to_string().as_bytes()).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(env.wait_terminal(rejected).await.status, "rejected");
}

/// Kills the MCP server, so that the worker restarts it and counts the restart (the scrape
/// loop waits for that series).
fn kill_the_mcp_server(pid_file: &Path) {
    let pid = std::fs::read_to_string(pid_file).expect("the MCP server wrote its pid");
    let killed = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -9 {pid}");
}
