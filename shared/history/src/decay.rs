//! Decay renderer for historian compartments (transform spec §8).
//!
//! A compartment is a historian summary of a range of the conversation with four
//! paraphrase tiers, `p1` (verbose) … `p4` (one line), and an importance 1..=100.
//! The renderer chooses one tier per compartment from a deterministic decay curve —
//! the further a compartment is from the newest one, and the lower its importance,
//! the sparser its tier, until it is archived (rendered as nothing) — so old history
//! fades instead of disappearing all at once.
//!
//! The curve: with `a = index − 1` (index counted from the newest compartment, newest
//! = 1), `H = H50 · 2^((I − 50) / D) / max(p, 0.10)` and `z = a / H`, the tier is the
//! first of P1..P4 whose bound in [`TIER_BOUNDS`] exceeds `z`; `z ≥ 2.587` archives.
//! The pressure `p` is computed once per render from the tier costs at `p = 1` against
//! the history budget. After the curve, a hard budget pass demotes the oldest visible
//! compartments one tier at a time until the rendered text fits.
//!
//! Everything here is pure: no clock, no environment, no I/O. The same input always
//! renders to the same bytes, which the frozen m[0] block relies on.

/// Half-life (in compartments) of an importance-50 compartment at pressure 1.
pub const H50: f64 = 24.0;

/// Importance steps that double (or halve) the half-life.
pub const D: f64 = 25.0;

/// Upper bounds of `z` for P1, P2, P3 and P4; `z` at or past the last bound archives.
pub const TIER_BOUNDS: [f64; 4] = [0.201, 0.729, 1.322, 2.587];

/// Average token cost of P1, P2, P3, P4 and an archived compartment.
///
/// Used only to estimate pressure. Per spec §8.3 the pressure sum counts archived
/// compartments as 0, so the last entry is informational.
pub const TIER_COST: [u64; 5] = [322, 109, 35, 20, 5];

/// Pressure never goes below this, so a roomy budget at most multiplies every
/// half-life by ten.
pub const MIN_PRESSURE: f64 = 0.10;

/// Lowest importance; smaller stored values are treated as this.
pub const MIN_IMPORTANCE: i64 = 1;

/// Highest importance; larger stored values are treated as this.
pub const MAX_IMPORTANCE: i64 = 100;

/// Separator between rendered compartments: one blank line.
const SEPARATOR: &str = "\n\n";

/// One historian compartment as the renderer needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compartment {
    /// Position in the session's compartment list; compartments are rendered in
    /// ascending sequence order.
    pub sequence: i64,
    /// First raw message ordinal the compartment covers.
    pub start_ordinal: i64,
    /// Last raw message ordinal the compartment covers.
    pub end_ordinal: i64,
    /// Creation time (Unix milliseconds) of the first covered message, if known.
    pub start_ms: Option<i64>,
    /// Creation time (Unix milliseconds) of the last covered message, if known.
    pub end_ms: Option<i64>,
    /// One-line title; sanitised and escaped when rendered.
    pub title: String,
    /// Paraphrase tiers `p1` (verbose) … `p4` (one line).
    pub tiers: [String; 4],
    /// Decay-rate importance; clamped to `1..=100` wherever it is used.
    pub importance: i64,
}

/// The tier a compartment renders at, densest first.
///
/// Ordering follows sparseness: `P1 < P2 < P3 < P4 < Archived`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    P1,
    P2,
    P3,
    P4,
    Archived,
}

impl Tier {
    /// Every tier, densest first.
    pub const ALL: [Tier; 5] = [Tier::P1, Tier::P2, Tier::P3, Tier::P4, Tier::Archived];

    /// The tier number as the spec writes it: 1..=4 for P1..P4, 5 for archived.
    pub fn number(self) -> u8 {
        match self {
            Tier::P1 => 1,
            Tier::P2 => 2,
            Tier::P3 => 3,
            Tier::P4 => 4,
            Tier::Archived => 5,
        }
    }

    /// One step sparser; archived stays archived.
    fn demoted(self) -> Tier {
        match self {
            Tier::P1 => Tier::P2,
            Tier::P2 => Tier::P3,
            Tier::P3 => Tier::P4,
            Tier::P4 | Tier::Archived => Tier::Archived,
        }
    }

    /// Whether the compartment renders as nothing.
    fn is_archived(self) -> bool {
        self == Tier::Archived
    }

    /// Index into [`Compartment::tiers`] (0 for P1 … 3 for P4); `None` when archived.
    fn text_index(self) -> Option<usize> {
        match self {
            Tier::Archived => None,
            tier => Some(usize::from(tier.number() - 1)),
        }
    }

    /// Cost of the tier in the pressure sum (archived costs nothing there).
    fn pressure_cost(self) -> u64 {
        self.text_index()
            .and_then(|index| TIER_COST.get(index))
            .copied()
            .unwrap_or(0)
    }
}

/// Half-life in compartments: `H50 · 2^((clamp(I, 1, 100) − 50) / D) / max(p, 0.10)`.
///
/// A NaN pressure counts as the floor.
fn half_life(importance: i64, pressure: f64) -> f64 {
    let importance = importance.clamp(MIN_IMPORTANCE, MAX_IMPORTANCE) as f64;
    let factor = ((importance - 50.0) / D).exp2();
    H50 * factor / pressure.max(MIN_PRESSURE)
}

