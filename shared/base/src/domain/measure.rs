//! How full the window is: the usable window of a model, usage as a share
//! of it, and the bands every subsystem measures against.

use super::envelope::ModelInfo;

/// Used for pressure math when the envelope names no context limit.
pub const DEFAULT_CONTEXT_LIMIT: u64 = 128_000;
/// Absolute band where the pass reports an emergency.
pub const EMERGENCY_PERCENT: f64 = 95.0;
/// Hard cap on the execute threshold.
pub const MAX_THRESHOLD_PERCENT: f64 = 90.0;

/// The usable input window: the context limit less an output reserve of
/// `min(output_limit, 25 % of context)`, never below `max(1024, 50 % of context)`.
pub fn usable_window(model: &ModelInfo) -> u64 {
    let context = model
        .context_limit
        .filter(|&c| c > 0)
        .unwrap_or(DEFAULT_CONTEXT_LIMIT);
    let reserve = model.output_limit.unwrap_or(0).min(context / 4);
    let floor = 1024.max(context / 2);
    context.saturating_sub(reserve).max(floor)
}

/// `max(85, min(threshold, 90) + 2)`: where the pass stops waiting for turn ends.
pub fn force_band(threshold: f64) -> f64 {
    85f64.max(threshold.min(MAX_THRESHOLD_PERCENT) + 2.0)
}

pub fn usage_percent(prompt_tokens: u64, window: u64) -> f64 {
    if window == 0 {
        return 0.0;
    }
    prompt_tokens as f64 / window as f64 * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_follow_the_threshold() {
        assert_eq!(force_band(65.0), 85.0);
        assert_eq!(force_band(88.0), 90.0);
        assert_eq!(force_band(99.0), 92.0);
    }

    #[test]
    fn usable_window_reserves_output() {
        let m = |c, o| ModelInfo {
            context_limit: c,
            output_limit: o,
            ..Default::default()
        };
        assert_eq!(usable_window(&m(Some(200_000), Some(32_000))), 168_000);
        // Reserve capped at a quarter of the context.
        assert_eq!(usable_window(&m(Some(200_000), Some(128_000))), 150_000);
        assert_eq!(usable_window(&m(None, None)), DEFAULT_CONTEXT_LIMIT);
        assert_eq!(usable_window(&m(Some(1000), Some(900))), 1024);
    }
}
