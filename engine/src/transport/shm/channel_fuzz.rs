//! Fuzz tests of the shm side channel's importer ([`fetch_export`]) against an exporter that
//! sends random bytes, or a valid export mutated, with some number of file descriptors: it
//! returns the export with one fd per buffer plus the status page, or an I/O error; never a
//! panic, and it allocates no more than its payload limit (1 MiB) allows, whatever length the
//! prefix declares.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::collection::vec;
use proptest::prelude::*;
use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use yuebing_testkit::alloc::measure;
use yuebing_testkit::fuzz::{config, edge_u64, mutate, mutations, overwrite};

use super::channel::{fetch_export, Export, ExportedBuffer, FetchError, MAX_FDS};

/// The channel's payload limit (`channel::MAX_PAYLOAD`).
const MAX_PAYLOAD: usize = 1 << 20;
/// The importer's receive buffer, a copy of what arrived, the payload as it grows (doubling),
/// one more read's buffer, and the decoded export.
const BOUND: usize = 6 * MAX_PAYLOAD;

/// Sends `bytes` with `fds` attached to the first byte, as the exporter does, then closes.
fn send_raw(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
    if bytes.is_empty() {
        return;
    }
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    }
    // The importer may have given up already: a failed send is its business.
    let Ok(sent) = sendmsg(
        stream,
        &[std::io::IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    ) else {
        return;
    };
    let mut s = stream;
    let _ = s.write_all(&bytes[sent..]);
}

/// A listening exporter that serves `bytes` and `fds` copies of a descriptor to one importer,
/// then the importer's result, with the socket file removed.
fn import_from(bytes: Vec<u8>, fds: usize) -> (std::io::Result<(Export, usize, u32)>, usize) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "yuebing-channel-fuzz-{}-{}.sock",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let listener = UnixListener::bind(&path).unwrap();
    let exporter = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        // The importer's hello (no token: the fixed part only), read before answering.
        let mut hello = [0u8; 10];
        let _ = (&stream).read_exact(&mut hello);
        let null = File::open("/dev/null").unwrap();
        let fds: Vec<BorrowedFd<'_>> = (0..fds).map(|_| null.as_fd()).collect();
        send_raw(&stream, &bytes, &fds);
    });
    let timeout = std::time::Duration::from_secs(5);
    let (res, peak) = measure(|| {
        fetch_export(&path, None, timeout)
            .map(|(export, fds, pid, _stream)| (export, fds.len(), pid))
            .map_err(|e| match e {
                FetchError::Io(e) => e,
                FetchError::Refused(why) => std::io::Error::other(format!("refused: {why:?}")),
            })
    });
    exporter.join().unwrap();
    let _ = std::fs::remove_file(&path);
    (res, peak)
}

fn check(bytes: Vec<u8>, fds: usize) -> Result<Option<Export>, TestCaseError> {
    let (res, peak) = import_from(bytes, fds);
    prop_assert!(peak <= BOUND, "{peak} bytes");
    Ok(match res {
        Ok((export, fds, pid)) => {
            prop_assert_eq!(
                fds,
                export.buffers.len() + 1,
                "one fd per buffer and the status page"
            );
            prop_assert_eq!(pid, std::process::id());
            Some(export)
        }
        Err(_) => None,
    })
}

fn export() -> impl Strategy<Value = Export> {
    let rights = (any::<bool>(), any::<bool>())
        .prop_map(|(read, write)| crate::memory::RemoteAccess { read, write });
    let buffer = (edge_u64(), edge_u64(), any::<usize>(), edge_u64(), rights).prop_map(
        |(addr, len, slot, generation, remote)| ExportedBuffer {
            addr,
            len,
            slot,
            generation,
            remote,
        },
    );
    (any::<u64>(), vec(buffer, 0..6)).prop_map(|(instance, buffers)| Export { instance, buffers })
}

/// The exporter's answer: status 0 (accepted), the payload's length, the payload.
fn framed(export: &Export) -> Vec<u8> {
    let payload = serde_json::to_vec(export).unwrap();
    let mut out = vec![0u8];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn export_from_random_bytes(bytes in vec(any::<u8>(), 0..64), len in edge_u64(), fds in 0usize..4) {
        let mut bytes = bytes;
        overwrite(&mut bytes, 1, 4, len, true);
        check(bytes, fds)?;
    }

    #[test]
    fn export_valid_then_mutated(
        e in export(),
        muts in mutations(3),
        len in edge_u64(),
        fds in prop_oneof![Just(None), (0usize..8).prop_map(Some)],
    ) {
        let bytes = framed(&e);
        let attached = e.buffers.len() + 1;
        prop_assert!(attached <= MAX_FDS);
        prop_assert_eq!(check(bytes.clone(), attached)?, Some(e));
        let mut long = bytes.clone();
        overwrite(&mut long, 1, 4, len, true);
        check(long, fds.unwrap_or(attached))?;
        check(mutate(bytes, &muts), fds.unwrap_or(attached))?;
    }
}
