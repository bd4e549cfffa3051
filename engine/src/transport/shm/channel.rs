//! The shm side channel: a Unix socket (mode 0600) over which an engine hands the memfds of its
//! exported buffers (those registered for remote access, each with its rights) to a same-host
//! peer of the same user (checked with SO_PEERCRED on both
//! ends). File descriptors travel as SCM_RIGHTS; tarpc cannot carry them. Blocking I/O: it runs
//! once per peer, on the blocking pool.
//!
//! ```text
//! importer: "YBSHM\0\0" | version u8 | token_len u16 | token
//! exporter: status u8 | (status 0:) len u32 | export (JSON), with the fds
//! ```
//!
//! The exporter checks the magic and version, then the cluster token, before it sends anything
//! but a refusal; status is 0, 1 (not this protocol or version) or 2 (missing or wrong token).

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
use yuebing_rpc::Token;

use crate::memory::RemoteAccess;

/// Most buffers handed over (the kernel's SCM_MAX_FD).
pub(crate) const MAX_FDS: usize = 253;
const MAX_PAYLOAD: usize = 1 << 20;
/// First bytes of an importer's hello; the last is the protocol version. Version 2: each
/// exported buffer carries its rights (`remote`), and only buffers registered for remote access
/// are exported.
const HELLO_MAGIC: [u8; 8] = *b"YBSHM\0\0\x02";
/// Status: the export follows.
const ACCEPTED: u8 = 0;
/// Status: not this protocol, or another version.
const BAD_VERSION: u8 = 1;
/// Status: the cluster token is missing or wrong.
const BAD_TOKEN: u8 = 2;

/// Why an exporter refused an importer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not this protocol or another version.
    BadVersion,
    /// Missing or wrong cluster token.
    BadToken,
}

impl Refused {
    fn status(self) -> u8 {
        match self {
            Refused::BadVersion => BAD_VERSION,
            Refused::BadToken => BAD_TOKEN,
        }
    }
}

/// The hello an importer sends.
fn encode_hello(token: Option<&Token>) -> Vec<u8> {
    let token = token.map_or(&[][..], Token::as_bytes);
    let mut out = HELLO_MAGIC.to_vec();
    // At most MAX_TOKEN_LEN (1024) bytes: the length fits.
    out.extend_from_slice(&(token.len() as u16).to_be_bytes());
    out.extend_from_slice(token);
    out
}

/// Exporter side: reads the importer's hello (within the stream's read timeout) and checks
/// the magic and version before the token's length, and the token before anything else. A
/// refusal is answered on the stream.
pub(crate) fn accept_hello(
    stream: &UnixStream,
    expected: Option<&Token>,
) -> io::Result<Result<(), Refused>> {
    let mut s = stream;
    let mut fixed = [0u8; 10];
    s.read_exact(&mut fixed)?;
    let verdict = if fixed[..8] != HELLO_MAGIC {
        Err(Refused::BadVersion)
    } else {
        match usize::from(u16::from_be_bytes([fixed[8], fixed[9]])) {
            len if len > yuebing_rpc::MAX_TOKEN_LEN => Err(Refused::BadVersion),
            len => {
                let mut token = vec![0u8; len];
                s.read_exact(&mut token)?;
                let given = (!token.is_empty()).then_some(&token[..]);
                match Token::admits(expected, given) {
                    true => Ok(()),
                    false => Err(Refused::BadToken),
                }
            }
        }
    };
    if let Err(why) = verdict {
        s.write_all(&[why.status()])?;
    }
    Ok(verdict)
}

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
    /// What the importer may do with it. No code of the exporter runs on the shm path, so the
    /// importer's engine enforces these rights; a buffer exported without write is sealed
    /// against writable mappings, so the kernel enforces that one too.
    pub(crate) remote: RemoteAccess,
}

