//! The scheduler: may this pass change bytes the provider already cached?
//!
//! Pure functions of the usage sample, the clock and the session's memory.
//! Provider-reported usage is the only measure of pressure it trusts.

use mc_base::codec::{Message, PartKind, Role};
use mc_base::config::CacheTtl;

use super::report::Decision;
use mc_base::domain::measure::{EMERGENCY_PERCENT, MAX_THRESHOLD_PERCENT, force_band};

/// A turn is mid-tool-use when the newest assistant step asked for tools and no
/// real user message followed it: the agent is still working, so an execute
/// would rewrite bytes between two steps of one turn.
pub fn is_mid_turn(messages: &[Message]) -> bool {
    let Some((last_assistant, msg)) = messages
        .iter()
        .enumerate()
        .rfind(|(_, m)| m.role() == Role::Assistant)
    else {
        return false;
    };
    if messages
        .iter()
        .skip(last_assistant + 1)
        .any(Message::is_real_user)
    {
        return false;
    }
    msg.finish() == Some("tool-calls")
        || msg
            .parts
            .iter()
            .any(|p| p.kind == PartKind::Tool && !p.provider_executed())
}

#[derive(Debug, Clone)]
pub struct SchedulerInput {
    pub usage_percent: f64,
    /// 0 when the provider has never answered in this session.
    pub last_response_ms: i64,
    pub now_ms: i64,
    pub ttl: CacheTtl,
    pub threshold: f64,
    pub mid_turn: bool,
    pub subagent: bool,
    /// An execute was deferred earlier because the turn was mid-tool-use.
    pub deferred_owed: bool,
    pub model_changed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    pub decision: Decision,
    pub reason: &'static str,
    /// An execute was due but waits for the turn to end.
    pub deferred_mid_turn: bool,
    pub force_band: bool,
    pub emergency: bool,
}

/// From this share of the execute threshold up, a pass whose cache is cold
/// anyway runs the relief drop too ([`cache_cold`]).
pub const RIDE_SHARE: f64 = 0.5;

/// Does a busting pass with this reason find the provider's cache cold
/// anyway (idle past the TTL, another model, another system prompt)? Then
/// what it changes costs nothing more, wherever it sits.
pub fn cache_cold(reason: &str) -> bool {
    matches!(
        reason,
        "ttl_expired" | "ttl_idle" | "model_change" | "system_change"
    )
}

pub fn ttl_expired(ttl: CacheTtl, last_response_ms: i64, now_ms: i64) -> bool {
    match ttl.as_millis() {
        None => false,
        // The clock comes from the envelope and the TTL from the config: both
        // may be anything, so neither wraps.
        Some(ms) => {
            last_response_ms > 0
                && now_ms.saturating_sub(last_response_ms) > i64::try_from(ms).unwrap_or(i64::MAX)
        }
    }
}

