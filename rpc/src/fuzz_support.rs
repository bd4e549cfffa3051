//! Test support for the decoder fuzz tests: a counting allocator and byte mutations.
//!
//! One file for the three crates: `engine` and `store` include it by path (each crate's
//! unit-test binary needs its own global allocator, and no crate depends on another's tests).
//!
//! [`measure`] runs a closure and reports the most bytes it had allocated at once, counting
//! only allocations made on its own thread, so tests running in parallel do not disturb each
//! other. A request counts even when the allocation fails: trying to allocate 2^40 bytes for a
//! damaged length is the bug, whether or not the system says yes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use proptest::sample::Index;

struct Counting;

#[global_allocator]
static COUNTING: Counting = Counting;

thread_local! {
    /// Whether this thread is measured, bytes allocated minus freed since it started, and the
    /// peak of that. A const-initialised `Cell` of plain data: reading it never allocates.
    static STATE: Cell<(bool, isize, isize)> = const { Cell::new((false, 0, 0)) };
}

fn note(delta: isize) {
    let _ = STATE.try_with(|s| {
        let (on, live, peak) = s.get();
        if on {
            let live = live.saturating_add(delta);
            s.set((on, live, peak.max(live)));
        }
    });
}

fn signed(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the bookkeeping only touches a thread-local `Cell` of plain data,
// which neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(signed(layout.size()));
        // SAFETY: the caller's guarantees about `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(signed(layout.size()));
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-signed(layout.size()));
        // SAFETY: `ptr` came from `System` with `layout` (every allocation here goes there).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(signed(new_size) - signed(layout.size()));
        // SAFETY: `ptr` came from `System` with `layout`; the caller vouches for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its result with the most bytes it had allocated at once (on this
/// thread, not counting what was allocated before).
pub(crate) fn measure<R>(f: impl FnOnce() -> R) -> (R, usize) {
    STATE.with(|s| s.set((true, 0, 0)));
    let r = f();
    let (_, _, peak) = STATE.with(|s| s.replace((false, 0, 0)));
    (r, usize::try_from(peak).unwrap_or(0))
}

/// One change to a valid encoding.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    /// Flips one bit.
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
        at: Index,
        width: usize,
        value: u64,
        big_endian: bool,
    },
}

/// Values a length field is most interesting at.
pub(crate) fn edge_u64() -> impl Strategy<Value = u64> {
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
pub(crate) fn varint(value: u64) -> Vec<u8> {
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
pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
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
pub(crate) fn mutations(n: usize) -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..=n)
}

/// `input` with `mutations` applied in order.
pub(crate) fn mutate(mut input: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
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
pub(crate) fn overwrite(
    input: &mut Vec<u8>,
    at: usize,
    width: usize,
    value: u64,
    big_endian: bool,
) {
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
pub(crate) fn config(cases: u32) -> ProptestConfig {
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
    fn measure_sees_the_peak_on_its_own_thread_only() {
        let (len, peak) = measure(|| {
            let big = vec![1u8; 1 << 20];
            drop(big);
            let other = std::thread::spawn(|| vec![0u8; 8 << 20].len());
            other.join().unwrap() + vec![2u8; 1000].len()
        });
        assert_eq!(len, (8 << 20) + 1000);
        assert!((1 << 20..2 << 20).contains(&peak), "{peak}");
        let (_, none) = measure(|| 1 + 1);
        assert_eq!(none, 0);
    }

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
