//! Which accesses peers may make to a registered region: its remote rights.
//!
//! A region is reachable by peers only if it was registered for remote access, with read and
//! write rights separate, as ibverbs' `IBV_ACCESS_REMOTE_READ` / `IBV_ACCESS_REMOTE_WRITE` (an
//! rdma transport is to map them onto its memory regions' flags). Memory registered without
//! them is *local-only*: this engine transfers from and into it (it is the local side of its requests,
//! or the target of its own `local` transport, which is no remote access), but it is not in the
//! published descriptor, and a peer's request for it is refused like one for unregistered
//! memory ([`Error::OutOfBounds`]). A peer's request for an exported region without the right
//! for its direction is refused with [`Error::AccessDenied`]. Either way before a byte moves.

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::request::Opcode;

/// The accesses peers may make to a registered region. The default is
/// [`RemoteAccess::LOCAL_ONLY`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteAccess {
    /// Peers may read the region (their [`Opcode::Read`] requests); ibverbs' `REMOTE_READ`.
    pub read: bool,
    /// Peers may write the region (their [`Opcode::Write`] requests); ibverbs' `REMOTE_WRITE`.
    pub write: bool,
}

impl RemoteAccess {
    /// Not reachable by peers: staging buffers, `get_into` destinations, `put_from` sources.
    pub const LOCAL_ONLY: RemoteAccess = RemoteAccess {
        read: false,
        write: false,
    };
    /// Peers may read it, not write it.
    pub const READ: RemoteAccess = RemoteAccess {
        read: true,
        write: false,
    };
    /// Peers may write it, not read it.
    pub const WRITE: RemoteAccess = RemoteAccess {
        read: false,
        write: true,
    };
    /// Peers may read and write it: a node's store space.
    pub const READ_WRITE: RemoteAccess = RemoteAccess {
        read: true,
        write: true,
    };

    /// Whether peers may reach the region at all (it is published in the descriptor).
    pub fn is_exported(self) -> bool {
        self.read || self.write
    }

    /// Whether a peer's request in direction `opcode` (seen from the peer) is allowed: its
    /// write needs [`RemoteAccess::write`], its read [`RemoteAccess::read`].
    pub fn allows(self, opcode: Opcode) -> bool {
        match opcode {
            Opcode::Read => self.read,
            Opcode::Write => self.write,
        }
    }

    /// A peer's request in direction `opcode` for `[addr, addr + len)`, inside a region with
    /// these rights: `Ok`, [`Error::OutOfBounds`] when the region is local-only (invisible to
    /// peers, as if unregistered), or [`Error::AccessDenied`] when it is exported without the
    /// right for `opcode`.
    pub fn check(self, opcode: Opcode, addr: u64, len: u64) -> Result<(), Error> {
        if !self.is_exported() {
            return Err(Error::OutOfBounds { addr, len });
        }
        match self.allows(opcode) {
            true => Ok(()),
            false => Err(Error::AccessDenied { addr, len }),
        }
    }
}

impl std::ops::BitOr for RemoteAccess {
    type Output = RemoteAccess;

    /// Both sets of rights: `RemoteAccess::READ | RemoteAccess::WRITE` is `READ_WRITE`.
    fn bitor(self, other: RemoteAccess) -> RemoteAccess {
        RemoteAccess {
            read: self.read || other.read,
            write: self.write || other.write,
        }
    }
}

impl std::fmt::Display for RemoteAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (self.read, self.write) {
            (false, false) => "local-only",
            (true, false) => "remote read",
            (false, true) => "remote write",
            (true, true) => "remote read-write",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_direction_needs_its_own_right_and_local_only_is_invisible() {
        let cases = [
            (RemoteAccess::LOCAL_ONLY, Opcode::Read, -3504),
            (RemoteAccess::LOCAL_ONLY, Opcode::Write, -3504),
            (RemoteAccess::READ, Opcode::Read, 0),
            (RemoteAccess::READ, Opcode::Write, -3511),
            (RemoteAccess::WRITE, Opcode::Read, -3511),
            (RemoteAccess::WRITE, Opcode::Write, 0),
            (RemoteAccess::READ_WRITE, Opcode::Read, 0),
            (RemoteAccess::READ_WRITE, Opcode::Write, 0),
        ];
        for (rights, opcode, code) in cases {
            let got = rights
                .check(opcode, 0x1000, 8)
                .err()
                .map_or(0, |e| e.code());
            assert_eq!(got, code, "{rights} {opcode:?}");
        }
        assert_eq!(RemoteAccess::default(), RemoteAccess::LOCAL_ONLY);
        assert_eq!(
            RemoteAccess::READ | RemoteAccess::WRITE,
            RemoteAccess::READ_WRITE
        );
        assert!(!RemoteAccess::LOCAL_ONLY.is_exported() && RemoteAccess::WRITE.is_exported());
    }
}
