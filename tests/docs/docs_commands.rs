//! The docs' commands run, so they never drift from the binary: every fenced block whose
//! info string is `sh check` or `sql check` in README.md and then docs/*.md (by name) runs,
//! in that order, in one bash script (a variable set by one block is seen by the next),
//! against `agentd dev` (the demo model, a worker and the gateway) started the way README
//! says, in a database and broker names of this test's own. `sql check` blocks run through
//! `psql -v ON_ERROR_STOP=1` with the psql variables `task_id` and `agent_id` set from the
//! shell variables `TASK` and `DEMO` of the blocks before. A block that fails fails the test
//! with the output.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::harness::{TestEnv, free_local_addr};
use crate::support::process::env_for;
use crate::support::wait;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// `agentd dev` prints its banner within this: it migrates its database and starts a
/// worker and the gateway first.
const DEV_STARTS_WITHIN: Duration = Duration::from_secs(60);

/// Every checked block of the docs, run one after another in one bash script (each a
/// fresh `agentd` process, some waiting for a demo task), ends within this.
const BLOCKS_RUN_WITHIN: Duration = Duration::from_secs(300);

/// A block to run: where it is and its text.
struct Block {
    origin: String,
    sql: bool,
    text: String,
}

/// The marked blocks of one Markdown file, in order.
fn marked_blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).expect("read the doc");
    let mut blocks = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (number, line) in text.lines().enumerate() {
        match &mut open {
            None => {
                let info = line.trim_start().strip_prefix("```").map(str::trim);
                let words: Vec<&str> = info
                    .map(|i| i.split_whitespace().collect())
                    .unwrap_or_default();
                if words.len() >= 2 && words[1] == "check" && matches!(words[0], "sh" | "sql") {
                    open = Some((number + 1, words[0] == "sql", String::new()));
                }
            }
            Some((start, sql, body)) => {
                if line.trim_start().starts_with("```") {
                    blocks.push(Block {
                        origin: format!("{}:{start}", path.display()),
                        sql: *sql,
                        text: std::mem::take(body),
                    });
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    assert!(
        open.is_none(),
        "{}: an unclosed check block",
        path.display()
    );
    blocks
}

fn all_blocks(root: &Path) -> Vec<Block> {
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    std::iter::once(root.join("README.md"))
        .chain(docs)
        .flat_map(|path| marked_blocks(&path))
        .collect()
}

/// One bash script: each block announced on stderr, SQL through psql.
fn script(blocks: &[Block]) -> String {
    let mut script = String::from("set -euo pipefail\n");
    for block in blocks {
        script.push_str(&format!("echo '>>> {}' >&2\n", block.origin));
        if block.sql {
            script.push_str(
                "psql \"$AGENTD__DATABASE__URL\" -X -q -v ON_ERROR_STOP=1 \
                 -v task_id=\"${TASK:-}\" -v agent_id=\"${DEMO:-}\" <<'AGENTD_DOCS_SQL'\n",
            );
            script.push_str(&block.text);
            script.push_str("AGENTD_DOCS_SQL\n");
        } else {
            script.push_str(&block.text);
        }
    }
    script
}

#[test]
fn the_docs_mark_blocks_to_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let blocks = all_blocks(root);
    let readme = blocks.iter().filter(|b| {
        b.origin
            .starts_with(&*root.join("README.md").display().to_string())
    });
    assert!(readme.count() >= 1, "README's first task is not checked");
    assert!(blocks.iter().any(|b| b.sql), "no SQL example is checked");
}

#[tokio::test]
async fn every_checked_block_of_the_docs_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let blocks = all_blocks(root);
    let env = TestEnv::without_worker(|_| {}).await;
    let mut vars: Vec<(String, String)> = env_for(&env.settings)
        .into_iter()
        .filter(|(key, _)| !key.starts_with("AGENTD__LLM__"))
        .collect();
    vars.push(("AGENTD__GATEWAY__BIND".into(), free_local_addr()));
    let binary = Path::new(env!("CARGO_BIN_EXE_agentd"));
    let path = format!(
        "{}:{}",
        binary.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // `agentd dev` as README starts it (here with a short demo latency).
    let banner = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("dev-{}.out", uuid::Uuid::new_v4().simple()));
    let mut dev = Command::new(binary)
        .args(["dev", "--latency-ms", "20"])
        .current_dir(root)
        .envs(vars.iter().cloned())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&banner).unwrap())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start agentd dev");
    let started = wait::until("agentd dev prints its banner", DEV_STARTS_WITHIN, || {
        let text = std::fs::read_to_string(&banner).unwrap_or_default();
        async move { text.contains("Ctrl-C stops it").then_some(text) }
    })
    .await;
    assert!(started.contains("DEMO"), "{started}");

    let mut bash = Command::new("bash")
        .current_dir(root)
        .envs(vars.iter().cloned())
        .env("PATH", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash");
    let mut stdin = bash.stdin.take().unwrap();
    stdin.write_all(script(&blocks).as_bytes()).await.unwrap();
    drop(stdin);
    let ran = tokio::time::timeout(BLOCKS_RUN_WITHIN, bash.wait_with_output())
        .await
        .expect("the docs' blocks end in time")
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(
        ran.status.success(),
        "a checked block failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    // README's first task got the demo model's answer.
    assert!(stdout.contains("17 * 23 + 4 = 395"), "{stdout}");

    let _ = dev.start_kill();
    let _ = dev.wait().await;
    env.stop().await;
}
