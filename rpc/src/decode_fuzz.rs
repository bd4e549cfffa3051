//! Fuzz tests of every decoder that reads what a peer sent: the frame header, the preamble's
//! hello and reply, frame bodies with their attachments (through the whole [`FrameReader`]), and
//! errors as they cross the wire.
//!
//! Each gets random bytes and mutated valid encodings (see `yuebing_testkit::fuzz`); each must
//! return a value or a typed error, never panic, and never allocate beyond its limit:
//!
//! - frame header: nothing (it is a fixed 20 bytes);
//! - preamble: the fixed part plus the longest fields it admits;
//! - frame reader: a few times `recv_max` (the read buffer may double while it waits for a body
//!   that large; the attachment region is sized by the header) plus serde's preallocation for
//!   sequences, which is capped at 1 MiB per sequence being decoded ([`SERDE_PREALLOC`] per
//!   nesting level of the message type), whatever length the body declares.

use std::collections::BTreeMap;
use std::io;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::executor::block_on;
use proptest::collection::vec;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use tarpc::{context, ClientMessage, Request, Response, ServerError};
use yuebing_testkit::alloc::measure;
use yuebing_testkit::fuzz::{config, edge_u64, mutate, mutations, overwrite, Mutation};

use crate::attachment::Attachment;
use crate::error::Error;
use crate::frame::{FrameHeader, HEADER_LEN};
use crate::preamble::{Hello, Reply};
use crate::transport::{FrameReader, FrameWriter, Received};

/// What serde preallocates at most for one sequence, whatever length it declares.
const SERDE_PREALLOC: usize = 1 << 20;
/// The receive limit the frame reader runs with here.
const RECV_MAX: u64 = 64 << 10;

/// A message type with every shape a service's types have: strings, sequences (nested),
/// maps, enums, options, byte buffers and attachments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Probe {
    name: String,
    ids: Vec<u64>,
    nested: Vec<Vec<u32>>,
    map: BTreeMap<String, i64>,
    kind: Kind,
    bytes: Bytes,
    data: Attachment,
    extra: Option<Attachment>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Kind {
    Unit,
    Number(u64),
    Named { x: String, y: Option<i32> },
}

fn probe() -> impl Strategy<Value = Probe> {
    let kind = prop_oneof![
        Just(Kind::Unit),
        any::<u64>().prop_map(Kind::Number),
        (".{0,8}", any::<Option<i32>>()).prop_map(|(x, y)| Kind::Named { x, y }),
    ];
    let blob = || vec(any::<u8>(), 0..600);
    (
        ".{0,12}",
        vec(any::<u64>(), 0..8),
        vec(vec(any::<u32>(), 0..4), 0..4),
        proptest::collection::btree_map(".{0,4}", any::<i64>(), 0..4),
        kind,
        blob(),
        blob(),
        proptest::option::of(blob()),
    )
        .prop_map(|(name, ids, nested, map, kind, bytes, data, extra)| Probe {
            name,
            ids,
            nested,
            map,
            kind,
            bytes: bytes.into(),
            data: Attachment::from(data),
            extra: extra.map(Attachment::from),
        })
}

/// What one call of the reader gave.
#[derive(Debug)]
enum Got<In> {
    Message(In, u64),
    Oversize(FrameHeader),
    End,
    Failed(io::ErrorKind),
}

/// Reads `bytes` to the end or to the first error; returns what came out and the peak of what
/// the reader allocated.
fn read_all<In: crate::transport::Decode>(bytes: &[u8]) -> (Vec<Got<In>>, usize) {
    let mut cx = Context::from_waker(Waker::noop());
    measure(|| {
        let mut reader = FrameReader::new(RECV_MAX);
        let mut io = bytes;
        let mut got = Vec::new();
        // Each frame takes at least a header's bytes: this many calls always reach the end.
        for _ in 0..bytes.len() / HEADER_LEN + 2 {
            match reader.poll_frame::<In, _>(&mut io, &mut cx) {
                Poll::Ready(Some(Ok(Received::Message(m, p)))) => got.push(Got::Message(m, p.len)),
                Poll::Ready(Some(Ok(Received::Oversize(h)))) => got.push(Got::Oversize(h)),
                Poll::Ready(Some(Err(e))) => {
                    got.push(Got::Failed(e.kind()));
                    break;
                }
                Poll::Ready(None) => {
                    got.push(Got::End);
                    break;
                }
                Poll::Pending => panic!("reading a slice never waits"),
            }
        }
        got
    })
}

