// TEMPORARY STUB (replaced by the real module)
#[derive(Debug, Clone, PartialEq)]
pub struct Compartment {
    pub sequence: i64,
    pub start_ordinal: i64,
    pub end_ordinal: i64,
    pub start_ms: Option<i64>,
    pub end_ms: Option<i64>,
    pub title: String,
    pub tiers: [String; 4],
    pub importance: i64,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    P1,
    P2,
    P3,
    P4,
    Archived,
}
impl Tier {
    pub fn number(self) -> u8 {
        match self {
            Tier::P1 => 1,
            Tier::P2 => 2,
            Tier::P3 => 3,
            Tier::P4 => 4,
            Tier::Archived => 5,
        }
    }
}
pub struct RenderOptions {
    pub budget_tokens: u64,
    pub pressure_multiplier: f64,
    pub dates: bool,
    pub utc_offset_minutes: i32,
}
pub struct Rendered {
    pub text: String,
    pub tiers: Vec<(i64, Tier)>,
    pub pressure: f64,
    pub tokens: u64,
}
pub fn render(cs: &[Compartment], o: &RenderOptions, count: &dyn Fn(&str) -> u64) -> Rendered {
    let parts: Vec<String> = cs.iter().map(|c| render_one(c, Tier::P1, o)).collect();
    let text = parts.join("\n\n");
    let tokens = count(&text);
    Rendered {
        text,
        tiers: cs.iter().map(|c| (c.sequence, Tier::P1)).collect(),
        pressure: 1.0,
        tokens,
    }
}
pub fn render_one(c: &Compartment, _t: Tier, _o: &RenderOptions) -> String {
    format!(
        "## {}-{} · {}\n{}",
        c.start_ordinal, c.end_ordinal, c.title, c.tiers[0]
    )
}
