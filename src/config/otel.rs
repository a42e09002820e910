//! The `[otel]` section: where the OpenTelemetry export of one trace per task goes, as
//! plain data (`otel::target` resolves it with the standard variables).

use std::collections::HashMap;

use serde::Deserialize;

/// The `[otel]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct OtelSettings {
    /// OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:6006/v1/traces`; empty: the
    /// standard variables decide (`otel::target`), and without them export is off.
    pub endpoint: String,
    /// `service.name` of the resource; empty: `OTEL_SERVICE_NAME`, else `agentd`.
    pub service_name: String,
    /// Extra HTTP headers of every export (an API key of a hosted collector); they win
    /// over `OTEL_EXPORTER_OTLP_HEADERS` for the same name.
    pub headers: HashMap<String, String>,
    /// Spans are sent in batches at least this often, in milliseconds.
    pub export_interval_ms: u64,
    /// Time one export request may take, in milliseconds.
    pub timeout_ms: u64,
}

impl Default for OtelSettings {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            service_name: String::new(),
            headers: HashMap::new(),
            export_interval_ms: 2000,
            timeout_ms: 10_000,
        }
    }
}