/// The curve's tier for the compartment at 1-based `index_from_newest` (newest = 1).
///
/// `z = (index − 1) / H`; the newest compartment is always P1 (an index of 0 is
/// treated as 1). `z ≥ 2.587` (or a non-finite `z`) archives.
fn tier_at(index_from_newest: usize, importance: i64, pressure: f64) -> Tier {
    let age = index_from_newest.saturating_sub(1);
    if age == 0 {
        return Tier::P1;
    }
    let z = age as f64 / half_life(importance, pressure);
    tier_for_z(z)
}

/// Maps a decay coordinate to a tier; NaN falls through to archived.
fn tier_for_z(z: f64) -> Tier {
    if z < TIER_BOUNDS[0] {
        Tier::P1
    } else if z < TIER_BOUNDS[1] {
        Tier::P2
    } else if z < TIER_BOUNDS[2] {
        Tier::P3
    } else if z < TIER_BOUNDS[3] {
        Tier::P4
    } else {
        Tier::Archived
    }
}

/// Budget pressure: `max(0.10, Σ cost / budget)`, the sum taken over every compartment
/// at its `p = 1` tier with archived ones costing 0. A zero budget means "no budget"
/// and gives 1.0.
pub fn pressure(compartments: &[Compartment], budget_tokens: u64) -> f64 {
    if budget_tokens == 0 {
        return 1.0;
    }
    pressure_against(compartments, budget_tokens as f64)
}

/// [`pressure`] against a fractional (effective) budget.
fn pressure_against(compartments: &[Compartment], budget: f64) -> f64 {
    if budget.is_nan() || budget <= 0.0 {
        return 1.0;
    }
    let count = compartments.len();
    let total: u64 = compartments
        .iter()
        .enumerate()
        .map(|(i, c)| tier_at(count - i, c.importance, 1.0).pressure_cost())
        .fold(0u64, u64::saturating_add);
    (total as f64 / budget).max(MIN_PRESSURE)
}

/// How [`render`] and [`render_one`] shape their output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenderOptions {
    /// History budget in tokens; 0 means unbudgeted (pressure 1, no demotion).
    pub budget_tokens: u64,
    /// 1.0 normally; above 1 tightens: the effective budget (for pressure and for
    /// enforcement alike) is `budget_tokens / pressure_multiplier`. A non-finite or
    /// non-positive value is treated as 1.0.
    pub pressure_multiplier: f64,
    /// Whether headings carry the date range (only when both times are known).
    pub dates: bool,
    /// Local-time offset from UTC in minutes, applied before taking calendar dates.
    pub utc_offset_minutes: i32,
}

impl RenderOptions {
    /// The budget the render is held to, or `None` when unbudgeted.
    fn effective_budget(&self) -> Option<f64> {
        if self.budget_tokens == 0 {
            return None;
        }
        let multiplier = if self.pressure_multiplier.is_finite() && self.pressure_multiplier > 0.0 {
            self.pressure_multiplier
        } else {
            1.0
        };
        Some(self.budget_tokens as f64 / multiplier)
    }
}

/// The result of [`render`].
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Compartments oldest→newest, separated by one blank line; empty when all are
    /// archived or there are none.
    pub text: String,
    /// The final tier of every input compartment, in input order, keyed by sequence.
    pub tiers: Vec<(i64, Tier)>,
    /// The pressure the curve was evaluated at.
    pub pressure: f64,
    /// Token count of `text` (0 for empty text).
    pub tokens: u64,
}

/// Renders `compartments` (ordered by sequence, oldest first) into one text block.
///
/// Tiers come from [`tier_at`] at the render's pressure; then, with a budget, the
/// oldest not-yet-archived compartment is demoted one tier at a time while the summed
/// per-compartment token counts exceed the effective budget, and after that while the
/// joined text still does. `count_tokens` is called once per (compartment, tier)
/// actually considered plus once per joined-text check.
pub fn render(
    compartments: &[Compartment],
    options: &RenderOptions,
    count_tokens: &dyn Fn(&str) -> u64,
) -> Rendered {
    let count = compartments.len();
    let budget = options.effective_budget();
    let pressure = match budget {
        Some(budget) => pressure_against(compartments, budget),
        None => 1.0,
    };
    let mut tiers: Vec<Tier> = compartments
        .iter()
        .enumerate()
        .map(|(i, c)| tier_at(count - i, c.importance, pressure))
        .collect();
    let mut pieces = PieceCache::new(compartments, options, count_tokens);

    let (text, tokens) = match budget {
        None => {
            let text = pieces.join(&tiers);
            let tokens = count_text(&text, count_tokens);
            (text, tokens)
        }
        Some(budget) => enforce_budget(&mut tiers, &mut pieces, budget, count_tokens),
    };

    Rendered {
        text,
        tiers: compartments
            .iter()
            .zip(&tiers)
            .map(|(c, &tier)| (c.sequence, tier))
            .collect(),
        pressure,
        tokens,
    }
}