pub fn decide(input: &SchedulerInput) -> Schedule {
    let threshold = input.threshold.min(MAX_THRESHOLD_PERCENT);
    let force = input.usage_percent >= force_band(threshold);
    let emergency = input.usage_percent >= EMERGENCY_PERCENT;
    let schedule = |decision, reason| Schedule {
        decision,
        reason,
        deferred_mid_turn: false,
        force_band: force,
        emergency,
    };
    if input.usage_percent == 0.0 && input.last_response_ms == 0 {
        return schedule(Decision::Defer, "new_session");
    }
    let base = if input.usage_percent >= threshold {
        Some("threshold")
    } else if ttl_expired(input.ttl, input.last_response_ms, input.now_ms) {
        Some("ttl_expired")
    } else if input.model_changed {
        Some("model_change")
    } else if input.deferred_owed && !input.mid_turn {
        Some("deferred_execute")
    } else {
        None
    };
    let Some(reason) = base else {
        return schedule(Decision::Defer, "cache_warm");
    };
    if emergency {
        return schedule(Decision::Execute, "emergency");
    }
    if force {
        return schedule(Decision::Execute, "force_band");
    }
    if input.mid_turn && !input.subagent {
        return Schedule {
            deferred_mid_turn: true,
            ..schedule(Decision::Defer, "mid_turn")
        };
    }
    schedule(Decision::Execute, reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::codec::opencode::decode_all;
    use serde_json::json;

    fn input() -> SchedulerInput {
        SchedulerInput {
            usage_percent: 40.0,
            last_response_ms: 1_000_000,
            now_ms: 1_000_000 + 60_000,
            ttl: CacheTtl::Millis(300_000),
            threshold: 65.0,
            mid_turn: false,
            subagent: false,
            deferred_owed: false,
            model_changed: false,
        }
    }

    #[test]
    fn warm_cache_below_threshold_defers() {
        let s = decide(&input());
        assert_eq!((s.decision, s.reason), (Decision::Defer, "cache_warm"));
    }

    #[test]
    fn brand_new_session_defers() {
        let s = decide(&SchedulerInput {
            usage_percent: 0.0,
            last_response_ms: 0,
            ..input()
        });
        assert_eq!((s.decision, s.reason), (Decision::Defer, "new_session"));
    }

    #[test]
    fn threshold_is_inclusive() {
        let s = decide(&SchedulerInput {
            usage_percent: 65.0,
            ..input()
        });
        assert_eq!((s.decision, s.reason), (Decision::Execute, "threshold"));
        let s = decide(&SchedulerInput {
            usage_percent: 64.99,
            ..input()
        });
        assert_eq!(s.decision, Decision::Defer);
    }

    #[test]
    fn ttl_expiry_is_strict_and_never_means_never() {
        let at_ttl = SchedulerInput {
            now_ms: 1_000_000 + 300_000,
            ..input()
        };
        assert_eq!(decide(&at_ttl).decision, Decision::Defer);
        let past = SchedulerInput {
            now_ms: 1_000_000 + 300_001,
            ..input()
        };
        assert_eq!(
            (decide(&past).decision, decide(&past).reason),
            (Decision::Execute, "ttl_expired")
        );
        let never = SchedulerInput {
            ttl: CacheTtl::Never,
            now_ms: i64::MAX / 2,
            ..input()
        };
        assert_eq!(decide(&never).decision, Decision::Defer);
        let never_at_threshold = SchedulerInput {
            usage_percent: 70.0,
            ..never
        };
        assert_eq!(decide(&never_at_threshold).decision, Decision::Execute);
    }

    #[test]
    fn mid_turn_defers_an_execute_and_owes_it() {
        let s = decide(&SchedulerInput {
            usage_percent: 70.0,
            mid_turn: true,
            ..input()
        });
        assert_eq!(
            (s.decision, s.reason, s.deferred_mid_turn),
            (Decision::Defer, "mid_turn", true)
        );
        // Subagents are not deferred.
        let s = decide(&SchedulerInput {
            usage_percent: 70.0,
            mid_turn: true,
            subagent: true,
            ..input()
        });
        assert_eq!(s.decision, Decision::Execute);
        // A defer stays a defer mid-turn, and owes nothing.
        let s = decide(&SchedulerInput {
            mid_turn: true,
            ..input()
        });
        assert_eq!((s.decision, s.deferred_mid_turn), (Decision::Defer, false));
        // The owed execute happens at the turn's end even though the cache is warm.
        let s = decide(&SchedulerInput {
            deferred_owed: true,
            ..input()
        });
        assert_eq!(
            (s.decision, s.reason),
            (Decision::Execute, "deferred_execute")
        );
    }

    #[test]
    fn force_band_and_emergency_bypass_mid_turn() {
        let s = decide(&SchedulerInput {
            usage_percent: 85.0,
            mid_turn: true,
            ..input()
        });
        assert_eq!(
            (s.decision, s.reason, s.force_band),
            (Decision::Execute, "force_band", true)
        );
        let s = decide(&SchedulerInput {
            usage_percent: 95.0,
            mid_turn: true,
            ..input()
        });
        assert_eq!(
            (s.decision, s.reason, s.emergency),
            (Decision::Execute, "emergency", true)
        );
    }

    #[test]
    fn only_a_cache_that_expired_or_changed_model_or_prompt_is_cold() {
        for reason in ["ttl_expired", "ttl_idle", "model_change", "system_change"] {
            assert!(cache_cold(reason), "{reason}");
        }
        for reason in [
            "threshold",
            "force_band",
            "emergency",
            "deferred_execute",
            "cache_warm",
        ] {
            assert!(!cache_cold(reason), "{reason}");
        }
    }

    #[test]
    fn mid_turn_detection() {
        let msgs = |v| decode_all(v).unwrap();
        let tool_step = json!({"info": {"role": "assistant", "finish": "tool-calls"}, "parts": []});
        let stop_step = json!({"info": {"role": "assistant", "finish": "stop"}, "parts": [{"type": "text", "text": "done"}]});
        let user = json!({"info": {"role": "user"}, "parts": [{"type": "text", "text": "next"}]});
        let synthetic = json!({"info": {"role": "user"}, "parts": [{"type": "text", "text": "x", "synthetic": true}]});
        assert!(is_mid_turn(&msgs(vec![user.clone(), tool_step.clone()])));
        assert!(!is_mid_turn(&msgs(vec![user.clone(), stop_step.clone()])));
        assert!(!is_mid_turn(&msgs(vec![tool_step.clone(), user.clone()])));
        assert!(
            is_mid_turn(&msgs(vec![tool_step.clone(), synthetic])),
            "synthetic users don't end a turn"
        );
        assert!(!is_mid_turn(&msgs(vec![user])));
    }
}
