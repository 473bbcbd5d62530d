//! What the tools' command lines share: the `-o table|json` choice, the duration syntax,
//! etcdctl's TLS flags and whether to draw progress. One definition each, so `revkv ctl`,
//! `revkv bench` and `revkv snapshot` behave alike.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use revkv_client::ClientTls;

/// Whether a command may draw progress on stderr: only on a terminal that can redraw a line.
/// `TERM=dumb` (an editor's shell, a recorded session, scripts/check-doc-examples.sh) gets none,
/// so what it records is the command's answer and nothing else.
pub fn draws_progress() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|term| term != "dumb")
}

/// etcdctl's TLS flags: `--cacert`, `--cert`, `--key`.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsArgs {
    /// CA bundle (PEM) the members' certificates are verified against; needed for https://
    /// endpoints. With it, the default endpoints are https://.
    #[arg(
        long = "cacert",
        id = "tls_cacert",
        env = "REVKV_CACERT",
        global = true
    )]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM), for members started with --client-cert-auth.
    #[arg(long = "cert", id = "tls_cert", env = "REVKV_CERT", global = true)]
    pub cert: Option<PathBuf>,
    /// The key of --cert (PEM).
    #[arg(long = "key", id = "tls_key", env = "REVKV_KEY", global = true)]
    pub key: Option<PathBuf>,
}

impl TlsArgs {
    /// The client's TLS settings.
    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            ca_file: self.cacert.clone(),
            cert_file: self.cert.clone(),
            key_file: self.key.clone(),
        }
    }

    /// `endpoints` as given, except that the local cluster's default `http://` endpoints become
    /// `https://` when a CA is given (as etcdctl picks the scheme from its TLS flags).
    pub fn adjust_default_endpoints(
        &self,
        endpoints: Vec<String>,
        defaults: &[String],
    ) -> Vec<String> {
        if self.cacert.is_none() || endpoints != defaults {
            return endpoints;
        }
        endpoints
            .iter()
            .map(|endpoint| endpoint.replacen("http://", "https://", 1))
            .collect()
    }
}

/// `-o table|json`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Aligned columns and sentences.
    #[default]
    Table,
    /// The answer as JSON.
    Json,
}

/// A parser for `-o` whose help lists the two values without their descriptions, as `revkv bench
/// --help` always has (`revkv ctl` takes the enum's own parser, which describes them).
pub fn terse_output_format_parser() -> impl TypedValueParser<Value = OutputFormat> {
    PossibleValuesParser::new(["table", "json"]).map(|text| {
        OutputFormat::from_str(&text, false).expect("the parser admits only the enum's values")
    })
}

/// Parses a duration: `humantime`'s syntax (`1500ms`, `10s`, `2m`, `1h`, `1m 30s`), or a bare number
/// of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text)
        .map_err(|error| format!("{text:?} is not a duration such as 10s, 500ms or 2m ({error})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_usual_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1s 500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("10 parsecs").is_err());
    }
}
