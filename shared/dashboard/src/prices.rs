//! What tokens cost: a stated table of list prices (US dollars per million
//! tokens, the providers' published prices for the models mc's users run
//! most, as of late 2025), overridable in config (`dashboard.price_*`).

use mc_base::config::DashboardConfig;

/// Dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Writing to the cache (Anthropic's 5-minute rate).
    pub cache_write: f64,
    pub cache_read: f64,
}

/// The table: the first entry whose every word is in the model's name wins.
pub const TABLE: &[(&str, Price)] = &[
    ("opus 4-5", price(5.0, 25.0, 6.25, 0.5)),
    ("opus 4.5", price(5.0, 25.0, 6.25, 0.5)),
    ("opus 4-6", price(5.0, 25.0, 6.25, 0.5)),
    ("opus", price(15.0, 75.0, 18.75, 1.5)),
    ("sonnet", price(3.0, 15.0, 3.75, 0.3)),
    ("haiku 4-5", price(1.0, 5.0, 1.25, 0.1)),
    ("haiku", price(0.8, 4.0, 1.0, 0.08)),
    ("gpt-5 mini", price(0.25, 2.0, 0.0, 0.025)),
    ("gpt-5", price(1.25, 10.0, 0.0, 0.125)),
    ("gpt-4.1", price(2.0, 8.0, 0.0, 0.5)),
    ("gemini 2.5-pro", price(1.25, 10.0, 0.0, 0.31)),
];

const fn price(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Price {
    Price {
        input,
        output,
        cache_write,
        cache_read,
    }
}

/// The price of a model (`provider/model`): the config's where it sets
/// one (each field apart), else the table's; `None` when neither knows.
pub fn of(model: Option<&str>, config: &DashboardConfig) -> Option<Price> {
    let name = model.unwrap_or_default().to_ascii_lowercase();
    let table = TABLE
        .iter()
        .find(|(words, _)| words.split(' ').all(|w| name.contains(w)))
        .map(|(_, p)| *p);
    let set = |x: f64| (x >= 0.0).then_some(x);
    let fields = [
        set(config.price_input),
        set(config.price_output),
        set(config.price_cache_write),
        set(config.price_cache_read),
    ];
    if table.is_none() && fields.iter().any(Option::is_none) {
        return None;
    }
    let base = table.unwrap_or(price(0.0, 0.0, 0.0, 0.0));
    let [input, output, write, read] = fields;
    Some(Price {
        input: input.unwrap_or(base.input),
        output: output.unwrap_or(base.output),
        cache_write: write.unwrap_or(base.cache_write),
        cache_read: read.unwrap_or(base.cache_read),
    })
}

/// Token sums of some calls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tokens {
    pub calls: i64,
    pub input: i64,
    pub cache_read: i64,
    pub cache_write: i64,
    pub output: i64,
}

impl Tokens {
    pub fn add(&mut self, other: &Tokens) {
        self.calls += other.calls;
        self.input += other.input;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.output += other.output;
    }

    /// cache read / (cache read + cache write + input), when anything was read.
    pub fn hit_percent(&self) -> Option<f64> {
        let all = self.cache_read + self.cache_write + self.input;
        (all > 0).then(|| self.cache_read as f64 * 100.0 / all as f64)
    }
}

/// What tokens cost, and what the cache saved (reads at the input price less
/// the read price).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    pub dollars: f64,
    pub saved: f64,
    /// Some tokens were of a model without a price.
    pub unpriced: bool,
}

impl Cost {
    pub fn of(tokens: &Tokens, price: Option<Price>) -> Cost {
        let Some(p) = price else {
            return Cost {
                unpriced: tokens.calls > 0,
                ..Cost::default()
            };
        };
        let m = |n: i64, per: f64| n as f64 * per / 1e6;
        Cost {
            dollars: m(tokens.input, p.input)
                + m(tokens.output, p.output)
                + m(tokens.cache_write, p.cache_write)
                + m(tokens.cache_read, p.cache_read),
            saved: m(tokens.cache_read, p.input - p.cache_read),
            unpriced: false,
        }
    }

    pub fn add(&mut self, other: &Cost) {
        self.dollars += other.dollars;
        self.saved += other.saved;
        self.unpriced |= other.unpriced;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_only() -> DashboardConfig {
        DashboardConfig {
            price_input: -1.0,
            price_output: -1.0,
            price_cache_write: -1.0,
            price_cache_read: -1.0,
        }
    }

    #[test]
    fn the_table_knows_model_families_and_config_overrides_each_field() {
        let sonnet = of(Some("anthropic/claude-sonnet-4-5"), &table_only()).unwrap();
        assert_eq!(sonnet.input, 3.0);
        let opus = of(Some("anthropic/claude-opus-4-5-20251101"), &table_only()).unwrap();
        assert_eq!(opus.output, 25.0);
        assert_eq!(
            of(Some("anthropic/claude-opus-4-1"), &table_only())
                .unwrap()
                .output,
            75.0
        );
        assert_eq!(of(Some("local/llama"), &table_only()), None);
        let config = DashboardConfig {
            price_input: 2.0,
            ..table_only()
        };
        let p = of(Some("anthropic/claude-sonnet-4-5"), &config).unwrap();
        assert_eq!((p.input, p.output), (2.0, 15.0));
        // An unknown model needs every field from the config.
        assert_eq!(of(Some("local/llama"), &config), None);
        let all = DashboardConfig {
            price_input: 1.0,
            price_output: 1.0,
            price_cache_write: 1.0,
            price_cache_read: 0.0,
        };
        assert!(of(Some("local/llama"), &all).is_some());
    }

    #[test]
    fn cost_counts_every_kind_and_what_the_cache_saved() {
        let t = Tokens {
            calls: 2,
            input: 1_000_000,
            cache_read: 2_000_000,
            cache_write: 1_000_000,
            output: 100_000,
        };
        let c = Cost::of(&t, of(Some("claude-sonnet-4-5"), &table_only()));
        assert!((c.dollars - (3.0 + 1.5 + 3.75 + 0.6)).abs() < 1e-9, "{c:?}");
        assert!((c.saved - 2.0 * (3.0 - 0.3)).abs() < 1e-9, "{c:?}");
        assert_eq!(t.hit_percent(), Some(50.0));
        assert!(Cost::of(&t, None).unpriced);
    }
}
