//! Frame bodies to messages: bincode that reads nothing past the body, and tarpc's request
//! deadline read without overflow.
//!
//! tarpc sends a request's deadline as the time left and, reading it, adds that to
//! `Instant::now()` unchecked: a peer that sends 2^63 seconds left would panic the reader. So
//! requests are read through a mirror of tarpc's layout ([`WireClientMessage`], kept in step by
//! a test) that clamps the time left to [`MAX_DEADLINE`]; responses carry no deadline and are
//! read as they are.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tarpc::{context, trace, ClientMessage, Request, Response};

use super::codec;

/// The farthest deadline a received request is given: a peer's further one, even one this host's
/// clock cannot represent, is read as this. Under the ~2.2 years tarpc's deadline queue (tokio-
/// util's timer wheel) accepts: a deadline past that panics the server's connection task.
pub(crate) const MAX_DEADLINE: Duration = crate::clock::FARTHEST;

/// A message the framing can read from one frame body.
pub(crate) trait Decode: Sized {
    /// Decodes `body`, all of it and nothing past it; a malformed body is an error, never a
    /// panic.
    fn decode(body: &[u8]) -> bincode::Result<Self>;
}

fn options(body: &[u8]) -> impl Options {
    codec().with_limit(body.len() as u64)
}

/// Unit tests read plain values off frames.
#[cfg(test)]
impl Decode for bytes::Bytes {
    fn decode(body: &[u8]) -> bincode::Result<Self> {
        options(body).deserialize(body)
    }
}

impl<T: DeserializeOwned> Decode for Response<T> {
    fn decode(body: &[u8]) -> bincode::Result<Self> {
        options(body).deserialize(body)
    }
}

impl<T: DeserializeOwned> Decode for ClientMessage<T> {
    fn decode(body: &[u8]) -> bincode::Result<Self> {
        Ok(match options(body).deserialize(body)? {
            WireClientMessage::Request(r) => {
                let mut context = blank_context();
                context.deadline = Instant::now() + r.context.deadline.min(MAX_DEADLINE);
                context.trace_context = r.context.trace_context;
                ClientMessage::Request(Request {
                    context,
                    id: r.id,
                    message: r.message,
                })
            }
            WireClientMessage::Cancel {
                trace_context,
                request_id,
            } => ClientMessage::Cancel {
                trace_context,
                request_id,
            },
        })
    }
}

/// A context whose every field the caller overwrites (tarpc's `Context` cannot be built field
/// by field outside tarpc). Made once: `context::current()` looks at the current span.
fn blank_context() -> context::Context {
    static BLANK: OnceLock<context::Context> = OnceLock::new();
    *BLANK.get_or_init(context::current)
}

/// tarpc's `ClientMessage` as bincode lays it out, with the deadline as the time left.
#[derive(Deserialize)]
enum WireClientMessage<T> {
    Request(WireRequest<T>),
    Cancel {
        trace_context: trace::Context,
        request_id: u64,
    },
}

/// tarpc's `Request`.
#[derive(Deserialize)]
struct WireRequest<T> {
    context: WireContext,
    id: u64,
    message: T,
}

/// tarpc's `Context`: the deadline as the time left.
#[derive(Deserialize)]
struct WireContext {
    deadline: Duration,
    trace_context: trace::Context,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
        codec().serialize(value).unwrap()
    }

    fn request(deadline_in: Duration, id: u64) -> ClientMessage<String> {
        let mut context = context::current();
        context.deadline = Instant::now() + deadline_in;
        context.trace_context = trace::Context {
            trace_id: trace::TraceId::from(0x0123_4567_89ab_cdef_u128 << 40),
            span_id: trace::SpanId::from(77),
            sampling_decision: trace::SamplingDecision::Sampled,
        };
        ClientMessage::Request(Request {
            context,
            id,
            message: "hello".into(),
        })
    }

    /// The mirror reads what tarpc writes: if tarpc's layout changes, this fails.
    #[test]
    fn mirror_reads_what_tarpc_writes() {
        let sent = request(Duration::from_secs(30), 9);
        let before = Instant::now();
        let got = ClientMessage::<String>::decode(&encode(&sent)).unwrap();
        let (ClientMessage::Request(sent), ClientMessage::Request(got)) = (sent, got) else {
            panic!("not a request");
        };
        assert_eq!((got.id, got.message.as_str()), (9, "hello"));
        assert_eq!(got.context.trace_context, sent.context.trace_context);
        let left = got.context.deadline - before;
        assert!(left <= Duration::from_secs(31) && left >= Duration::from_secs(29));

        let cancel = ClientMessage::<String>::Cancel {
            trace_context: sent.context.trace_context,
            request_id: 5,
        };
        match ClientMessage::<String>::decode(&encode(&cancel)).unwrap() {
            ClientMessage::Cancel {
                trace_context,
                request_id,
            } => assert_eq!((trace_context, request_id), (sent.context.trace_context, 5)),
            other => panic!("{other:?}"),
        }
        let response = Response {
            request_id: 3,
            message: Ok::<_, tarpc::ServerError>(vec![1u8, 2]),
        };
        assert_eq!(Response::decode(&encode(&response)).unwrap(), response);
    }

    /// Regression: a time left of `u64::MAX` seconds panicked tarpc's reader ("overflow when
    /// adding duration to instant"); it is now read as the farthest deadline.
    #[test]
    fn a_deadline_past_the_clock_is_clamped_not_a_panic() {
        let mut body = encode(&request(Duration::from_secs(30), 1));
        // The variant index (one byte) is followed by the deadline's seconds, a varint: one byte
        // below 251. Replace it with u64::MAX (marker 253, then eight bytes).
        assert!((29..=30).contains(&body[1]));
        body.splice(1..2, [253, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        let before = Instant::now();
        let Ok(ClientMessage::Request(got)) = ClientMessage::<String>::decode(&body) else {
            panic!("the request should decode");
        };
        assert!(got.context.deadline >= before + MAX_DEADLINE);
        assert_eq!(got.message, "hello");
    }

    #[test]
    fn trailing_and_missing_bytes_are_errors() {
        let mut body = encode(&request(Duration::from_secs(1), 1));
        body.push(0);
        assert!(ClientMessage::<String>::decode(&body).is_err());
        body.truncate(body.len() - 2);
        assert!(ClientMessage::<String>::decode(&body).is_err());
    }
}