/// Demotes oldest-first until the render fits `budget`; returns the final text and
/// its token count.
fn enforce_budget(
    tiers: &mut [Tier],
    pieces: &mut PieceCache<'_>,
    budget: f64,
    count_tokens: &dyn Fn(&str) -> u64,
) -> (String, u64) {
    // Every demotion moves one compartment one tier sparser, so at most 4 × N are
    // possible; the guard only protects against a logic error.
    let mut steps_left = tiers.len().saturating_mul(5);
    let mut oldest = 0;

    // Phase 1: the sum of per-compartment counts (separators not included).
    let mut sum = tiers
        .iter()
        .enumerate()
        .map(|(i, &tier)| pieces.tokens(i, tier))
        .fold(0u64, u64::saturating_add);
    while sum as f64 > budget && steps_left > 0 {
        let Some((i, tier)) = next_visible(tiers, &mut oldest) else {
            break;
        };
        let before = pieces.tokens(i, *tier);
        *tier = tier.demoted();
        let after = pieces.tokens(i, *tier);
        sum = sum.saturating_sub(before).saturating_add(after);
        steps_left -= 1;
    }

    // Phase 2: the joined text, whose count can differ from the sum (separators,
    // tokens merging across piece boundaries).
    loop {
        let text = pieces.join(tiers);
        let tokens = count_text(&text, count_tokens);
        if tokens as f64 <= budget || steps_left == 0 {
            return (text, tokens);
        }
        let Some((_, tier)) = next_visible(tiers, &mut oldest) else {
            return (text, tokens);
        };
        *tier = tier.demoted();
        steps_left -= 1;
    }
}

/// The oldest compartment that is not archived yet (its index and tier), advancing
/// `cursor` past archived ones (demotion only ever archives from the front, so the
/// cursor never goes back).
fn next_visible<'t>(tiers: &'t mut [Tier], cursor: &mut usize) -> Option<(usize, &'t mut Tier)> {
    while tiers.get(*cursor).is_some_and(|tier| tier.is_archived()) {
        *cursor += 1;
    }
    tiers.get_mut(*cursor).map(|tier| (*cursor, tier))
}

/// Token count of a joined text; the empty text costs nothing.
fn count_text(text: &str, count_tokens: &dyn Fn(&str) -> u64) -> u64 {
    if text.is_empty() {
        0
    } else {
        count_tokens(text)
    }
}

/// A rendered compartment at one tier and its token count.
struct Piece {
    text: String,
    tokens: u64,
}

/// Renders and counts each (compartment, tier) at most once.
struct PieceCache<'a> {
    compartments: &'a [Compartment],
    options: &'a RenderOptions,
    count_tokens: &'a dyn Fn(&str) -> u64,
    slots: Vec<[Option<Piece>; 4]>,
}

impl<'a> PieceCache<'a> {
    fn new(
        compartments: &'a [Compartment],
        options: &'a RenderOptions,
        count_tokens: &'a dyn Fn(&str) -> u64,
    ) -> Self {
        let slots = compartments
            .iter()
            .map(|_| [None, None, None, None])
            .collect();
        PieceCache {
            compartments,
            options,
            count_tokens,
            slots,
        }
    }

    /// Renders (if needed) and returns the piece; `None` for archived.
    fn piece(&mut self, index: usize, tier: Tier) -> Option<&Piece> {
        let slot_index = tier.text_index()?;
        let slot = self.slots.get_mut(index)?.get_mut(slot_index)?;
        if slot.is_none() {
            let text = render_one(self.compartments.get(index)?, tier, self.options);
            let tokens = (self.count_tokens)(&text);
            *slot = Some(Piece { text, tokens });
        }
        slot.as_ref()
    }

    fn tokens(&mut self, index: usize, tier: Tier) -> u64 {
        self.piece(index, tier).map_or(0, |piece| piece.tokens)
    }

    /// The visible pieces at `tiers`, oldest first, separated by a blank line.
    fn join(&mut self, tiers: &[Tier]) -> String {
        let mut text = String::new();
        for (i, &tier) in tiers.iter().enumerate() {
            if let Some(piece) = self.piece(i, tier) {
                if !text.is_empty() {
                    text.push_str(SEPARATOR);
                }
                text.push_str(&piece.text);
            }
        }
        text
    }
}

/// Renders one compartment at `tier`: the heading, then (when the body is not empty)
/// a newline and the body. Archived renders as the empty string.
///
/// Used directly for m[1]'s new compartments, which always show at full tier.
pub fn render_one(c: &Compartment, tier: Tier, options: &RenderOptions) -> String {
    let Some(slot) = tier.text_index() else {
        return String::new();
    };
    let mut out = heading(c, options);
    let body = body(c, slot);
    if !body.is_empty() {
        out.push('\n');
        out.push_str(&body);
    }
    out
}

/// `## <start>-<end> · <date range> · <title>`, leaving out the date segment without
/// dates and the title segment when the sanitised title is empty.
fn heading(c: &Compartment, options: &RenderOptions) -> String {
    let mut out = format!("## {}-{}", c.start_ordinal, c.end_ordinal);
    if options.dates
        && let (Some(start), Some(end)) = (c.start_ms, c.end_ms)
    {
        out.push_str(" · ");
        out.push_str(&date_range(start, end, options.utc_offset_minutes));
    }
    let title = sanitize_title(&c.title);
    if !title.is_empty() {
        out.push_str(" · ");
        out.push_str(&title);
    }
    out
}

/// Whether a title character starts or continues a run that collapses to one space.
fn is_title_break(ch: char) -> bool {
    ch.is_control() || ch == '\u{2028}' || ch == '\u{2029}'
}

/// Collapses each run of control characters and line/paragraph separators to one
/// space, trims, and XML-escapes.
fn sanitize_title(raw: &str) -> String {
    let mut collapsed = String::with_capacity(raw.len());
    let mut in_break = false;
    for ch in raw.chars() {
        if is_title_break(ch) {
            if !in_break {
                collapsed.push(' ');
            }
            in_break = true;
        } else {
            collapsed.push(ch);
            in_break = false;
        }
    }
    let mut out = String::with_capacity(collapsed.len());
    push_escaped(&mut out, collapsed.trim());
    out
}

