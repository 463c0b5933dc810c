//! Reduce nudges. Channel 1 appends a reminder to a new tool output; Channel 2
//! inserts one synthetic user reminder after a finished step. Both only land
//! on content the provider has never cached, and replay from stored state.

/// The live tail below which nothing is worth nudging about.
pub const MIN_TAIL: u64 = 60_000;
pub const CHANNEL1_MIN_REDUCIBLE: u64 = 25_000;
pub const CHANNEL2_MIN_REDUCIBLE: u64 = 50_000;
pub const CHANNEL2_SHARE: f64 = 0.75;
/// Channel 2 re-arms once the reducible mass falls below this.
pub const REARM_BELOW: u64 = 25_000;

/// 1 gentle, 2 firm, 3 urgent; 0 = no nudge.
pub fn channel1_level(total: u64, reducible: u64) -> u8 {
    if total < MIN_TAIL || reducible < CHANNEL1_MIN_REDUCIBLE {
        return 0;
    }
    let severity = reducible as f64 / total.max(1) as f64;
    match severity {
        s if s >= 0.60 => 3,
        s if s >= 0.40 => 2,
        s if s >= 0.20 => 1,
        _ => 0,
    }
}

/// Fire on a level escalation, or when the reducible mass grew by
/// `max(25 000, 8 % of the tail)` since the last nudge.
pub fn channel1_fires(
    level: u8,
    last_level: i64,
    total: u64,
    reducible: u64,
    last_reducible: i64,
) -> bool {
    if level == 0 {
        return false;
    }
    let step = 25_000f64.max(0.08 * total as f64);
    i64::from(level) > last_level || reducible as f64 >= last_reducible as f64 + step
}

pub fn channel1_text(level: u8, reducible: u64, oldest: &[(i64, String)]) -> String {
    let lead = match level {
        3 => "Context is filling up with output you no longer need.",
        2 => "A large share of this context is spent output.",
        _ => "Some older output in this context could go.",
    };
    let mut text = format!(
        "\n\n<system-reminder>\n{lead} About {}k tokens of older messages and tool outputs can be \
         dropped with ctx_reduce.",
        reducible.div_ceil(1000)
    );
    if !oldest.is_empty() {
        let list: Vec<String> = oldest
            .iter()
            .map(|(n, name)| format!("§{n}§ {name}"))
            .collect();
        text.push_str(&format!("\noldest reclaimable: {}", list.join(" · ")));
    }
    text.push_str("\n</system-reminder>");
    text
}

pub fn channel2_due(total: u64, reducible: u64) -> bool {
    total >= MIN_TAIL
        && reducible >= CHANNEL2_MIN_REDUCIBLE
        && reducible as f64 / total.max(1) as f64 >= CHANNEL2_SHARE
}

pub fn channel2_text(reducible: u64) -> String {
    format!(
        "<system-reminder>\nAbout {}k tokens of tool output in this conversation are spent and \
         not yet reduced. Before continuing, drop what you no longer need with ctx_reduce; older \
         history will be summarised soon.\n</system-reminder>",
        reducible.div_ceil(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel1_bands_and_floors() {
        assert_eq!(channel1_level(59_999, 50_000), 0);
        assert_eq!(channel1_level(100_000, 24_999), 0);
        assert_eq!(channel1_level(100_000, 25_000), 1);
        assert_eq!(channel1_level(100_000, 40_000), 2);
        assert_eq!(channel1_level(100_000, 60_000), 3);
        assert!(channel1_fires(1, 0, 100_000, 25_000, 0));
        assert!(
            !channel1_fires(1, 1, 100_000, 30_000, 25_000),
            "no escalation, small growth"
        );
        assert!(channel1_fires(1, 1, 100_000, 50_000, 25_000), "grew by 25k");
        assert!(channel1_fires(2, 1, 100_000, 40_000, 39_000), "escalation");
    }

    #[test]
    fn channel2_threshold() {
        assert!(channel2_due(80_000, 60_000));
        assert!(!channel2_due(80_000, 59_000), "below 75 %");
        assert!(!channel2_due(59_000, 59_000));
        assert!(channel1_text(1, 30_500, &[(3, "read".into())]).contains("§3§ read"));
        assert!(channel2_text(51_000).contains("51k"));
    }
}
