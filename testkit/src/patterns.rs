//! Deterministic bytes for tests that write something and check what comes back: the same
//! `(len, seed)` always gives the same bytes, another seed other bytes.
//!
//! The bytes are pseudo-random (fastrand's generator seeded with `seed`), not a short cycle: a
//! copy that lands a multiple of 256 bytes off, or mixes up two objects, does not read back
//! equal by chance.

/// `len` bytes that differ from position to position and from seed to seed (object `i` of a
/// test: `pattern(len, i as u64)`).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    fill(&mut bytes, seed);
    bytes
}

/// Fills `buf` with the bytes of [`pattern`]`(buf.len(), seed)`.
pub fn fill(buf: &mut [u8], seed: u64) {
    fastrand::Rng::with_seed(seed).fill(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_bytes_another_seed_others() {
        assert_eq!(pattern(4099, 7), pattern(4099, 7));
        assert_ne!(pattern(4099, 7), pattern(4099, 8));
        let p = pattern(1 << 16, 3);
        assert_ne!(p[..256], p[256..512], "no 256-byte cycle");
        let mut buf = [0u8; 100];
        fill(&mut buf, 9);
        assert_eq!(buf[..], pattern(100, 9)[..]);
        assert!(pattern(0, 1).is_empty());
    }
}
