//! `revkv ctl`: the command line for a running cluster, on top of [`Client`](revkv_client::Client).
//!
//! ```text
//! revkv ctl [--endpoints URL,...] [-o table|json] [--timeout 10s] COMMAND
//!   get KEY | put KEY VALUE | del KEY | list [PREFIX] | txn [-f FILE] | patch KEY JSON
//!   watch KEY | compact REVISION | status | member list|add|promote|remove
//!   leader transfer ID | hash | snapshot save FILE
//!   lease grant TTL | lease revoke ID | lease keep-alive ID | lease ttl ID | lease list
//!   lock NAME [-- COMMAND...] | elect NAME PROPOSAL | elect NAME --listen
//!   auth enable|disable|status | user add|delete|list|get|passwd|grant-role|revoke-role
//!   role add|delete|list|get|grant-permission|revoke-permission
//! ```
//!
//! With auth enabled, `--user NAME:PASSWORD` (or `REVKV_USER`) makes every call as that user.
//!
//! Endpoints come from `--endpoints`, else `REVKV_ENDPOINTS`, else the local three-member cluster
//! that `scripts/cluster.sh` starts. Output is for people by default (aligned tables, short
//! sentences) and JSON with `-o json`. Exit codes let scripts tell outcomes apart:
//! [`EXIT_NOT_FOUND`], [`EXIT_CONFLICT`], [`EXIT_OUTCOME_UNKNOWN`], [`EXIT_ERROR`] for any other
//! error, and 2 for a command line clap rejects.
//!
//! Parts: this file has the exit codes, `command_line.rs` the command line (re-exported here),
//! [`commands`] runs each command ([`lease`] the lease commands, [`recipes`] `lock` and `elect`),
//! `answers.rs` asks every endpoint and prints an answer for them all, and [`output`] formats the
//! answers. The subcommand files take their helpers from `answers.rs`, never from `commands.rs`,
//! so that imports run one way: `commands.rs` names them, they do not name it.

mod answers;
pub mod auth;
mod command_line;
pub mod commands;
pub mod conflicts;
pub mod convergence;
pub mod history;
pub mod lease;
pub mod maintenance;
pub mod output;
pub mod recipes;
pub mod snapshot;

use std::process::ExitCode;

pub use crate::cli::OutputFormat;
pub use command_line::{
    AlarmCommand, ConflictsCommand, CtlArgs, CtlCommand, LeaderCommand, LeaseCommand,
    MemberCommand, SnapshotCommand, SnapshotFormat, DEFAULT_ENDPOINTS,
};
use revkv_client::ClientError;

/// Exit code of an error other than the ones below.
pub const EXIT_ERROR: u8 = 1;
/// Exit code when the key, member or endpoint does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code when a revision precondition failed (`--if-mod-revision`, `--if-absent`).
pub const EXIT_CONFLICT: u8 = 4;
/// Exit code when a write was sent but its answer was lost: it may or may not have happened.
pub const EXIT_OUTCOME_UNKNOWN: u8 = 5;

/// Runs `revkv ctl`: prints the answer on stdout, an error on stderr, and exits with its code.
pub async fn run(args: CtlArgs) -> ExitCode {
    match commands::execute(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("revkv ctl: {error}");
            if let ClientError::Conflict {
                conflicting_fields, ..
            } = &error
            {
                if !conflicting_fields.is_empty() {
                    eprintln!("conflicting fields: {}", conflicting_fields.join(", "));
                }
            }
            ExitCode::from(exit_code_of(&error))
        }
    }
}

