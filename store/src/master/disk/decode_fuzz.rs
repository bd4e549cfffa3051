//! Fuzz tests of what the master reads back from its data directory: file headers, log frames
//! ([`LogEntry`]) and snapshot frames ([`Snapshot`]), and then the master rebuilt from what
//! decoded ([`Master::restore`]: snapshot load and log replay).
//!
//! Inputs are random bytes and mutated valid files. A mutated payload is usually framed again
//! with its checksum fixed, so that the damage reaches the decoder instead of stopping at the
//! CRC. Each step must give a value, `Torn`/`End`, or a typed error; never a panic; and reading
//! allocates at most a few times the bytes there are, plus serde's preallocation for sequences
//! (at most 1 MiB per sequence being decoded), whatever lengths the bytes declare.

use proptest::collection::vec;
use proptest::prelude::*;
use smallvec::SmallVec;
use yuebing_testkit::alloc::measure;
use yuebing_testkit::fuzz::{config, edge_u64, mutate, mutations, overwrite};

use super::frame::{read_frame, write_frame, Frame};
use super::frame::{LOG_MAGIC, SNAPSHOT_MAGIC};
use crate::files::{read_header, write_header};
use crate::master::grant::GrantId;
use crate::master::log::{LogEntry, Record, FORMAT_VERSION};
use crate::master::object::Pin;
use crate::master::space::Replica;
use crate::master::task::{TaskId, TaskKind};
use crate::master::types::{ClientId, MountId, MountSpec, PutConfig};
use crate::master::{Master, MasterConfig, Snapshot};

/// What serde preallocates at most for one sequence, whatever length it declares.
const SERDE_PREALLOC: usize = 1 << 20;

fn bound(input: usize) -> usize {
    4 * input + 2 * SERDE_PREALLOC + (64 << 10)
}

/// Every frame in `bytes` (after a header, when `header` is given): the values, and whether
/// the reading ended cleanly; checks the allocation bound.
fn read_all<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    header: Option<&[u8; 8]>,
) -> Result<(Vec<T>, bool), TestCaseError> {
    let (res, peak) = measure(|| {
        let mut r = bytes;
        if let Some(magic) = header {
            match read_header(&mut r, magic, FORMAT_VERSION, "fuzz") {
                Ok(true) => {}
                Ok(false) => return Ok((Vec::new(), true)),
                Err(e) => return Err(e.code()),
            }
        }
        let mut values = Vec::new();
        // Each frame takes at least its 8-byte head: this many reads always reach the end.
        for _ in 0..bytes.len() / 8 + 2 {
            match read_frame::<T>(&mut r) {
                Ok(Frame::Value(v, _)) => values.push(v),
                Ok(Frame::End) => return Ok((values, true)),
                Ok(Frame::Torn(_)) => return Ok((values, false)),
                Err(e) => panic!("reading a slice failed: {e}"),
            }
        }
        panic!("read_frame went on past the end");
    });
    prop_assert!(
        peak <= bound(bytes.len()),
        "{peak} bytes for {}",
        bytes.len()
    );
    match res {
        Ok(r) => Ok(r),
        // A bad magic is Corrupt, another format version InvalidVersion.
        Err(code) => {
            prop_assert!(matches!(code, -1500 | -300), "code {code}");
            Ok((Vec::new(), false))
        }
    }
}

/// `payload` as one frame with a correct checksum.
fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn file_of<T: serde::Serialize>(magic: &[u8; 8], values: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    write_header(&mut out, magic, FORMAT_VERSION).unwrap();
    for v in values {
        write_frame(&mut out, v).unwrap();
    }
    out
}

