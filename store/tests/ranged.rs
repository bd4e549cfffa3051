//! Objects moved in parts: `Client::batch_get_ranges` (parts of objects into registered
//! memory, each bad fragment refused in its place) and the multi-buffer batches
//! (`batch_put_from_buffers` gathers a value from several buffers, `batch_get_into_buffers`
//! spreads it over several), from the client's own space and from a peer's.

mod common;

use std::time::Duration;

use yuebing_store::{Client, ClientConfig, Fragment, Options};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranged_reads_gather_fragments_and_refuse_each_bad_one_in_place() {
    let (master, owner) = common::master_and_client().await;
    // A client with no space of its own reads from the owner's over the engine; the owner
    // reads its own replicas through the local path.
    let reader = Client::start(ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 0,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let (a, b) = (pattern(1, 100_000), pattern(2, 5000));
    owner.put("a", &a, &opts).await.unwrap();
    owner.put("b", &b, &opts).await.unwrap();
    for c in [&owner, &reader] {
        let buf = c.engine().allocate(1 << 16, true).unwrap();
        let at = |off: u64| buf.addr() + off;
        let frag = |dst: u64, offset: u64, len: u64| Fragment {
            addr: at(dst),
            offset,
            len,
        };
        let a_parts = [
            frag(0, 10, 1000),
            frag(2000, 90_000, 10_000),
            frag(20_000, 99_999, 2),
        ];
        let b_parts = [frag(30_000, 0, 5000)];
        let again = [frag(40_000, 4990, 10)];
        let missing = [frag(50_000, 0, 4)];
        let bad = [Fragment {
            addr: 0,
            offset: 0,
            len: 4,
        }];
        let items: Vec<(&str, &[Fragment])> = vec![
            ("a", &a_parts),
            ("b", &b_parts),
            ("b", &again),
            ("nope", &missing),
            ("a", &bad),
            ("", &missing),
        ];
        let results = c.batch_get_ranges(&items, &opts).await.unwrap();
        let codes: Vec<Vec<Result<u64, i32>>> = results
            .iter()
            .map(|r| {
                r.iter()
                    .map(|f| f.as_ref().map(|n| *n).map_err(|e| e.code()))
                    .collect()
            })
            .collect();
        assert_eq!(
            codes,
            vec![
                vec![Ok(1000), Ok(10_000), Err(-600)],
                vec![Ok(5000)],
                vec![Ok(10)],
                vec![Err(-704)],
                vec![Err(-600)],
                vec![Err(-600)],
            ]
        );
        let mut got = vec![0u8; 1 << 16];
        // SAFETY: the batch is over; no transfer into `buf` is under way.
        unsafe { buf.read_at(0, &mut got) }.unwrap();
        assert_eq!(&got[..1000], &a[10..1010]);
        assert_eq!(&got[2000..12_000], &a[90_000..]);
        assert_eq!(
            &got[20_000..20_002],
            &[0, 0],
            "the fragment past the end is not read"
        );
        assert_eq!(&got[30_000..35_000], &b[..]);
        assert_eq!(&got[40_000..40_010], &b[4990..]);
        assert_eq!(
            &got[50_000..50_004],
            &[0; 4],
            "a missing key writes nothing"
        );
        // A batch with nothing to read makes no call and answers each refusal.
        let none: Vec<(&str, &[Fragment])> = vec![("", &missing), ("a", &[])];
        let r = c.batch_get_ranges(&none, &opts).await.unwrap();
        assert_eq!(r[0][0].as_ref().unwrap_err().code(), -600);
        assert!(r[1].is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_buffer_batches_gather_and_scatter_per_layer_blocks() {
    let (master, owner) = common::master_and_client().await;
    let reader = Client::start(ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 0,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    // Three "layers" of 1000, 3000 and 24 bytes per key, in one registered region.
    let layers = [1000u64, 3000, 24];
    let per_key: u64 = layers.iter().sum();
    let src = owner.engine().allocate(1 << 16, true).unwrap();
    let keys: Vec<String> = (0..4).map(|i| format!("kv{i}")).collect();
    let mut expected = Vec::new();
    let mut buffers: Vec<Vec<(u64, u64)>> = Vec::new();
    for (i, _) in keys.iter().enumerate() {
        let value = pattern(i as u8 + 10, per_key as usize);
        let base = i as u64 * 8192;
        let mut at = 0;
        let mut mine = Vec::new();
        for (l, &len) in layers.iter().enumerate() {
            // Each layer's block lies apart from the others (a gap of 64 bytes after it).
            let addr = base + l as u64 * 2048 + if l == 2 { 2048 } else { 0 };
            // SAFETY: no transfer touches `src` yet.
            unsafe { src.write_at(addr as usize, &value[at..at + len as usize]) }.unwrap();
            mine.push((src.addr() + addr, len));
            at += len as usize;
        }
        buffers.push(mine);
        expected.push(value);
    }
    let items: Vec<(&str, &[(u64, u64)])> = keys
        .iter()
        .zip(&buffers)
        .map(|(k, b)| (k.as_str(), b.as_slice()))
        .collect();
    let put = owner.batch_put_from_buffers(&items, &opts).await.unwrap();
    assert!(put.iter().all(|r| r.is_ok()), "{put:?}");
    for (k, v) in keys.iter().zip(&expected) {
        assert_eq!(
            &owner.get(k, &opts).await.unwrap(),
            v,
            "{k} is the layers end to end"
        );
    }
    // A bad buffer refuses its item only; an empty list of buffers is an empty object.
    let bad: [(u64, u64); 1] = [(0, 4)];
    let refused = owner
        .batch_put_from_buffers(&[("x", &bad[..]), ("y", &[][..])], &opts)
        .await
        .unwrap();
    assert_eq!(refused[0].as_ref().unwrap_err().code(), -600);
    assert_eq!(refused[1].as_ref().unwrap_err().code(), -600);

    for c in [&owner, &reader] {
        let dst = c.engine().allocate(1 << 16, true).unwrap();
        // Read back into another layout: two buffers of 2500 and 4000 bytes per key.
        let out: Vec<Vec<(u64, u64)>> = (0..4u64)
            .map(|i| {
                vec![
                    (dst.addr() + i * 8000, 2500),
                    (dst.addr() + i * 8000 + 3000, 4000),
                ]
            })
            .collect();
        let mut items: Vec<(&str, &[(u64, u64)])> = keys
            .iter()
            .zip(&out)
            .map(|(k, b)| (k.as_str(), b.as_slice()))
            .collect();
        let short = [(dst.addr() + 40_000, 4000u64)];
        items.push(("kv0", &short));
        items.push(("nope", &short));
        let got = c.batch_get_into_buffers(&items, &opts).await.unwrap();
        let codes: Vec<Result<u64, i32>> = got
            .iter()
            .map(|r| r.as_ref().map(|n| *n).map_err(|e| e.code()))
            .collect();
        assert_eq!(codes[..4], [Ok(per_key); 4]);
        assert_eq!(codes[4], Err(-600), "4000 bytes of room for 4024");
        assert_eq!(codes[5], Err(-704));
        let mut back = vec![0u8; 1 << 16];
        // SAFETY: the batch is over; no transfer into `dst` is under way.
        unsafe { dst.read_at(0, &mut back) }.unwrap();
        for (i, v) in expected.iter().enumerate() {
            let at = i * 8000;
            assert_eq!(&back[at..at + 2500], &v[..2500]);
            assert_eq!(&back[at + 3000..at + 3000 + 1524], &v[2500..]);
            assert!(
                back[at + 4524..at + 7000].iter().all(|&b| b == 0),
                "past the object"
            );
        }
        assert!(
            back[40_000..44_000].iter().all(|&b| b == 0),
            "a refused item writes nothing"
        );
    }
}
