//! `Client::batch_get_ranges`: parts of objects gathered into registered memory, from the
//! client's own space and from a peer's, each bad fragment refused in its place.

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
