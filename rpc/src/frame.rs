//! The frame header: pure encoding and checking, no I/O.
//!
//! Every message after the preamble is one frame:
//!
//! ```text
//! +------+---------+-------+------------+----------+------------+---------------+
//! | "YB" | version | flags | request id | body len | attach len | body | attach |
//! |  2 B |   1 B   |  1 B  |  u64 BE    |  u32 BE  |   u32 BE   |      |        |
//! +------+---------+-------+------------+----------+------------+---------------+
//! ```
//!
//! The body is the bincode encoding of a tarpc message; the attachment region carries the raw bytes
//! of the message's [`Attachment`](crate::Attachment)s, outside serde. Because the request id and
//! both lengths sit in the fixed header, a receiver can refuse an oversize frame for that one
//! request and skip its bytes without losing the connection.

use bytes::{Buf, BufMut};

use crate::error::Error;

/// Size of the fixed header in bytes.
pub(crate) const HEADER_LEN: usize = 20;
const MARK: [u8; 2] = *b"YB";
const VERSION: u8 = 1;

/// The fixed header of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    /// tarpc request id the frame belongs to.
    pub(crate) request_id: u64,
    /// Length of the bincode body.
    pub(crate) body_len: u32,
    /// Length of the attachment region.
    pub(crate) attach_len: u32,
}

impl FrameHeader {
    /// Body plus attachment: what counts against the frame limit.
    pub(crate) fn payload_len(&self) -> u64 {
        u64::from(self.body_len) + u64::from(self.attach_len)
    }

    /// Writes the header into exactly [`HEADER_LEN`] bytes.
    pub(crate) fn encode(&self, mut out: &mut [u8]) {
        out.put_slice(&MARK);
        out.put_u8(VERSION);
        out.put_u8(0);
        out.put_u64(self.request_id);
        out.put_u32(self.body_len);
        out.put_u32(self.attach_len);
    }

    /// Checks the start of `buf`: `Ok(None)` when fewer than [`HEADER_LEN`] bytes are there yet,
    /// an error when the bytes cannot be a yuebing frame.
    pub(crate) fn check(buf: &[u8]) -> Result<Option<FrameHeader>, Error> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let mut b = &buf[..HEADER_LEN];
        let mut mark = [0u8; 2];
        b.copy_to_slice(&mut mark);
        let (version, flags) = (b.get_u8(), b.get_u8());
        if mark != MARK {
            return Err(Error::Protocol {
                reason: format!("bad frame mark {mark:02x?}"),
            });
        }
        if version != VERSION || flags != 0 {
            return Err(Error::Protocol {
                reason: format!("unsupported frame version {version} flags {flags:#x}"),
            });
        }
        Ok(Some(FrameHeader {
            request_id: b.get_u64(),
            body_len: b.get_u32(),
            attach_len: b.get_u32(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = FrameHeader {
            request_id: 0xdead_beef_0102,
            body_len: 77,
            attach_len: 1 << 20,
        };
        let mut buf = [0u8; HEADER_LEN];
        h.encode(&mut buf);
        assert_eq!(FrameHeader::check(&buf).unwrap(), Some(h));
        assert_eq!(h.payload_len(), 77 + (1 << 20));
    }

    #[test]
    fn short_input_needs_more() {
        assert_eq!(FrameHeader::check(b"YB\x01").unwrap(), None);
    }

    #[test]
    fn garbage_is_refused() {
        let err = FrameHeader::check(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap_err();
        assert_eq!(err.code(), -2010);
        let mut buf = [0u8; HEADER_LEN];
        FrameHeader::default_for_test().encode(&mut buf);
        buf[2] = 9;
        assert!(FrameHeader::check(&buf).is_err());
    }

    impl FrameHeader {
        fn default_for_test() -> Self {
            FrameHeader {
                request_id: 1,
                body_len: 2,
                attach_len: 3,
            }
        }
    }
}
