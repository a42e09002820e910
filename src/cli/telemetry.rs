//! Installs the tracing subscriber: text or JSON lines on stderr, filtered by RUST_LOG or
//! log.level.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber (once; later calls are no-ops).
pub fn init(log: &LogSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match log.format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
