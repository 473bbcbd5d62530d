//! `revkv ctl alarm list|disarm` and `revkv ctl defrag`, printed as etcdctl prints them, or as the
//! API's answers with `-o json`.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use revkv_client::{AlarmMember, Client, ClientError};

use super::answers::{ask_each_endpoint, print_either};
use super::{output, AlarmCommand};
use crate::cli::OutputFormat;

/// Runs one `alarm` command.
pub async fn alarm(
    client: &Client,
    format: OutputFormat,
    command: AlarmCommand,
) -> Result<(), ClientError> {
    match command {
        AlarmCommand::List => {
            let answer = client.alarms().await?;
            print_either(format, &answer, || alarm_lines(&answer.alarms));
        }
        AlarmCommand::Disarm { member_id } => {
            let answer = client.disarm_alarms(member_id).await?;
            print_either(format, &answer, || alarm_lines(&answer.disarmed));
        }
    }
    Ok(())
}

/// etcdctl's lines: `memberID:N alarm:NOSPACE`, one per alarm (nothing when none).
fn alarm_lines(alarms: &[AlarmMember]) -> String {
    alarms
        .iter()
        .map(|alarm| format!("memberID:{} alarm:{}", alarm.member_id, alarm.alarm))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Defragments every endpoint in turn (one member at a time, as etcd's documentation advises: a
/// member defragmenting answers nothing meanwhile).
pub async fn defrag(client: &Client, format: OutputFormat) -> Result<(), ClientError> {
    let progress = defrag_progress();
    let members = client.endpoints().len();
    let mut started = 0;
    let asked = ask_each_endpoint(client, |member| {
        started += 1;
        let endpoint = member.endpoints().first().cloned().unwrap_or_default();
        progress.set_message(format!(
            "defragmenting member {started} of {members} ({endpoint})"
        ));
        async move { member.defragment().await }
    })
    .await?;
    progress.finish_and_clear();
    let rows: Vec<_> = asked
        .answers
        .iter()
        .map(|(endpoint, answer)| {
            vec![
                endpoint.clone(),
                answer.header.member_id.to_string(),
                answer.file_bytes_before.to_string(),
                answer.file_bytes_after.to_string(),
                answer.elapsed_ms.to_string(),
            ]
        })
        .collect();
    let printed: Vec<_> = asked
        .answers
        .iter()
        .map(|(endpoint, answer)| serde_json::json!({ "endpoint": endpoint, "defragment": answer }))
        .collect();
    let headers = ["ENDPOINT", "ID", "BYTES BEFORE", "BYTES AFTER", "MS"];
    print_either(format, &printed, || output::table(&headers, &rows));
    asked.outcome()
}

/// Which member is being defragmented and for how long, on a terminal (a defragmentation of a
/// large file takes a while and answers nothing meanwhile); nothing drawn otherwise.
fn defrag_progress() -> ProgressBar {
    if !crate::cli::draws_progress() {
        return ProgressBar::hidden();
    }
    let progress = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        progress.set_style(style);
    }
    progress.enable_steady_tick(Duration::from_millis(200));
    progress
}
