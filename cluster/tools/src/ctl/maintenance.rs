//! `revkv ctl alarm list|disarm` and `revkv ctl defrag`, printed as etcdctl prints them, or as the
//! API's answers with `-o json`.

use revkv_client::{AlarmMember, Client, ClientError};

use super::commands::{ask_each_endpoint, print_either};
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
    let asked =
        ask_each_endpoint(client, |member| async move { member.defragment().await }).await?;
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
