//! The cluster's only source of randomness: a seeded SplitMix64 generator.
//!
//! Every random choice (kubelet timing jitter) is drawn from one
//! [`SimRng`] owned by the cluster task, in event order, so that a run is reproducible
//! from its seed.

use std::time::Duration;

/// A small, fast, seedable pseudo-random generator (SplitMix64).
#[derive(Clone, Debug)]
pub(crate) struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator whose whole sequence is fixed by `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        // 53 random bits are exactly what an f64 mantissa holds.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `base` scaled by a uniform factor in `[1 - fraction, 1 + fraction]` (never negative).
    pub(crate) fn jitter(&mut self, base: Duration, fraction: f64) -> Duration {
        if fraction <= 0.0 || base.is_zero() {
            return base;
        }
        let factor = 1.0 + fraction * (2.0 * self.unit() - 1.0);
        base.mul_f64(factor.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_other_seed_other_sequence() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        let mut c = SimRng::new(8);
        let seq_a: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let seq_b: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        let seq_c: Vec<u64> = (0..16).map(|_| c.next_u64()).collect();
        assert_eq!(seq_a, seq_b);
        assert_ne!(seq_a, seq_c);
    }

    #[test]
    fn jitter_stays_within_the_fraction() {
        let mut rng = SimRng::new(3);
        let base = Duration::from_secs(10);
        let draws: Vec<Duration> = (0..500).map(|_| rng.jitter(base, 0.2)).collect();
        assert!(
            draws
                .iter()
                .all(|d| *d >= Duration::from_secs(8) && *d <= Duration::from_secs(12))
        );
        assert!(draws.iter().any(|d| *d < Duration::from_millis(9_500)));
        assert!(draws.iter().any(|d| *d > Duration::from_millis(10_500)));
        assert_eq!(rng.jitter(base, 0.0), base);
    }

    #[test]
    fn unit_is_in_range() {
        let mut rng = SimRng::new(99);
        assert!(
            (0..1000)
                .map(|_| rng.unit())
                .all(|u| (0.0..1.0).contains(&u))
        );
    }
}
