//! The cause of every cache bust: for each recorded call whose cache read
//! fell short of what the previous call left cached, why — from mc's own
//! record of both calls and the provider's numbers. Pure; a cause is named
//! only from evidence, and the evidence is part of the answer.
//!
//! What the previous call left cached is its cache read plus its cache
//! write; a call reads that again unless something before its end changed.
//! The rules, first that holds wins: the harness changed the model, the
//! system prompt or the tool set; the call came after the cache's lifetime
//! (`transform.cache_ttl`) with nothing sent; mc changed earlier bytes on this
//! pass (its execute, and the trigger; or a head refresh alone); the harness
//! sent a different history (its first message changed, or fewer messages:
//! its own compaction); else unknown.

use serde::Serialize;

use mc_base::config::CacheTtl;
use mc_base::domain::envelope::Usage;

use super::calls::{Call, HeadMove};

/// Cache tokens the provider may shave off between two calls without it
/// being a bust (its block granularity), or this share of what was cached.
pub const TOLERANCE_TOKENS: u64 = 1024;
pub const TOLERANCE_SHARE: f64 = 0.02;

/// How a call's cache read compares with what the previous call left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    /// The provider's usage for this call is not known (yet).
    NotReported,
    /// The session's first recorded call, or the previous one's usage is unknown.
    Cold,
    /// It read what was cached.
    Stable,
    /// It read less than was cached, but some of it.
    Partial,
    /// It read almost nothing of what was cached.
    Full,
}

impl CacheState {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::NotReported => "not_reported",
            CacheState::Cold => "cold",
            CacheState::Stable => "stable",
            CacheState::Partial => "partial",
            CacheState::Full => "full",
        }
    }

    pub fn is_bust(self) -> bool {
        matches!(self, CacheState::Partial | CacheState::Full)
    }
}

/// Why a call's cache read fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    ModelChanged,
    SystemChanged,
    ToolsChanged,
    /// The cache lived out its lifetime between the two calls.
    IdleTtl,
    /// mc's execute changed earlier bytes (the trigger is the call's reason).
    McExecute,
    /// Only m[1] of mc's head changed (new compartments, memory, pins).
    HeadRefresh,
    /// The harness sent a different history (its own compaction).
    HistoryRewritten,
    Unknown,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::ModelChanged => "model_changed",
            Cause::SystemChanged => "system_changed",
            Cause::ToolsChanged => "tools_changed",
            Cause::IdleTtl => "idle_ttl",
            Cause::McExecute => "mc_execute",
            Cause::HeadRefresh => "head_refresh",
            Cause::HistoryRewritten => "history_rewritten",
            Cause::Unknown => "unknown",
        }
    }

    /// Who made the change: mc, the harness, the provider's clock, or nobody known.
    pub fn whose(self) -> &'static str {
        match self {
            Cause::McExecute | Cause::HeadRefresh => "mc",
            Cause::ModelChanged
            | Cause::SystemChanged
            | Cause::ToolsChanged
            | Cause::HistoryRewritten => "harness",
            Cause::IdleTtl => "ttl",
            Cause::Unknown => "unknown",
        }
    }
}

/// The verdict on one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub state: CacheState,
    /// Set exactly when the state is a bust.
    pub cause: Option<Cause>,
    /// mc's trigger when the cause is mc's execute (threshold, emergency, ttl_expired, …).
    pub trigger: Option<String>,
    /// What the cause was read from, in words.
    pub evidence: String,
    /// What the previous call left cached, and what this one read.
    pub expected_read: Option<u64>,
    pub cache_read: Option<u64>,
}

/// The cache's lifetime in milliseconds (`None`: it never expires).
pub fn ttl_ms(ttl: CacheTtl) -> Option<i64> {
    ttl.as_millis()
        .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX))
}

/// One verdict per call, in order (`calls` oldest first, one session).
pub fn classify(calls: &[Call], ttl_ms: Option<i64>) -> Vec<Verdict> {
    let mut out = Vec::with_capacity(calls.len());
    let mut previous: Option<&Call> = None;
    for call in calls {
        out.push(verdict(previous, call, ttl_ms));
        previous = Some(call);
    }
    out
}

fn cached_after(usage: &Usage) -> u64 {
    usage.cache_read.saturating_add(usage.cache_write)
}

