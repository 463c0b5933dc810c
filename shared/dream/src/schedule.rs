//! When a task is due: its cron expression, read in the local time zone the
//! binary passes in, after its last attempt; after a failure, a back-off.

use croner::Cron;
use jiff::Timestamp;
use jiff::tz::TimeZone;

use mc_base::config::parse_cron;
use mc_base::error::{Error, Result};

/// The first retry after a failure waits this long; each further failure
/// doubles it, up to [`MAX_BACKOFF_MS`].
pub const FIRST_BACKOFF_MS: i64 = 15 * 60 * 1000;
pub const MAX_BACKOFF_MS: i64 = 24 * 60 * 60 * 1000;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub expression: String,
    cron: Cron,
}

impl Schedule {
    pub fn parse(expression: &str) -> Result<Schedule> {
        let cron = parse_cron(expression).map_err(|problem| {
            Error::Config(format!("schedule {expression:?} {problem}"))
                .with_hint("fix it under dream.schedule in the user config")
        })?;
        Ok(Schedule {
            expression: expression.trim().to_string(),
            cron,
        })
    }

    /// The first time strictly after `after_ms` the expression matches, in
    /// `tz`; `None` if it never does (e.g. `0 0 31 2 *`).
    pub fn next_after(&self, after_ms: i64, tz: &TimeZone) -> Option<i64> {
        let start = Timestamp::from_millisecond(after_ms)
            .ok()?
            .to_zoned(tz.clone());
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|next| next.timestamp().as_millisecond())
    }
}

/// What the schedule needs of a task's stored state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempts {
    /// The last attempt that did not fail (ok, nothing to do, or skipped by
    /// the activity gate); `None` if there was none.
    pub last_settled_ms: Option<i64>,
    /// Set while the last attempt failed: the earliest retry.
    pub retry_after_ms: Option<i64>,
}

/// When the task is next due: at once if it never ran; at its back-off
/// after a failure; else the schedule's next time after its last attempt.
/// `None`: never (an expression that matches no date).
pub fn next_due(schedule: &Schedule, attempts: &Attempts, tz: &TimeZone) -> Option<i64> {
    if let Some(retry) = attempts.retry_after_ms {
        return Some(retry);
    }
    match attempts.last_settled_ms {
        None => Some(i64::MIN),
        Some(last) => schedule.next_after(last, tz),
    }
}

/// The wait after the `failures`-th failure in a row (1 = the first).
pub fn backoff_ms(failures: u32) -> i64 {
    let doublings = failures.saturating_sub(1).min(20);
    FIRST_BACKOFF_MS
        .saturating_mul(1_i64 << doublings)
        .min(MAX_BACKOFF_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01 04:40:00 UTC, a Tuesday.
    const NOW: i64 = 1_796_100_000_000;
    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;

    fn utc() -> TimeZone {
        TimeZone::UTC
    }

    #[test]
    fn the_next_time_follows_the_expression_in_the_time_zone() {
        let quarter = Schedule::parse("*/15 * * * *").unwrap();
        assert_eq!(quarter.next_after(NOW, &utc()), Some(NOW + 5 * MIN));
        assert_eq!(
            quarter.next_after(NOW + 5 * MIN, &utc()),
            Some(NOW + 20 * MIN),
            "strictly after"
        );
        let nightly = Schedule::parse("0 3 * * *").unwrap();
        // 04:40 → tomorrow 03:00 UTC.
        assert_eq!(
            nightly.next_after(NOW, &utc()),
            Some(NOW - 100 * MIN + 24 * HOUR)
        );
        // The same expression in UTC+2 (no DST in December): 03:00 local is 01:00 UTC.
        let plus_two = TimeZone::fixed(jiff::tz::offset(2));
        assert_eq!(
            nightly.next_after(NOW, &plus_two),
            Some(NOW - 220 * MIN + 24 * HOUR)
        );
        assert!(Schedule::parse("0 0 0 3 * *").is_err(), "six fields");
    }

    #[test]
    fn due_at_once_then_on_schedule_and_backs_off_after_failures() {
        let nightly = Schedule::parse("0 3 * * *").unwrap();
        assert_eq!(
            next_due(&nightly, &Attempts::default(), &utc()),
            Some(i64::MIN),
            "never ran: due now"
        );
        let ran = Attempts {
            last_settled_ms: Some(NOW),
            retry_after_ms: None,
        };
        assert_eq!(
            next_due(&nightly, &ran, &utc()),
            Some(NOW - 100 * MIN + 24 * HOUR)
        );
        let failed = Attempts {
            last_settled_ms: Some(NOW - 24 * HOUR),
            retry_after_ms: Some(NOW + 30 * MIN),
        };
        assert_eq!(next_due(&nightly, &failed, &utc()), Some(NOW + 30 * MIN));
        assert_eq!(backoff_ms(1), 15 * MIN);
        assert_eq!(backoff_ms(2), 30 * MIN);
        assert_eq!(backoff_ms(4), 2 * HOUR);
        assert_eq!(backoff_ms(30), 24 * HOUR);
        assert_eq!(backoff_ms(0), 15 * MIN);
    }
}
