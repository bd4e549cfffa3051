//! Proptest strategies for fuzzing decoders of what a peer sent or a disk holds (feature
//! `fuzz`): [`mutations`] of a valid encoding, applied with [`mutate`]; length fields at their
//! most interesting values ([`edge_u64`]) as bincode's [`varint`] or fixed-width integers
//! ([`overwrite`]); and the fuzz tests' [`config`].
//!
//! Each decoder under test gets random bytes and mutated valid encodings, and must return a
//! value or a typed error, never panic, and never allocate beyond its limit (measured with
//! [`crate::alloc::measure`]).

use proptest::prelude::*;
use proptest::sample::Index;

/// One change to a valid encoding.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Flips one bit: the bit (0 … 7) of the byte at the index.
    Flip(Index, u8),
    /// Cuts the input short.
    Truncate(Index),
    /// Appends bytes.
    Extend(Vec<u8>),
    /// Inserts bytes in the middle.
    Insert(Index, Vec<u8>),
    /// Overwrites `width` bytes with a value, big- or little-endian: a length or count made
    /// huge, zero or off by a little.
    Overwrite {
        /// Where (the input grows if it is too short).
        at: Index,
        /// How many bytes: 1, 2, 4 or 8.
        width: usize,
        /// The value, of which the low `width` bytes are written.
        value: u64,
        /// Big-endian, else little-endian.
        big_endian: bool,
    },
}

/// Values a length field is most interesting at.
pub fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u16::MAX)),
        (u64::MAX - 16)..=u64::MAX,
        (u64::from(u32::MAX) - 16)..=u64::from(u32::MAX),
        1u64 << 31..=(1u64 << 31) + 16,
        0u64..300,
        any::<u64>(),
    ]
}

/// `value` as bincode's variable-length integer: one byte below 251, else a marker (251, 252,
/// 253 for 2, 4, 8 bytes) and the value, little-endian.
pub fn varint(value: u64) -> Vec<u8> {
    let (marker, width) = match value {
        0..=250 => return vec![value as u8],
        251..=0xffff => (251, 2),
        0x1_0000..=0xffff_ffff => (252, 4),
        _ => (253, 8),
    };
    let mut out = vec![marker];
    out.extend_from_slice(&value.to_le_bytes()[..width]);
    out
}

/// A mutation of any kind.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    // Inserted bytes: random, or a length prefix (variable-length or fixed) of an edge value.
    let bytes = prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..24),
        edge_u64().prop_map(varint),
        edge_u64().prop_map(|v| v.to_le_bytes().to_vec()),
    ];
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => bytes.clone().prop_map(Mutation::Extend),
        1 => (any::<Index>(), bytes).prop_map(|(i, b)| Mutation::Insert(i, b)),
        3 => (any::<Index>(), prop::sample::select(vec![1usize, 2, 4, 8]), edge_u64(), any::<bool>())
            .prop_map(|(at, width, value, big_endian)| Mutation::Overwrite {
                at,
                width,
                value,
                big_endian,
            }),
    ]
}

/// Up to `n` mutations.
pub fn mutations(n: usize) -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..=n)
}

/// `input` with `mutations` applied in order.
pub fn mutate(mut input: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        match m {
            Mutation::Flip(i, bit) if !input.is_empty() => {
                let at = i.index(input.len());
                input[at] ^= 1 << bit;
            }
            Mutation::Flip(..) => {}
            Mutation::Truncate(i) => input.truncate(i.index(input.len() + 1)),
            Mutation::Extend(more) => input.extend_from_slice(more),
            Mutation::Insert(i, more) => {
                let at = i.index(input.len() + 1);
                input.splice(at..at, more.iter().copied());
            }
            Mutation::Overwrite {
                at,
                width,
                value,
                big_endian,
            } => {
                let at = at.index(input.len() + 1);
                overwrite(&mut input, at, *width, *value, *big_endian);
            }
        }
    }
    input
}

/// Writes the low `width` bytes of `value` at `at`, growing `input` if it is too short.
pub fn overwrite(input: &mut Vec<u8>, at: usize, width: usize, value: u64, big_endian: bool) {
    let bytes = if big_endian {
        value.to_be_bytes()[8 - width..].to_vec()
    } else {
        value.to_le_bytes()[..width].to_vec()
    };
    if input.len() < at + width {
        input.resize(at + width, 0);
    }
    input[at..at + width].copy_from_slice(&bytes);
}

/// Proptest settings for the fuzz tests: `cases` cases (`PROPTEST_CASES` overrides it, for a
/// longer hunt), and failures are not written to files in the source tree (a failure found is
/// kept as a plain regression test instead).
pub fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_and_varints() {
        assert_eq!(varint(250), [250]);
        assert_eq!(varint(251), [251, 251, 0]);
        assert_eq!(
            varint(u64::MAX),
            [253, 255, 255, 255, 255, 255, 255, 255, 255]
        );
        let mut v = vec![0u8; 2];
        overwrite(&mut v, 1, 4, 0x0102_0304, true);
        assert_eq!(v, [0, 1, 2, 3, 4]);
        let longer = mutate(vec![1, 2, 3], &[Mutation::Extend(vec![4])]);
        assert_eq!(longer, [1, 2, 3, 4]);
    }
}