fn verdict(previous: Option<&Call>, call: &Call, ttl_ms: Option<i64>) -> Verdict {
    let plain = |state, evidence: &str, expected| Verdict {
        state,
        cause: None,
        trigger: None,
        evidence: evidence.to_string(),
        expected_read: expected,
        cache_read: call.usage.map(|u| u.cache_read),
    };
    let Some(usage) = call.usage else {
        return plain(
            CacheState::NotReported,
            "the provider's usage for this call has not reached mc",
            None,
        );
    };
    let Some(prev) = previous else {
        return plain(
            CacheState::Cold,
            "the first recorded call of the session",
            None,
        );
    };
    let Some(prev_usage) = prev.usage else {
        return plain(
            CacheState::Cold,
            "the previous call's usage is unknown: nothing to compare with",
            None,
        );
    };
    let expected = cached_after(&prev_usage);
    let tolerance = TOLERANCE_TOKENS.max((expected as f64 * TOLERANCE_SHARE) as u64);
    if usage.cache_read.saturating_add(tolerance) >= expected {
        return plain(
            CacheState::Stable,
            "read what the previous call left cached",
            Some(expected),
        );
    }
    let state = if usage.cache_read < tolerance.max(expected / 10) {
        CacheState::Full
    } else {
        CacheState::Partial
    };
    let (cause, evidence) = cause_of(prev, call, ttl_ms);
    let trigger = (cause == Cause::McExecute).then(|| call.reason.clone());
    Verdict {
        state,
        cause: Some(cause),
        trigger,
        evidence,
        expected_read: Some(expected),
        cache_read: Some(usage.cache_read),
    }
}

fn changed(a: &Option<String>, b: &Option<String>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a != b)
}