/// The reader's property: it ends (cleanly or with a typed error), never panics, and its peak
/// allocation stays within a few times its limit plus serde's bounded preallocation.
fn check_reader<In: crate::transport::Decode>(bytes: &[u8]) -> Result<Vec<Got<In>>, TestCaseError> {
    let (got, peak) = read_all::<In>(bytes);
    let last = got.last();
    prop_assert!(
        matches!(last, Some(Got::End | Got::Failed(_))),
        "the reader neither ended nor failed"
    );
    if let Some(Got::Failed(kind)) = last {
        prop_assert!(
            matches!(
                kind,
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
            ),
            "{kind:?}"
        );
    }
    let bound = 4 * RECV_MAX as usize + 3 * SERDE_PREALLOC;
    prop_assert!(peak <= bound, "{peak} bytes allocated, bound {bound}");
    Ok(got)
}

fn request(id: u64, p: Probe) -> ClientMessage<Probe> {
    let mut ctx = context::current();
    ctx.deadline = Instant::now() + Duration::from_secs(10);
    ClientMessage::Request(Request {
        context: ctx,
        id,
        message: p,
    })
}

/// A request as the wire has it, with any time left (tarpc's own type can only send a
/// deadline this host's clock represents): the layout of tarpc's `ClientMessage::Request`.
#[derive(Serialize)]
enum WireRequest {
    Request {
        context: (Duration, tarpc::trace::Context),
        id: u64,
        message: Probe,
    },
}

impl crate::transport::Message for WireRequest {
    fn request_id(&self) -> u64 {
        let WireRequest::Request { id, .. } = self;
        *id
    }
    fn is_request(&self) -> bool {
        true
    }
    fn error_reply(_: u64, _: &Error) -> Option<Self> {
        None
    }
}

fn time_left() -> impl Strategy<Value = Duration> {
    (edge_u64(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n))
}

/// Encodes `items` as the transport writes them, one frame each.
fn frames<T: Serialize + crate::transport::Message>(items: &[T]) -> Vec<u8> {
    let mut writer = FrameWriter::new(u64::MAX);
    for item in items {
        assert!(writer.encode(item).is_ok(), "encodable");
    }
    let mut out = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    let done = writer.poll_write_out(&mut out, &mut cx);
    assert!(matches!(done, Poll::Ready(Ok(()))));
    out
}

/// Header offsets of the frame lengths (see `frame`): body at 12, attachment at 16.
const BODY_LEN_AT: usize = 12;
const ATTACH_LEN_AT: usize = 16;

/// The first frame of `stream` with its body mutated and its header saying the body's new
/// length: what reaches the body decoder when the framing is intact.
fn mutate_body(stream: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let header = FrameHeader::check(stream).unwrap().unwrap();
    let body_end = HEADER_LEN + header.body_len as usize;
    let attach_end = body_end + header.attach_len as usize;
    let body = mutate(stream[HEADER_LEN..body_end].to_vec(), muts);
    let mut out = vec![0u8; HEADER_LEN];
    FrameHeader {
        body_len: u32::try_from(body.len()).unwrap(),
        ..header
    }
    .encode(&mut out);
    out.extend_from_slice(&body);
    out.extend_from_slice(&stream[body_end..attach_end]);
    out
}

fn check_header(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (res, peak) = measure(|| FrameHeader::check(bytes));
    match res {
        Ok(None) => prop_assert!(bytes.len() < HEADER_LEN),
        Ok(Some(h)) => {
            let mut again = [0u8; HEADER_LEN];
            h.encode(&mut again);
            prop_assert_eq!(&again[..], &bytes[..HEADER_LEN], "decoding is exact");
            prop_assert_eq!(
                h.payload_len(),
                u64::from(h.body_len) + u64::from(h.attach_len)
            );
            prop_assert_eq!(peak, 0, "a valid header allocates nothing");
        }
        Err(e) => {
            prop_assert!(bytes.len() >= HEADER_LEN);
            prop_assert_eq!(e.code(), -2010);
        }
    }
    Ok(())
}

/// The preamble's limits: the hello's fixed part and longest fields (256 + 1024), the reply's
/// fixed part and longest message (u16), which lossy UTF-8 may triple; plus error messages.
const HELLO_BOUND: usize = 4 << 10;
const REPLY_BOUND: usize = 4 * (1 << 16) + (4 << 10);

fn check_hello(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (res, peak) = measure(|| block_on(Hello::read(&mut &bytes[..])));
    prop_assert!(peak <= HELLO_BOUND, "{peak} bytes for a hello");
    match res {
        Ok(h) => prop_assert!(bytes.starts_with(&h.encode()), "decoding is exact"),
        Err(e) => prop_assert_eq!(e.code(), -2010, "{}", e),
    }
    Ok(())
}

