//! Fuzz tests of segment descriptors as a peer hands them over (JSON, through the control
//! service's `descriptor` call): random bytes, mutated valid descriptors, and descriptors whose
//! every field may be of the wrong type or at an edge value. [`SegmentDescriptor::from_json`]
//! returns a descriptor that is safe to check accesses against, or a typed error; never a
//! panic; and it allocates at most a small multiple of its input (serde_json's values), whose
//! size the rpc frame limit bounds.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{json, Value};
use yuebing_testkit::alloc::measure;
use yuebing_testkit::fuzz::{config, edge_u64, mutate, mutations};

use crate::bounds::check_bounds;
use crate::location::Location;
use crate::segment::{SegmentDescriptor, DESCRIPTOR_VERSION};

/// Bytes from_json may allocate per byte of input, plus a constant.
const PER_INPUT_BYTE: usize = 64;
const FIXED: usize = 64 << 10;

fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (res, peak) = measure(|| SegmentDescriptor::from_json(bytes));
    let bound = PER_INPUT_BYTE * bytes.len() + FIXED;
    prop_assert!(peak <= bound, "{peak} bytes for {} of input", bytes.len());
    let d = match res {
        Ok(d) => d,
        Err(e) => {
            prop_assert!(matches!(e.code(), -3001 | -3508), "{e}");
            return Ok(());
        }
    };
    prop_assert_eq!(d.version, DESCRIPTOR_VERSION);
    let mut prev_end = 0;
    for (i, b) in d.buffers.iter().enumerate() {
        let end = b.addr.checked_add(b.len);
        prop_assert!(end.is_some(), "buffer {i} ends past u64");
        prop_assert!(i == 0 || b.addr >= prev_end, "buffer {i} overlaps");
        prev_end = end.unwrap_or(u64::MAX);
    }
    // What a peer does with a descriptor: check accesses against its buffers.
    let regions = d.regions();
    for b in &d.buffers {
        let last = b.addr.saturating_add(b.len).saturating_sub(1);
        for (addr, len) in [(b.addr, b.len), (b.addr, 1), (last, 1), (last, u64::MAX)] {
            let inside = len > 0
                && addr >= b.addr
                && addr.checked_add(len).is_some_and(|e| e <= b.addr + b.len);
            if inside {
                prop_assert!(check_bounds(&regions, addr, len).is_ok());
            } else {
                let _ = check_bounds(&regions, addr, len);
            }
        }
    }
    let again = SegmentDescriptor::from_json(&d.to_json());
    prop_assert!(again.is_ok(), "a decoded descriptor encodes to a valid one");
    Ok(())
}

/// Any JSON value (no floats: they need not round-trip exactly).
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        edge_u64().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::from),
            btree_map(".{0,4}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Mostly a value of the right type, sometimes any value at all.
fn field(valid: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
    prop_oneof![6 => valid, 1 => any_json()]
}

fn location() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u32>().prop_map(|numa| Location::Cpu { numa }),
        any::<u32>().prop_map(|device| Location::Cuda { device }),
    ]
    .prop_map(|l| serde_json::to_value(l).unwrap_or_default())
}

fn buffer() -> impl Strategy<Value = Value> {
    // Small addresses and lengths, so that some buffers are disjoint, and edge values.
    let number =
        || prop_oneof![(0u64..64).prop_map(|n| n * 0x1000), edge_u64()].prop_map(Value::from);
    (field(number()), field(number()), field(location()))
        .prop_map(|(addr, len, location)| json!({"addr": addr, "len": len, "location": location}))
}

fn descriptor() -> impl Strategy<Value = Value> {
    let version = prop_oneof![4 => Just(u64::from(DESCRIPTOR_VERSION)), 1 => edge_u64()];
    let text = || ".{0,12}".prop_map(Value::from);
    (
        field(version.prop_map(Value::from)),
        field(text()),
        field(text()),
        field(edge_u64().prop_map(Value::from)),
        field(vec(buffer(), 0..5).prop_map(Value::from)),
        field(
            btree_map("[a-z]{1,6}", any_json(), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ),
        proptest::option::of("[a-z_]{1,12}"),
    )
        .prop_map(
            |(version, name, endpoint, instance_id, buffers, transports, drop_key)| {
                let mut v = json!({
                    "version": version,
                    "name": name,
                    "endpoint": endpoint,
                    "instance_id": instance_id,
                    "buffers": buffers,
                    "transports": transports,
                });
                if let (Some(key), Some(map)) = (drop_key, v.as_object_mut()) {
                    // A missing field, or an unknown one.
                    if map.remove(&key).is_none() {
                        map.insert(key, Value::Null);
                    }
                }
                v
            },
        )
}

/// A descriptor an engine could publish: disjoint buffers, any transports section.
fn valid_descriptor() -> impl Strategy<Value = SegmentDescriptor> {
    let ranges = vec((1u64..1 << 40, 1u64..1 << 30), 0..6);
    (
        ".{0,12}",
        any::<u64>(),
        ranges,
        btree_map("[a-z]{1,6}", any_json(), 0..3),
    )
        .prop_map(|(name, instance_id, ranges, transports)| {
            let mut d = SegmentDescriptor::new(name.clone(), name, instance_id);
            let mut next = 0u64;
            for (gap, len) in ranges {
                d.buffers.push(crate::segment::BufferDesc {
                    addr: next + gap,
                    len,
                    location: Location::default(),
                    remote: crate::memory::RemoteAccess::READ_WRITE,
                });
                next += gap + len;
            }
            d.buffers.reverse();
            d.transports = transports;
            d
        })
}

proptest! {
    #![proptest_config(config(600))]

    #[test]
    fn descriptor_valid_then_mutated(d in valid_descriptor(), muts in mutations(4)) {
        let bytes = d.to_json();
        let mut sorted = d.clone();
        sorted.buffers.sort_by_key(|b| b.addr);
        prop_assert_eq!(SegmentDescriptor::from_json(&bytes).ok(), Some(sorted));
        check(&bytes)?;
        check(&mutate(bytes, &muts))?;
    }

    #[test]
    fn descriptor_from_random_bytes(bytes in vec(any::<u8>(), 0..200)) {
        check(&bytes)?;
    }

    #[test]
    fn descriptor_with_fields_of_any_type_or_value(v in descriptor()) {
        check(&serde_json::to_vec(&v).unwrap_or_default())?;
    }

    #[test]
    fn descriptor_mutated(v in descriptor(), muts in mutations(4)) {
        check(&mutate(serde_json::to_vec(&v).unwrap_or_default(), &muts))?;
    }
}
