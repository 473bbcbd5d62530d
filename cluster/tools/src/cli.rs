//! What the tools' command lines share: the `-o table|json` choice and the duration syntax.
//! One definition each, so `revkv ctl` and `revkv bench` read them alike.

use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::ValueEnum;

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