/// Mostly one of a few small values, so that records meet (a write's start, end and revoke
/// name the same key; replicas land in mounted ranges), sometimes anything.
fn few<T: Clone + std::fmt::Debug + 'static>(
    common: Vec<T>,
    any: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = T> {
    prop_oneof![3 => prop::sample::select(common), 1 => any]
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

fn record() -> impl Strategy<Value = Record> {
    let client = || any::<u128>().prop_map(ClientId);
    let mount = || few(vec![0, 1, 2], prop_oneof![Just(u32::MAX), any::<u32>()]).prop_map(MountId);
    let key = || few(strings(&["a", "b", ""]), ".{0,10}").prop_map(String::into_boxed_str);
    let number = || few(vec![0, 64, 1 << 20], edge_u64());
    let replica = move || (mount(), number()).prop_map(|(mount, offset)| Replica { mount, offset });
    let replicas = move || vec(replica(), 0..4).prop_map(SmallVec::from_vec);
    let task = || few(vec![1u128, 2, u128::MAX], any::<u128>()).prop_map(TaskId);
    let grant = || few(vec![1u64, 2, u64::MAX], any::<u64>()).prop_map(GrantId);
    let nodes = || vec(few(strings(&["n1", "n2"]), ".{0,6}"), 0..3);
    let kind = prop_oneof![
        nodes().prop_map(|targets| TaskKind::Copy { targets }),
        (
            few(strings(&["n1"]), ".{0,6}"),
            few(strings(&["n2"]), ".{0,6}")
        )
            .prop_map(|(source, target)| TaskKind::Move { source, target }),
    ];
    let pin = || prop_oneof![Just(Pin::None), Just(Pin::Soft), Just(Pin::Hard)];
    let node = few(strings(&["n1", "n2"]), ".{0,6}");
    prop_oneof![
        (
            client(),
            mount(),
            node,
            number(),
            few(vec![16 << 20], edge_u64())
        )
            .prop_map(|(client, mount, node, base, len)| Record::Mount {
                client,
                mount,
                node,
                base,
                len
            }),
        (mount(), number()).prop_map(|(mount, until)| Record::UnmountBegin { mount, until }),
        mount().prop_map(|mount| Record::MountRemoved { mount }),
        (
            client(),
            key(),
            number(),
            replicas(),
            any::<(bool, bool)>(),
            pin()
        )
            .prop_map(|(client, key, size, replicas, (in_place, replaces), pin)| {
                Record::WriteStart {
                    client,
                    key,
                    size,
                    replicas,
                    in_place,
                    replaces,
                    pin,
                }
            }),
        (key(), number()).prop_map(|(key, old_until)| Record::WriteEnd { key, old_until }),
        (key(), any::<bool>()).prop_map(|(key, hold)| Record::WriteRevoke { key, hold }),
        (key(), any::<bool>(), number()).prop_map(|(key, evicted, hold_until)| {
            Record::Remove {
                key,
                evicted,
                hold_until,
            }
        }),
        Just(Record::Release),
        (key(), vec(mount(), 0..3), number()).prop_map(|(key, mounts, hold_until)| {
            Record::ReplicasDrop {
                key,
                mounts,
                hold_until,
            }
        }),
        (task(), key(), kind, client()).prop_map(|(id, key, kind, client)| Record::TaskCreate {
            id,
            key,
            kind,
            client
        }),
        (task(), replica(), replicas(), number()).prop_map(|(id, source, targets, until)| {
            Record::TaskStart {
                id,
                source,
                targets,
                until,
            }
        }),
        (task(), prop::option::of(".{0,6}"), number()).prop_map(|(id, error, hold_until)| {
            Record::TaskEnd {
                id,
                error,
                hold_until,
            }
        }),
        (client(), grant(), replica(), number()).prop_map(|(client, grant, replica, len)| {
            Record::GrantStart {
                client,
                grant,
                replica,
                len,
            }
        }),
        (
            client(),
            key(),
            number(),
            vec((grant(), replica()), 0..3),
            any::<bool>(),
            pin()
        )
            .prop_map(|(client, key, size, parts, replaces, pin)| {
                Record::WriteGranted {
                    client,
                    key,
                    size,
                    parts,
                    replaces,
                    pin,
                }
            }),
        (grant(), number()).prop_map(|(grant, hold_until)| Record::GrantEnd { grant, hold_until }),
    ]
}

/// Log entries with any records, numbered from 1 on (so that replay reaches them).
fn entries() -> impl Strategy<Value = Vec<LogEntry>> {
    let now = few(vec![1, 1_000, 1 << 40], edge_u64());
    vec((record(), now), 1..12).prop_map(|rs| {
        rs.into_iter()
            .zip(1u64..)
            .map(|((record, now), seq)| LogEntry {
                seq,
                epoch: 1,
                now,
                record,
            })
            .collect()
    })
}

/// One step of a master's life, applied whether or not it succeeds.
#[derive(Debug, Clone)]
enum Op {
    Put(u8, u64, u32),
    End(u8),
    Revoke(u8),
    Upsert(u8, u64),
    Remove(u8, bool),
    Unmount(u32),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6, 1u64..1 << 20, 1u32..4).prop_map(|(k, s, n)| Op::Put(k, s, n)),
        (0u8..6).prop_map(Op::End),
        (0u8..6).prop_map(Op::Revoke),
        (0u8..6, 1u64..1 << 20).prop_map(|(k, s)| Op::Upsert(k, s)),
        (0u8..6, any::<bool>()).prop_map(|(k, f)| Op::Remove(k, f)),
        (1u32..4).prop_map(Op::Unmount),
        (1u64..2_000).prop_map(Op::Tick),
    ]
}