pub(crate) fn same_user(stream: &UnixStream) -> io::Result<u32> {
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
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::other("shm export too large"))?
        .to_be_bytes();
    let status = [ACCEPTED];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many buffers to hand over at once"));
    }
    let sent = sendmsg(
        stream,
        &[
            IoSlice::new(&status),
            IoSlice::new(&len),
            IoSlice::new(&payload),
        ],
        &mut control,
        SendFlags::empty(),
    )?;
    // The fds went with the first byte; whatever did not fit goes as plain bytes.
    let rest: Vec<u8> = status
        .iter()
        .chain(len.iter())
        .chain(payload.iter())
        .copied()
        .skip(sent)
        .collect();
    let mut s = stream;
    s.write_all(&rest)?;
    Ok(())
}

/// Connects to `path` within `timeout`. A blocking connect would wait for as long as the
/// exporter's accept backlog is full (it is stopped, or busy with other handshakes); a
/// non-blocking one says so at once (`EAGAIN` on a Unix socket), and is tried again.
fn connect_within(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    use rustix::io::Errno;
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    let addr = SocketAddrUnix::new(path)?;
    let until = std::time::Instant::now() + timeout;
    loop {
        match rustix::net::connect(&fd, &addr) {
            Ok(()) => break,
            Err(Errno::AGAIN | Errno::INTR) if std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(Errno::AGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the exporter accepted no connection within {timeout:?}"),
                ))
            }
            Err(e) => return Err(e.into()),
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// What an importer got: the export, its fds, the exporter's pid, and the connection, which
/// the exporter keeps open for as long as its engine lives (the importer's heartbeat).
pub(crate) type Fetched = (Export, Vec<OwnedFd>, u32, UnixStream);

/// Why an import failed.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// The exporter refused the hello.
    Refused(Refused),
    /// The socket, the peer's user, or its answer failed.
    Io(io::Error),
}

impl From<io::Error> for FetchError {
    fn from(e: io::Error) -> FetchError {
        FetchError::Io(e)
    }
}

/// Importer side: connects to `path`, checks the exporter's uid, presents `token`, receives
/// the export and its fds; every read waits at most `timeout`.
pub(crate) fn fetch_export(
    path: &Path,
    token: Option<&Token>,
    timeout: Duration,
) -> Result<Fetched, FetchError> {
    let stream = connect_within(path, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let pid = same_user(&stream)?;
    (&stream).write_all(&encode_hello(token))?;
    let mut buf = vec![0u8; 64 << 10];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        &stream,
        &mut [IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            fds.extend(received);
        }
    }
    let short = || io::Error::new(io::ErrorKind::UnexpectedEof, "short shm export");
    match buf[..got.bytes].first() {
        None => return Err(short().into()),
        Some(&ACCEPTED) => {}
        Some(&BAD_TOKEN) => return Err(FetchError::Refused(Refused::BadToken)),
        Some(_) => return Err(FetchError::Refused(Refused::BadVersion)),
    }
    let mut data = buf[1..got.bytes].to_vec();
    if data.len() < 4 {
        return Err(short().into());
    }
    let len = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "shm export too large").into());
    }
    let mut s = &stream;
    while data.len() < 4 + len {
        let mut more = vec![0u8; 4 + len - data.len()];
        let n = s.read(&mut more)?;
        if n == 0 {
            return Err(short().into());
        }
        data.extend_from_slice(&more[..n]);
    }
    let export: Export = serde_json::from_slice(&data[4..4 + len]).map_err(io::Error::other)?;
    if export.buffers.len() + 1 != fds.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "shm export: buffers and fds differ",
        )
        .into());
    }
    Ok((export, fds, pid, stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_to_an_exporter_that_accepts_nothing_gives_up_at_its_timeout() {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let path = std::env::temp_dir().join(format!("yuebing-full-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // A listener with the smallest backlog that never accepts (a stopped exporter).
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::net::bind(&listener, &SocketAddrUnix::new(&path).unwrap()).unwrap();
        rustix::net::listen(&listener, 0).unwrap();
        let mut queued = Vec::new();
        let started = std::time::Instant::now();
        let e = loop {
            match connect_within(&path, Duration::from_millis(200)) {
                Ok(s) => queued.push(s),
                Err(e) => break e,
            }
            assert!(queued.len() < 64, "the backlog never filled");
        };
        let _ = std::fs::remove_file(&path);
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
