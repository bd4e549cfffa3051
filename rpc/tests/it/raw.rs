//! The wire written by hand, for tests that must misbehave: send a frame header and part of its
//! payload, then stall, as no well-behaved client would. The layouts are those documented in the
//! crate's `preamble` and `frame` modules (big-endian integers).
#![allow(unreachable_pub)]

use std::net::SocketAddr;

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use yuebing_rpc::PROTOCOL_VERSION;

/// Size of a frame header.
pub const HEADER_LEN: usize = 20;
const MAGIC: &[u8; 8] = b"YUEBING\0";

/// A client preamble asking for `service`, without a token.
pub fn hello(service: &str, max_frame: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    out.extend_from_slice(&max_frame.to_be_bytes());
    let len = u16::try_from(service.len()).expect("short service name");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(service.as_bytes());
    out
}

/// A frame header: `request_id`, then the body and attachment lengths.
pub fn frame_header(request_id: u64, body_len: u32, attach_len: u32) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..2].copy_from_slice(b"YB");
    out[2] = 1;
    out[4..12].copy_from_slice(&request_id.to_be_bytes());
    out[12..16].copy_from_slice(&body_len.to_be_bytes());
    out[16..20].copy_from_slice(&attach_len.to_be_bytes());
    out
}

/// A whole request frame: header and the bincode body of a tarpc request `id` carrying
/// `message` (no attachment), as a client would send it.
pub fn request_frame<T: Serialize>(id: u64, message: T) -> Vec<u8> {
    request_frame_with_context(id, message, tarpc::context::current())
}

/// As [`request_frame`], with `context` (its deadline, say) as the client set it.
pub fn request_frame_with_context<T: Serialize>(
    id: u64,
    message: T,
    context: tarpc::context::Context,
) -> Vec<u8> {
    let request = tarpc::ClientMessage::Request(tarpc::Request {
        context,
        id,
        message,
    });
    let body = bincode::DefaultOptions::new()
        .serialize(&request)
        .expect("a request serializes");
    let body_len = u32::try_from(body.len()).expect("a body under 4 GiB");
    let mut out = frame_header(id, body_len, 0).to_vec();
    out.extend_from_slice(&body);
    out
}

/// Connects to `addr`, asks for `service` and returns the stream and the largest frame the server
/// announced it accepts. Panics if the server refuses.
pub async fn connect(addr: SocketAddr, service: &str) -> (TcpStream, u64) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(&hello(service, 64 << 20)).await.expect("hello");
    let mut fixed = [0u8; 8 + 2 + 4 + 8 + 2];
    s.read_exact(&mut fixed).await.expect("preamble reply");
    assert_eq!(&fixed[..8], MAGIC);
    let status = i32::from_be_bytes(fixed[10..14].try_into().unwrap());
    let max_frame = u64::from_be_bytes(fixed[14..22].try_into().unwrap());
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes([fixed[22], fixed[23]]))];
    s.read_exact(&mut msg).await.expect("preamble message");
    assert_eq!(status, 0, "refused: {}", String::from_utf8_lossy(&msg));
    (s, max_frame)
}

/// Reads one response frame (without attachments) and decodes its body.
pub async fn read_response<T: DeserializeOwned>(s: &mut TcpStream) -> tarpc::Response<T> {
    let mut header = [0u8; HEADER_LEN];
    s.read_exact(&mut header).await.expect("response header");
    let body_len = u32::from_be_bytes(header[12..16].try_into().unwrap());
    let attach_len = u32::from_be_bytes(header[16..20].try_into().unwrap());
    assert_eq!(attach_len, 0, "no attachment expected");
    let mut body = vec![0u8; body_len as usize];
    s.read_exact(&mut body).await.expect("response body");
    bincode::DefaultOptions::new()
        .deserialize(&body)
        .expect("a tarpc response")
}

/// Waits until the server closes `s` (end of stream or an error), for at most `ceiling`;
/// panics if it does not.
pub async fn closed_within(mut s: TcpStream, ceiling: std::time::Duration) {
    let mut buf = vec![0u8; 1024];
    let closed = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(ceiling, closed)
        .await
        .expect("the server closes the connection");
}
