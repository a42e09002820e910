//! The OpenAPI document stays true: schemathesis (PyPI, pinned in
//! tests/faces/gateway/requirements.txt) reads `/openapi.json` from a running gateway and sends a
//! bounded number of generated requests per operation (valid and invalid, then stateful
//! sequences), checking that no answer is a 5xx and that every status, content type,
//! header and body is the documented one.
//!
//! schemathesis comes from `AGENTD_SCHEMATHESIS` (the `st` executable), else the venv
//! `.ci/run` makes (`target/schemathesis-venv`), else `st` on PATH. Under `CI=true` a
//! missing schemathesis fails the test; elsewhere it is skipped with the reason.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::gateway::Gateway;
use crate::support::harness::{TestEnv, scratch_dir};
use tokio::process::Command;

/// Generated requests per operation and phase: enough to find drift, some 10 to 40 s on
/// two loaded cores.
const EXAMPLES_PER_OPERATION: &str = "10";
/// The run is killed (and the test fails) after this long.
const RUN_LIMIT: Duration = Duration::from_secs(180);
const TOKEN: &str = "schemathesis-token";

/// The `st` executable, or None (skipped) outside CI.
fn schemathesis() -> Option<String> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/schemathesis-venv/bin/st");
    let candidates = [
        std::env::var("AGENTD_SCHEMATHESIS").ok(),
        venv.exists().then(|| venv.display().to_string()),
        Some("st".into()),
    ];
    for candidate in candidates.into_iter().flatten() {
        let runs = std::process::Command::new(&candidate)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if matches!(runs, Ok(status) if status.success()) {
            return Some(candidate);
        }
    }
    let message = "schemathesis is not installed (python3 -m venv target/schemathesis-venv && \
                   target/schemathesis-venv/bin/pip install -r tests/faces/gateway/requirements.txt)";
    if std::env::var_os("CI").is_some_and(|v| v == "true") {
        panic!("{message}");
    }
    eprintln!("{message}; skipped (it fails under CI=true)");
    None
}

#[tokio::test]
async fn schemathesis_finds_the_gateway_as_documented() {
    let Some(st) = schemathesis() else {
        return;
    };
    let env = TestEnv::without_worker(|_| {}).await;
    let gateway = Gateway::start_with(env.settings.clone(), &[TOKEN]).await;
    let dir = scratch_dir("schemathesis");
    let run = Command::new(&st)
        .arg("run")
        .arg(gateway.url("/openapi.json"))
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_headers_conformance,response_schema_conformance",
        ])
        .args(["--max-examples", EXAMPLES_PER_OPERATION])
        .args(["--request-timeout", "5", "--workers", "1", "--no-color"])
        // NUL is allowed in generated text (the default): every route stores it as U+FFFD.
        .args(["--generation-allow-x00", "true"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN_LIMIT, run)
        .await
        .expect("schemathesis ends within the limit")
        .expect("schemathesis runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "schemathesis found the gateway differing from its document:\n{report}"
    );
    assert!(report.contains("passed"), "{report}");
    gateway.stop().await;
    env.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
