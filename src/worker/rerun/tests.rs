//! A rerun message completed from its source: what is taken, what is refused and why.

use uuid::Uuid;

use super::*;
use crate::core::fair_share::Priority;

fn spec(rerun: RerunSpec) -> TaskSpec {
    TaskSpec {
        task_id: Uuid::now_v7(),
        agent_id: Uuid::nil(),
        input: String::new(),
        conversation_id: None,
        constraints: Vec::new(),
        stream: false,
        budget: None,
        requested: Requested::Default,
        tenant_id: None,
        priority: Priority::Normal,
        rerun: Some(rerun),
    }
}

fn source(status: &str) -> Source {
    Source {
        task_id: Uuid::now_v7(),
        agent_id: Some(Uuid::now_v7()),
        input: Some("What is 2 + 2?".into()),
        constraints: Some(sqlx::types::Json(vec!["be brief".into()])),
        agent_version: Some(3),
        status: status.into(),
        tenant_id: "acme".into(),
    }
}

fn rerun_of(source: &Source) -> RerunSpec {
    RerunSpec {
        source_task_id: source.task_id,
        llm: RerunMode::Recorded,
        tools: RerunMode::Live,
    }
}

#[test]
fn a_rerun_takes_the_sources_agent_input_constraints_version_and_tenant() {
    let source = source("completed");
    let rerun = rerun_of(&source);
    let done = completed(spec(rerun), rerun, Some(source.clone())).expect("completed");
    assert_eq!(Some(done.agent_id), source.agent_id);
    assert_eq!(Some(done.input), source.input);
    assert_eq!(done.constraints, vec!["be brief".to_owned()]);
    assert_eq!(done.requested, Requested::Version(3));
    assert_eq!(done.tenant_id.as_deref(), Some("acme"));
    assert_eq!(done.rerun, Some(rerun));
}

#[test]
fn a_named_version_or_channel_wins_over_the_sources() {
    let source = source("failed");
    let rerun = rerun_of(&source);
    for requested in [Requested::Version(7), Requested::Channel("canary".into())] {
        let asked = TaskSpec {
            requested: requested.clone(),
            ..spec(rerun)
        };
        let done = completed(asked, rerun, Some(source.clone())).expect("completed");
        assert_eq!(done.requested, requested);
    }
}

#[test]
fn an_unknown_running_or_foreign_source_is_refused_with_a_reason() {
    let running = source("running");
    let rerun = rerun_of(&running);
    let reason = completed(spec(rerun), rerun, None).unwrap_err().reason;
    assert!(reason.contains("is not a known task"), "{reason}");
    let reason = completed(spec(rerun), rerun, Some(running.clone()))
        .unwrap_err()
        .reason;
    assert!(reason.contains("has not ended (it is running)"), "{reason}");
    let foreign = TaskSpec {
        tenant_id: Some("globex".into()),
        ..spec(rerun)
    };
    let rejection = completed(foreign, rerun, Some(source("completed"))).unwrap_err();
    assert!(
        rejection
            .reason
            .contains("is not a task of tenant \"globex\""),
        "{}",
        rejection.reason
    );
    // No nil agent and no empty input are recorded with the rejection.
    assert_eq!((rejection.agent_id, rejection.input), (None, None));
}

#[test]
fn a_named_agent_or_input_must_be_the_sources() {
    let source = source("completed");
    let rerun = rerun_of(&source);
    let other_agent = TaskSpec {
        agent_id: Uuid::now_v7(),
        ..spec(rerun)
    };
    let reason = completed(other_agent, rerun, Some(source.clone()))
        .unwrap_err()
        .reason;
    assert!(
        reason.contains("is not the agent of rerun source"),
        "{reason}"
    );
    let same = TaskSpec {
        agent_id: source.agent_id.expect("agent"),
        input: source.input.clone().expect("input"),
        ..spec(rerun)
    };
    assert!(completed(same, rerun, Some(source.clone())).is_ok());
    let other_input = TaskSpec {
        input: "something else".into(),
        ..spec(rerun)
    };
    let reason = completed(other_input, rerun, Some(source))
        .unwrap_err()
        .reason;
    assert!(reason.contains("input differs"), "{reason}");
}

#[test]
fn a_source_rejected_before_it_was_read_cannot_be_rerun() {
    let unread = Source {
        agent_id: None,
        input: None,
        ..source("rejected")
    };
    let rerun = rerun_of(&unread);
    let reason = completed(spec(rerun), rerun, Some(unread))
        .unwrap_err()
        .reason;
    assert!(reason.contains("has no agent or input"), "{reason}");
}
