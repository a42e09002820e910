//! Tier `faces`: what people and other systems look at. The gateway (HTTP, SSE, OpenAPI,
//! bounds, the page in headless Chromium, schemathesis) in `gateway`, the `agentd` binary
//! answering a person's mistakes (`cli`), the Grafana dashboard and alert rules against
//! exported metrics (`dashboards`), and OpenTelemetry export to a real receiver
//! (`otel_phoenix`). The operations listener's exact counts are in `serial` (`metrics`):
//! the recorder is the process's.
//!
//! A new test goes here when it checks what a face shows or answers; what the feature
//! behind it does belongs to `features`. `cargo test --test faces [FILTER]`.

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod cli;
mod dashboards;
mod gateway;
mod otel_phoenix;