const CLIENTS: [ClientId; 3] = [ClientId(0xa), ClientId(0xb), ClientId(0xc)];

fn cfg() -> MasterConfig {
    MasterConfig {
        lease_ttl_ms: 100,
        client_ttl_ms: 100_000,
        put_discard_ms: 300,
        put_release_ms: 3_000,
        unmount_grace_ms: 500,
        ..MasterConfig::default()
    }
}

/// A master after `ops` (three nodes of 16 MiB), and every log entry it appended.
fn history(ops: &[Op]) -> (Master, Vec<LogEntry>, u64) {
    let mut m = Master::new(cfg(), true);
    for (i, c) in CLIENTS.iter().enumerate() {
        let spec = MountSpec {
            node: format!("n{i}"),
            base: 0x1000_0000 * (i as u64 + 1),
            len: 16 << 20,
        };
        m.mount(*c, 0, &[spec]).unwrap();
    }
    let mut now = 1;
    for op in ops {
        let c = CLIENTS[now as usize % 3];
        let key = |k: &u8| format!("k{k}");
        let _ = match op {
            Op::Put(k, size, n) => {
                let cfg = PutConfig {
                    replica_num: *n,
                    ..PutConfig::default()
                };
                m.put_start(c, now, &key(k), *size, &cfg, crate::master::Write::Put)
                    .map(drop)
            }
            Op::End(k) => m.put_end(c, now, &key(k)),
            Op::Revoke(k) => m.put_revoke(c, now, &key(k)),
            Op::Upsert(k, size) => m
                .put_start(
                    c,
                    now,
                    &key(k),
                    *size,
                    &PutConfig::default(),
                    crate::master::Write::Upsert,
                )
                .map(drop),
            Op::Remove(k, force) => m.remove(now, &key(k), *force),
            Op::Unmount(id) => m.unmount(c, now, MountId(*id)),
            Op::Tick(dt) => {
                now += dt;
                m.handle_timeout(now);
                Ok(())
            }
        };
        now += 1;
    }
    let mut log = Vec::new();
    while let Some(e) = m.poll_effect() {
        if let crate::master::Effect::Append(entry) = e {
            log.push(entry);
        }
    }
    (m, log, now)
}