/// The body for tier slot `slot` (0 = p1): that tier's text or, when it is blank, the
/// next denser non-blank one; line endings normalised to `\n`, trimmed, XML-escaped,
/// and every line starting with `## ` indented by one space so a body cannot forge a
/// compartment heading. Empty when every candidate tier is blank.
fn body(c: &Compartment, slot: usize) -> String {
    let Some(raw) = c
        .tiers
        .iter()
        .take(slot + 1)
        .rev()
        .map(|text| text.trim())
        .find(|text| !text.is_empty())
    else {
        return String::new();
    };
    let normalised = raw.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(normalised.len() + 16);
    for (i, line) in normalised.trim().split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if line.starts_with("## ") {
            out.push(' ');
        }
        push_escaped(&mut out, line);
    }
    out
}

/// Appends `text` with `&`, `<` and `>` escaped.
fn push_escaped(out: &mut String, text: &str) {
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            other => out.push(other),
        }
    }
}

/// `2026-08-01` (same day), `2026-08-01→14` (same month) or `2026-07-30→2026-08-02`,
/// from the two timestamps shifted by the UTC offset.
fn date_range(start_ms: i64, end_ms: i64, utc_offset_minutes: i32) -> String {
    let (y1, m1, d1) = local_date(start_ms, utc_offset_minutes);
    let (y2, m2, d2) = local_date(end_ms, utc_offset_minutes);
    if (y1, m1, d1) == (y2, m2, d2) {
        format!("{y1:04}-{m1:02}-{d1:02}")
    } else if (y1, m1) == (y2, m2) {
        format!("{y1:04}-{m1:02}-{d1:02}→{d2:02}")
    } else {
        format!("{y1:04}-{m1:02}-{d1:02}→{y2:04}-{m2:02}-{d2:02}")
    }
}

const MS_PER_DAY: i64 = 86_400_000;

/// The calendar date of a Unix-millisecond instant at a fixed UTC offset.
fn local_date(ms: i64, utc_offset_minutes: i32) -> (i64, u32, u32) {
    let shifted = ms.saturating_add(i64::from(utc_offset_minutes) * 60_000);
    civil_from_days(shifted.div_euclid(MS_PER_DAY))
}

