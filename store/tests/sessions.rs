//! Objects written and read in ranges after one master round trip (Mooncake's put and get
//! sessions): `batch_reserve` → `batch_write_reserved` (layer by layer) → `batch_publish` or
//! `batch_revoke`, and `batch_locate` → `batch_read_located`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use yuebing_engine::EngineBuffer;
use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Fragment, Options};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn codes<T: std::fmt::Debug>(r: &[yuebing_store::Result<T>]) -> Vec<Result<&T, i32>> {
    r.iter().map(|r| r.as_ref().map_err(|e| e.code())).collect()
}

fn client_of(master: &RunningMaster, store_size: u64) -> ClientConfig {
    ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size,
        ..ClientConfig::default()
    }
}

/// `len` bytes of registered memory holding `data` at 0.
fn filled(c: &Client, len: u64, data: &[u8]) -> Arc<EngineBuffer> {
    let buf = c.engine().allocate(len as usize, true).unwrap();
    // SAFETY: the buffer is new; no transfer touches it.
    unsafe { buf.write_at(0, data) }.unwrap();
    buf
}

fn read_back(buf: &EngineBuffer, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: the calls that moved bytes into `buf` are over.
    unsafe { buf.read_at(0, &mut out) }.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_objects_are_written_layer_by_layer_then_published() {
    let (master, owner) = common::master_and_client().await;
    let writer = Client::start(client_of(&master, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let (layers, page) = (4u64, 1000u64);
    let size = layers * page;
    for (n, c) in [&owner, &writer].into_iter().enumerate() {
        let keys = [format!("a{n}"), format!("b{n}")];
        let values = [pattern(1, size as usize), pattern(2, size as usize)];
        let src = filled(
            c,
            2 * size,
            &[values[0].clone(), values[1].clone()].concat(),
        );
        let items: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), size)).collect();
        let reserved = c.batch_reserve(&items, &opts).await.unwrap();
        let reserved: Vec<_> = reserved.into_iter().map(Result::unwrap).collect();
        assert_eq!(reserved[1].key(), keys[1]);
        assert_eq!(reserved[1].size(), size);
        // Not readable before its publication.
        assert!(c.get(&keys[0], &opts).await.is_err());
        // Layers in reverse order: each item one page of its key.
        for layer in (0..layers).rev() {
            let frags: Vec<[Fragment; 1]> = (0..2u64)
                .map(|i| {
                    [Fragment {
                        addr: src.addr() + i * size + layer * page,
                        offset: layer * page,
                        len: page,
                    }]
                })
                .collect();
            let items: Vec<_> = reserved.iter().zip(&frags).collect();
            let written = c.batch_write_reserved(&items, &opts).await.unwrap();
            assert_eq!(codes(&written), vec![Ok(&page), Ok(&page)]);
        }
        // A fragment past the object, or at address 0, writes nothing of its item.
        let outside = [Fragment {
            addr: src.addr(),
            offset: size - 10,
            len: 11,
        }];
        let null = [Fragment {
            addr: 0,
            offset: 0,
            len: 1,
        }];
        let bad = c
            .batch_write_reserved(&[(&reserved[0], &outside), (&reserved[1], &null)], &opts)
            .await
            .unwrap();
        assert_eq!(codes(&bad), vec![Err(-600), Err(-600)]);
        let published = c.batch_publish(&reserved, &opts).await.unwrap();
        assert_eq!(codes(&published), vec![Ok(&()), Ok(&())]);
        assert!(reserved[0].sealed());
        for (k, v) in keys.iter().zip(&values) {
            assert_eq!(&c.get(k, &opts).await.unwrap(), v);
        }
        // Sealed: a later write is refused and the object keeps its bytes.
        let late = [Fragment {
            addr: src.addr() + size,
            offset: 0,
            len: page,
        }];
        let r = c
            .batch_write_reserved(&[(&reserved[0], &late)], &opts)
            .await
            .unwrap();
        assert_eq!(r[0].as_ref().unwrap_err().code(), -600);
        assert_eq!(c.get(&keys[0], &opts).await.unwrap(), values[0]);
        // Published again (a lost answer): the master answers Ok.
        let again = c.batch_publish(&reserved[..1], &opts).await.unwrap();
        assert!(again[0].is_ok(), "{:?}", again[0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_reservation_stores_nothing_and_its_key_may_be_put_again() {
    let (master, _owner) = common::master_and_client().await;
    let c = Client::start(client_of(&master, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let size = 1 << 20;
    let value = pattern(3, size as usize);
    let src = filled(&c, size, &value);
    let first = c.batch_reserve(&[("r", size)], &opts).await.unwrap();
    let first = first.into_iter().next().unwrap().unwrap();
    let whole = [Fragment::whole(src.addr(), size)];
    let w = c
        .batch_write_reserved(&[(&first, &whole)], &opts)
        .await
        .unwrap();
    assert_eq!(*w[0].as_ref().unwrap(), size);
    let revoked = c
        .batch_revoke(std::slice::from_ref(&first), &opts)
        .await
        .unwrap();
    assert!(revoked[0].is_ok(), "{:?}", revoked[0]);
    assert_eq!(c.get("r", &opts).await.unwrap_err().code(), -704);
    assert!(!c.exist("r", &opts).await.unwrap());
    let w = c
        .batch_write_reserved(&[(&first, &whole)], &opts)
        .await
        .unwrap();
    assert_eq!(w[0].as_ref().unwrap_err().code(), -600, "sealed");
    // The key is free again: reserved, written and published anew.
    let second = c.batch_reserve(&[("r", 10)], &opts).await.unwrap();
    let second = second.into_iter().next().unwrap().unwrap();
    let part = [Fragment::whole(src.addr(), 10)];
    let w = c
        .batch_write_reserved(&[(&second, &part)], &opts)
        .await
        .unwrap();
    assert_eq!(*w[0].as_ref().unwrap(), 10);
    assert!(c.batch_publish(&[second], &opts).await.unwrap()[0].is_ok());
    assert_eq!(c.get("r", &opts).await.unwrap(), &value[..10]);
    // Bad items are refused in place, before any round trip; a reservation of a key being
    // written is refused by the master.
    let bad = c
        .batch_reserve(&[("", 10), ("z", 0), ("r", 10)], &opts)
        .await
        .unwrap();
    assert_eq!(codes(&bad).len(), 3);
    assert_eq!(bad[0].as_ref().unwrap_err().code(), -600);
    assert_eq!(bad[1].as_ref().unwrap_err().code(), -600);
    assert!(bad[2].is_err(), "r exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_waits_for_the_writes_under_way() {
    let (master, _owner) = common::master_and_client().await;
    let _space = Client::start(client_of(&master, 40 << 20)).await.unwrap();
    let c = Client::start(client_of(&master, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(20));
    // Large enough that its transfer outlasts a master round trip; the rounds' objects fit
    // the space together.
    let size = 8u64 << 20;
    let value = pattern(9, size as usize);
    let src = filled(&c, size, &value);
    for round in 0..4 {
        let key = format!("k{round}");
        let r = c
            .batch_reserve(&[(key.as_str(), size)], &opts)
            .await
            .unwrap();
        let r = r.into_iter().next().unwrap().unwrap();
        // The write in 64 fragments, its publication asked for as it starts.
        let frags: Vec<Fragment> = (0..64u64)
            .map(|i| Fragment {
                addr: src.addr() + i * (size / 64),
                offset: i * (size / 64),
                len: size / 64,
            })
            .collect();
        let write = c.batch_write_reserved(&[(&r, &frags)], &opts);
        let publish = async {
            tokio::task::yield_now().await;
            let p = c
                .batch_publish(std::slice::from_ref(&r), &opts)
                .await
                .unwrap();
            // Read at once: the published object holds every byte of a write that succeeded.
            (p, c.get(&key, &opts).await)
        };
        let (w, (p, got)) = tokio::join!(write, publish);
        let w = w.unwrap();
        match &w[0] {
            Ok(n) => {
                assert_eq!(*n, size);
                assert!(p[0].is_ok(), "{:?}", p[0]);
                assert!(got.unwrap() == value, "round {round}: torn object");
            }
            // Sealed before it started: refused, and nothing claims it was written.
            Err(e) => assert_eq!(e.code(), -600, "{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn located_objects_are_read_in_ranges_without_the_master() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let mut cfg = MasterServerConfig::default();
    cfg.core.lease_ttl_ms = 1000;
    let master = RunningMaster::start(cfg, &bind).await.unwrap();
    let owner = Client::start(client_of(&master, 8 << 20)).await.unwrap();
    let reader = Client::start(client_of(&master, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let (a, b) = (pattern(4, 8000), pattern(5, 300));
    owner.put("a", &a, &opts).await.unwrap();
    owner.put("b", &b, &opts).await.unwrap();
    let mut located = Vec::new();
    for c in [&owner, &reader] {
        let found = c
            .batch_locate(&["a", "nope", "b", ""], &opts)
            .await
            .unwrap();
        let got: Vec<_> = found
            .iter()
            .map(|f| f.as_ref().map(|l| l.size()).map_err(|e| e.code()))
            .collect();
        assert_eq!(got, vec![Ok(8000), Err(-704), Ok(300), Err(-600)]);
        located.push(found);
    }
    // The reads need the master no more.
    master.shutdown(Duration::from_secs(1)).await;
    for (c, found) in [&owner, &reader].into_iter().zip(&located) {
        let (fa, fb) = (found[0].as_ref().unwrap(), found[2].as_ref().unwrap());
        let dst = c.engine().allocate(1 << 14, true).unwrap();
        let frag = |at: u64, offset: u64, len: u64| Fragment {
            addr: dst.addr() + at,
            offset,
            len,
        };
        for half in 0..2u64 {
            let fa_parts = [frag(half * 4000, half * 4000, 4000)];
            let fb_parts = [
                frag(9000 + half * 150, half * 150, 100),
                frag(9100 + half * 150, half * 150 + 100, 50),
            ];
            let items = [(fa, &fa_parts[..]), (fb, &fb_parts[..])];
            let r = c.batch_read_located(&items, &opts).await.unwrap();
            assert_eq!(codes(&r), vec![Ok(&4000), Ok(&150)]);
        }
        let outside = [frag(12_000, 299, 2)];
        let r = c
            .batch_read_located(&[(fb, &outside)], &opts)
            .await
            .unwrap();
        assert_eq!(r[0].as_ref().unwrap_err().code(), -600);
        let back = read_back(&dst, 12_002);
        assert_eq!(&back[..8000], &a[..]);
        assert_eq!(&back[9000..9300], &b[..]);
        assert_eq!(&back[12_000..], &[0, 0], "a refused item reads nothing");
    }
    // Past the lease: refused before any transfer.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (c, found) in [&owner, &reader].into_iter().zip(&located) {
        let dst = c.engine().allocate(4096, true).unwrap();
        let late = [Fragment::whole(dst.addr(), 300)];
        let fb = found[2].as_ref().unwrap();
        let r = c.batch_read_located(&[(fb, &late)], &opts).await.unwrap();
        assert_eq!(r[0].as_ref().unwrap_err().code(), -707);
        assert_eq!(read_back(&dst, 300), vec![0u8; 300]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_whose_write_failed_or_whose_deadline_passed_is_not_published() {
    let (master, _owner) = common::master_and_client().await;
    let c = Client::start(client_of(&master, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let src = filled(&c, 4096, &pattern(6, 4096));
    let r = c.batch_reserve(&[("f", 4096)], &opts).await.unwrap();
    let r = r.into_iter().next().unwrap().unwrap();
    // Memory the engine never registered: the transfer fails once it has started.
    let plain = vec![0u8; 4096];
    let unregistered = [Fragment::whole(plain.as_ptr() as u64, 4096)];
    let w = c
        .batch_write_reserved(&[(&r, &unregistered)], &opts)
        .await
        .unwrap();
    assert!(w[0].is_err(), "{:?}", w[0]);
    // A later write that succeeds does not make it publishable: a replica may be partial.
    let good = [Fragment::whole(src.addr(), 4096)];
    let w = c.batch_write_reserved(&[(&r, &good)], &opts).await.unwrap();
    assert!(w[0].is_ok(), "{:?}", w[0]);
    let p = c
        .batch_publish(std::slice::from_ref(&r), &opts)
        .await
        .unwrap();
    assert_eq!(p[0].as_ref().unwrap_err().code(), -700, "{:?}", p[0]);
    assert!(!c.exist("f", &opts).await.unwrap());
    assert!(c.batch_revoke(&[r], &opts).await.unwrap()[0].is_ok());
    // Another client's reservation is refused in its place: its write is that client's.
    let other = Client::start(client_of(&master, 0)).await.unwrap();
    let theirs = other
        .batch_reserve(&[("theirs", 4096)], &opts)
        .await
        .unwrap();
    let theirs = theirs.into_iter().next().unwrap().unwrap();
    let w = c
        .batch_write_reserved(&[(&theirs, &good)], &opts)
        .await
        .unwrap();
    assert_eq!(w[0].as_ref().unwrap_err().code(), -600);
    let p = c
        .batch_publish(std::slice::from_ref(&theirs), &opts)
        .await
        .unwrap();
    assert_eq!(p[0].as_ref().unwrap_err().code(), -600);
    assert!(other.batch_revoke(&[theirs], &opts).await.unwrap()[0].is_ok());
    // Past the reserving call's deadline: not published, and a revoke is left to the master.
    let short = Options::deadline(Duration::from_millis(300));
    let late = c.batch_reserve(&[("late", 4096)], &short).await.unwrap();
    let late = late.into_iter().next().unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let w = c
        .batch_write_reserved(&[(&late, &good)], &opts)
        .await
        .unwrap();
    assert_eq!(
        w[0].as_ref().unwrap_err().code(),
        yuebing_store::Error::Timeout.code()
    );
    let p = c
        .batch_publish(std::slice::from_ref(&late), &opts)
        .await
        .unwrap();
    assert_eq!(
        p[0].as_ref().unwrap_err().code(),
        yuebing_store::Error::Timeout.code()
    );
    assert!(!c.exist("late", &opts).await.unwrap());
    assert!(c.batch_revoke(&[late], &opts).await.unwrap()[0].is_ok());
}
