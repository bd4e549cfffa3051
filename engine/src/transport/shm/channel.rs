//! The shm side channel: a Unix socket (mode 0600) over which an engine hands the memfds of its
//! exported buffers to a same-host peer of the same user (checked with SO_PEERCRED on both
//! ends). File descriptors travel as SCM_RIGHTS; tarpc cannot carry them. Blocking I/O: it runs
//! once per peer, on the blocking pool.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

/// Most buffers handed over (the kernel's SCM_MAX_FD).
pub(crate) const MAX_FDS: usize = 253;
const MAX_PAYLOAD: usize = 1 << 20;

/// What an engine exports: its instance and its buffers. The first fd is its status page (see
/// `status`), then one per buffer, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Export {
    pub(crate) instance: u64,
    pub(crate) buffers: Vec<ExportedBuffer>,
}

/// One exported buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExportedBuffer {
    /// Address in the exporter.
    pub(crate) addr: u64,
    /// Length in bytes.
    pub(crate) len: u64,
    /// Its slot in the status page, and the generation that slot holds while it is registered.
    pub(crate) slot: usize,
    pub(crate) generation: u64,
}

fn same_user(stream: &UnixStream) -> io::Result<u32> {
    let cred = rustix::net::sockopt::socket_peercred(stream)?;
    if cred.uid != rustix::process::getuid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "shm peer runs as another user",
        ));
    }
    Ok(cred.pid.as_raw_nonzero().get() as u32)
}

/// Exporter side: checks the peer's uid, then sends `export` with `fds`.
pub(crate) fn send_export(
    stream: &UnixStream,
    export: &Export,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    same_user(stream)?;
    let payload = serde_json::to_vec(export).map_err(io::Error::other)?;
    let len = (payload.len() as u32).to_be_bytes();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many buffers to hand over at once"));
    }
    let sent = sendmsg(
        stream,
        &[IoSlice::new(&len), IoSlice::new(&payload)],
        &mut control,
        SendFlags::empty(),
    )?;
    // The fds went with the first byte; whatever did not fit goes as plain bytes.
    let rest: Vec<u8> = len
        .iter()
        .chain(payload.iter())
        .copied()
        .skip(sent)
        .collect();
    let mut s = stream;
    s.write_all(&rest)?;
    Ok(())
}

/// Importer side: connects to `path`, checks the exporter's uid, receives its export and fds.
/// Returns them with the exporter's pid and the connection, which the exporter keeps open for
/// as long as its engine lives (the importer's heartbeat).
pub(crate) fn fetch_export(path: &Path) -> io::Result<(Export, Vec<OwnedFd>, u32, UnixStream)> {
    let stream = UnixStream::connect(path)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let pid = same_user(&stream)?;
    let mut buf = vec![0u8; 64 << 10];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        &stream,
        &mut [IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            fds.extend(received);
        }
    }
    let mut data = buf[..got.bytes].to_vec();
    if data.len() < 4 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short shm export",
        ));
    }
    let len = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "shm export too large",
        ));
    }
    let mut s = &stream;
    while data.len() < 4 + len {
        let mut more = vec![0u8; 4 + len - data.len()];
        let n = s.read(&mut more)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short shm export",
            ));
        }
        data.extend_from_slice(&more[..n]);
    }
    let export: Export = serde_json::from_slice(&data[4..4 + len]).map_err(io::Error::other)?;
    if export.buffers.len() + 1 != fds.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "shm export: buffers and fds differ",
        ));
    }
    Ok((export, fds, pid, stream))
}