/// Rebuilds a master from what decoded: a master or a typed error, never a panic; a master
/// that then runs its timers and takes a snapshot without panicking either.
fn check_restore(snapshot: Option<Snapshot>, log: Vec<LogEntry>, now: u64) {
    match Master::restore(cfg(), false, snapshot, log, now) {
        Ok(mut m) => {
            if let Some(at) = m.poll_timeout() {
                m.handle_timeout(at.max(now));
            }
            m.handle_timeout(now.saturating_add(1_000_000));
            let _ = m.snapshot();
        }
        // Damage that decoded but does not fit is Corrupt; a snapshot of another format or
        // alignment InvalidVersion or InvalidParams.
        Err(e) => assert!(matches!(e.code(), -1500 | -300 | -600), "{e}"),
    }
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn log_from_random_bytes(bytes in vec(any::<u8>(), 0..200), header in any::<bool>()) {
        let mut file = Vec::new();
        if header {
            write_header(&mut file, LOG_MAGIC, FORMAT_VERSION).unwrap();
        }
        file.extend_from_slice(&bytes);
        read_all::<LogEntry>(&file, Some(LOG_MAGIC))?;
        // Random payloads behind correct checksums reach bincode.
        let framed = frame(&bytes);
        let (entries, _) = read_all::<LogEntry>(&framed, None)?;
        check_restore(None, entries, 1);
        read_all::<Snapshot>(&framed, None)?;
    }

    #[test]
    fn log_mutated(log in entries(), muts in mutations(4), at in any::<prop::sample::Index>(), len in edge_u64()) {
        let file = file_of(LOG_MAGIC, &log);
        let (back, clean) = read_all::<LogEntry>(&file, Some(LOG_MAGIC))?;
        prop_assert!(clean);
        prop_assert_eq!(&back, &log, "a valid log reads back exactly");
        // A frame's length field made huge, zero or off by a little.
        let mut long = file.clone();
        overwrite(&mut long, 12, 4, len, false);
        read_all::<LogEntry>(&long, Some(LOG_MAGIC))?;
        // The whole file damaged (the checksums catch most of it)...
        read_all::<LogEntry>(&mutate(file, &muts), Some(LOG_MAGIC))?;
        // ...or one entry's payload, checksum fixed.
        let victim = &log[at.index(log.len())];
        let payload = mutate(bincode::serialize(victim).unwrap(), &muts);
        let (decoded, _) = read_all::<LogEntry>(&frame(&payload), None)?;
        let mut replay: Vec<LogEntry> = log.clone();
        replay.splice(at.index(log.len())..=at.index(log.len()), decoded);
        check_restore(None, replay, 1);
    }

    #[test]
    fn snapshot_and_log_of_a_history_mutated(
        ops in vec(op(), 0..24),
        muts in mutations(4),
        which in any::<prop::sample::Index>(),
        edge in (edge_u64(), 0u8..4),
    ) {
        let (m, log, now) = history(&ops);
        let snapshot = m.snapshot();
        let file = file_of(SNAPSHOT_MAGIC, std::slice::from_ref(&snapshot));
        let (back, _) = read_all::<Snapshot>(&file, Some(SNAPSHOT_MAGIC))?;
        prop_assert_eq!(back.first(), Some(&snapshot), "a valid snapshot reads back exactly");
        check_restore(Some(snapshot.clone()), Vec::new(), now);

        let payload = mutate(bincode::serialize(&snapshot).unwrap(), &muts);
        let (decoded, _) = read_all::<Snapshot>(&frame(&payload), None)?;
        check_restore(decoded.into_iter().next(), log.clone(), now);

        if !log.is_empty() {
            let i = which.index(log.len());
            let payload = mutate(bincode::serialize(&log[i]).unwrap(), &muts);
            let (decoded, _) = read_all::<LogEntry>(&frame(&payload), None)?;
            let mut replay = log.clone();
            replay.splice(i..=i, decoded);
            check_restore(None, replay, now);
            // One number of one entry at an edge value, the rest of the history intact.
            let mut replay = log.clone();
            set_number(&mut replay[i], edge.0, edge.1);
            check_restore(None, replay, now);
        }
    }
}

/// Sets one number of `e` to `v`: its time (`which` 0), a size or length (1), a replica's
/// offset (2), or a time it names (3).
fn set_number(e: &mut LogEntry, v: u64, which: u8) {
    match (which, &mut e.record) {
        (0, _) => e.now = v,
        (1, Record::Mount { len, .. } | Record::WriteStart { size: len, .. }) => *len = v,
        (2, Record::Mount { base, .. }) => *base = v,
        (2, Record::WriteStart { replicas, .. }) => replicas.iter_mut().for_each(|r| r.offset = v),
        (
            3,
            Record::UnmountBegin { until, .. }
            | Record::WriteEnd {
                old_until: until, ..
            }
            | Record::Remove {
                hold_until: until, ..
            }
            | Record::ReplicasDrop {
                hold_until: until, ..
            }
            | Record::TaskStart { until, .. }
            | Record::TaskEnd {
                hold_until: until, ..
            },
        ) => *until = v,
        (2, Record::TaskStart { targets, .. }) => targets.iter_mut().for_each(|r| r.offset = v),
        _ => e.now = v,
    }
}

