//! The space redb grows the ledger file by is written with zeros, not left a hole, so the
//! pages later commits write land in blocks the file system has already allocated (whose
//! `fdatasync` then commits no journal for new blocks). Seen from outside: after the file has
//! grown, every byte up to its length is allocated on disk.
#![cfg(unix)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

/// The file's length, and the bytes the file system has allocated for it (`st_blocks` counts
/// 512-byte units, whatever the file system's block size).
fn size_and_allocated(path: &Path) -> (u64, u64) {
    let meta = std::fs::metadata(path).expect("the ledger file");
    (meta.len(), meta.blocks() * 512)
}

#[tokio::test]
async fn a_grown_ledger_file_has_no_holes() {
    // Stored answers of 256 KiB grow the file well past the size a new database starts with.
    let provider = FakeProvider::start(Behavior::fixed(200, vec![b'r'; 256 * 1024])).await;
    let proxy = start(&provider, "").await;
    let ledger = proxy.ledger_path();
    let (started, _) = size_and_allocated(&ledger);

    for n in 0..24 {
        let answer = refund(&proxy, &format!("wf-grow-{n}"), "amount=100").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    }

    let (size, allocated) = size_and_allocated(&ledger);
    assert!(
        size > started,
        "the file grew ({started} bytes at start, {size} now)"
    );
    assert!(
        allocated >= size,
        "every byte of the {size}-byte file is allocated, but only {allocated} are: the \
         growth left holes"
    );
}
