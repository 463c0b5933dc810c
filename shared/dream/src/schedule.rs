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

/// When the task is next due at `now_ms`: at once if it never ran; at its
/// back-off after a failure; else the schedule's next time after its last
/// attempt — unless that is further ahead than a clock that never went back
/// allows ([`rederived`]), then the schedule's next time after now.
/// `None`: never (an expression that matches no date).
pub fn next_due(
    schedule: &Schedule,
    attempts: &Attempts,
    tz: &TimeZone,
    now_ms: i64,
) -> Option<i64> {
    rederived(schedule, attempts, tz, now_ms).or_else(|| stored_due(schedule, attempts, tz))
}

/// The next due time the stored attempts give, whatever the clock says now.
fn stored_due(schedule: &Schedule, attempts: &Attempts, tz: &TimeZone) -> Option<i64> {
    if let Some(retry) = attempts.retry_after_ms {
        return Some(retry);
    }
    match attempts.last_settled_ms {
        None => Some(i64::MIN),
        Some(last) => schedule.next_after(last, tz),
    }
}

/// The schedule's next time after `now_ms`, when the stored attempts put the
/// task more than one period ahead of now (a back-off: more than
/// [`MAX_BACKOFF_MS`], if that is longer). Attempts recorded while the clock
/// ran ahead do that once it is set back; without this the task would wait
/// for the clock to catch up (a year ahead and back: a year). A due time the
/// attempts reach with a clock that never went back is never further ahead
/// than the next time after now, so this changes nothing then. `None`: the
/// stored due time stands.
pub fn rederived(
    schedule: &Schedule,
    attempts: &Attempts,
    tz: &TimeZone,
    now_ms: i64,
) -> Option<i64> {
    let stored = stored_due(schedule, attempts, tz)?;
    let first = schedule.next_after(now_ms, tz)?;
    let period = schedule.next_after(first, tz)?.saturating_sub(first);
    let allowed = if attempts.retry_after_ms.is_some() {
        period.max(MAX_BACKOFF_MS)
    } else {
        period
    };
    (stored.saturating_sub(now_ms) > allowed).then_some(first)
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
            next_due(&nightly, &Attempts::default(), &utc(), NOW),
            Some(i64::MIN),
            "never ran: due now"
        );
        let ran = Attempts {
            last_settled_ms: Some(NOW),
            retry_after_ms: None,
        };
        assert_eq!(
            next_due(&nightly, &ran, &utc(), NOW),
            Some(NOW - 100 * MIN + 24 * HOUR)
        );
        let failed = Attempts {
            last_settled_ms: Some(NOW - 24 * HOUR),
            retry_after_ms: Some(NOW + 30 * MIN),
        };
        assert_eq!(
            next_due(&nightly, &failed, &utc(), NOW),
            Some(NOW + 30 * MIN)
        );
        assert_eq!(backoff_ms(1), 15 * MIN);
        assert_eq!(backoff_ms(2), 30 * MIN);
        assert_eq!(backoff_ms(4), 2 * HOUR);
        assert_eq!(backoff_ms(30), 24 * HOUR);
        assert_eq!(backoff_ms(0), 15 * MIN);
    }

    #[test]
    fn attempts_made_while_the_clock_ran_ahead_are_re_derived_from_now() {
        const YEAR: i64 = 365 * 24 * HOUR;
        let quarter = Schedule::parse("*/15 * * * *").unwrap();
        let nightly = Schedule::parse("0 3 * * *").unwrap();
        let ahead = Attempts {
            last_settled_ms: Some(NOW + YEAR),
            retry_after_ms: None,
        };
        // Back at today: due per the period from now, not in a year.
        assert_eq!(next_due(&quarter, &ahead, &utc(), NOW), Some(NOW + 5 * MIN));
        assert_eq!(
            rederived(&quarter, &ahead, &utc(), NOW),
            Some(NOW + 5 * MIN)
        );
        assert_eq!(
            next_due(&nightly, &ahead, &utc(), NOW),
            Some(NOW - 100 * MIN + 24 * HOUR)
        );
        // A back-off set while ahead goes too; one within the longest back-off stays.
        let failed_ahead = Attempts {
            last_settled_ms: Some(NOW - HOUR),
            retry_after_ms: Some(NOW + YEAR),
        };
        assert_eq!(
            next_due(&quarter, &failed_ahead, &utc(), NOW),
            Some(NOW + 5 * MIN)
        );
        let backing_off = Attempts {
            last_settled_ms: Some(NOW - HOUR),
            retry_after_ms: Some(NOW + 20 * HOUR),
        };
        assert_eq!(rederived(&quarter, &backing_off, &utc(), NOW), None);
        assert_eq!(
            next_due(&quarter, &backing_off, &utc(), NOW),
            Some(NOW + 20 * HOUR)
        );
        // With a clock that never went back nothing is re-derived, whatever
        // the period: a monthly task just run is due in a month.
        let monthly = Schedule::parse("0 3 1 * *").unwrap();
        let just_ran = Attempts {
            last_settled_ms: Some(NOW - MIN),
            retry_after_ms: None,
        };
        for schedule in [&quarter, &nightly, &monthly] {
            assert_eq!(rederived(schedule, &just_ran, &utc(), NOW), None);
            assert_eq!(rederived(schedule, &Attempts::default(), &utc(), NOW), None);
        }
    }
}
