//! The kept first request's plain codec: any bytes decode or are refused without a panic, a
//! decoded request encodes back to the same bytes, and every request round-trips.
//!
//! Input: a 0 byte then the bytes to decode (the seeds), or anything else: a request built
//! by `arbitrary` from the bytes, to encode and decode.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use http::{HeaderValue, Method};
use idemproxy::kept::KeptRequest;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Request<'a> {
    method: &'a [u8],
    path_and_query: String,
    content_type: Option<&'a [u8]>,
    body: &'a [u8],
}

fuzz_target!(|data: &[u8]| match data.split_first() {
    None => {}
    Some((0, bytes)) => {
        if let Some(kept) = KeptRequest::decode(bytes) {
            assert_eq!(kept.encode(), bytes);
        }
    }
    Some((_, rest)) => {
        let Ok(Request {
            method,
            path_and_query,
            content_type,
            body,
        }) = Request::arbitrary_take_rest(Unstructured::new(rest))
        else {
            return;
        };
        let Ok(method) = Method::from_bytes(method) else {
            return;
        };
        let content_type = match content_type.map(HeaderValue::from_bytes) {
            Some(Ok(v)) => Some(v),
            Some(Err(_)) => return,
            None => None,
        };
        let kept = KeptRequest {
            method,
            path_and_query,
            content_type,
            body: Bytes::copy_from_slice(body),
        };
        assert_eq!(KeptRequest::decode(&kept.encode()), Some(kept));
    }
});
