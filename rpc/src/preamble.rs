//! The connection preamble: the first bytes each side sends, before any frame.
//!
//! The client says which protocol version it speaks, which service it wants, its cluster token (if
//! any) and the largest frame it accepts. The server answers with its version, a status code
//! (0 or an [`Error`] code) and the largest frame it accepts. On a non-zero status the server closes
//! the connection. The layouts are fixed so that a peer of another version can still read the
//! status:
//!
//! ```text
//! hello: "YUEBING\0" | version u16 | max_frame u64 | service_len u16 | token_len u16 | service | token
//! reply: "YUEBING\0" | version u16 | status i32 | max_frame u64 | msg_len u16 | msg
//! ```

use std::time::Duration;

use bytes::{Buf, BufMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::Error;
use crate::token::{Token, MAX_TOKEN_LEN};

/// The protocol version this build speaks; a peer of another version is refused at the
/// preamble (`VersionMismatch`).
///
/// - 2: the store master's calls renumbered (put and upsert one call each, with the write
///   mode as an argument; the calls outside the table first).
/// - 1: the first.
pub const PROTOCOL_VERSION: u16 = 2;
const MAGIC: [u8; 8] = *b"YUEBING\0";
const HELLO_FIXED: usize = 8 + 2 + 8 + 2 + 2;
const REPLY_FIXED: usize = 8 + 2 + 4 + 8 + 2;
const MAX_SERVICE_LEN: usize = 256;

/// What a client sends first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) version: u16,
    pub(crate) max_frame: u64,
    pub(crate) service: String,
    pub(crate) token: Option<Token>,
}

/// What the server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) version: u16,
    /// 0, or the code of the error that refused the connection.
    pub(crate) status: i32,
    pub(crate) max_frame: u64,
    pub(crate) message: String,
}

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let token: &[u8] = self.token.as_ref().map_or(&[], Token::as_bytes);
        let mut out = Vec::with_capacity(HELLO_FIXED + self.service.len() + token.len());
        out.put_slice(&MAGIC);
        out.put_u16(self.version);
        out.put_u64(self.max_frame);
        out.put_u16(self.service.len() as u16);
        out.put_u16(token.len() as u16);
        out.put_slice(self.service.as_bytes());
        out.put_slice(token);
        out
    }

    /// Reads a hello; a malformed one is a [`Error::Protocol`].
    pub(crate) async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Hello, Error> {
        let mut fixed = [0u8; HELLO_FIXED];
        r.read_exact(&mut fixed).await.map_err(io_protocol)?;
        let mut b = &fixed[..];
        check_magic(&mut b)?;
        let version = b.get_u16();
        let max_frame = b.get_u64();
        let service_len = usize::from(b.get_u16());
        let token_len = usize::from(b.get_u16());
        if service_len > MAX_SERVICE_LEN || token_len > MAX_TOKEN_LEN {
            return Err(Error::Protocol {
                reason: format!("preamble field too long ({service_len}, {token_len})"),
            });
        }
        let mut var = vec![0u8; service_len + token_len];
        r.read_exact(&mut var).await.map_err(io_protocol)?;
        let token = var.split_off(service_len);
        Ok(Hello {
            version,
            max_frame,
            service: utf8(var)?,
            // Kept as sent, to be checked against the server's in constant time.
            token: (!token.is_empty()).then(|| Token::received(token)),
        })
    }
}

