//! Cron expressions of `dream.schedule.*`: what the config accepts, and the
//! parser mc-dream evaluates them with (the same one, so a schedule the
//! config took is one the dreamer can run).

use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// A standard five-field crontab expression (minute hour day-of-month month
/// day-of-week; names like `MON` and `JAN`, ranges, lists and steps), or a
/// nickname (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`).
/// Seconds fields are refused: mc-dream runs from a crontab, once a minute
/// at best. The error says what is wrong, in croner's words.
pub fn parse_cron(text: &str) -> Result<Cron, String> {
    let text = text.trim();
    if !text.starts_with('@') && text.split_whitespace().count() != 5 {
        return Err(format!(
            "has {} fields; a schedule has 5 (minute hour day-of-month month day-of-week)",
            text.split_whitespace().count()
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| format!("is not a cron expression ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_fields_and_nicknames_parse_and_mistakes_say_what_is_wrong() {
        for good in [
            "*/15 * * * *",
            "0 3 * * *",
            "30 4 * * SUN",
            "0 9-17 * * 1-5",
            "@daily",
            "@hourly",
        ] {
            assert!(parse_cron(good).is_ok(), "{good}");
        }
        let err = parse_cron("61 * * * *").unwrap_err();
        assert!(err.starts_with("is not a cron expression ("), "{err}");
        assert_eq!(
            parse_cron("0 0 3 * * *").unwrap_err(),
            "has 6 fields; a schedule has 5 (minute hour day-of-month month day-of-week)"
        );
        assert!(parse_cron("every day").is_err());
        assert!(parse_cron("").is_err());
    }
}
