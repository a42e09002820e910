//! Where spans go, resolved from the `[otel]` section and OpenTelemetry's standard
//! environment variables, so that a user who sets only those gets traces:
//!
//! - endpoint: `[otel] endpoint`, else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is),
//!   else `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL: `v1/traces` is appended); none = off;
//! - `service.name`: `[otel] service_name`, else `OTEL_SERVICE_NAME`, else `agentd`;
//! - headers: `OTEL_EXPORTER_OTLP_HEADERS`, then `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, then
//!   `[otel] headers`, a later source winning for the same name (comma-separated `key=value`,
//!   values percent-decoded, as the specification says).
//!
//! agentd's own keys win when set. A pure function of the settings and a variable lookup,
//! so that it is tested without touching the process environment.

use std::collections::BTreeMap;

use super::OtelSettings;

/// The service name when neither `[otel] service_name` nor `OTEL_SERVICE_NAME` is set.
pub const DEFAULT_SERVICE_NAME: &str = "agentd";
/// The path appended to `OTEL_EXPORTER_OTLP_ENDPOINT` for traces over OTLP/HTTP.
const TRACES_PATH: &str = "v1/traces";

/// The resolved export: where, under which service name, with which headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportTarget {
    /// The OTLP/HTTP traces URL.
    pub endpoint: String,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Headers of every export request, by lowercase name.
    pub headers: BTreeMap<String, String>,
    /// What was set but could not be used (a malformed header, another OTLP protocol), to log.
    pub warnings: Vec<String>,
}

/// Resolves the export from `settings` and the environment `var`; `None`: export is off.
pub fn resolve(
    settings: &OtelSettings,
    var: impl Fn(&str) -> Option<String>,
) -> Option<ExportTarget> {
    let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
    let endpoint = match settings.endpoint.trim() {
        "" => set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .map(|url| url.trim().to_owned())
            .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| traces_url(&base)))?,
        own => own.to_owned(),
    };
    let service_name = match settings.service_name.trim() {
        "" => set("OTEL_SERVICE_NAME").map_or(DEFAULT_SERVICE_NAME.to_owned(), |name| {
            name.trim().to_owned()
        }),
        own => own.to_owned(),
    };
    let mut warnings = Vec::new();
    let mut headers = BTreeMap::new();
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        if let Some(list) = set(name) {
            headers.extend(parse_headers(name, &list, &mut warnings));
        }
    }
    for (key, value) in &settings.headers {
        headers.insert(key.trim().to_ascii_lowercase(), value.clone());
    }
    for name in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ] {
        if let Some(protocol) = set(name).filter(|p| p.trim() != "http/protobuf") {
            warnings.push(format!(
                "{name}={protocol} is ignored: agentd exports OTLP over HTTP with protobuf"
            ));
        }
    }
    Some(ExportTarget {
        endpoint,
        service_name,
        headers,
        warnings,
    })
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT` is a base URL: the traces path is appended to its path.
fn traces_url(base: &str) -> String {
    let base = base.trim();
    if base.ends_with('/') {
        format!("{base}{TRACES_PATH}")
    } else {
        format!("{base}/{TRACES_PATH}")
    }
}

/// `key1=value1,key2=value2` with percent-encoded values; a malformed entry is skipped with
/// a warning naming the variable (its value may be a secret, so it is not repeated).
fn parse_headers(variable: &str, list: &str, warnings: &mut Vec<String>) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    for (index, entry) in list.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let parsed = entry.split_once('=').and_then(|(key, value)| {
            let key = key.trim();
            let valid = !key.is_empty() && key.bytes().all(is_token_byte);
            valid.then(|| Some((key.to_ascii_lowercase(), percent_decode(value.trim())?)))?
        });
        match parsed {
            Some(header) => headers.push(header),
            None => warnings.push(format!(
                "{variable}: entry {} is not key=value with a valid name and value; skipped",
                index + 1
            )),
        }
    }
    headers
}

/// A byte of an HTTP header name (RFC 9110 `tchar`).
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Decodes `%XX` escapes; `None` for a broken escape, text that is not UTF-8 once decoded,
/// or a control character (which no header value may hold).
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            decoded.push(bytes[at]);
            at += 1;
        }
    }
    let text = String::from_utf8(decoded).ok()?;
    (!text.chars().any(|c| c.is_control() && c != '\t')).then_some(text)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings(endpoint: &str, service_name: &str, headers: &[(&str, &str)]) -> OtelSettings {
        OtelSettings {
            endpoint: endpoint.into(),
            service_name: service_name.into(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..OtelSettings::default()
        }
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn nothing_set_is_off() {
        assert_eq!(resolve(&settings("", "", &[]), env(&[])), None);
        let blank = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]);
        assert_eq!(resolve(&settings("", "", &[]), blank), None);
    }

    #[test]
    fn the_standard_variables_alone_export() {
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=s%20e%2Ccret, X-Tenant = acme",
            ),
            ("OTEL_SERVICE_NAME", "checkout-agents"),
        ]);
        let target = resolve(&settings("", "", &[]), vars).expect("on");
        assert_eq!(target.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(target.service_name, "checkout-agents");
        let expected = [("api-key", "s e,cret"), ("x-tenant", "acme")];
        let expected: BTreeMap<String, String> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(target.headers, expected);
        assert!(target.warnings.is_empty(), "{:?}", target.warnings);
    }

    #[test]
    fn the_base_url_gets_the_traces_path_and_the_traces_url_is_used_as_is() {
        let with_slash = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example/base/")]);
        let target = resolve(&settings("", "", &[]), with_slash).unwrap();
        assert_eq!(target.endpoint, "https://otel.example/base/v1/traces");
        let both = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4318/custom",
            ),
        ]);
        let target = resolve(&settings("", "", &[]), both).unwrap();
        assert_eq!(target.endpoint, "http://traces:4318/custom");
        assert_eq!(target.service_name, DEFAULT_SERVICE_NAME);
    }

    #[test]
    fn agentds_own_keys_win_when_set() {
        let vars = env(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://from-env/v1/traces",
            ),
            ("OTEL_SERVICE_NAME", "from-env"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=env,x-only-env=1",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-only-env=2"),
        ]);
        let own = settings(
            "http://own:6006/v1/traces",
            "own-name",
            &[("Authorization", "Bearer own")],
        );
        let target = resolve(&own, vars).unwrap();
        assert_eq!(target.endpoint, "http://own:6006/v1/traces");
        assert_eq!(target.service_name, "own-name");
        assert_eq!(target.headers["authorization"], "Bearer own");
        // The traces variable wins over the generic one; unrelated headers are kept.
        assert_eq!(target.headers["x-only-env"], "2");
    }

    #[test]
    fn malformed_headers_and_another_protocol_are_warned_about_not_used() {
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "good=1,novalue,=empty,bad key=2,broken=%e2%28,nul=a%00b,",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        let target = resolve(&settings("", "", &[]), vars).unwrap();
        assert_eq!(target.headers.keys().collect::<Vec<_>>(), ["good"]);
        assert_eq!(target.warnings.len(), 6, "{:?}", target.warnings);
        assert!(target.warnings.iter().any(|w| w.contains("grpc")));
        // A rejected value is never repeated: it may be a secret.
        assert!(target.warnings.iter().all(|w| !w.contains("%e2")));
    }
}