/// Proleptic Gregorian (year, month, day) for a count of days since 1970-01-01.
///
/// Works in a calendar whose years start on 1 March, so the leap day is the last day
/// of its year, and splits days into 400-year eras of 146,097 days each.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // 0000-03-01 is 719,468 days before 1970-01-01.
    let since_epoch0 = days + 719_468;
    let era = since_epoch0.div_euclid(146_097);
    let day_of_era = since_epoch0.rem_euclid(146_097); // 0..=146_096
    // Year within the era: remove the leap days accumulated so far (one per 4 years,
    // none per 100, one per 400) before dividing by 365.
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March: 153-day blocks of five months (31,30,31,30,31).
    let month_from_march = (5 * day_of_year + 2) / 153; // 0..=11
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1; // 1..=31
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace-separated words: pieces joined by blank lines sum exactly.
    fn words(text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }

    fn compartment(sequence: i64, importance: i64) -> Compartment {
        Compartment {
            sequence,
            start_ordinal: sequence,
            end_ordinal: sequence,
            start_ms: None,
            end_ms: None,
            title: format!("T{sequence}"),
            tiers: [
                format!("full {sequence}"),
                format!("short {sequence}"),
                format!("brief {sequence}"),
                format!("anchor {sequence}"),
            ],
            importance,
        }
    }

    fn many(count: i64, importance: i64) -> Vec<Compartment> {
        (1..=count).map(|s| compartment(s, importance)).collect()
    }

    fn options(budget_tokens: u64) -> RenderOptions {
        RenderOptions {
            budget_tokens,
            pressure_multiplier: 1.0,
            dates: false,
            utc_offset_minutes: 0,
        }
    }

    fn tier_list(rendered: &Rendered) -> Vec<Tier> {
        rendered.tiers.iter().map(|&(_, tier)| tier).collect()
    }

    #[test]
    fn tier_numbers_round_trip() {
        for (i, tier) in Tier::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(tier.number()), i + 1);
        }
        assert_eq!(Tier::P4.demoted(), Tier::Archived);
        assert_eq!(Tier::Archived.demoted(), Tier::Archived);
    }

    #[test]
    fn golden_tiers_at_importance_50_and_pressure_1() {
        assert_eq!(half_life(50, 1.0), 24.0);
        for index in 1..=200 {
            let expected = match index {
                1..=5 => Tier::P1,
                6..=18 => Tier::P2,
                19..=32 => Tier::P3,
                33..=63 => Tier::P4,
                _ => Tier::Archived,
            };
            assert_eq!(tier_at(index, 50, 1.0), expected, "index {index}");
        }
        // Both sides of every boundary, spelled out.
        let sides = [
            (5, Tier::P1),
            (6, Tier::P2),
            (18, Tier::P2),
            (19, Tier::P3),
            (32, Tier::P3),
            (33, Tier::P4),
            (63, Tier::P4),
            (64, Tier::Archived),
        ];
        for (index, tier) in sides {
            assert_eq!(tier_at(index, 50, 1.0), tier, "index {index}");
        }
        // Index 0 is treated as the newest.
        assert_eq!(tier_at(0, 50, 1.0), Tier::P1);
    }

    #[test]
    fn importance_extremes_archive_where_the_spec_says() {
        assert_eq!(half_life(100, 1.0), 96.0);
        assert_eq!(tier_at(249, 100, 1.0), Tier::P4);
        assert_eq!(tier_at(250, 100, 1.0), Tier::Archived);
        assert!((half_life(1, 1.0) - 6.1687).abs() < 1e-3);
        assert_eq!(tier_at(16, 1, 1.0), Tier::P4);
        assert_eq!(tier_at(17, 1, 1.0), Tier::Archived);
        // Out-of-range importance clamps.
        for index in [2, 16, 17, 249, 250] {
            assert_eq!(tier_at(index, 0, 1.0), tier_at(index, 1, 1.0));
            assert_eq!(tier_at(index, -7, 1.0), tier_at(index, 1, 1.0));
            assert_eq!(tier_at(index, 1_000, 1.0), tier_at(index, 100, 1.0));
        }
    }

    #[test]
    fn pressure_two_halves_the_half_life() {
        assert_eq!(half_life(50, 2.0), 12.0);
        assert_eq!(half_life(100, 2.0), 48.0);
        // At p = 1 position 33 is P4; with H = 12 the archive boundary moves to 33.
        assert_eq!(tier_at(33, 50, 1.0), Tier::P4);
        assert_eq!(tier_at(32, 50, 2.0), Tier::P4);
        assert_eq!(tier_at(33, 50, 2.0), Tier::Archived);
        // The P1 boundary moves from 5|6 to 3|4.
        assert_eq!(tier_at(3, 50, 2.0), Tier::P1);
        assert_eq!(tier_at(4, 50, 2.0), Tier::P2);
        // Pressure is floored at 0.10 (and NaN counts as the floor).
        assert_eq!(half_life(50, 0.0), 240.0);
        assert_eq!(half_life(50, 0.01), half_life(50, 0.10));
        assert_eq!(half_life(50, f64::NAN), 240.0);
        // Even infinite pressure keeps the newest compartment.
        assert_eq!(tier_at(1, 1, f64::INFINITY), Tier::P1);
        assert_eq!(tier_at(2, 100, f64::INFINITY), Tier::Archived);
    }

    #[test]
    fn tiers_are_monotone_in_age_importance_and_pressure() {
        for importance in 1..=100 {
            let mut previous = Tier::P1;
            for index in 1..=400 {
                let tier = tier_at(index, importance, 1.0);
                assert!(tier >= previous, "age: I={importance} index={index}");
                previous = tier;
            }
        }
        for index in 1..=400 {
            let mut previous = Tier::Archived;
            for importance in 1..=100 {
                let tier = tier_at(index, importance, 1.0);
                assert!(tier <= previous, "importance: I={importance} index={index}");
                previous = tier;
            }
        }
        for index in [2, 10, 40, 120] {
            let mut previous = Tier::P1;
            for step in 1..=60 {
                let tier = tier_at(index, 50, f64::from(step) * 0.1);
                assert!(tier >= previous, "pressure: index={index} step={step}");
                previous = tier;
            }
        }
    }

    #[test]
    fn pressure_ignores_archived_cost() {
        // 5 × 322 + 13 × 109 + 14 × 35 + 31 × 20 = 4137 for the 63 visible positions.
        let visible = many(63, 50);
        assert_eq!(pressure(&visible, 1), 4137.0);
        assert_eq!(pressure(&visible, 4137), 1.0);
        for count in [64, 70, 500] {
            assert_eq!(pressure(&many(count, 50), 1), 4137.0, "count {count}");
        }
        // Floor, zero budget, and the empty list.
        assert_eq!(pressure(&many(1, 50), 1_000_000), MIN_PRESSURE);
        assert_eq!(pressure(&visible, 0), 1.0);
        assert_eq!(pressure(&[], 100), MIN_PRESSURE);
    }

    /// A compartment whose pieces count 200 / 100 / 50 / 10 words at P1..P4 with
    /// dates off: the heading `## n-n · T` is 4 words.
    fn sized(sequence: i64) -> Compartment {
        let body = |n: usize| vec!["w"; n].join(" ");
        Compartment {
            sequence,
            start_ordinal: sequence,
            end_ordinal: sequence,
            start_ms: None,
            end_ms: None,
            title: "T".to_owned(),
            tiers: [body(196), body(96), body(46), body(6)],
            importance: 50,
        }
    }

    #[test]
    fn budget_demotes_the_oldest_first() {
        let list: Vec<_> = (1..=3).map(sized).collect();
        assert_eq!(words(&render_one(&list[0], Tier::P1, &options(0))), 200);
        assert_eq!(words(&render_one(&list[0], Tier::P4, &options(0))), 10);

        // Budget 420: p = 966/420 = 2.3, every curve tier P1 (sum 600). The oldest goes
        // P2 (500), P3 (450), P4 (410) and then fits.
        let rendered = render(&list, &options(420), &words);
        assert_eq!(rendered.pressure, 2.3);
        assert_eq!(tier_list(&rendered), [Tier::P4, Tier::P1, Tier::P1]);
        assert_eq!(rendered.tokens, 410);

        // Budget 300: p = 3.22 puts the oldest at P2 on the curve (sum 500). It is
        // archived (450, 410, 400) before the middle one is touched (P2 → 300).
        let calls = std::cell::Cell::new(0u32);
        let counted = |text: &str| {
            calls.set(calls.get() + 1);
            words(text)
        };
        let rendered = render(&list, &options(300), &counted);
        assert_eq!(tier_list(&rendered), [Tier::Archived, Tier::P2, Tier::P1]);
        // Memoised: six distinct (compartment, tier) pieces (1: P2, P3, P4; 2: P1, P2;
        // 3: P1) plus one joined-text check.
        assert_eq!(calls.get(), 7);
        assert_eq!(rendered.tokens, 300);
        assert!(!rendered.text.contains("## 1-1"));
        assert!(rendered.text.starts_with("## 2-2 · T\n"));
        assert_eq!(
            rendered.tiers,
            vec![(1, Tier::Archived), (2, Tier::P2), (3, Tier::P1)]
        );

        // The multiplier divides the budget: 600 / 2 behaves like 300.
        let tightened = RenderOptions {
            pressure_multiplier: 2.0,
            ..options(600)
        };
        assert_eq!(render(&list, &tightened, &words), rendered);
        // A nonsensical multiplier is ignored.
        let ignored = RenderOptions {
            pressure_multiplier: f64::NAN,
            ..options(300)
        };
        assert_eq!(render(&list, &ignored, &words), rendered);
    }

    #[test]
    fn budget_rechecks_the_joined_text() {
        // 100 tokens per line: the blank separator line is invisible to the per-piece
        // sum but counted in the joined text.
        let lines = |text: &str| 100 * text.split('\n').count() as u64;
        let mut list = vec![compartment(1, 50), compartment(2, 50)];
        for c in &mut list {
            c.tiers[0] = "a\nb\nc".to_owned();
            c.tiers[1] = "a\nb".to_owned();
        }
        // Pieces: 400 each at P1, sum 800 fits; joined 9 lines = 900 does not, so the
        // oldest drops to P2 (3 + 1 + 4 lines = 800).
        let rendered = render(&list, &options(800), &lines);
        assert_eq!(tier_list(&rendered), [Tier::P2, Tier::P1]);
        assert_eq!(rendered.tokens, 800);
        assert_eq!(rendered.text, "## 1-1 · T1\na\nb\n\n## 2-2 · T2\na\nb\nc");
    }

    #[test]
    fn budget_can_archive_everything() {
        let list: Vec<_> = (1..=3).map(sized).collect();
        let rendered = render(&list, &options(5), &words);
        assert_eq!(tier_list(&rendered), [Tier::Archived; 3]);
        assert_eq!(rendered.text, "");
        assert_eq!(rendered.tokens, 0);
    }

    #[test]
    fn renders_a_small_example_exactly() {
        let list = vec![
            Compartment {
                sequence: 1,
                start_ordinal: 1,
                end_ordinal: 12,
                start_ms: Some(1_785_448_800_000), // 2026-07-30T22:00Z
                end_ms: Some(1_785_661_200_000),   // 2026-08-02T09:00Z
                title: "Set up workspace".to_owned(),
                tiers: [
                    "Created the workspace with three crates and CI.".to_owned(),
                    "Scaffolded the workspace & crates.".to_owned(),
                    "Workspace <scaffold>.".to_owned(),
                    "Workspace.".to_owned(),
                ],
                importance: 1,
            },
            Compartment {
                sequence: 2,
                start_ordinal: 13,
                end_ordinal: 30,
                start_ms: Some(1_785_744_000_000), // 2026-08-03T08:00Z
                end_ms: Some(1_785_778_200_000),   // 2026-08-03T17:30Z
                title: "Tokenizer".to_owned(),
                tiers: [
                    "Wired tiktoken in and measured it.".to_owned(),
                    "Added the tokenizer.".to_owned(),
                    "Tokenizer.".to_owned(),
                    "Tok.".to_owned(),
                ],
                importance: 1,
            },
            Compartment {
                sequence: 3,
                start_ordinal: 31,
                end_ordinal: 44,
                start_ms: Some(1_785_837_600_000), // 2026-08-04T10:00Z
                end_ms: Some(1_786_708_800_000),   // 2026-08-14T12:00Z
                title: "Decay renderer".to_owned(),
                tiers: [
                    "  Wrote the decay renderer.\nTiers follow the curve.\n".to_owned(),
                    "Wrote the renderer.".to_owned(),
                    "Renderer.".to_owned(),
                    "R.".to_owned(),
                ],
                importance: 50,
            },
        ];
        let options = RenderOptions {
            dates: true,
            ..options(300)
        };
        let rendered = render(&list, &options, &words);
        // Costs at p = 1: 322 + 322 + 109 (the oldest, importance 1, is P2) = 753.
        assert_eq!(rendered.pressure, 753.0 / 300.0);
        assert_eq!(tier_list(&rendered), [Tier::P3, Tier::P2, Tier::P1]);
        let expected = "## 1-12 · 2026-07-30→2026-08-02 · Set up workspace\n\
                        Workspace &lt;scaffold&gt;.\n\
                        \n\
                        ## 13-30 · 2026-08-03 · Tokenizer\n\
                        Added the tokenizer.\n\
                        \n\
                        ## 31-44 · 2026-08-04→14 · Decay renderer\n\
                        Wrote the decay renderer.\n\
                        Tiers follow the curve.";
        assert_eq!(rendered.text, expected);
        assert_eq!(rendered.tokens, words(expected));
    }

    fn dated(start_ms: i64, end_ms: i64) -> Compartment {
        Compartment {
            start_ordinal: 12,
            end_ordinal: 40,
            start_ms: Some(start_ms),
            end_ms: Some(end_ms),
            title: "Title".to_owned(),
            ..Compartment::default()
        }
    }

    fn dated_heading(c: &Compartment, utc_offset_minutes: i32) -> String {
        let options = RenderOptions {
            dates: true,
            utc_offset_minutes,
            ..options(0)
        };
        render_one(c, Tier::P4, &options)
    }

    #[test]
    fn date_ranges_compress_by_day_month_and_year() {
        // 2026-08-03T08:00Z → 2026-08-03T17:30Z
        let same_day = dated(1_785_744_000_000, 1_785_778_200_000);
        assert_eq!(dated_heading(&same_day, 0), "## 12-40 · 2026-08-03 · Title");
        // 2026-08-04T10:00Z → 2026-08-14T12:00Z
        let same_month = dated(1_785_837_600_000, 1_786_708_800_000);
        assert_eq!(
            dated_heading(&same_month, 0),
            "## 12-40 · 2026-08-04→14 · Title"
        );
        // 2026-07-30T22:00Z → 2026-08-02T09:00Z
        let months = dated(1_785_448_800_000, 1_785_661_200_000);
        assert_eq!(
            dated_heading(&months, 0),
            "## 12-40 · 2026-07-30→2026-08-02 · Title"
        );
        // 2025-12-31T12:00Z → 2026-01-01T12:00Z
        let years = dated(1_767_182_400_000, 1_767_268_800_000);
        assert_eq!(
            dated_heading(&years, 0),
            "## 12-40 · 2025-12-31→2026-01-01 · Title"
        );
        // Leap day 2024-02-29T00:00Z → 2024-03-01T00:00Z
        let leap = dated(1_709_164_800_000, 1_709_251_200_000);
        assert_eq!(
            dated_heading(&leap, 0),
            "## 12-40 · 2024-02-29→2024-03-01 · Title"
        );
    }

    #[test]
    fn date_ranges_apply_the_utc_offset_across_midnight() {
        // 2026-07-31T23:30Z → 2026-08-01T10:00Z
        let c = dated(1_785_540_600_000, 1_785_578_400_000);
        assert_eq!(
            dated_heading(&c, 0),
            "## 12-40 · 2026-07-31→2026-08-01 · Title"
        );
        // UTC+1: the start is 00:30 on 1 August, so both ends share a day.
        assert_eq!(dated_heading(&c, 60), "## 12-40 · 2026-08-01 · Title");
        // UTC-5: 2026-08-01T03:00Z is 22:00 on 31 July.
        let c = dated(1_785_540_600_000, 1_785_553_200_000);
        assert_eq!(dated_heading(&c, -300), "## 12-40 · 2026-07-31 · Title");
        assert_eq!(
            dated_heading(&c, 0),
            "## 12-40 · 2026-07-31→2026-08-01 · Title"
        );
    }

    #[test]
    fn dates_are_left_out_when_off_or_unknown() {
        let c = dated(1_785_744_000_000, 1_785_778_200_000);
        assert_eq!(render_one(&c, Tier::P4, &options(0)), "## 12-40 · Title");
        let mut missing_end = c.clone();
        missing_end.end_ms = None;
        assert_eq!(dated_heading(&missing_end, 0), "## 12-40 · Title");
        let mut missing_start = c;
        missing_start.start_ms = None;
        assert_eq!(dated_heading(&missing_start, 0), "## 12-40 · Title");
    }

    #[test]
    fn civil_dates_match_a_day_by_day_walk() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(-25_567), (1900, 1, 1));
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let (mut y, mut m, mut d) = (1900, 1, 1);
        for days in -25_567..47_482 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            d += 1;
            if d > month_len(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
        assert_eq!((y, m, d), (2100, 1, 1));
        assert_eq!(civil_from_days(47_482), (2100, 1, 1));
        // Extreme timestamps do not panic.
        let _ = local_date(i64::MAX, i32::MAX);
        let _ = local_date(i64::MIN, i32::MIN);
    }

    #[test]
    fn titles_are_sanitised_and_cannot_forge_headings() {
        let mut c = compartment(1, 50);
        c.title = "  Fix\n\tthe\u{2028}\u{2029}bug\r\n  ".to_owned();
        assert_eq!(
            render_one(&c, Tier::P4, &options(0)),
            "## 1-1 · Fix the bug\nanchor 1"
        );
        c.title = "A\u{0}\u{7}B\u{85}C".to_owned();
        assert!(render_one(&c, Tier::P4, &options(0)).starts_with("## 1-1 · A B C\n"));
        c.title = "Real\n## 9-9 · Fake".to_owned();
        assert_eq!(
            render_one(&c, Tier::P4, &options(0)),
            "## 1-1 · Real ## 9-9 · Fake\nanchor 1"
        );
        c.title = "x <y> & \"z\"".to_owned();
        assert!(
            render_one(&c, Tier::P4, &options(0)).starts_with("## 1-1 · x &lt;y&gt; &amp; \"z\"\n")
        );
        c.title = " \n\t ".to_owned();
        assert_eq!(render_one(&c, Tier::P4, &options(0)), "## 1-1\nanchor 1");
    }

    #[test]
    fn bodies_cannot_forge_headings() {
        let mut c = compartment(1, 50);
        c.tiers[0] = "## Opening line\nmid\n## 9-9 · Fake\n### deeper\n ## indented\n##tight\r\n## crlf\r## cr".to_owned();
        assert_eq!(
            render_one(&c, Tier::P1, &options(0)),
            "## 1-1 · T1\n ## Opening line\nmid\n ## 9-9 · Fake\n### deeper\n ## indented\n##tight\n ## crlf\n ## cr"
        );
        // No line of any render starts a heading except the compartments' own.
        let rendered = render(std::slice::from_ref(&c), &options(0), &words);
        let headings = rendered
            .text
            .lines()
            .filter(|l| l.starts_with("## "))
            .count();
        assert_eq!(headings, 1);
    }

    #[test]
    fn bodies_are_trimmed_and_escaped() {
        let mut c = compartment(1, 50);
        c.tiers[1] = "\n  if a < b && c > d { \"q\" } 'x'  \n\n".to_owned();
        assert_eq!(
            render_one(&c, Tier::P2, &options(0)),
            "## 1-1 · T1\nif a &lt; b &amp;&amp; c &gt; d { \"q\" } 'x'"
        );
        c.tiers[0] = "&amp; stays literal".to_owned();
        assert_eq!(
            render_one(&c, Tier::P1, &options(0)),
            "## 1-1 · T1\n&amp;amp; stays literal"
        );
    }

    #[test]
    fn empty_tiers_fall_back_to_denser_ones() {
        let mut c = compartment(1, 50);
        c.tiers = [
            "full".to_owned(),
            String::new(),
            "  \n ".to_owned(),
            String::new(),
        ];
        assert_eq!(render_one(&c, Tier::P4, &options(0)), "## 1-1 · T1\nfull");
        assert_eq!(render_one(&c, Tier::P3, &options(0)), "## 1-1 · T1\nfull");
        assert_eq!(render_one(&c, Tier::P2, &options(0)), "## 1-1 · T1\nfull");
        c.tiers[1] = "mid".to_owned();
        assert_eq!(render_one(&c, Tier::P4, &options(0)), "## 1-1 · T1\nmid");
        assert_eq!(render_one(&c, Tier::P1, &options(0)), "## 1-1 · T1\nfull");
        // Never a sparser tier: P1 blank with P2 present still shows nothing.
        c.tiers[0] = String::new();
        assert_eq!(render_one(&c, Tier::P1, &options(0)), "## 1-1 · T1");
        // All blank: heading only, no trailing newline.
        c.tiers = Default::default();
        assert_eq!(render_one(&c, Tier::P4, &options(0)), "## 1-1 · T1");
    }

    #[test]
    fn archived_compartments_render_as_nothing() {
        let c = compartment(1, 50);
        assert_eq!(render_one(&c, Tier::Archived, &options(0)), "");
        // Unbudgeted: p = 1, so of 66 compartments the oldest three (positions 64-66)
        // are archived.
        let list = many(66, 50);
        let rendered = render(&list, &options(0), &words);
        assert_eq!(rendered.pressure, 1.0);
        let archived: Vec<i64> = rendered
            .tiers
            .iter()
            .filter(|(_, tier)| tier.is_archived())
            .map(|&(sequence, _)| sequence)
            .collect();
        assert_eq!(archived, [1, 2, 3]);
        assert!(
            rendered
                .text
                .starts_with("## 4-4 · T4\nanchor 4\n\n## 5-5 · T5\n")
        );
        assert!(!rendered.text.contains("## 3-3"));
        assert!(!rendered.text.contains("\n\n\n"));
        assert!(rendered.text.ends_with("## 66-66 · T66\nfull 66"));
        assert_eq!(rendered.text.matches("## ").count(), 63);
    }

    #[test]
    fn empty_input_renders_empty() {
        let rendered = render(&[], &options(1_000), &words);
        assert_eq!(rendered.text, "");
        assert_eq!(rendered.tokens, 0);
        assert!(rendered.tiers.is_empty());
    }

    #[test]
    fn renders_are_byte_stable() {
        let mut list = many(120, 50);
        for (i, c) in list.iter_mut().enumerate() {
            c.importance = (i as i64 * 37) % 100 + 1;
            c.start_ms = Some(1_785_448_800_000 + i as i64 * 3_600_000);
            c.end_ms = Some(1_785_448_800_000 + i as i64 * 7_200_000);
        }
        let options = RenderOptions {
            dates: true,
            utc_offset_minutes: 120,
            ..options(900)
        };
        let first = render(&list, &options, &words);
        let second = render(&list.clone(), &options, &words);
        assert_eq!(first.text.as_bytes(), second.text.as_bytes());
        assert_eq!(first, second);
        assert!(first.tokens <= 900);
    }

    #[test]
    fn ten_thousand_compartments_cost_a_bounded_number_of_token_counts() {
        let list: Vec<Compartment> = (1..=10_000)
            .map(|s| {
                let mut c = compartment(s, (s * 37) % 100 + 1);
                c.start_ms = Some(1_700_000_000_000 + s * 60_000);
                c.end_ms = Some(1_700_000_000_000 + s * 120_000);
                c.tiers[0] = format!("full {s} ").repeat(20);
                c
            })
            .collect();
        let options = RenderOptions {
            dates: true,
            ..options(2_000)
        };
        let calls = std::cell::Cell::new(0u64);
        let counted = |text: &str| {
            calls.set(calls.get() + 1);
            words(text)
        };
        // How long it takes is a benchmark figure (scripts/bench renders 40
        // compartments per pass); what the test holds is the work: counts.
        let rendered = render(&list, &options, &counted);
        assert_eq!(rendered.tiers.len(), 10_000);
        assert!(rendered.tokens <= 2_000);
        assert!(rendered.tokens > 0);
        // Memoised: at most one count per (compartment, tier) plus the joined checks.
        assert!(calls.get() < 5 * 10_000, "{} token counts", calls.get());
        let unbudgeted = render(
            &list,
            &RenderOptions {
                budget_tokens: 0,
                ..options
            },
            &words,
        );
        assert!(!unbudgeted.text.is_empty());
    }
}
