//! Fuzz tests of the tcp data plane's request and response headers (the hello is left to its
//! own tests): random bytes and mutated valid headers decode to a header that encodes back to
//! the same bytes, or to a typed error; never a panic, and no allocation on success. (A
//! request's `len` is checked against the target's slice limit before any byte is read or
//! buffered: see `target`.)

use proptest::collection::vec;
use proptest::prelude::*;
use yuebing_testkit::alloc::measure;
use yuebing_testkit::fuzz::{config, edge_u64, mutate, mutations};

use super::wire::{RequestHeader, ResponseHeader, REQUEST_LEN, RESPONSE_LEN};
use crate::request::Opcode;

fn check_request(bytes: &[u8; REQUEST_LEN]) -> Result<(), TestCaseError> {
    let (res, peak) = measure(|| RequestHeader::decode(bytes));
    match res {
        Ok(h) => {
            prop_assert_eq!(&h.encode(), bytes, "decoding is exact");
            prop_assert_eq!(peak, 0, "a valid header allocates nothing");
        }
        Err(e) => prop_assert_eq!(e.code(), -3001, "{}", e),
    }
    Ok(())
}

fn check_response(bytes: &[u8; RESPONSE_LEN]) -> Result<(), TestCaseError> {
    let (res, peak) = measure(|| ResponseHeader::decode(bytes));
    match res {
        Ok(h) => {
            prop_assert_eq!(&h.encode(), bytes, "decoding is exact");
            prop_assert_eq!(peak, 0, "a valid header allocates nothing");
        }
        Err(e) => prop_assert_eq!(e.code(), -3505, "{}", e),
    }
    Ok(())
}

/// `bytes` cut or padded with zeros to `N` (the headers are read as fixed arrays).
fn fixed<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = bytes.len().min(N);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

fn request_header() -> impl Strategy<Value = RequestHeader> {
    let opcode = prop_oneof![Just(Opcode::Read), Just(Opcode::Write)];
    (
        opcode,
        edge_u64(),
        edge_u64(),
        edge_u64(),
        edge_u64(),
        any::<bool>(),
    )
        .prop_map(
            |(opcode, req_id, instance, addr, len, lone)| RequestHeader {
                opcode,
                req_id,
                instance,
                addr,
                len,
                lone,
            },
        )
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn request_header_from_random_bytes(bytes in vec(any::<u8>(), REQUEST_LEN), mark in any::<bool>()) {
        let mut bytes = fixed::<REQUEST_LEN>(&bytes);
        if mark {
            bytes[..2].copy_from_slice(b"YT");
        }
        check_request(&bytes)?;
    }

    #[test]
    fn request_header_mutated(h in request_header(), muts in mutations(3)) {
        let bytes = h.encode();
        prop_assert_eq!(RequestHeader::decode(&bytes).ok(), Some(h));
        check_request(&fixed(&mutate(bytes.to_vec(), &muts)))?;
    }

    #[test]
    fn response_header_from_random_bytes(bytes in vec(any::<u8>(), RESPONSE_LEN), mark in any::<bool>()) {
        let mut bytes = fixed::<RESPONSE_LEN>(&bytes);
        if mark {
            bytes[..4].copy_from_slice(b"YR\0\0");
        }
        check_response(&bytes)?;
    }

    #[test]
    fn response_header_mutated(
        (status, req_id, extra) in (any::<i32>(), edge_u64(), edge_u64()),
        muts in mutations(3),
    ) {
        let h = ResponseHeader { status, req_id, extra };
        let bytes = h.encode();
        prop_assert_eq!(ResponseHeader::decode(&bytes).ok(), Some(h));
        check_response(&fixed(&mutate(bytes.to_vec(), &muts)))?;
    }
}
