//! What every command does with its answers: ask each endpoint in turn (`status`, `hash`,
//! `defrag`, `conflicts top`) and print an answer as JSON or as a sentence for people. Its own
//! file, naming none of the command files, so that `commands.rs` and the subcommand files
//! (`auth.rs`, `lease.rs`, `snapshot.rs`, ...) all use it without importing each other.

use revkv_client::{Client, ClientError};

use super::output;
use crate::cli::OutputFormat;

/// Prints `answer` as JSON, or the lines `human` makes. Nothing to say prints nothing, not an
/// empty line, as etcdctl does (`alarm list` with no alarm), so a script can test for emptiness.
pub(super) fn print_either<T: serde::Serialize>(
    format: OutputFormat,
    answer: &T,
    human: impl FnOnce() -> String,
) {
    match format {
        OutputFormat::Json => println!("{}", output::json(answer)),
        OutputFormat::Table => {
            let lines = human();
            if !lines.is_empty() {
                println!("{lines}");
            }
        }
    }
}

/// Each endpoint's answer to one call, asked in turn through a client of that member alone, and
/// the last failure. A member that fails is reported on stderr and the others are still asked, so
/// a command prints what it has and still exits non-zero.
pub struct EndpointAnswers<T> {
    pub answers: Vec<(String, T)>,
    pub last_error: Option<ClientError>,
}

impl<T> EndpointAnswers<T> {
    /// The command's outcome once it has printed the answers.
    pub fn outcome(self) -> Result<(), ClientError> {
        self.last_error.map_or(Ok(()), Err)
    }
}

/// Asks every endpoint of `client` in turn with `ask`.
pub async fn ask_each_endpoint<T, Answer>(
    client: &Client,
    mut ask: impl FnMut(Client) -> Answer,
) -> Result<EndpointAnswers<T>, ClientError>
where
    Answer: std::future::Future<Output = Result<T, ClientError>>,
{
    let mut answers = Vec::new();
    let mut last_error = None;
    for endpoint in client.endpoints() {
        match ask(client.for_member(endpoint)?).await {
            Ok(answer) => answers.push((endpoint.clone(), answer)),
            Err(error) => {
                eprintln!("revkv ctl: {endpoint}: {error}");
                last_error = Some(error);
            }
        }
    }
    Ok(EndpointAnswers {
        answers,
        last_error,
    })
}
