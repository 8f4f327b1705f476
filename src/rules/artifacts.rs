//! R8: a listener sees artifact names, refs, digests, source run and labels,
//! never bytes; it reads bytes only by name, only for names in its trigger
//! event's contract. A ref is refused even when it is correct: the read tool
//! takes names from the contract, not refs from the model.

use crate::codes::Code;
use crate::codes::Refusal;
use crate::model::{ArtifactRef, Run};

/// True when the requested string looks like a content ref or digest rather
/// than an artifact name.
fn looks_like_ref(requested: &str) -> bool {
    requested.contains("://")
        || requested.starts_with("sha256:")
        || requested.len() == 64 && requested.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Decide a read: the artifact to read, or the refusal to record.
pub fn authorize_read(
    run: &Run,
    requested: &str,
    tool_budget: Option<u32>,
) -> Result<ArtifactRef, Refusal> {
    if !run.is_open() {
        return Err(Refusal::new(
            Code::RunClosed,
            format!("run {} is closed; a closed run reads nothing", run.run),
        ));
    }
    if let Some(budget) = tool_budget {
        if run.tool_calls >= budget {
            return Err(Refusal::new(
                Code::BudgetExhausted,
                format!(
                    "run {} has used its {budget} tool calls; reads count as tool calls",
                    run.run
                ),
            ));
        }
    }
    if looks_like_ref(requested) {
        return Err(Refusal::new(Code::RefNotAllowed,
            format!("{requested:?} is a content ref; reads take artifact names from the trigger event's contract"),
        ));
    }
    let Some(trigger) = &run.trigger else {
        return Err(Refusal::new(
            Code::NoContract,
            format!(
                "run {} was not opened by an event, so it has no artifact contract to read from",
                run.run
            ),
        ));
    };
    let found = trigger
        .artifacts
        .iter()
        .find(|a| a.name == requested)
        .cloned()
        .ok_or_else(|| {
            let names: Vec<&str> = trigger.artifacts.iter().map(|a| a.name.as_str()).collect();
            Refusal::new(
                Code::NotInContract,
                format!(
                    "{requested:?} is not in the contract of event {} (it exposes: {})",
                    trigger.event,
                    if names.is_empty() {
                        "nothing".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            )
        })?;
    super::labels::check_label_count(
        &super::labels::after_read(&run.labels, &found),
        &format!("reading {requested:?}"),
    )?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Trigger;
    use crate::rules::chain::tests::run_at;

    fn listener() -> Run {
        let mut run = run_at("r2", Some("r1"), Some(1));
        run.trigger = Some(Trigger {
            event_id: "ae-1".into(),
            event: "incident.triaged".into(),
            context: "incident".into(),
            source_run: "r1".into(),
            artifacts: vec![ArtifactRef {
                name: "triage_summary".into(),
                sha256: [0xaa; 32],
                size: 10,
                source_run: "r1".into(),
                labels: vec!["area:acme/platform".into()],
            }],
        });
        run
    }

    #[test]
    fn r8_reads_names_from_the_contract_only() {
        let run = listener();
        let got = authorize_read(&run, "triage_summary", None).unwrap();
        assert_eq!(got.source_run, "r1");
        assert_eq!(
            authorize_read(&run, "suspected_cause", None)
                .unwrap_err()
                .code,
            "not_in_contract"
        );
    }

    #[test]
    fn r8_a_correct_ref_is_still_refused() {
        let run = listener();
        let good_ref = run.trigger.as_ref().unwrap().artifacts[0]
            .content_ref()
            .clone();
        assert_eq!(
            authorize_read(&run, &good_ref, None).unwrap_err().code,
            "ref_not_allowed"
        );
        let digest = run.trigger.as_ref().unwrap().artifacts[0].digest();
        assert_eq!(
            authorize_read(&run, &digest, None).unwrap_err().code,
            "ref_not_allowed"
        );
    }

    #[test]
    fn r8_reads_count_against_the_tool_budget() {
        let mut run = listener();
        run.tool_calls = 2;
        assert_eq!(
            authorize_read(&run, "triage_summary", Some(2))
                .unwrap_err()
                .code,
            "budget_exhausted"
        );
        assert!(authorize_read(&run, "triage_summary", Some(3)).is_ok());
    }

    #[test]
    fn r8_root_run_has_no_contract() {
        let run = run_at("r1", Some("r1"), Some(0));
        assert_eq!(
            authorize_read(&run, "anything", None).unwrap_err().code,
            "no_contract"
        );
    }
}