fn check_reply(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (res, peak) = measure(|| block_on(Reply::read(&mut &bytes[..])));
    prop_assert!(peak <= REPLY_BOUND, "{peak} bytes for a reply");
    match res {
        Ok(r) if !r.message.contains('\u{fffd}') => {
            prop_assert!(bytes.starts_with(&r.encode()), "decoding is exact")
        }
        Ok(_) => {}
        Err(e) => prop_assert_eq!(e.code(), -2010, "{}", e),
    }
    Ok(())
}

fn hello() -> impl Strategy<Value = Hello> {
    (
        any::<u16>(),
        edge_u64(),
        "[a-z]{0,16}",
        proptest::option::of(".{1,40}"),
    )
        .prop_map(|(version, max_frame, service, token)| Hello {
            version,
            max_frame,
            service,
            token: token.map(|t: String| crate::Token::received(t.into_bytes())),
        })
}

fn reply() -> impl Strategy<Value = Reply> {
    (any::<u16>(), any::<i32>(), edge_u64(), ".{0,40}").prop_map(
        |(version, status, max_frame, message)| Reply {
            version,
            status,
            max_frame,
            message,
        },
    )
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn frame_header_from_random_bytes(bytes in vec(any::<u8>(), 0..40)) {
        check_header(&bytes)?;
    }

    #[test]
    fn frame_header_mutated(
        (request_id, body_len, attach_len) in any::<(u64, u32, u32)>(),
        lens in (edge_u64(), edge_u64()),
        muts in mutations(3),
    ) {
        let mut bytes = [0u8; HEADER_LEN];
        FrameHeader { request_id, body_len, attach_len }.encode(&mut bytes);
        check_header(&bytes)?;
        let mut bytes = bytes.to_vec();
        overwrite(&mut bytes, BODY_LEN_AT, 4, lens.0, true);
        overwrite(&mut bytes, ATTACH_LEN_AT, 4, lens.1, true);
        check_header(&bytes)?;
        check_header(&mutate(bytes, &muts))?;
    }

    #[test]
    fn preamble_from_random_bytes(bytes in vec(any::<u8>(), 0..80), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic {
            // Past the magic, so the lengths are read.
            bytes.splice(0..0, *b"YUEBING\0");
        }
        check_hello(&bytes)?;
        check_reply(&bytes)?;
    }

    /// Hello: max_frame at 10 (u64), service_len at 18 and token_len at 20 (u16), big-endian.
    #[test]
    fn hello_mutated(h in hello(), lens in (edge_u64(), edge_u64()), muts in mutations(3)) {
        let bytes = h.encode();
        let (back, _) = measure(|| block_on(Hello::read(&mut &bytes[..])));
        prop_assert_eq!(back.ok(), Some(h));
        let mut long = bytes.clone();
        overwrite(&mut long, 18, 2, lens.0, true);
        overwrite(&mut long, 20, 2, lens.1, true);
        check_hello(&long)?;
        check_hello(&mutate(bytes, &muts))?;
    }

    /// Reply: msg_len at 22 (u16, big-endian).
    #[test]
    fn reply_mutated(r in reply(), len in edge_u64(), muts in mutations(3)) {
        let bytes = r.encode();
        let (back, _) = measure(|| block_on(Reply::read(&mut &bytes[..])));
        prop_assert_eq!(back.ok(), Some(r));
        let mut long = bytes.clone();
        overwrite(&mut long, 22, 2, len, true);
        check_reply(&long)?;
        check_reply(&mutate(bytes, &muts))?;
    }

    #[test]
    fn error_details_from_the_wire(detail in ".{0,60}", code in any::<i32>(), a in edge_u64(), b in edge_u64()) {
        for detail in [detail.clone(), format!("yuebing-rpc:{code}:{a}:{b}:{detail}")] {
            let err = Error::from_server_error(&ServerError::new(io::ErrorKind::Other, detail));
            // A decoded error encodes again to something that decodes to the same error.
            let again = Error::from_server_error(&err.to_server_error());
            prop_assert_eq!(again, err);
        }
    }
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn frame_reader_from_random_bytes(
        (request_id, body_len, attach_len) in (any::<u64>(), edge_u64(), edge_u64()),
        rest in vec(any::<u8>(), 0..400),
        framed in any::<bool>(),
    ) {
        // Past the header check, where the lengths and the body are read.
        let mut bytes = Vec::new();
        if framed {
            let mut header = [0u8; HEADER_LEN];
            FrameHeader { request_id, body_len: 0, attach_len: 0 }.encode(&mut header);
            bytes.extend_from_slice(&header);
            overwrite(&mut bytes, BODY_LEN_AT, 4, body_len % 512, true);
            overwrite(&mut bytes, ATTACH_LEN_AT, 4, attach_len, true);
        }
        bytes.extend_from_slice(&rest);
        check_reader::<ClientMessage<Probe>>(&bytes)?;
        check_reader::<Response<Probe>>(&bytes)?;
    }

    /// Valid streams of requests, then mutated: lengths in headers overwritten, varints of
    /// huge lengths inserted into bodies, bits flipped, cut or extended.
    #[test]
    fn frame_reader_requests_mutated(
        probes in vec(probe(), 1..4),
        muts in mutations(4),
        lens in (edge_u64(), edge_u64()),
    ) {
        let sent: Vec<_> = probes.into_iter().enumerate().map(|(i, p)| request(i as u64, p)).collect();
        let bytes = frames(&sent);
        let got = check_reader::<ClientMessage<Probe>>(&bytes)?;
        let mut got_lens = Vec::new();
        let received: Vec<_> = got.into_iter().filter_map(|g| match g {
            Got::Message(ClientMessage::Request(r), len) => {
                got_lens.push(len);
                Some(r.message)
            }
            _ => None,
        }).collect();
        let want: Vec<_> = sent.into_iter().filter_map(|m| match m {
            ClientMessage::Request(r) => Some(r.message),
            _ => None,
        }).collect();
        prop_assert_eq!(received, want, "a valid stream decodes exactly");
        let payload: u64 = got_lens.iter().sum();
        prop_assert_eq!(payload as usize + HEADER_LEN * got_lens.len(), bytes.len(), "sizes add up");

        let mut long = bytes.clone();
        overwrite(&mut long, BODY_LEN_AT, 4, lens.0, true);
        overwrite(&mut long, ATTACH_LEN_AT, 4, lens.1, true);
        check_reader::<ClientMessage<Probe>>(&long)?;
        check_reader::<ClientMessage<Probe>>(&mutate_body(&bytes, &muts))?;
        check_reader::<ClientMessage<Probe>>(&mutate(bytes, &muts))?;
    }

    /// Requests with any deadline a peer can send, up to `u64::MAX` seconds.
    #[test]
    fn frame_reader_requests_with_any_deadline(p in probe(), left in time_left(), id in any::<u64>()) {
        let sent = WireRequest::Request { context: (left, Default::default()), id, message: p.clone() };
        let got = check_reader::<ClientMessage<Probe>>(&frames(&[sent]))?;
        let Some(Got::Message(ClientMessage::Request(r), _)) = got.first() else {
            return Err(TestCaseError::fail(format!("{got:?}")));
        };
        prop_assert_eq!((r.id, &r.message), (id, &p));
    }

    #[test]
    fn frame_reader_responses_mutated(
        probes in vec(probe(), 1..4),
        muts in mutations(4),
        detail in ".{0,20}",
    ) {
        let mut sent: Vec<_> = probes
            .into_iter()
            .enumerate()
            .map(|(i, p)| Response { request_id: i as u64, message: Ok(p) })
            .collect();
        sent.push(Response {
            request_id: 99,
            message: Err(ServerError::new(io::ErrorKind::Other, detail)),
        });
        let bytes = frames(&sent);
        let got = check_reader::<Response<Probe>>(&bytes)?;
        let received: Vec<_> = got.into_iter().filter_map(|g| match g {
            Got::Message(r, _) => Some(r),
            _ => None,
        }).collect();
        prop_assert_eq!(received, sent, "a valid stream decodes exactly");
        check_reader::<Response<Probe>>(&mutate_body(&bytes, &muts))?;
        check_reader::<Response<Probe>>(&mutate(bytes, &muts))?;
    }
}

/// A frame that declares the largest body and attachment a header can: refused as oversize for
/// its one request (not read, not allocated), and the rest of the stream is skipped.
#[test]
fn declared_lengths_at_the_maximum_are_skipped_not_allocated() {
    let mut bytes = [0u8; HEADER_LEN];
    FrameHeader {
        request_id: 7,
        body_len: u32::MAX,
        attach_len: u32::MAX,
    }
    .encode(&mut bytes);
    let (got, peak) = read_all::<ClientMessage<Probe>>(&bytes);
    assert!(
        matches!(&got[..], [Got::Oversize(h), Got::Failed(io::ErrorKind::UnexpectedEof)] if h.request_id == 7),
        "{got:?}"
    );
    assert!(peak < 4 * RECV_MAX as usize, "{peak}");
}