impl Reply {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let msg = &self.message.as_bytes()[..self.message.len().min(u16::MAX as usize)];
        let mut out = Vec::with_capacity(REPLY_FIXED + msg.len());
        out.put_slice(&MAGIC);
        out.put_u16(self.version);
        out.put_i32(self.status);
        out.put_u64(self.max_frame);
        out.put_u16(msg.len() as u16);
        out.put_slice(msg);
        out
    }

    pub(crate) async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Reply, Error> {
        let mut fixed = [0u8; REPLY_FIXED];
        r.read_exact(&mut fixed).await.map_err(io_protocol)?;
        let mut b = &fixed[..];
        check_magic(&mut b)?;
        let version = b.get_u16();
        let status = b.get_i32();
        let max_frame = b.get_u64();
        let mut msg = vec![0u8; usize::from(b.get_u16())];
        r.read_exact(&mut msg).await.map_err(io_protocol)?;
        Ok(Reply {
            version,
            status,
            max_frame,
            message: String::from_utf8_lossy(&msg).into_owned(),
        })
    }

    /// The error a refusing reply stands for, seen from a client that speaks `ours`.
    pub(crate) fn into_result(self, ours: u16) -> Result<Reply, Error> {
        match self.status {
            0 => Ok(self),
            -2005 => Err(Error::VersionMismatch {
                ours,
                theirs: self.version,
            }),
            -2004 => Err(Error::Unauthenticated),
            -2006 => Err(Error::UnknownService { name: self.message }),
            -2003 => Err(Error::Overloaded {
                reason: self.message,
            }),
            -2009 => Err(Error::ShuttingDown),
            code => Err(Error::Remote {
                code,
                message: self.message,
            }),
        }
    }
}

/// Client side: sends `hello`, reads the reply, within `timeout`.
pub(crate) async fn client_handshake<S>(
    io: &mut S,
    hello: &Hello,
    timeout: Duration,
) -> Result<Reply, Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        io.write_all(&hello.encode()).await.map_err(io_protocol)?;
        io.flush().await.map_err(io_protocol)?;
        Reply::read(io).await
    };
    let reply = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| Error::Protocol {
            reason: format!("no preamble reply within {timeout:?}"),
        })??;
    reply.into_result(hello.version)
}

/// Writes a reply to `io` (server side).
pub(crate) async fn write_reply<W: AsyncWrite + Unpin>(
    io: &mut W,
    reply: &Reply,
) -> Result<(), Error> {
    io.write_all(&reply.encode()).await.map_err(io_protocol)?;
    io.flush().await.map_err(io_protocol)
}

fn check_magic(b: &mut &[u8]) -> Result<(), Error> {
    let mut magic = [0u8; 8];
    b.copy_to_slice(&mut magic);
    if magic == MAGIC {
        Ok(())
    } else {
        Err(Error::Protocol {
            reason: format!("bad preamble magic {magic:02x?}"),
        })
    }
}

fn utf8(v: Vec<u8>) -> Result<String, Error> {
    String::from_utf8(v).map_err(|_| Error::Protocol {
        reason: "preamble field is not UTF-8".into(),
    })
}

fn io_protocol(e: std::io::Error) -> Error {
    Error::Protocol {
        reason: format!("preamble: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hello_round_trip() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            max_frame: 64 << 20,
            service: "echo".into(),
            token: Some("s3cret".into()),
        };
        let bytes = h.encode();
        assert_eq!(Hello::read(&mut &bytes[..]).await.unwrap(), h);
        let anon = Hello { token: None, ..h };
        assert_eq!(Hello::read(&mut &anon.encode()[..]).await.unwrap(), anon);
    }

    #[tokio::test]
    async fn reply_maps_to_typed_errors() {
        let reply = |status, message: &str| Reply {
            version: 7,
            status,
            max_frame: 1,
            message: message.into(),
        };
        let r = reply(-2005, "");
        let back = Reply::read(&mut &r.encode()[..]).await.unwrap();
        assert_eq!(
            back.into_result(1),
            Err(Error::VersionMismatch { ours: 1, theirs: 7 })
        );
        assert_eq!(
            reply(-2006, "kv").into_result(1),
            Err(Error::UnknownService { name: "kv".into() })
        );
        assert_eq!(reply(-2004, "").into_result(1), Err(Error::Unauthenticated));
        assert!(reply(0, "").into_result(1).is_ok());
    }

    #[tokio::test]
    async fn garbage_is_a_protocol_error() {
        let junk = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
        assert_eq!(Hello::read(&mut &junk[..]).await.unwrap_err().code(), -2010);
        assert_eq!(
            Hello::read(&mut &b"YUE"[..]).await.unwrap_err().code(),
            -2010
        );
    }
}
