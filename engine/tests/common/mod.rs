//! Helpers shared by the engine's integration tests.
#![allow(dead_code, unreachable_pub)]

use yuebing_engine::{EngineBuffer, RemoteAccess, SegmentHandle, TransferEngine};
use yuebing_testkit::patterns::pattern;

/// Rights of a target buffer that peers read and write.
pub const RW: RemoteAccess = RemoteAccess::READ_WRITE;

/// Test access to an engine buffer's bytes. Each test touches a buffer's bytes only while no
/// transfer on them is in flight and no peer is given them to write, which is what
/// [`EngineBuffer::write_at`]'s contract asks.
pub trait TestBytes {
    /// Copies `data` in at `offset`.
    fn put(&self, offset: usize, data: &[u8]) -> Result<(), yuebing_engine::Error>;
    /// Copies `out.len()` bytes at `offset` out.
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<(), yuebing_engine::Error>;
}

impl TestBytes for EngineBuffer {
    fn put(&self, offset: usize, data: &[u8]) -> Result<(), yuebing_engine::Error> {
        // SAFETY (test): see the trait's docs.
        unsafe { self.write_at(offset, data) }
    }
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<(), yuebing_engine::Error> {
        // SAFETY (test): see the trait's docs.
        unsafe { self.read_at(offset, out) }
    }
}

/// `len` bytes of `buf` at `offset`.
pub fn read_back(buf: &EngineBuffer, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    buf.get(offset, &mut out).unwrap();
    out
}

/// Sizes from 1 byte to 64 MiB, each with an unaligned source and destination offset.
pub const ROUND_TRIPS: [(usize, usize, usize); 6] = [
    (1, 3, 11),
    (7, 0, 1),
    (4099, 13, 7),
    ((1 << 20) + 5, 5, 63),
    ((3 << 20) + 1, 1, 2),
    (64 << 20, 9, 17),
];

/// Writes each size from `src` (local) to `dst` in `peer`, checks it landed, reads it back into
/// `back` (local) and checks that too. All three buffers need 64 MiB + 64 bytes.
pub async fn round_trips(
    e: &TransferEngine,
    peer: SegmentHandle,
    src: &EngineBuffer,
    dst: &EngineBuffer,
    back: &EngineBuffer,
) {
    for (len, so, doff) in ROUND_TRIPS {
        let data = pattern(len, len as u64);
        src.put(so, &data).unwrap();
        let (s, d) = (src.addr() + so as u64, dst.addr() + doff as u64);
        e.write(s, peer, d, len as u64).await.unwrap();
        assert!(read_back(dst, doff, len) == data, "write of {len} bytes");
        e.read(back.addr() + 3, peer, d, len as u64).await.unwrap();
        assert!(read_back(back, 3, len) == data, "read of {len} bytes");
    }
}

/// `a` writes 4 KiB and then 1 MiB into `b` from a plain thread with a plain executor (no tokio
/// context): the engine's own runtime does the I/O and the big copies, the caller only waits.
pub async fn writes_from_a_plain_thread(a: TransferEngine, b: &TransferEngine) {
    let src = a.allocate(1 << 20, false).unwrap();
    let dst = b.allocate_exported(1 << 20, false, RW).unwrap();
    let data = pattern(1 << 20, 5);
    src.put(0, &data).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    let (s, d) = (src.addr(), dst.addr());
    let waited = std::thread::spawn(move || {
        futures::executor::block_on(async {
            a.write(s, peer, d, 4096).await?;
            a.write(s, peer, d, 1 << 20).await
        })
    });
    let result = tokio::task::spawn_blocking(move || waited.join())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result, Ok(()));
    assert!(read_back(&dst, 0, 1 << 20) == data);
}
