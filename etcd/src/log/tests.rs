//! The log's pure parts: decoding under a key, the run check, an append's outcome, watch
//! responses, published sequence numbers. The etcd side is in `tests/log.rs`.

use std::collections::VecDeque;

use etcd_client::proto::{
    PbEvent, PbKeyValue, PbRangeResponse, PbResponseHeader, PbResponseOp, PbTxnOpResponse,
    PbTxnResponse, PbWatchResponse,
};
use etcd_client::{TxnResponse, WatchResponse};
use yuebing_store::master::ha::LogGroup;
use yuebing_store::master::{LogEntry, Record};

use super::read::Run;
use super::standbys::parse_applied;
use super::watch::receive;
use super::*;

const PREFIX: &str = "/yuebing/c/master";

fn group(first: u64, n: u64) -> LogGroup {
    let entries = (first..first + n)
        .map(|seq| LogEntry {
            seq,
            epoch: 7,
            now: 1000 + seq,
            record: Record::Remove {
                key: format!("k{seq}").into(),
                evicted: false,
                hold_until: 0,
            },
        })
        .collect();
    LogGroup::new(entries).unwrap()
}

fn stored(g: &LogGroup) -> (Vec<u8>, Vec<u8>) {
    (
        LogGroup::key(PREFIX, g.first()).into_bytes(),
        g.encode().unwrap(),
    )
}

#[test]
fn a_group_decodes_only_under_its_own_key() {
    let g = group(5, 3);
    let (key, value) = stored(&g);
    assert_eq!(decode(PREFIX, &key, &value).unwrap(), g);
    let other = LogGroup::key(PREFIX, 6);
    let e = decode(PREFIX, other.as_bytes(), &value).unwrap_err();
    assert_eq!(e.code(), -1500, "{e}");
    let e = decode(PREFIX, b"/yuebing/c/master/log/nope", &value).unwrap_err();
    assert_eq!(e.code(), -1500, "{e}");
    let e = decode(PREFIX, &key, b"garbage").unwrap_err();
    assert_eq!((e.code(), e.name()), (-1500, "Corrupt"), "{e}");
    let e = decode(PREFIX, b"\xff\xfe", &value).unwrap_err();
    assert_eq!(e.code(), -1500);
}

#[test]
fn a_run_is_contiguous_and_starts_at_or_before_the_seq_asked_for() {
    let mut run = Run::new(4);
    run.check("a", &group(3, 2)).unwrap();
    run.check("b", &group(5, 10)).unwrap();
    let e = run.check("c", &group(16, 1)).unwrap_err();
    assert_eq!(e.code(), -1500, "a gap: {e}");

    let e = Run::new(4).check("a", &group(6, 1)).unwrap_err();
    assert_eq!(e, Error::LogTruncated { seq: 4, first: 6 });

    // After a group that ends before seq, the next one must follow it.
    let mut run = Run::new(9);
    run.follows(&group(1, 5));
    assert_eq!(run.check("x", &group(10, 1)).unwrap_err().code(), -1500);
    let mut run = Run::new(9);
    run.follows(&group(1, 8));
    run.check("x", &group(9, 1)).unwrap();
}

fn range(kvs: Vec<PbKeyValue>) -> PbResponseOp {
    PbResponseOp {
        response: Some(PbTxnOpResponse::ResponseRange(PbRangeResponse {
            kvs,
            ..PbRangeResponse::default()
        })),
    }
}

fn txn(succeeded: bool, responses: Vec<PbResponseOp>) -> TxnResponse {
    TxnResponse(PbTxnResponse {
        header: Some(PbResponseHeader {
            revision: 42,
            ..PbResponseHeader::default()
        }),
        succeeded,
        responses,
    })
}

fn kv(key: &str, value: &[u8], create_revision: i64, mod_revision: i64) -> PbKeyValue {
    PbKeyValue {
        key: key.as_bytes().to_vec(),
        value: value.to_vec(),
        create_revision,
        mod_revision,
        ..PbKeyValue::default()
    }
}

