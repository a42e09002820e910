//! The task message's parsing, field by field: what is read, what is refused and why.

use super::*;

const MAX: usize = 1024;
const AGENT: &str = "0195f3a0-0000-7000-8000-000000000001";
const TASK: &str = "0195f3a0-0000-7000-8000-0000000000aa";

fn parse(body: &str) -> Result<TaskSpec, Rejection> {
    parse_task(body.as_bytes(), Some("application/json"), MAX)
}

#[test]
fn a_full_message_parses() {
    let body = format!(
        r#"{{"task_id":"{TASK}","agent_id":"{AGENT}","input":"hi","constraints":["be brief"],"stream":true,"extra":1}}"#
    );
    let spec = parse(&body).expect("valid");
    assert_eq!(spec.task_id.to_string(), TASK);
    assert_eq!(spec.agent_id.to_string(), AGENT);
    assert_eq!(spec.input, "hi");
    assert_eq!(spec.constraints, vec!["be brief".to_owned()]);
    assert!(spec.stream);
}

#[test]
fn a_missing_task_id_is_generated() {
    let spec = parse(&format!(r#"{{"agent_id":"{AGENT}","input":"hi"}}"#)).expect("valid");
    assert_eq!(spec.task_id.get_version_num(), 7);
    assert!(!spec.stream);
}

#[test]
fn missing_fields_are_rejected_but_keep_the_task_id() {
    let rejection = parse(&format!(r#"{{"task_id":"{TASK}","input":"  "}}"#)).unwrap_err();
    assert_eq!(
        rejection.task_id.map(|id| id.to_string()).as_deref(),
        Some(TASK)
    );
    assert!(
        rejection.reason.contains("agent_id is required"),
        "{}",
        rejection.reason
    );
    assert!(
        rejection.reason.contains("input must not be empty"),
        "{}",
        rejection.reason
    );
}

#[test]
fn bad_bodies_are_rejected_with_reasons() {
    for (body, needle) in [
        ("not json", "not valid JSON"),
        ("[1,2]", "JSON object"),
        (
            r#"{"agent_id":42,"input":"x"}"#,
            "agent_id must be a UUID string",
        ),
        (
            r#"{"agent_id":"nope","input":"x"}"#,
            "agent_id is not a valid UUID",
        ),
        (
            &format!(r#"{{"agent_id":"{AGENT}","input":7}}"#),
            "input must be a string",
        ),
        (
            &format!(r#"{{"agent_id":"{AGENT}","input":"x","constraints":"a"}}"#),
            "constraints",
        ),
        (
            &format!(r#"{{"agent_id":"{AGENT}","input":"x","stream":"yes"}}"#),
            "stream",
        ),
    ] {
        let rejection = parse(body).unwrap_err();
        assert!(
            rejection.reason.contains(needle),
            "{body}: {}",
            rejection.reason
        );
    }
}

#[test]
fn size_and_content_type_are_checked_first() {
    let big = "x".repeat(MAX + 1);
    assert!(
        parse_task(big.as_bytes(), None, MAX)
            .unwrap_err()
            .reason
            .contains("larger")
    );
    let body = format!(r#"{{"agent_id":"{AGENT}","input":"hi"}}"#);
    let rejection = parse_task(body.as_bytes(), Some("text/plain"), MAX).unwrap_err();
    assert!(rejection.reason.contains("content_type"));
    assert!(
        parse_task(
            body.as_bytes(),
            Some("application/json; charset=utf-8"),
            MAX
        )
        .is_ok()
    );
    assert!(parse_task(body.as_bytes(), None, MAX).is_ok());
}

#[test]
fn nul_in_the_input_and_constraints_becomes_the_replacement_character() {
    let body = json_body(r#""input":"a\u0000b","constraints":["c\u0000","d"]"#);
    let spec = parse(&body).expect("valid");
    assert_eq!(spec.input, "a\u{FFFD}b");
    assert_eq!(spec.constraints, ["c\u{FFFD}", "d"]);
}

#[test]
fn a_huge_bad_value_is_quoted_only_in_part() {
    let bad = "x".repeat(200_000);
    let body = format!(r#"{{"task_id":"{bad}","agent_id":"{AGENT}","input":"hi"}}"#);
    let rejection = parse_task(body.as_bytes(), None, 1 << 20).unwrap_err();
    assert!(
        rejection.reason.len() < 600,
        "{} bytes",
        rejection.reason.len()
    );
    assert!(
        rejection.reason.contains("task_id is not a valid UUID"),
        "{}",
        rejection.reason
    );
    assert!(rejection.reason.ends_with("(200000 bytes)"));
}

#[test]
fn a_version_or_a_channel_may_be_named() {
    let spec = parse(&json_body(r#""input":"x","agent_version":3"#)).expect("valid");
    assert_eq!(spec.requested, Requested::Version(3));
    let spec = parse(&json_body(r#""input":"x","channel":"canary""#)).expect("valid");
    assert_eq!(spec.requested, Requested::Channel("canary".into()));
    let spec = parse(&json_body(r#""input":"x","channel":"a\u0000""#)).expect("valid");
    assert_eq!(spec.requested, Requested::Channel("a\u{FFFD}".into()));
    assert_eq!(
        parse(&json_body(r#""input":"x""#)).unwrap().requested,
        Requested::Default
    );
    for (fields, needle) in [
        (r#""agent_version":0"#, "at least 1"),
        (r#""agent_version":"2""#, "agent_version must be an integer"),
        (r#""agent_version":1.5"#, "at least 1"),
        (r#""channel":" ""#, "channel must be 1 to 100"),
        (r#""channel":7"#, "channel must be a string"),
        (r#""agent_version":2,"channel":"stable""#, "not both"),
    ] {
        let body = json_body(&format!(r#""input":"x",{fields}"#));
        let rejection = parse(&body).unwrap_err();
        assert!(
            rejection.reason.contains(needle),
            "{fields}: {}",
            rejection.reason
        );
    }
}

#[test]
fn the_task_id_of_a_dead_message_is_read_alone() {
    let body = format!(r#"{{"task_id":"{TASK}","input":7}}"#);
    assert_eq!(
        task_id_of(body.as_bytes())
            .map(|id| id.to_string())
            .as_deref(),
        Some(TASK)
    );
    assert_eq!(task_id_of(br#"{"agent_id":"x"}"#), None);
    assert_eq!(task_id_of(br#"{"task_id":"nope"}"#), None);
    assert_eq!(task_id_of(b"[1]"), None);
}

#[test]
fn a_tenant_and_a_priority_may_be_named() {
    let spec = parse(&json_body(
        r#""input":"x","tenant_id":"acme","priority":"high""#,
    ))
    .expect("valid");
    assert_eq!(spec.tenant_id.as_deref(), Some("acme"));
    assert_eq!(spec.priority, Priority::High);
    let spec = parse(&json_body(r#""input":"x""#)).expect("valid");
    assert_eq!((spec.tenant_id, spec.priority), (None, Priority::Normal));
    for (fields, needle) in [
        (r#""tenant_id":"""#, "must not be empty"),
        (r#""tenant_id":"*""#, "only for a token"),
        (r#""tenant_id":"a\u0000b""#, "control characters"),
        (r#""tenant_id":7"#, "tenant_id must be a string"),
        (r#""priority":"urgent""#, "\"urgent\""),
        (r#""priority":1"#, "priority must be"),
    ] {
        let body = json_body(&format!(r#""input":"x",{fields}"#));
        let rejection = parse(&body).unwrap_err();
        assert!(
            rejection.reason.contains(needle),
            "{fields}: {}",
            rejection.reason
        );
    }
}

fn json_body(fields: &str) -> String {
    format!(r#"{{"agent_id":"{AGENT}",{fields}}}"#)
}

const SOURCE: &str = "0195f3a0-0000-7000-8000-0000000000bb";

#[test]
fn a_rerun_needs_neither_agent_nor_input_and_defaults_to_recorded() {
    let spec = parse(&format!(r#"{{"rerun":{{"source_task_id":"{SOURCE}"}}}}"#)).expect("valid");
    let rerun = spec.rerun.expect("rerun");
    assert_eq!(rerun.source_task_id.to_string(), SOURCE);
    assert_eq!(
        (rerun.llm, rerun.tools),
        (RerunMode::Recorded, RerunMode::Recorded)
    );
    // The source's agent and input are read by the worker.
    assert!(spec.agent_id.is_nil());
    assert!(spec.input.is_empty());
}

#[test]
fn a_rerun_reads_its_modes_and_keeps_the_named_version() {
    let body = format!(
        r#"{{"agent_id":"{AGENT}","input":"hi","agent_version":2,
            "rerun":{{"source_task_id":"{SOURCE}","llm":"live","tools":"recorded"}}}}"#
    );
    let spec = parse(&body).expect("valid");
    let rerun = spec.rerun.expect("rerun");
    assert_eq!(
        (rerun.llm, rerun.tools),
        (RerunMode::Live, RerunMode::Recorded)
    );
    assert_eq!(spec.requested, Requested::Version(2));
    assert_eq!(spec.agent_id.to_string(), AGENT);
}

#[test]
fn bad_reruns_are_rejected_with_reasons() {
    for (rerun, needle) in [
        (r#""x""#.to_owned(), "rerun must be an object"),
        ("{}".to_owned(), "rerun.source_task_id is required"),
        (
            r#"{"source_task_id":"nope"}"#.to_owned(),
            "rerun.source_task_id is not a valid UUID",
        ),
        (
            format!(r#"{{"source_task_id":"{SOURCE}","llm":"replayed"}}"#),
            "rerun.llm must be \"recorded\" or \"live\"",
        ),
        (
            format!(r#"{{"source_task_id":"{SOURCE}","tools":true}}"#),
            "rerun.tools must be",
        ),
        (
            format!(r#"{{"source_task_id":"{SOURCE}","mode":"live"}}"#),
            "unknown field \"mode\"",
        ),
    ] {
        let body = format!(r#"{{"task_id":"{TASK}","rerun":{rerun}}}"#);
        let rejection = parse(&body).unwrap_err();
        assert!(
            rejection.reason.contains(needle),
            "{needle}: {}",
            rejection.reason
        );
        // The task id is kept so the task can end `rejected`; no nil agent leaks out.
        assert_eq!(
            rejection.task_id.map(|id| id.to_string()).as_deref(),
            Some(TASK)
        );
        assert_eq!(rejection.agent_id, None);
        assert_eq!(rejection.input, None);
    }
}

#[test]
fn a_rerun_takes_no_conversation_and_no_constraints_of_its_own() {
    let body = format!(
        r#"{{"conversation_id":"{TASK}","constraints":["x"],"rerun":{{"source_task_id":"{SOURCE}"}}}}"#
    );
    let reason = parse(&body).unwrap_err().reason;
    assert!(
        reason.contains("a rerun takes no conversation_id"),
        "{reason}"
    );
    assert!(reason.contains("leave constraints out"), "{reason}");
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 128, ..Default::default() })]

    /// Whatever Unicode (NUL included) a rerun field carries, the reason that goes into
    /// `tasks.error`, an AMQP header and a log line is storable and bounded, and the task
    /// id is kept so the task can end `rejected`.
    #[test]
    fn any_unicode_in_a_rerun_gives_a_storable_bounded_reason(
        mode in ".{0,300}",
        source in ".{0,300}",
        key in "[a-z\u{0}-\u{10ffff}]{1,40}",
    ) {
        for rerun in [
            serde_json::json!({"source_task_id": SOURCE, "llm": mode}),
            serde_json::json!({"source_task_id": SOURCE, "tools": mode}),
            serde_json::json!({"source_task_id": source}),
            serde_json::json!({"source_task_id": SOURCE, key.clone(): 1}),
        ] {
            let body = serde_json::json!({"task_id": TASK, "rerun": rerun}).to_string();
            match parse_task(body.as_bytes(), Some("application/json"), 1 << 20) {
                // Only the two mode names, a valid source and no other key pass.
                Ok(spec) => proptest::prop_assert!(spec.rerun.is_some()),
                Err(rejection) => {
                    proptest::prop_assert!(!rejection.reason.contains('\0'));
                    proptest::prop_assert!(
                        rejection.reason.len() <= crate::core::bounded::REASON_BYTES + 32
                    );
                    proptest::prop_assert_eq!(rejection.task_id.map(|id| id.to_string()), Some(TASK.to_owned()));
                }
            }
        }
    }
}
