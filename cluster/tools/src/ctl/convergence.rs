//! `revkv ctl convergence KEY`: an object's desired and observed state over its history (the
//! state-sync note's debugging tool). For a value in Kubernetes' shape (`metadata.generation`,
//! `spec`, `status.observedGeneration`), each version is a row: who wrote it (a spec write bumps
//! the generation; a status write moves only the status), the generation and the observed
//! generation, the lag between them, and what changed under `spec` and `status`. Below the table,
//! each generation with the revision that wrote it and the revision whose status first observed
//! it (how many store revisions the controller took), and a diagnosis of the current version:
//! the generation lag and the fields named alike in spec and status that disagree.

use serde::Serialize;
use serde_json::Value;

use super::answers::print_either;
use super::history::{changes_between, read_versions};
use super::output::{shortened, table};
use crate::cli::OutputFormat;
use revkv_client::{Client, ClientError, HistoryVersion};

/// One version, as the report prints it.
#[derive(Debug, Serialize, PartialEq)]
pub struct ConvergenceRow {
    pub revision: u64,
    /// `created`, `spec`, `status`, `spec+status`, `other`, `deleted`, or `not-an-object`.
    pub writer: String,
    pub generation: Option<u64>,
    pub observed_generation: Option<u64>,
    pub lag: Option<u64>,
    /// The RFC 6902 operations under /spec, /status and /metadata/generation.
    pub changes: Vec<String>,
}

/// One generation's life: written at a revision, observed at a later one (or not yet).
#[derive(Debug, Serialize, PartialEq)]
pub struct GenerationLife {
    pub generation: u64,
    pub written_at: u64,
    pub observed_at: Option<u64>,
    /// Store revisions between the write and the observation.
    pub revisions_to_observe: Option<u64>,
}

/// The whole report (`-o json` prints it as it is).
#[derive(Debug, Serialize, PartialEq)]
pub struct ConvergenceReport {
    pub key: String,
    pub versions: Vec<ConvergenceRow>,
    pub generations: Vec<GenerationLife>,
    /// Whether the latest version's status reflects its generation.
    pub converged: bool,
    /// The latest version's generation minus its observed generation.
    pub generation_lag: u64,
    /// Fields present under both `spec` and `status` with different values (`replicas: spec=3,
    /// status=2`): a controller that observed the generation but did not make it so.
    pub spec_status_mismatches: Vec<String>,
}

pub async fn convergence(
    client: &Client,
    format: OutputFormat,
    key: &str,
    from_revision: Option<u64>,
    max_versions: u64,
) -> Result<(), ClientError> {
    let versions = read_versions(client, key, from_revision, max_versions).await?;
    let report = convergence_report(key, &versions);
    print_either(format, &report, || report_text(&report));
    Ok(())
}

/// The generation and observed generation of a value in Kubernetes' shape.
fn generations(value: &Value) -> Option<(u64, u64)> {
    let generation = value.pointer("/metadata/generation")?.as_u64()?;
    let observed = value
        .pointer("/status/observedGeneration")
        .and_then(Value::as_u64);
    Some((generation, observed.unwrap_or(0)))
}

