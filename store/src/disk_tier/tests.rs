use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::*;

fn value(key: &str, len: usize) -> Bytes {
    let seed = crc32fast::hash(key.as_bytes()) as usize;
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ seed) as u8)
        .collect()
}

fn tag(i: u8) -> Tag {
    Tag([i; 16])
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn config(dir: &Path, capacity: u64, segment_bytes: u64) -> DiskTierConfig {
    DiskTierConfig {
        dir: dir.to_path_buf(),
        capacity,
        segment_bytes,
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    segment::list(dir)
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

/// Sizes around the gathering limit and the segment size.
const SIZES: [usize; 6] = [1, 4096, 65_536, (256 << 10) + 1, 1 << 20, (3 << 20) + 7];

#[test]
fn what_is_written_reads_back_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let cfg = config(dir.path(), 64 << 20, 2 << 20);
    let (tier, rec) = DiskTier::open(cfg.clone(), rt.handle()).unwrap();
    assert_eq!(rec, Recovery::default());
    rt.block_on(async {
        let writes = SIZES.iter().enumerate().map(|(i, &len)| {
            let key = format!("k{i}");
            let tier = &tier;
            async move { tier.write(&key, tag(i as u8), value(&key, len)).await }
        });
        for r in futures::future::join_all(writes).await {
            r.unwrap();
        }
        for (i, &len) in SIZES.iter().enumerate() {
            let key = format!("k{i}");
            let (t, v) = tier.read(&key).await.unwrap();
            assert_eq!((t, v.len()), (tag(i as u8), len));
            assert!(v == value(&key, len), "{key}");
        }
        assert!(matches!(
            tier.read("nope").await,
            Err(Error::ObjectNotFound { .. })
        ));
    });
    let usage = tier.usage();
    assert_eq!(usage.objects, SIZES.len() as u64);
    assert!(usage.live >= SIZES.iter().sum::<usize>() as u64 && usage.used >= usage.live);
    tier.close();

    let (tier, rec) = DiskTier::open(cfg, rt.handle()).unwrap();
    assert_eq!(rec.torn_bytes, 0);
    assert!(rec.damaged.is_empty());
    assert_eq!(rec.held.len(), SIZES.len());
    for (i, &len) in SIZES.iter().enumerate() {
        let held = rec.held.iter().find(|h| h.key == format!("k{i}")).unwrap();
        assert_eq!((held.tag, held.len), (tag(i as u8), len as u64));
    }
    rt.block_on(async {
        let (_, v) = tier.read("k5").await.unwrap();
        assert!(v == value("k5", SIZES[5]));
        // A newer write of a key replaces it, on disk too.
        tier.write("k1", tag(99), value("other", 10)).await.unwrap();
    });
    tier.close();
    let (tier, rec) = DiskTier::open(config(dir.path(), 64 << 20, 2 << 20), rt.handle()).unwrap();
    let k1 = rec.held.iter().find(|h| h.key == "k1").unwrap();
    assert_eq!((k1.tag, k1.len), (tag(99), 10));
    tier.close();
}

#[test]
fn a_crash_at_any_byte_of_an_append_loses_only_that_write() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let cfg = config(dir.path(), 64 << 20, 64 << 20);
    let (tier, _) = DiskTier::open(cfg.clone(), rt.handle()).unwrap();
    rt.block_on(async {
        tier.write("a", tag(1), value("a", 5000)).await.unwrap();
        tier.write("b", tag(2), value("b", 300)).await.unwrap();
    });
    tier.close();
    let files = segment_files(dir.path());
    let path = files.last().unwrap();
    let whole = std::fs::read(path).unwrap();
    let b_len = (HEAD_LEN + 1 + 300) as u64;
    let b_at = whole.len() as u64 - b_len;
    // Every prefix of b's record, and b's record with a page that never reached the disk
    // (zeros), as a kill or a power cut leaves it.
    let mut damaged: Vec<Vec<u8>> = (b_at..whole.len() as u64)
        .map(|cut| whole[..cut as usize].to_vec())
        .collect();
    let mut holed = whole.clone();
    holed[b_at as usize + HEAD_LEN + 10..].fill(0);
    damaged.push(holed);
    for bytes in damaged {
        let work = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join(path.file_name().unwrap()), &bytes).unwrap();
        let (tier, rec) =
            DiskTier::open(config(work.path(), 64 << 20, 64 << 20), rt.handle()).unwrap();
        assert_eq!(
            rec.held.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(),
            ["a"],
            "a file of {} bytes",
            bytes.len()
        );
        assert_eq!(rec.torn_bytes, bytes.len() as u64 - b_at);
        rt.block_on(async {
            assert!(tier.read("a").await.unwrap().1 == value("a", 5000));
            assert!(matches!(
                tier.read("b").await,
                Err(Error::ObjectNotFound { .. })
            ));
            // The tier goes on writing after the cut.
            tier.write("c", tag(3), value("c", 77)).await.unwrap();
        });
        tier.close();
        // The torn tail stays where it was (nothing is cut), reported as damage of what is
        // no longer the newest segment.
        let (tier, rec) =
            DiskTier::open(config(work.path(), 64 << 20, 64 << 20), rt.handle()).unwrap();
        assert_eq!(rec.held.len(), 2, "{:?}", rec.held);
        assert_eq!(rec.torn_bytes, 0);
        assert_eq!(rec.damaged.len(), usize::from(bytes.len() as u64 > b_at));
        tier.close();
    }
}