/// The exit code that tells `error` apart.
pub fn exit_code_of(error: &ClientError) -> u8 {
    match error {
        ClientError::NotFound { .. } => EXIT_NOT_FOUND,
        ClientError::Conflict { .. } => EXIT_CONFLICT,
        ClientError::OutcomeUnknown { .. } => EXIT_OUTCOME_UNKNOWN,
        _ => EXIT_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct CommandLineUnderTest {
        #[command(flatten)]
        ctl: CtlArgs,
    }

    fn parse(words: &[&str]) -> Result<CtlArgs, clap::Error> {
        let argv = std::iter::once("ctl").chain(words.iter().copied());
        CommandLineUnderTest::try_parse_from(argv).map(|parsed| parsed.ctl)
    }

    #[test]
    fn global_options_go_before_or_after_the_command() {
        let before = parse(&[
            "-o",
            "json",
            "--endpoints",
            "http://a:1,http://b:2",
            "get",
            "k",
        ]);
        let after = parse(&["get", "k", "-o", "json", "--timeout", "500ms"]).unwrap();
        assert_eq!(before.unwrap().endpoints, ["http://a:1", "http://b:2"]);
        assert_eq!(after.output, OutputFormat::Json);
        assert_eq!(after.timeout, Duration::from_millis(500));
    }

    #[test]
    fn nested_commands_parse() {
        let add = parse(&[
            "member",
            "add",
            "4",
            "--peer-url",
            "http://p",
            "--client-url",
            "http://c",
        ]);
        assert!(matches!(
            add.unwrap().command,
            CtlCommand::Member(MemberCommand::Add { id: 4, .. })
        ));
        let transfer = parse(&["leader", "transfer", "2"]).unwrap();
        assert!(matches!(
            transfer.command,
            CtlCommand::Leader(LeaderCommand::Transfer { to: 2 })
        ));
        assert!(parse(&["put", "k", "v", "--if-mod-revision", "3", "--if-absent"]).is_err());
    }

    #[test]
    fn lock_takes_a_command_after_the_separator_and_elect_a_proposal_or_listen() {
        let lock = parse(&["lock", "jobs", "--ttl", "3", "--", "sh", "-c", "true"]).unwrap();
        let CtlCommand::Lock { name, ttl, command } = lock.command else {
            panic!("not a lock");
        };
        assert_eq!((name.as_str(), ttl), ("jobs", 3));
        assert_eq!(command, ["sh", "-c", "true"]);
        assert!(matches!(
            parse(&["elect", "e", "--listen"]).unwrap().command,
            CtlCommand::Elect { listen: true, .. }
        ));
        assert!(
            parse(&["elect", "e"]).is_err(),
            "a candidate needs a proposal"
        );
        assert!(parse(&["elect", "e", "p", "--listen"]).is_err());
        assert!(matches!(
            parse(&["put", "k", "v", "--lease", "7"]).unwrap().command,
            CtlCommand::Put { lease: Some(7), .. }
        ));
        let grant = parse(&["--user", "root:pw", "user", "grant-role", "app", "app-rw"]).unwrap();
        assert_eq!(grant.credentials.as_deref(), Some("root:pw"));
        assert!(matches!(
            grant.command,
            CtlCommand::User(auth::UserCommand::GrantRole { user, .. }) if user == "app"
        ));
        assert!(matches!(
            parse(&["put", "k", "{}", "--merge-from", "4"])
                .unwrap()
                .command,
            CtlCommand::Put {
                merge_from: Some(4),
                ..
            }
        ));
        assert!(
            parse(&[
                "put",
                "k",
                "{}",
                "--merge-from",
                "4",
                "--if-mod-revision",
                "4"
            ])
            .is_err(),
            "a merge carries its own precondition"
        );
    }

    #[test]
    fn exit_codes_tell_not_found_conflict_and_unknown_outcomes_apart() {
        let not_found = ClientError::NotFound {
            message: String::new(),
        };
        let conflict = ClientError::Conflict {
            current: None,
            message: String::new(),
            conflicting_fields: Vec::new(),
        };
        let unknown = ClientError::OutcomeUnknown {
            endpoint: String::new(),
            message: String::new(),
        };
        let other = ClientError::Invalid {
            message: String::new(),
        };
        let codes = [&not_found, &conflict, &unknown, &other].map(exit_code_of);
        assert_eq!(
            codes,
            [
                EXIT_NOT_FOUND,
                EXIT_CONFLICT,
                EXIT_OUTCOME_UNKNOWN,
                EXIT_ERROR
            ]
        );
    }
}
