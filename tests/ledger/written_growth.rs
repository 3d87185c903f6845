//! No page of the ledger is written into a hole of its file: the space redb grows the file by
//! is written with zeros before (or as) pages reach it, so the file system has already
//! allocated the blocks a commit writes (and that commit's `fdatasync` commits no journal for
//! new blocks). Seen from outside: after the file has grown, every byte up to the last one
//! holding data is allocated on disk.
#![cfg(unix)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

/// The file's length, the bytes the file system has allocated for it (`st_blocks` counts
/// 512-byte units, whatever the file system's block size), and the end of its last non-zero
/// byte.
fn layout(path: &Path) -> (u64, u64, u64) {
    let meta = std::fs::metadata(path).expect("the ledger file");
    let bytes = std::fs::read(path).expect("read the ledger file");
    let data_end = bytes.iter().rposition(|b| *b != 0).map_or(0, |at| at + 1);
    (meta.len(), meta.blocks() * 512, data_end as u64)
}

#[tokio::test]
async fn a_grown_ledger_file_has_no_holes_below_its_data() {
    // Stored answers of 256 KiB grow the file well past the size a new database starts with.
    let provider = FakeProvider::start(Behavior::fixed(200, vec![b'r'; 256 * 1024])).await;
    let proxy = start(&provider, "").await;
    let ledger = proxy.ledger_path();
    let (started, _, _) = layout(&ledger);

    for n in 0..24 {
        let answer = refund(&proxy, &format!("wf-grow-{n}"), "amount=100").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    }

    let (size, allocated, data_end) = layout(&ledger);
    assert!(
        size > started,
        "the file grew ({started} bytes at start, {size} now)"
    );
    assert!(
        data_end > started,
        "pages were written past the first length ({started} bytes), up to {data_end}"
    );
    assert!(
        allocated >= data_end,
        "every byte up to the last data (at {data_end} of {size}) is allocated, but only \
         {allocated} bytes are: pages were written into holes"
    );
}