/// Builds the report from the key's versions, oldest first.
pub fn convergence_report(key: &str, versions: &[HistoryVersion]) -> ConvergenceReport {
    let mut rows = Vec::with_capacity(versions.len());
    let mut generations_seen: Vec<GenerationLife> = Vec::new();
    let mut previous: Option<&HistoryVersion> = None;
    let mut previous_value: Option<Value> = None;
    for version in versions {
        let value = (!version.is_delete())
            .then(|| serde_json::from_str::<Value>(&version.kv.value).ok())
            .flatten();
        let parsed = value.as_ref().and_then(generations);
        let changes: Vec<String> = changes_between(previous, version)
            .into_iter()
            .filter(|line| is_state_change(line))
            .collect();
        let writer = writer_of(version, previous_value.as_ref(), value.as_ref());
        if let Some((generation, observed)) = parsed {
            note_generations(
                &mut generations_seen,
                generation,
                observed,
                version.kv.mod_revision,
            );
        }
        rows.push(ConvergenceRow {
            revision: version.kv.mod_revision,
            writer,
            generation: parsed.map(|(generation, _)| generation),
            observed_generation: parsed.map(|(_, observed)| observed),
            lag: parsed.map(|(generation, observed)| generation.saturating_sub(observed)),
            changes,
        });
        previous = Some(version);
        previous_value = value;
    }
    let latest = previous_value.as_ref().and_then(generations);
    ConvergenceReport {
        key: key.to_string(),
        versions: rows,
        generations: generations_seen,
        converged: latest.is_some_and(|(generation, observed)| observed >= generation),
        generation_lag: latest.map_or(0, |(generation, observed)| {
            generation.saturating_sub(observed)
        }),
        spec_status_mismatches: previous_value.as_ref().map(mismatches).unwrap_or_default(),
    }
}

/// Records a generation first seen at `revision`, and marks observed every one up to `observed`.
fn note_generations(
    lives: &mut Vec<GenerationLife>,
    generation: u64,
    observed: u64,
    revision: u64,
) {
    if lives.last().is_none_or(|last| last.generation < generation) {
        lives.push(GenerationLife {
            generation,
            written_at: revision,
            observed_at: None,
            revisions_to_observe: None,
        });
    }
    for life in lives.iter_mut().filter(|life| life.generation <= observed) {
        if life.observed_at.is_none() {
            life.observed_at = Some(revision);
            life.revisions_to_observe = Some(revision - life.written_at);
        }
    }
}

/// Whether a change line touches desired or observed state: an RFC 6902 operation under `/spec`,
/// `/status` or on `/metadata/generation`, or a whole-value line ("created ...", "deleted").
fn is_state_change(line: &str) -> bool {
    let mut words = line.split(' ');
    let operation = words.next().unwrap_or("");
    if !["add", "remove", "replace", "move", "copy"].contains(&operation) {
        return true;
    }
    let path = words.next().unwrap_or("");
    path.starts_with("/spec") || path.starts_with("/status") || path == "/metadata/generation"
}

/// Who wrote a version, judged by what changed from the one before.
fn writer_of(version: &HistoryVersion, before: Option<&Value>, after: Option<&Value>) -> String {
    if version.is_delete() {
        return "deleted".into();
    }
    let Some(after) = after.filter(|value| generations(value).is_some()) else {
        return "not-an-object".into();
    };
    let Some(before) = before else {
        return "created".into();
    };
    let spec_changed = before.get("spec") != after.get("spec")
        || before.pointer("/metadata/generation") != after.pointer("/metadata/generation");
    let status_changed = before.get("status") != after.get("status");
    match (spec_changed, status_changed) {
        (true, true) => "spec+status",
        (true, false) => "spec",
        (false, true) => "status",
        (false, false) => "other",
    }
    .into()
}

/// Fields of the same name under `spec` and `status` whose values differ.
fn mismatches(value: &Value) -> Vec<String> {
    let (Some(Value::Object(spec)), Some(Value::Object(status))) =
        (value.get("spec"), value.get("status"))
    else {
        return Vec::new();
    };
    (spec.iter())
        .filter_map(|(name, desired)| {
            let observed = status.get(name)?;
            (observed != desired).then(|| format!("{name}: spec={desired}, status={observed}"))
        })
        .collect()
}

fn optional(number: Option<u64>) -> String {
    number.map_or("-".into(), |number| number.to_string())
}

