//! The tcp data plane's wire format (pure encoding, no I/O).
//!
//! A data connection opens with a hello (magic, version, cluster token) answered by one status
//! byte ([`HelloStatus`]). The target checks the magic and version before it trusts the token's
//! length, and the token before it reads anything else. Then the initiator sends requests and
//! the target answers each, in order:
//!
//! ```text
//! hello:    "YBTCP\0\0" | version u8 | token_len u16 | token      answer: status u8
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
/// Length of the hello before the token: magic (with the version) and the token's length.
pub(crate) const HELLO_FIXED: usize = 10;

/// The target's one-byte answer to a hello. Initiators of version 1 read any non-zero status as
/// a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HelloStatus {
    /// Admitted: requests may follow.
    Accepted = 0,
    /// Not a yuebing data connection, or a protocol version this target does not speak.
    BadVersion = 1,
    /// The cluster token is missing or wrong.
    BadToken = 2,
}

impl HelloStatus {
    /// The status a target sent (an unknown byte is a refusal of unknown cause).
    pub(crate) fn from_byte(b: u8) -> Option<HelloStatus> {
        match b {
            0 => Some(HelloStatus::Accepted),
            1 => Some(HelloStatus::BadVersion),
            2 => Some(HelloStatus::BadToken),
            _ => None,
        }
    }
}

/// The hello an initiator sends.
pub(crate) fn encode_hello(token: Option<&yuebing_rpc::Token>) -> Vec<u8> {
    let token = token.map_or(&[][..], yuebing_rpc::Token::as_bytes);
    let mut out = Vec::with_capacity(HELLO_FIXED + token.len());
    out.put_slice(&HELLO_MAGIC);
    // A token is at most MAX_TOKEN_LEN (1024) bytes, so its length fits.
    out.put_u16(token.len() as u16);
    out.put_slice(token);
    out
}

/// Checks the fixed part of a hello: the magic and version first, then the token's length
/// (at most [`yuebing_rpc::MAX_TOKEN_LEN`]), which it returns. Anything else is `BadVersion`,
/// and the target reads no further.
pub(crate) fn check_hello(fixed: &[u8; HELLO_FIXED]) -> Result<usize, HelloStatus> {
    let (magic, len) = fixed.split_at(8);
    if magic != HELLO_MAGIC && magic != HELLO_MAGIC_V1 {
        return Err(HelloStatus::BadVersion);
    }
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    match len <= yuebing_rpc::MAX_TOKEN_LEN {
        true => Ok(len),
        false => Err(HelloStatus::BadVersion),
    }
}

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
    fn hello_checks_the_magic_before_the_length() {
        let token = yuebing_rpc::Token::new("t0ken").unwrap();
        let hello = encode_hello(Some(&token));
        let fixed: [u8; HELLO_FIXED] = hello[..HELLO_FIXED].try_into().unwrap();
        assert_eq!(check_hello(&fixed), Ok(5));
        assert_eq!(&hello[HELLO_FIXED..], b"t0ken");
        let mut v1 = fixed;
        v1[7] = 1;
        assert_eq!(check_hello(&v1), Ok(5), "version 1 is still served");
        let mut long = fixed;
        long[8..].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(check_hello(&long), Err(HelloStatus::BadVersion));
        // An HTTP request is refused on its first bytes.
        let http: [u8; HELLO_FIXED] = b"GET / HTTP"[..].try_into().unwrap();
        assert_eq!(check_hello(&http), Err(HelloStatus::BadVersion));
        for s in [
            HelloStatus::Accepted,
            HelloStatus::BadVersion,
            HelloStatus::BadToken,
        ] {
            assert_eq!(HelloStatus::from_byte(s as u8), Some(s));
        }
        assert_eq!(HelloStatus::from_byte(9), None);
    }

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
