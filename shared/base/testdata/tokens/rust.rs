use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

/// A rate limiter that allows `capacity` requests per `window`, per client key.
#[derive(Debug)]
pub struct RateLimiter {
    capacity: u32,
    window: Duration,
    buckets: HashMap<String, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last_refill: Instant,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Allow { remaining: u32 },
    Deny { retry_after: Duration },
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Allow { remaining } => write!(f, "allow ({remaining} left)"),
            Decision::Deny { retry_after } => {
                write!(f, "deny (retry in {:.1}s)", retry_after.as_secs_f64())
            }
        }
    }
}

impl RateLimiter {
    pub fn new(capacity: u32, window: Duration) -> Self {
        assert!(capacity > 0, "capacity must be positive");
        Self { capacity, window, buckets: HashMap::new() }
    }

    fn refill_rate(&self) -> f64 {
        f64::from(self.capacity) / self.window.as_secs_f64()
    }

    pub fn check(&mut self, key: &str, now: Instant) -> Decision {
        let rate = self.refill_rate();
        let cap = f64::from(self.capacity);
        let bucket = self
            .buckets
            .entry(key.to_owned())
            .or_insert(Bucket { tokens: cap, last_refill: now });
        let elapsed = now.saturating_duration_since(bucket.last_refill);
        bucket.tokens = (bucket.tokens + elapsed.as_secs_f64() * rate).min(cap);
        bucket.last_refill = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Decision::Allow { remaining: bucket.tokens.floor() as u32 }
        } else {
            let missing = 1.0 - bucket.tokens;
            Decision::Deny { retry_after: Duration::from_secs_f64(missing / rate) }
        }
    }

    /// Drops buckets that have been full for longer than one window.
    pub fn gc(&mut self, now: Instant) -> usize {
        let before = self.buckets.len();
        let window = self.window;
        self.buckets.retain(|_, b| now.saturating_duration_since(b.last_refill) < window);
        before - self.buckets.len()
    }

    pub fn snapshot(&self) -> BTreeMap<&str, u32> {
        self.buckets.iter().map(|(k, b)| (k.as_str(), b.tokens as u32)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_up_to_capacity_then_denies() {
        let mut rl = RateLimiter::new(3, Duration::from_secs(1));
        let t0 = Instant::now();
        for expected in [2, 1, 0] {
            assert_eq!(rl.check("a", t0), Decision::Allow { remaining: expected });
        }
        assert!(matches!(rl.check("a", t0), Decision::Deny { .. }));
        assert_eq!(rl.check("b", t0), Decision::Allow { remaining: 2 });
    }

    #[test]
    fn refills_over_time() {
        let mut rl = RateLimiter::new(2, Duration::from_millis(200));
        let t0 = Instant::now();
        let _ = rl.check("k", t0);
        let _ = rl.check("k", t0);
        let later = t0 + Duration::from_millis(150);
        assert!(matches!(rl.check("k", later), Decision::Allow { .. }));
        assert_eq!(rl.gc(later + Duration::from_secs(5)), 1);
    }
}
