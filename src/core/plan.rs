//! Plan bookkeeping for the machine: which step a recursion works on, step status changes,
//! replacing the plan on RE_PLAN and recording recursions under their step. Pure functions
//! over the plan; the machine turns their results into domain events.

use crate::core::action::PlannedStep;
use crate::core::state::{PlanStep, StepRecursion, StepStatus};

/// The step in progress: the first `running` step.
pub(crate) fn in_progress(plan: &[PlanStep]) -> Option<&PlanStep> {
    plan.iter().find(|step| step.status == StepStatus::Running)
}

/// Picks the step a new recursion works on: the step in progress, else the first `pending`
/// step, which becomes `running`. Returns its id and whether it was just started.
pub(crate) fn attribute(plan: &mut [PlanStep]) -> Option<(String, bool)> {
    if let Some(step) = in_progress(plan) {
        return Some((step.step_id.clone(), false));
    }
    let step = plan
        .iter_mut()
        .find(|step| step.status == StepStatus::Pending)?;
    step.status = StepStatus::Running;
    Some((step.step_id.clone(), true))
}

/// Sets the status of step `step_id`; true if the step exists and its status changed.
pub(crate) fn set_status(plan: &mut [PlanStep], step_id: &str, status: StepStatus) -> bool {
    match plan.iter_mut().find(|step| step.step_id == step_id) {
        Some(step) if step.status != status => {
            step.status = status;
            true
        }
        _ => false,
    }
}

/// Replaces the plan with the model's steps. Steps whose `step_id` survives keep their
/// recorded recursions, so a re-plan does not erase the execution history.
pub(crate) fn replace(plan: &mut Vec<PlanStep>, planned: Vec<PlannedStep>) {
    let mut old = std::mem::take(plan);
    *plan = planned
        .into_iter()
        .map(|step| {
            let recursions = old
                .iter_mut()
                .find(|kept| kept.step_id == step.step_id)
                .map(|kept| std::mem::take(&mut kept.recursions))
                .unwrap_or_default();
            PlanStep {
                step_id: step.step_id,
                description: step.description,
                status: step.status,
                recursions,
            }
        })
        .collect();
}

/// Appends a finished recursion to the history of step `step_id`, if the step exists.
pub(crate) fn record(plan: &mut [PlanStep], step_id: &str, recursion: StepRecursion) {
    if let Some(step) = plan.iter_mut().find(|step| step.step_id == step_id) {
        step.recursions.push(recursion);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::RecursionStatus;
    use uuid::Uuid;

    fn step(id: &str, status: StepStatus) -> PlanStep {
        PlanStep {
            step_id: id.into(),
            description: format!("step {id}"),
            status,
            recursions: vec![],
        }
    }

    #[test]
    fn attribution_prefers_running_then_starts_the_first_pending() {
        let mut plan = vec![
            step("1", StepStatus::Done),
            step("2", StepStatus::Pending),
            step("3", StepStatus::Running),
        ];
        assert_eq!(attribute(&mut plan), Some(("3".into(), false)));
        plan[2].status = StepStatus::Done;
        assert_eq!(attribute(&mut plan), Some(("2".into(), true)));
        assert_eq!(plan[1].status, StepStatus::Running);
        plan[1].status = StepStatus::Error;
        assert_eq!(attribute(&mut plan), None);
        assert_eq!(attribute(&mut []), None);
    }

    #[test]
    fn set_status_reports_real_changes_only() {
        let mut plan = vec![step("1", StepStatus::Running)];
        assert!(!set_status(&mut plan, "1", StepStatus::Running));
        assert!(set_status(&mut plan, "1", StepStatus::Done));
        assert!(!set_status(&mut plan, "9", StepStatus::Done));
    }

    #[test]
    fn replace_keeps_the_history_of_surviving_steps() {
        let mut plan = vec![
            step("1", StepStatus::Running),
            step("2", StepStatus::Pending),
        ];
        let recursion = StepRecursion {
            trace_id: Uuid::nil(),
            status: RecursionStatus::Error,
            result: "failed".into(),
            error_log: Some("boom".into()),
        };
        record(&mut plan, "1", recursion.clone());
        record(&mut plan, "missing", recursion.clone());
        let planned = vec![
            PlannedStep {
                step_id: "1".into(),
                description: "retry differently".into(),
                status: StepStatus::Pending,
            },
            PlannedStep {
                step_id: "3".into(),
                description: "new".into(),
                status: StepStatus::Pending,
            },
        ];
        replace(&mut plan, planned);
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].description, "retry differently");
        assert_eq!(plan[0].recursions, vec![recursion]);
        assert!(plan[1].recursions.is_empty());
    }
}
