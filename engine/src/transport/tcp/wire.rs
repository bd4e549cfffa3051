//! The tcp data plane's wire format (pure encoding, no I/O).
//!
//! A data connection opens with a hello (magic, version, cluster token) answered by one status
//! byte. Then the initiator sends requests and the target answers each, in order:
//!
//! ```text
//! request:  "YT" | op u8 | flags u8 | req id u64 | instance u64 | addr u64 | len u64 | (write: len bytes)
//! response: "YR" | 0 u16 | status i32 | req id u64 | extra u64 | (read, status 0: len bytes)
//! ```
//!
//! The only request flag is [`LONE`]. `status` is 0 or an engine error code; `extra` carries
//! the target's instance id when the status is StaleSegment. Big-endian throughout.

use bytes::{Buf, BufMut};

use crate::error::Error;
use crate::request::Opcode;

/// First bytes of a data connection.
/// Its last byte is the protocol version: 2 added the request flag [`LONE`].
pub(crate) const HELLO_MAGIC: [u8; 8] = *b"YBTCP\0\0\x02";
/// The hello of version 1, still served: its initiators never set a flag, so targets can be
/// upgraded before their initiators.
pub(crate) const HELLO_MAGIC_V1: [u8; 8] = *b"YBTCP\0\0\x01";
/// Request flag: the initiator waits for this request alone, so its next one is likely to
/// follow the answer within a round trip (the target may spin for it instead of parking).
pub(crate) const LONE: u8 = 0x01;
/// Request header length.
pub(crate) const REQUEST_LEN: usize = 36;
/// Response header length.
pub(crate) const RESPONSE_LEN: usize = 24;

/// A data request's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestHeader {
    pub(crate) opcode: Opcode,
    pub(crate) req_id: u64,
    pub(crate) instance: u64,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    /// The [`LONE`] flag.
    pub(crate) lone: bool,
}

impl RequestHeader {
    pub(crate) fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        let mut b = &mut out[..];
        b.put_slice(b"YT");
        b.put_u8(match self.opcode {
            Opcode::Write => 1,
            Opcode::Read => 2,
        });
        b.put_u8(if self.lone { LONE } else { 0 });
        b.put_u64(self.req_id);
        b.put_u64(self.instance);
        b.put_u64(self.addr);
        b.put_u64(self.len);
        out
    }

    pub(crate) fn decode(buf: &[u8; REQUEST_LEN]) -> Result<Self, Error> {
        let mut b = &buf[..];
        let mark = [b.get_u8(), b.get_u8()];
        let (op, flags) = (b.get_u8(), b.get_u8());
        let opcode = match (mark, op, flags) {
            (m, 1, f) if &m == b"YT" && f & !LONE == 0 => Opcode::Write,
            (m, 2, f) if &m == b"YT" && f & !LONE == 0 => Opcode::Read,
            _ => return Err(Error::invalid("malformed data request header")),
        };
        Ok(RequestHeader {
            opcode,
            req_id: b.get_u64(),
            instance: b.get_u64(),
            addr: b.get_u64(),
            len: b.get_u64(),
            lone: flags & LONE != 0,
        })
    }
}

/// A data response's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResponseHeader {
    pub(crate) status: i32,
    pub(crate) req_id: u64,
    pub(crate) extra: u64,
}

impl ResponseHeader {
    pub(crate) fn encode(&self) -> [u8; RESPONSE_LEN] {
        let mut out = [0u8; RESPONSE_LEN];
        let mut b = &mut out[..];
        b.put_slice(b"YR");
        b.put_u16(0);
        b.put_i32(self.status);
        b.put_u64(self.req_id);
        b.put_u64(self.extra);
        out
    }

    pub(crate) fn decode(buf: &[u8; RESPONSE_LEN]) -> Result<Self, Error> {
        let mut b = &buf[..];
        if &buf[..4] != b"YR\0\0" {
            return Err(Error::PeerFailed {
                reason: "malformed data response".into(),
            });
        }
        b.advance(4);
        Ok(ResponseHeader {
            status: b.get_i32(),
            req_id: b.get_u64(),
            extra: b.get_u64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_garbage() {
        let r = RequestHeader {
            opcode: Opcode::Read,
            req_id: 7,
            instance: 0xfeed,
            addr: 0x1000,
            len: 1 << 20,
            lone: false,
        };
        assert_eq!(RequestHeader::decode(&r.encode()).unwrap(), r);
        let lone = RequestHeader { lone: true, ..r };
        assert_eq!(RequestHeader::decode(&lone.encode()).unwrap(), lone);
        let mut unknown_flag = r.encode();
        unknown_flag[3] = 0x02;
        assert!(RequestHeader::decode(&unknown_flag).is_err());
        let s = ResponseHeader {
            status: -3504,
            req_id: 7,
            extra: 9,
        };
        assert_eq!(ResponseHeader::decode(&s.encode()).unwrap(), s);
        assert!(RequestHeader::decode(&[0xAB; REQUEST_LEN]).is_err());
        assert!(ResponseHeader::decode(&[0; RESPONSE_LEN]).is_err());
    }
}
