//! Installs the tracing subscriber: text or JSON lines on stderr, filtered by RUST_LOG or
//! log.level.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber (once; later calls are no-ops).
pub fn init(log: &LogSettings) {
    init_with_writer(log, std::io::stderr);
}

/// Like [`init`], writing the lines to `writer` (tests capture the JSON lines this way).
/// JSON lines carry the fields of every enclosing span in `spans` (the `task` span's
/// `task_id`, the `recursion` span's `trace_id` and `iteration`) and the innermost in `span`.
pub fn init_with_writer<W>(log: &LogSettings, writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let _ = match log.format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