fn report_text(report: &ConvergenceReport) -> String {
    let rows: Vec<Vec<String>> = (report.versions.iter())
        .map(|row| {
            vec![
                row.revision.to_string(),
                row.writer.clone(),
                optional(row.generation),
                optional(row.observed_generation),
                optional(row.lag),
                shortened(&row.changes.join("; ")),
            ]
        })
        .collect();
    let headers = [
        "REVISION",
        "WRITER",
        "GENERATION",
        "OBSERVED",
        "LAG",
        "CHANGES",
    ];
    let mut text = table(&headers, &rows);
    for life in &report.generations {
        let observed = match (life.observed_at, life.revisions_to_observe) {
            (Some(at), Some(after)) => {
                format!("observed at revision {at} ({after} revisions later)")
            }
            _ => "not observed yet".to_string(),
        };
        text += &format!(
            "\ngeneration {}: written at revision {}, {observed}",
            life.generation, life.written_at
        );
    }
    text += &match (report.converged, report.generation_lag) {
        (true, _) => "\nconverged: the status reflects the current generation".to_string(),
        (false, lag) => format!("\nnot converged: the status lags the spec by {lag} generation(s)"),
    };
    for mismatch in &report.spec_status_mismatches {
        text += &format!("\nspec and status differ: {mismatch}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use revkv_client::KeyValue;

    fn version(value: &str, revision: u64) -> HistoryVersion {
        HistoryVersion {
            kind: if value.is_empty() { "DELETE" } else { "PUT" }.into(),
            kv: KeyValue {
                key: "set".into(),
                value: value.into(),
                create_revision: 2,
                mod_revision: revision,
                version: 1,
                lease: 0,
            },
        }
    }

    fn object(generation: u64, replicas: u64, status: Option<(u64, u64)>) -> String {
        let mut value = serde_json::json!({"metadata": {"generation": generation},
                                           "spec": {"replicas": replicas}});
        if let Some((observed, ready)) = status {
            value["status"] =
                serde_json::json!({"observedGeneration": observed, "replicas": ready});
        }
        value.to_string()
    }

    #[test]
    fn the_report_follows_each_generation_from_its_write_to_its_observation() {
        let versions = [
            version(&object(1, 1, None), 2),
            version(&object(1, 1, Some((1, 1))), 4),
            version(&object(2, 3, Some((1, 1))), 7),
            version(&object(3, 4, Some((1, 1))), 8),
            version(&object(3, 4, Some((3, 3))), 12),
        ];
        let report = convergence_report("set", &versions);
        let writers: Vec<&str> = report
            .versions
            .iter()
            .map(|row| row.writer.as_str())
            .collect();
        assert_eq!(writers, ["created", "status", "spec", "spec", "status"]);
        let lags: Vec<Option<u64>> = report.versions.iter().map(|row| row.lag).collect();
        assert_eq!(lags, [Some(1), Some(0), Some(1), Some(2), Some(0)]);
        assert_eq!(
            report.versions[2].changes,
            ["replace /metadata/generation 2", "replace /spec/replicas 3"]
        );
        let lives: Vec<(u64, u64, Option<u64>)> = (report.generations.iter())
            .map(|life| (life.generation, life.written_at, life.revisions_to_observe))
            .collect();
        assert_eq!(lives, [(1, 2, Some(2)), (2, 7, Some(5)), (3, 8, Some(4))]);
        assert!(report.converged);
        assert_eq!(
            report.spec_status_mismatches,
            ["replicas: spec=4, status=3"]
        );
    }

    #[test]
    fn an_unobserved_generation_and_values_of_other_shapes_are_reported_as_such() {
        let versions = [
            version("plain", 2),
            version(&object(1, 1, None), 3),
            version(&object(2, 2, Some((1, 1))), 5),
        ];
        let report = convergence_report("set", &versions);
        assert_eq!(report.versions[0].writer, "not-an-object");
        assert!(!report.converged);
        assert_eq!(report.generation_lag, 1);
        assert_eq!(report.generations.last().unwrap().observed_at, None);
        let text = report_text(&report);
        assert!(
            text.contains("generation 2: written at revision 5, not observed yet"),
            "{text}"
        );
        assert!(text.contains("not converged: the status lags the spec by 1 generation(s)"));
        let deleted = convergence_report("set", &[version(&object(1, 1, None), 2), version("", 3)]);
        assert_eq!(deleted.versions[1].writer, "deleted");
        assert!(!deleted.converged);
    }
}