#[test]
fn damaged_bytes_are_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let cfg = config(dir.path(), 64 << 20, 64 << 20);
    let (tier, _) = DiskTier::open(cfg.clone(), rt.handle()).unwrap();
    rt.block_on(async {
        tier.write("a", tag(1), value("a", 4096)).await.unwrap();
        tier.write("b", tag(2), value("b", 4096)).await.unwrap();
    });
    // A bit of a's value rots after it was written.
    let path = segment_files(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let a_value = HEADER_LEN + HEAD_LEN + 1;
    bytes[a_value + 100] ^= 4;
    std::fs::write(&path, &bytes).unwrap();
    rt.block_on(async {
        match tier.read("a").await {
            Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("checksum"), "{reason}"),
            other => panic!("read damaged bytes: {other:?}"),
        }
        // Found damaged, it is forgotten; b still reads.
        assert!(matches!(
            tier.read("a").await,
            Err(Error::ObjectNotFound { .. })
        ));
        assert!(tier.read("b").await.unwrap().1 == value("b", 4096));
    });
    tier.close();
    // At the next opening the damage ends that segment's scan, the newest: b, after it, is
    // lost with it (never served wrong).
    let (tier, rec) = DiskTier::open(cfg, rt.handle()).unwrap();
    assert!(rec.held.is_empty(), "{:?}", rec.held);
    assert!(rec.torn_bytes > 0);
    tier.close();
}

#[test]
fn damage_in_an_older_segment_is_reported_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    // Segments of 1 MiB: each 600 KiB value takes its own.
    let cfg = config(dir.path(), 64 << 20, 1 << 20);
    let (tier, _) = DiskTier::open(cfg.clone(), rt.handle()).unwrap();
    rt.block_on(async {
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            tier.write(key, tag(i as u8), value(key, 600 << 10))
                .await
                .unwrap();
        }
    });
    tier.close();
    let first = segment_files(dir.path()).remove(0);
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[HEADER_LEN + 3] ^= 1; // a's head
    std::fs::write(&first, &bytes).unwrap();
    let (tier, rec) = DiskTier::open(cfg, rt.handle()).unwrap();
    assert_eq!(
        rec.held.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(),
        ["b", "c"]
    );
    assert_eq!(rec.damaged.len(), 1, "{rec:?}");
    assert_eq!(rec.torn_bytes, 0);
    tier.close();
}