fn cause_of(prev: &Call, call: &Call, ttl_ms: Option<i64>) -> (Cause, String) {
    if changed(&prev.model, &call.model) {
        let (a, b) = (
            prev.model.as_deref().unwrap_or_default(),
            call.model.as_deref().unwrap_or_default(),
        );
        return (
            Cause::ModelChanged,
            format!("the model went from {a} to {b}"),
        );
    }
    if changed(&prev.system_print, &call.system_print) {
        return (
            Cause::SystemChanged,
            "the harness's system prompt is not the previous call's".into(),
        );
    }
    if changed(&prev.tools_print, &call.tools_print) {
        return (
            Cause::ToolsChanged,
            "the harness's tool set is not the previous call's".into(),
        );
    }
    let idle = call.at_ms.saturating_sub(prev.at_ms);
    if let Some(ttl) = ttl_ms
        && idle >= ttl
    {
        let mc = if call.decision == "execute" {
            format!("; mc executed on it ({})", call.reason)
        } else {
            String::new()
        };
        return (
            Cause::IdleTtl,
            format!(
                "{}s since the previous call, past the cache's {}s lifetime{mc}",
                idle / 1000,
                ttl / 1000
            ),
        );
    }
    if call.bust != "none" {
        if call.head == HeadMove::Refreshed && call.drops == 0 && call.bust == "soft" {
            return (
                Cause::HeadRefresh,
                format!("mc refreshed m[1] of its head ({})", call.reason),
            );
        }
        let head = match (&call.head, &call.head_reason) {
            (HeadMove::Rebuilt, Some(why)) => format!(", m[0] rebuilt ({why})"),
            _ => String::new(),
        };
        return (
            Cause::McExecute,
            format!(
                "mc's {} bust: {} ({} drops{head})",
                call.bust, call.reason, call.drops
            ),
        );
    }
    if changed(&prev.first_message, &call.first_message) || call.messages < prev.messages {
        return (
            Cause::HistoryRewritten,
            format!(
                "the harness sent {} messages after {}{}",
                call.messages,
                prev.messages,
                if changed(&prev.first_message, &call.first_message) {
                    ", starting from another first message"
                } else {
                    ""
                }
            ),
        );
    }
    (
        Cause::Unknown,
        "mc changed nothing and the harness's model, system prompt, tools and history look the \
         same; the provider read less than it had cached"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::Sources;

    fn call(at_ms: i64, usage: Option<(u64, u64)>) -> Call {
        Call {
            id: at_ms,
            session: 1,
            at_ms,
            decision: "defer".into(),
            reason: "cache_warm".into(),
            bust: "none".into(),
            head: HeadMove::Replayed,
            head_reason: None,
            usage_percent: 40.0,
            context_window: 200_000,
            model: Some("anthropic/claude".into()),
            system_print: Some("s1".into()),
            tools_print: Some("t1".into()),
            messages: 10,
            first_message: Some("m1".into()),
            system_tokens: Some(1000),
            tools_tokens: Some(2000),
            sources: Sources::default(),
            drops: 0,
            usage: usage.map(|(read, write)| Usage {
                input: 10,
                cache_read: read,
                cache_write: write,
                output: 100,
            }),
        }
    }

    const TTL: Option<i64> = Some(300_000);

    /// A warm session, then `last` after it: the verdict on `last`.
    fn after(last: Call) -> Verdict {
        let calls = vec![
            call(0, Some((0, 50_000))),
            call(10_000, Some((50_000, 2_000))),
            last,
        ];
        classify(&calls, TTL).pop().unwrap()
    }

    #[test]
    fn a_warm_sequence_is_cold_then_stable_and_unknown_usage_is_said() {
        let calls = vec![
            call(0, Some((0, 50_000))),
            call(10_000, Some((50_000, 2_000))),
            call(20_000, Some((51_500, 1_000))),
            call(30_000, None),
        ];
        let states: Vec<_> = classify(&calls, TTL).iter().map(|v| v.state).collect();
        assert_eq!(
            states,
            [
                CacheState::Cold,
                CacheState::Stable,
                CacheState::Stable,
                CacheState::NotReported
            ]
        );
        // A call after one whose usage is unknown has nothing to compare with.
        let calls = vec![call(0, None), call(1, Some((0, 9_000)))];
        assert_eq!(classify(&calls, TTL)[1].state, CacheState::Cold);
    }

    #[test]
    fn mcs_execute_names_its_trigger() {
        let mut c = call(20_000, Some((3_000, 40_000)));
        c.decision = "execute".into();
        c.reason = "threshold".into();
        c.bust = "hard".into();
        c.head = HeadMove::Rebuilt;
        c.head_reason = Some("pressure_backstop".into());
        c.drops = 4;
        let v = after(c);
        assert_eq!(v.state, CacheState::Full);
        assert_eq!(v.cause, Some(Cause::McExecute));
        assert_eq!(v.trigger.as_deref(), Some("threshold"));
        assert!(v.evidence.contains("pressure_backstop"), "{}", v.evidence);
        assert_eq!(v.expected_read, Some(52_000));
    }

    #[test]
    fn a_head_refresh_alone_is_told_from_an_execute_with_drops() {
        let mut c = call(20_000, Some((30_000, 20_000)));
        c.decision = "execute".into();
        c.reason = "threshold".into();
        c.bust = "soft".into();
        c.head = HeadMove::Refreshed;
        let v = after(c.clone());
        assert_eq!(
            (v.state, v.cause),
            (CacheState::Partial, Some(Cause::HeadRefresh))
        );
        c.drops = 2;
        assert_eq!(after(c).cause, Some(Cause::McExecute));
    }

    #[test]
    fn an_idle_gap_past_the_ttl_is_the_ttl_even_when_mc_executed_on_it() {
        let mut c = call(10_000 + 400_000, Some((0, 52_000)));
        c.decision = "execute".into();
        c.reason = "ttl_expired".into();
        c.bust = "soft".into();
        let v = after(c.clone());
        assert_eq!(v.cause, Some(Cause::IdleTtl));
        assert!(v.evidence.contains("400s"), "{}", v.evidence);
        // Within the lifetime the same numbers are mc's execute.
        c.at_ms = 20_000;
        assert_eq!(after(c).cause, Some(Cause::McExecute));
        // A cache that never expires is never the TTL's fault.
        let mut c = call(10_000_000, Some((0, 52_000)));
        c.decision = "defer".into();
        let calls = vec![
            call(0, Some((0, 50_000))),
            call(10_000, Some((50_000, 2_000))),
            c,
        ];
        assert_eq!(classify(&calls, None)[2].cause, Some(Cause::Unknown));
    }

    #[test]
    fn the_harness_changing_model_system_tools_or_history_is_the_harness() {
        type Change = fn(&mut Call);
        let cases: [(Change, Cause); 5] = [
            (
                |c| c.model = Some("anthropic/other".into()),
                Cause::ModelChanged,
            ),
            (|c| c.system_print = Some("s2".into()), Cause::SystemChanged),
            (|c| c.tools_print = Some("t2".into()), Cause::ToolsChanged),
            (
                |c| c.first_message = Some("summary".into()),
                Cause::HistoryRewritten,
            ),
            (|c| c.messages = 3, Cause::HistoryRewritten),
        ];
        for (change, cause) in cases {
            let mut c = call(20_000, Some((0, 30_000)));
            change(&mut c);
            let v = after(c);
            assert_eq!(v.cause, Some(cause), "{}", v.evidence);
            assert_eq!(v.state, CacheState::Full);
        }
        // The harness's change wins over mc's execute on the same call.
        let mut c = call(20_000, Some((0, 30_000)));
        c.system_print = Some("s2".into());
        c.bust = "hard".into();
        c.decision = "execute".into();
        assert_eq!(after(c).cause, Some(Cause::SystemChanged));
    }

    #[test]
    fn nothing_changed_is_unknown_never_a_guess_and_small_shaves_are_no_bust() {
        let v = after(call(20_000, Some((20_000, 30_000))));
        assert_eq!(
            (v.state, v.cause),
            (CacheState::Partial, Some(Cause::Unknown))
        );
        // Within the tolerance (2 % of 52,000 = 1,040 tokens) it is stable.
        let v = after(call(20_000, Some((52_000 - 1_040, 0))));
        assert_eq!((v.state, v.cause), (CacheState::Stable, None));
        let v = after(call(20_000, Some((52_000 - 1_041, 0))));
        assert!(v.state.is_bust());
    }
}
