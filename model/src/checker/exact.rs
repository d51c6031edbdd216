//! `--exact`: what the visited set's 64-bit fingerprints can hide, made visible.
//!
//! The search identifies a state by the fingerprint of its packed bytes. Two different
//! states with one fingerprint would make the second look visited: its successors might
//! never be explored, and a violation behind them would be missed — a *holds* could be
//! wrong. The hash is xxh3-64, which behaves as a uniform 64-bit hash on the model's
//! encodings (`tests/e2e/fingerprints.rs` measures it), so the chance of any collision
//! is about n² / 2^65 for n unique states ([`collision_probability`]), reported with
//! every verdict. An exact run
//! also keeps every state's full packed bytes, keyed by fingerprint, and compares them
//! whenever a fingerprint is met again: a collision then ends the check as inconclusive
//! instead of passing unseen, so an exact *holds* carries no probability at all.

use std::collections::HashMap;
use std::sync::Mutex;

/// Fingerprint bits the visited set keys states by.
pub const FINGERPRINT_BITS: u32 = 64;

/// The probability that some two of `states` distinct states share a fingerprint,
/// assuming a uniform hash: 1 − e^(−n(n−1)/2^(b+1)), the birthday bound.
pub fn collision_probability(states: u64) -> f64 {
    let n = states as f64;
    let pairs = n * (n - 1.0) / 2.0;
    -(-pairs / 2f64.powi(FINGERPRINT_BITS as i32)).exp_m1()
}

/// Every state's packed bytes by fingerprint, sharded like the visited set.
pub(super) struct Exact {
    shards: Vec<Mutex<HashMap<u64, Box<[u8]>>>>,
}

const SHARDS: usize = 64;

impl Exact {
    pub(super) fn new() -> Exact {
        Exact {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    /// Records `bytes` under `fp`, or checks them against the bytes already there;
    /// false when another state has that fingerprint (a collision).
    pub(super) fn same_or_new(&self, fp: u64, bytes: &[u8]) -> bool {
        let shard = &self.shards[(fp >> 58) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        match shard.get(&fp) {
            Some(known) => **known == *bytes,
            None => {
                shard.insert(fp, bytes.into());
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_birthday_bound() {
        assert_eq!(collision_probability(1), 0.0);
        let p = collision_probability(1 << 32);
        // n = 2^32: n(n-1)/2^65 is just under 1/2, so p = 1 - e^-0.5.
        assert!((p - (1.0 - (-0.5f64).exp())).abs() < 1e-6, "{p}");
        let small = collision_probability(49_037);
        assert!(small > 6.0e-11 && small < 6.6e-11, "{small}");
    }

    #[test]
    fn a_second_state_with_a_known_fingerprint_is_a_collision() {
        let exact = Exact::new();
        assert!(exact.same_or_new(7, b"one"));
        assert!(
            exact.same_or_new(7, b"one"),
            "the same state again is no collision"
        );
        assert!(!exact.same_or_new(7, b"two"));
    }
}
