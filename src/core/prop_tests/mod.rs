//! Property tests of the core's robustness against whatever a model or a tool sends: the
//! reply parser ([`reply`]) and the state-snapshot renderer ([`snapshot`]) take arbitrary
//! bytes, arbitrary JSON, deep nesting, huge strings and floods of braces or tags without
//! panicking, in time linear in the input, and what is fed back stays within the limits;
//! arbitrary Unicode (NUL, U+FFFF, combining runs, lone-surrogate escapes) leaves only
//! storable text in the machine, with task-unique tool-call ids ([`storable`]).
//!
//! Timing is asserted only loosely (seconds for megabytes, on a slow shared machine in a
//! debug build): linearity comes from the construction (non-overlapping candidates, a
//! bounded number of passes, serde_json's recursion limit), the bounds only catch a
//! quadratic regression, which would take minutes at these sizes.

mod record;
mod reply;
mod snapshot;
mod storable;
mod strategies;

use std::time::{Duration, Instant};

use proptest::test_runner::Config;

/// Cases per property: enough to reach the corners, few enough for a debug build.
fn config(cases: u32) -> Config {
    Config {
        cases,
        // Shrunk failures are reported in the test output; no files in the source tree.
        failure_persistence: None,
        ..Config::default()
    }
}

/// Runs `work`, failing if it takes longer than `limit` (a loose bound: see the module doc).
fn within<T>(limit: Duration, what: &str, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = work();
    let took = started.elapsed();
    assert!(took < limit, "{what} took {took:?}, more than {limit:?}");
    result
}

/// Generous bound for one pass over a few megabytes.
const SLOW: Duration = Duration::from_secs(5);