#[test]
fn removed_objects_give_their_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    // 8 MiB in segments of 1 MiB; objects of 200 KiB (five to a segment).
    let cfg = config(dir.path(), 8 << 20, 1 << 20);
    let (tier, _) = DiskTier::open(cfg, rt.handle()).unwrap();
    rt.block_on(async {
        let len = 200 << 10;
        let mut n = 0;
        // Fill the tier.
        loop {
            let key = format!("k{n}");
            match tier.write(&key, tag(0), value(&key, len)).await {
                Ok(()) => n += 1,
                Err(Error::DiskTierFull { need, free }) => {
                    assert!(free < need, "{free} {need}");
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(n >= 30, "only {n} objects of 200 KiB fit 8 MiB");
        let full = tier.usage();
        // Remove four of every five: the next writes fit only if their space comes back.
        for i in (0..n).filter(|i| i % 5 != 0) {
            assert!(tier.remove(&format!("k{i}")));
        }
        assert!(!tier.remove("k1"));
        for i in 0..n {
            let key = format!("new{i}");
            if i % 5 != 0 {
                tier.write(&key, tag(1), value(&key, len)).await.unwrap();
            }
        }
        let usage = tier.usage();
        assert!(usage.used <= usage.capacity, "{usage:?}");
        assert_eq!(usage.objects, full.objects, "{usage:?} {full:?}");
        // Everything kept, moved or not, reads back.
        for i in 0..n {
            let (key, want) = match i % 5 {
                0 => (format!("k{i}"), tag(0)),
                _ => (format!("new{i}"), tag(1)),
            };
            let (t, v) = tier.read(&key).await.unwrap();
            assert!(t == want && v == value(&key, len), "{key}");
        }
    });
    tier.close();
}

#[test]
fn a_write_that_cannot_fit_changes_nothing_and_bad_calls_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let cfg = config(dir.path(), 1 << 20, 1 << 20);
    let (tier, _) = DiskTier::open(cfg.clone(), rt.handle()).unwrap();
    // A second process (or tier) on the same directory is refused.
    match DiskTier::open(cfg.clone(), rt.handle()) {
        Err(Error::Io { reason, .. }) => assert!(reason.contains("another"), "{reason}"),
        other => panic!("{other:?}"),
    }
    rt.block_on(async {
        tier.write("a", tag(1), value("a", 1000)).await.unwrap();
        let before = tier.usage();
        assert!(matches!(
            tier.write("big", tag(2), value("big", 2 << 20)).await,
            Err(Error::DiskTierFull { .. })
        ));
        assert!(matches!(
            tier.write("", tag(2), value("x", 1)).await,
            Err(Error::InvalidParams { .. })
        ));
        assert_eq!(tier.usage(), before);
        assert!(tier.read("a").await.unwrap().1 == value("a", 1000));
    });
    assert!(matches!(
        DiskTier::open(config(dir.path(), 0, 1 << 20), rt.handle()),
        Err(Error::InvalidParams { .. })
    ));
    tier.close();
}

#[test]
fn acknowledged_writes_survive_compaction_under_pressure() {
    // Small segments and a tight capacity, eight writers overwriting their own keys: groups
    // rotate segments and need compaction to fit. Every write acknowledged must read back as
    // the newest of its key, before and after a reopen.
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let cfg = config(dir.path(), 3 << 20, 256 << 10);
    let (tier, _) = DiskTier::open(cfg.clone(), rt.handle()).unwrap();
    let tier = Arc::new(tier);
    let newest = rt.block_on(async {
        let writers = (0..8u8).map(|w| {
            let tier = tier.clone();
            tokio::spawn(async move {
                let mut newest: Vec<(String, Tag, usize)> = Vec::new();
                for round in 0..40u8 {
                    for k in 0..3 {
                        let key = format!("w{w}k{k}");
                        let len = 10_000 + 7_000 * usize::from((round + k as u8) % 5);
                        let t = Tag([w, round, k as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                        match tier
                            .write(&key, t, value(&format!("{key}{round}"), len))
                            .await
                        {
                            Ok(()) => {
                                newest.retain(|(k2, _, _)| *k2 != key);
                                newest.push((key, t, len));
                            }
                            Err(Error::DiskTierFull { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                newest
            })
        });
        let mut all = Vec::new();
        for w in writers {
            all.extend(w.await.unwrap());
        }
        all
    });
    assert_eq!(newest.len(), 24, "some key was never written");
    let check = |tier: &DiskTier| {
        rt.block_on(async {
            for (key, t, len) in &newest {
                let (got, v) = tier
                    .read(key)
                    .await
                    .unwrap_or_else(|e| panic!("{key}: {e}"));
                assert_eq!(got, *t, "{key}");
                assert!(v == value(&format!("{key}{}", t.0[1]), *len), "{key}");
            }
        })
    };
    check(&tier);
    assert!(tier.usage().used <= tier.usage().capacity + cfg.segment_bytes);
    Arc::try_unwrap(tier).unwrap().close();
    let (tier, rec) = DiskTier::open(cfg, rt.handle()).unwrap();
    assert!(rec.damaged.is_empty() && rec.torn_bytes == 0, "{rec:?}");
    for (key, t, len) in &newest {
        let held = rec.held.iter().find(|h| &h.key == key).unwrap();
        assert_eq!((held.tag, held.len), (*t, *len as u64), "{key}");
    }
    check(&tier);
    tier.close();
}

#[test]
fn a_group_that_needs_compaction_loses_and_reverts_nothing() {
    // Segments of 1 MiB, 3 MiB in all. Twenty 100 KiB objects fill two segments; nine of the
    // first segment's are removed (dead, but less than a segment: no compaction yet). Then one
    // burst, queued as one group: k9 (of the first segment) again, a 600 KiB value and twelve
    // more objects. The group rotates the head and needs the first segment compacted to fit:
    // done in the middle of the group, compaction once deleted the segment of records placed
    // and not yet indexed, or copied k9's old record after its new one.
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let cfg = config(dir.path(), 3 << 20, 1 << 20);
    let (tier, _) = DiskTier::open(cfg.clone(), rt.handle()).unwrap();
    let len = 100 << 10;
    let acked = rt.block_on(async {
        for i in 0..20 {
            let key = format!("k{i}");
            tier.write(&key, tag(1), value(&key, len)).await.unwrap();
        }
        for i in 0..9 {
            assert!(tier.remove(&format!("k{i}")));
        }
        // The large value first: while the writer writes it, the rest queue up as one group.
        let mut burst = vec![("big".to_string(), 600 << 10)];
        burst.push(("k9".to_string(), 33 << 10));
        burst.extend((0..12).map(|i| (format!("n{i}"), len)));
        // Values made first, so that the writes are queued at once.
        let values: Vec<Bytes> = burst
            .iter()
            .map(|(key, n)| value(&format!("{key}2"), *n))
            .collect();
        let writes = burst.iter().zip(values).map(|((key, n), v)| {
            let tier = &tier;
            async move {
                let r = tier.write(key, tag(2), v).await;
                (key.clone(), *n, r)
            }
        });
        let mut acked = Vec::new();
        for (key, n, r) in futures::future::join_all(writes).await {
            match r {
                Ok(()) => acked.push((key.clone(), tag(2), format!("{key}2"), n)),
                Err(Error::DiskTierFull { .. }) => {}
                Err(e) => panic!("{key}: {e}"),
            }
        }
        for i in 10..20 {
            let key = format!("k{i}");
            acked.push((key.clone(), tag(1), key, len));
        }
        if !acked.iter().any(|a| a.0 == "k9") {
            acked.push(("k9".into(), tag(1), "k9".into(), len));
        }
        acked
    });
    let check = |tier: &DiskTier, held: Option<&[Held]>| {
        for (key, t, seed, n) in &acked {
            let (got, v) = rt
                .block_on(tier.read(key))
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(got == *t && v == value(seed, *n), "{key}");
            if let Some(held) = held {
                let h = held.iter().find(|h| &h.key == key).unwrap();
                assert_eq!(h.tag, *t, "{key} reverted");
            }
        }
    };
    check(&tier, None);
    tier.close();
    let (tier, rec) = DiskTier::open(cfg, rt.handle()).unwrap();
    check(&tier, Some(&rec.held));
    tier.close();
}
