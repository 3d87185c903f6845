//! The body reader: a body in arbitrary frames (data, trailers, an error) is buffered whole
//! when it fits the limit, refused as too large when it does not, and never panics; the
//! guarded reader holds its declared length and the shared budget to the same rules.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use http_body_util::StreamBody;
use idemproxy::budget::{self, BodyLimits, Budget, Unread};
use idemproxy::wire::{BoxError, Unbuffered, collect_limited};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone)]
enum Piece {
    Data(Vec<u8>),
    Trailers,
    Error,
}

#[derive(Arbitrary, Debug)]
struct Input {
    pieces: Vec<Piece>,
    limit: u16,
    declared: Option<u16>,
    budget: u16,
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    })
}

fn body(
    pieces: &[Piece],
) -> StreamBody<impl futures_core::Stream<Item = Result<Frame<Bytes>, BoxError>>> {
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = pieces
        .iter()
        .map(|p| match p {
            Piece::Data(d) => Ok(Frame::data(Bytes::copy_from_slice(d))),
            Piece::Trailers => Ok(Frame::trailers(HeaderMap::new())),
            Piece::Error => Err("broken".into()),
        })
        .collect();
    StreamBody::new(ready_stream(frames))
}

fn ready_stream<T>(items: Vec<T>) -> impl futures_core::Stream<Item = T> {
    struct Iter<T>(std::vec::IntoIter<T>);
    impl<T> futures_core::Stream for Iter<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    impl<T> Unpin for Iter<T> {}
    Iter(items.into_iter())
}

fuzz_target!(|input: Input| {
    // What the frames say, read plainly: the data up to the first error.
    let mut data = Vec::new();
    let mut broken = false;
    for piece in &input.pieces {
        match piece {
            Piece::Data(d) => data.extend_from_slice(d),
            Piece::Trailers => {}
            Piece::Error => {
                broken = true;
                break;
            }
        }
    }
    let limit = u64::from(input.limit);
    runtime().block_on(async {
        match collect_limited(body(&input.pieces), limit).await {
            Ok(bytes) => {
                assert!(!broken);
                assert_eq!(bytes, data);
                assert!(bytes.len() as u64 <= limit);
            }
            Err(Unbuffered::TooLarge) => assert!(data.len() as u64 > limit || broken),
            Err(Unbuffered::Broken(_)) => assert!(broken),
        }
        let shared = Budget::new(u64::from(input.budget));
        let limits = BodyLimits {
            declared: input.declared.map(u64::from),
            max: limit,
            timeout: Duration::from_secs(3600),
        };
        match budget::read(&shared, body(&input.pieces), limits).await {
            Ok((bytes, held)) => {
                assert!(!broken);
                assert_eq!(bytes, data);
                assert!(bytes.len() as u64 <= limit);
                assert!(shared.used() <= u64::from(input.budget));
                assert!(limits.declared.is_none_or(|d| d == bytes.len() as u64));
                drop(held);
            }
            Err(Unread::TimedOut) => panic!("a body of ready frames timed out"),
            Err(_) => {}
        }
        assert_eq!(
            shared.used(),
            0,
            "a refused or finished read left bytes reserved"
        );
    });
});
