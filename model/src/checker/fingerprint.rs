//! A fixed, fast 64-bit state fingerprint. Fixed, so that state order, shard assignment
//! and hence counterexamples do not change with the Rust version or process; fast,
//! because every generated state is hashed once.

use std::hash::{Hash, Hasher};

const K: u64 = 0x517c_c1b7_2722_0a95;

/// An Fx-style hasher taking eight bytes at a time, with a murmur3 finaliser so that every
/// bit of the result depends on every word. The checker's fingerprints, and the hash of
/// conform's request-id tables (ids are ~40-byte strings hashed for every report, where
/// SipHash's DoS resistance buys nothing for a log the user hands us).
#[derive(Clone, Copy, Default)]
pub struct FingerprintHasher {
    hash: u64,
}

impl FingerprintHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FingerprintHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        // The length keeps "a" and "a\0" apart.
        self.add(u64::from_le_bytes(tail) ^ ((rest.len() as u64) << 56));
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        let mut h = self.hash;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        h
    }
}

/// The fingerprint of a value; never 0 (0 marks "no parent").
pub fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut hasher = FingerprintHasher::default();
    value.hash(&mut hasher);
    hasher.finish().max(1)
}

/// The fingerprint of a byte string (a packed state); never 0.
pub fn fingerprint_bytes(bytes: &[u8]) -> u64 {
    let mut hasher = FingerprintHasher::default();
    hasher.write(bytes);
    hasher.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_across_runs_and_sensitive_to_content() {
        assert_eq!(
            fingerprint(&(1u8, 2u16, vec![3u8])),
            fingerprint(&(1u8, 2u16, vec![3u8]))
        );
        assert_ne!(fingerprint(&vec![1u8, 2]), fingerprint(&vec![2u8, 1]));
        assert_ne!(fingerprint(&0u64), 0);
    }
}
