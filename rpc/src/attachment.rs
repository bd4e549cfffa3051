//! Raw byte payloads that travel beside a message instead of inside its serde encoding.
//!
//! An [`Attachment`] is a field type for request and response structs. When the message goes
//! through yuebing's transport, serializing the field records only its length and hands the
//! `Bytes` to the transport, which writes it with vectored I/O straight from the caller's buffer;
//! the receiver reads the whole attachment region into one pre-sized buffer and each field becomes a
//! zero-copy slice of it. Outside the transport (e.g. `bincode::serialize` by hand) the field is
//! serialized inline, so the type is always safe to use.
//!
//! Copies of a 1 MiB attachment, end to end through an echo: the sender's `writev` copies it
//! into the kernel, the receiver's `read` copies it out of the kernel into the pre-sized buffer;
//! no user-space `memcpy` of the payload happens on either side, except for the part (at most one
//! read-buffer, 64 KiB) that arrived together with the frame header and is moved from the read
//! buffer. The reply takes the same path. Compare stock tarpc with `Bytes` in serde: one copy into
//! the encoder's buffer and one out of the decoder's buffer on each side.

use std::cell::RefCell;
use std::ops::Deref;

use bytes::Bytes;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A raw byte payload carried outside serde (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment(pub Bytes);

impl Attachment {
    /// Wraps `bytes`.
    pub fn new(bytes: impl Into<Bytes>) -> Self {
        Attachment(bytes.into())
    }

    /// The payload.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl Deref for Attachment {
    type Target = Bytes;
    fn deref(&self) -> &Bytes {
        &self.0
    }
}

impl From<Bytes> for Attachment {
    fn from(b: Bytes) -> Self {
        Attachment(b)
    }
}

impl From<Vec<u8>> for Attachment {
    fn from(v: Vec<u8>) -> Self {
        Attachment(v.into())
    }
}

thread_local! {
    /// Set while the transport serializes one message: attachments collected so far.
    static OUTGOING: RefCell<Option<Vec<Bytes>>> = const { RefCell::new(None) };
    /// Set while the transport deserializes one message: the region and how much is consumed.
    static INCOMING: RefCell<Option<(Bytes, usize)>> = const { RefCell::new(None) };
}

#[derive(Serialize)]
enum ReprRef<'a> {
    Inline(&'a Bytes),
    OutOfBand(u64),
}

#[derive(Deserialize)]
enum Repr {
    Inline(Bytes),
    OutOfBand(u64),
}

impl Serialize for Attachment {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let out_of_band = OUTGOING.with(|cell| match cell.borrow_mut().as_mut() {
            Some(list) => {
                list.push(self.0.clone());
                true
            }
            None => false,
        });
        if out_of_band {
            ReprRef::OutOfBand(self.0.len() as u64).serialize(s)
        } else {
            ReprRef::Inline(&self.0).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Attachment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Inline(b) => Ok(Attachment(b)),
            Repr::OutOfBand(len) => INCOMING.with(|cell| {
                let mut slot = cell.borrow_mut();
                let (region, used) = slot
                    .as_mut()
                    .ok_or_else(|| D::Error::custom("out-of-band attachment outside a frame"))?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| used.checked_add(l))
                    .filter(|&end| end <= region.len())
                    .ok_or_else(|| D::Error::custom("attachment longer than the frame's region"))?;
                let piece = region.slice(*used..end);
                *used = end;
                Ok(Attachment(piece))
            }),
        }
    }
}

/// Runs `f` (one serialization pass) and returns the attachments it emitted, in order. `f` must
/// walk the value once: `bincode::serialize_into`, not `bincode::serialize` (which walks it twice,
/// once to size the buffer).
pub(crate) fn collect<R>(f: impl FnOnce() -> R) -> (R, Vec<Bytes>) {
    OUTGOING.with(|cell| *cell.borrow_mut() = Some(Vec::new()));
    let r = f();
    let list = OUTGOING
        .with(|cell| cell.borrow_mut().take())
        .unwrap_or_default();
    (r, list)
}

/// Runs `f` (a deserialization) with `region` as the source of out-of-band attachments. Returns
/// `f`'s result and whether the region was consumed exactly.
pub(crate) fn provide<R>(region: Bytes, f: impl FnOnce() -> R) -> (R, bool) {
    let total = region.len();
    INCOMING.with(|cell| *cell.borrow_mut() = Some((region, 0)));
    let r = f();
    let used = INCOMING
        .with(|cell| cell.borrow_mut().take())
        .map_or(0, |(_, used)| used);
    (r, used == total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Msg {
        id: u32,
        a: Attachment,
        b: Attachment,
    }

    fn msg() -> Msg {
        Msg {
            id: 7,
            a: Attachment::new(vec![1u8; 1000]),
            b: Attachment::new(&b"tail"[..]),
        }
    }

    fn encode(m: &Msg) -> (Vec<u8>, Vec<Bytes>) {
        let mut body = Vec::new();
        let ((), atts) = collect(|| bincode::serialize_into(&mut body, m).unwrap());
        (body, atts)
    }

    #[test]
    fn out_of_band_round_trip_is_zero_copy() {
        let (body, atts) = encode(&msg());
        assert!(body.len() < 64, "payload stayed out of the body");
        assert_eq!(atts.len(), 2);
        let region: Bytes = [atts[0].as_ref(), atts[1].as_ref()].concat().into();
        let base = region.as_ptr();
        let (back, exact) = provide(region, || bincode::deserialize::<Msg>(&body).unwrap());
        assert!(exact);
        assert_eq!(back, msg());
        assert_eq!(back.a.as_ptr(), base, "slice of the region, not a copy");
    }

    #[test]
    fn inline_outside_the_transport() {
        let bytes = bincode::serialize(&msg()).unwrap();
        assert!(bytes.len() > 1000);
        assert_eq!(bincode::deserialize::<Msg>(&bytes).unwrap(), msg());
    }

    #[test]
    fn short_region_is_an_error_not_a_panic() {
        let (body, _) = encode(&msg());
        let (res, _) = provide(Bytes::from_static(b"xy"), || {
            bincode::deserialize::<Msg>(&body)
        });
        assert!(res.is_err());
        assert!(
            bincode::deserialize::<Msg>(&body).is_err(),
            "no region outside a frame"
        );
    }
}