// Regressions: inputs the fuzz tests above found, each of which panicked or over-allocated
// before its fix.

fn entry(seq: u64, now: u64, record: Record) -> LogEntry {
    LogEntry {
        seq,
        epoch: 1,
        now,
        record,
    }
}

fn mount(id: u32, node: &str, base: u64, len: u64) -> Record {
    Record::Mount {
        client: ClientId(1),
        mount: MountId(id),
        node: node.into(),
        base,
        len,
    }
}

fn restore_code(snapshot: Option<Snapshot>, log: Vec<LogEntry>) -> i32 {
    match Master::restore(cfg(), false, snapshot, log, 10) {
        Ok(mut m) => {
            m.handle_timeout(u64::MAX);
            0
        }
        Err(e) => e.code(),
    }
}

/// `next_mount = id + 1` overflowed for the last id.
#[test]
fn a_mount_with_the_last_id_replays() {
    assert_eq!(
        restore_code(None, vec![entry(1, 1, mount(u32::MAX, "n", 0, 4096))]),
        0
    );
}

/// The total capacity overflowed; an empty or overflowing range was accepted from the log
/// although `mount` refuses it.
#[test]
fn mounts_no_node_could_make_are_corrupt() {
    let big = 1 << 63;
    let log = vec![
        entry(1, 1, mount(1, "a", 0, big)),
        entry(2, 1, mount(2, "b", 0, big)),
    ];
    assert_eq!(restore_code(None, log), -1500, "capacity past u64::MAX");
    for record in [
        mount(1, "a", 0, 0),
        mount(1, "a", u64::MAX, 2),
        mount(1, "", 0, 64),
    ] {
        assert_eq!(restore_code(None, vec![entry(1, 1, record)]), -1500);
    }
}

/// A write started at `u64::MAX` (a damaged time): its release time overflowed when it was
/// revoked with its space held, removed, or its range went.
#[test]
fn a_write_started_at_the_end_of_time_is_held_not_a_panic() {
    let start = |seq| {
        entry(
            seq,
            u64::MAX,
            Record::WriteStart {
                client: ClientId(1),
                key: "k".into(),
                size: 64,
                replicas: SmallVec::from_vec(vec![Replica {
                    mount: MountId(1),
                    offset: 0,
                }]),
                in_place: false,
                replaces: false,
                pin: Pin::None,
            },
        )
    };
    let mounted = entry(1, 1, mount(1, "n", 0, 1 << 20));
    let ends = [
        Record::WriteRevoke {
            key: "k".into(),
            hold: true,
        },
        Record::MountRemoved { mount: MountId(1) },
    ];
    for end in ends {
        let log = vec![mounted.clone(), start(2), entry(3, 5, end)];
        assert_eq!(restore_code(None, log), 0);
    }
    // Left running: its timers saturate.
    assert_eq!(restore_code(None, vec![mounted, start(2)]), 0);
}

/// A snapshot at log position `u64::MAX`: the restored master's next entry overflowed.
#[test]
fn a_snapshot_at_the_last_position_is_corrupt() {
    let (m, _, _) = history(&[]);
    let mut s = m.snapshot();
    s.seq = u64::MAX;
    assert_eq!(restore_code(Some(s), Vec::new()), -1500);
}

/// A snapshot whose two ranges have one id (damage): loaded without a check before.
#[test]
fn a_snapshot_with_colliding_mounts_is_corrupt() {
    let (m, _, _) = history(&[]);
    let mut bytes = bincode::serialize(&m.snapshot()).unwrap();
    // version u32, seq, epoch and alignment u64, next_mount u32, the count u64: the first
    // range's id at 40; each range is id u32, client u128, node (u64 length, "n0"), base and
    // len u64, draining None (one byte): 47 bytes.
    assert_eq!(bytes[40..44], 1u32.to_le_bytes());
    assert_eq!(bytes[87..91], 2u32.to_le_bytes());
    bytes[87..91].copy_from_slice(&1u32.to_le_bytes());
    let s: Snapshot = bincode::deserialize(&bytes).unwrap();
    assert_eq!(restore_code(Some(s), Vec::new()), -1500);
}