#[test]
fn an_append_outcome_names_who_won() {
    let epoch = Epoch {
        election_key: "/e/1".into(),
        create_revision: 10,
    };
    let key = "/yuebing/c/master/log/00000000000000000003";
    let ours = b"ours";
    assert_eq!(outcome(&txn(true, vec![]), key, ours, 3, &epoch), Ok(42));

    let leader = |rev| range(vec![kv("/e/1", b"", rev, rev)]);
    let deposed = outcome(
        &txn(false, vec![leader(11), range(vec![])]),
        key,
        ours,
        3,
        &epoch,
    );
    assert_eq!(
        deposed.unwrap_err(),
        Error::Deposed {
            key: "/e/1".into(),
            epoch: 10,
            current: Some(11)
        }
    );
    let gone = outcome(
        &txn(false, vec![range(vec![]), range(vec![])]),
        key,
        ours,
        3,
        &epoch,
    );
    assert_eq!(gone.unwrap_err().code(), -5012);

    let taken = range(vec![kv(key, b"theirs", 30, 30)]);
    let conflict = outcome(&txn(false, vec![leader(10), taken]), key, ours, 3, &epoch);
    assert_eq!(conflict.unwrap_err(), Error::LogConflict { seq: 3 });

    // A retry of an append that had committed: same value, same epoch.
    let mine = range(vec![kv(key, ours, 30, 31)]);
    assert_eq!(
        outcome(&txn(false, vec![leader(10), mine]), key, ours, 3, &epoch),
        Ok(31)
    );

    // Whatever else etcd answers is a typed error, never a panic.
    for responses in [
        vec![],
        vec![leader(10)],
        vec![PbResponseOp { response: None }, leader(10)],
        vec![leader(10), range(vec![])],
    ] {
        let e = outcome(&txn(false, responses), key, ours, 3, &epoch).unwrap_err();
        assert_eq!(e.code(), -5009, "{e}");
    }
    let mut headless = txn(true, vec![]);
    headless.0.header = None;
    assert_eq!(
        outcome(&headless, key, ours, 3, &epoch).unwrap_err().code(),
        -5009
    );
}

fn event(kind: i32, key: &[u8], value: &[u8]) -> PbEvent {
    PbEvent {
        r#type: kind,
        kv: Some(PbKeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            ..PbKeyValue::default()
        }),
        prev_kv: None,
    }
}

fn watch(resp: PbWatchResponse) -> (Result<()>, Vec<Result<LogGroup>>) {
    let mut ready = VecDeque::new();
    let result = receive(PREFIX, 5, Ok(Some(WatchResponse(resp))), &mut ready);
    (result, ready.into_iter().collect())
}

#[test]
fn watch_events_become_groups_in_order_deletes_ignored() {
    let (a, b) = (group(1, 2), group(3, 1));
    let (ka, va) = stored(&a);
    let (kb, vb) = stored(&b);
    let resp = PbWatchResponse {
        events: vec![event(0, &ka, &va), event(1, &ka, b""), event(0, &kb, &vb)],
        ..PbWatchResponse::default()
    };
    let (result, items) = watch(resp);
    result.unwrap();
    assert_eq!(items, vec![Ok(a), Ok(b)]);
}

#[test]
fn damage_compaction_and_cancellation_end_the_watch() {
    let good = group(1, 1);
    let (k, v) = stored(&good);
    let damaged = PbWatchResponse {
        events: vec![event(0, &k, &v), event(0, &k, b"junk")],
        ..PbWatchResponse::default()
    };
    let (result, items) = watch(damaged);
    assert_eq!(result.unwrap_err().code(), -1500);
    assert_eq!(
        items,
        vec![Ok(good)],
        "the groups before the damage come first"
    );

    let unknown = PbWatchResponse {
        events: vec![event(9, &k, &v)],
        ..PbWatchResponse::default()
    };
    assert_eq!(watch(unknown).0.unwrap_err().code(), -5009);
    let no_kv = PbWatchResponse {
        events: vec![PbEvent::default()],
        ..PbWatchResponse::default()
    };
    assert_eq!(watch(no_kv).0.unwrap_err().code(), -5009);

    let compacted = PbWatchResponse {
        canceled: true,
        compact_revision: 9,
        ..PbWatchResponse::default()
    };
    assert_eq!(
        watch(compacted).0.unwrap_err(),
        Error::Compacted {
            requested: 5,
            compacted: 9
        }
    );
    let canceled = PbWatchResponse {
        canceled: true,
        ..PbWatchResponse::default()
    };
    assert_eq!(watch(canceled).0.unwrap_err().code(), -5008);
    let mut ready = VecDeque::new();
    assert_eq!(
        receive(PREFIX, 5, Ok(None), &mut ready).unwrap_err().code(),
        -5002
    );
}

#[test]
fn published_sequence_numbers_are_decimal_u64() {
    assert_eq!(parse_applied(b"k", b"0").unwrap(), 0);
    assert_eq!(
        parse_applied(b"k", b"18446744073709551615").unwrap(),
        u64::MAX
    );
    for bad in [
        &b""[..],
        b"-1",
        b"+1",
        b" 1",
        b"1x",
        b"18446744073709551616",
        b"\xff",
    ] {
        assert_eq!(
            parse_applied(b"k", bad).unwrap_err().code(),
            -5009,
            "{bad:?}"
        );
    }
}

#[test]
fn an_inclusive_end_follows_exactly_its_key() {
    let key = LogGroup::key(PREFIX, 7);
    let end = inclusive_end(key.as_bytes());
    assert!(key.as_bytes() < &end[..]);
    assert!(&end[..] < LogGroup::key(PREFIX, 8).as_bytes());
}

#[test]
fn a_read_looks_first_over_the_most_entries_a_group_holds() {
    use yuebing_store::master::ha::GroupLimits;
    assert_eq!(
        Some(WINDOW),
        u64::try_from(GroupLimits::default().max_entries).ok()
    );
}
