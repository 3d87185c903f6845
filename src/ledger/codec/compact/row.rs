//! A redb `ops` value (a row): an operation's record, kept request, stored response and
//! history in one value. Decoding never panics.

use super::{In, Out};

/// A redb `ops` value: `ROW`, the record's length and the record (in any layout `decode_op`
/// reads), the kept request and the stored response (each its length plus one and its bytes,
/// or 0 for none), then the operation's events as `append_events` writes them. One value per
/// operation instead of an entry per event and one in each of two more tables: a commit
/// touches fewer trees, and a replay reads one value.
pub(in crate::ledger) fn encode_row(row: &Row<'_>) -> Vec<u8> {
    let len = |part: Option<&[u8]>| part.map_or(0, <[u8]>::len);
    let size = 12 + row.record.len() + len(row.request) + len(row.response) + row.history.len();
    let mut out = Out(Vec::with_capacity(size));
    out.0.push(ROW);
    out.bytes(row.record);
    for part in [row.request, row.response] {
        match part {
            Some(bytes) => {
                out.uint(bytes.len() as u64 + 1);
                out.0.extend_from_slice(bytes);
            }
            None => out.uint(0),
        }
    }
    out.0.extend_from_slice(row.history);
    out.0
}

/// The parts of a row; bytes that are no row are a bare record.
pub(in crate::ledger) fn split_row(bytes: &[u8]) -> Option<Row<'_>> {
    let mut input = In(bytes);
    if input.byte() != Some(ROW) {
        return Some(Row {
            record: bytes,
            request: None,
            response: None,
            history: &[],
        });
    }
    let record = input.bytes()?;
    let mut part = || match usize::try_from(input.uint()?).ok()? {
        0 => Some(None),
        n => Some(Some(input.take(n - 1)?)),
    };
    let request = part()?;
    let response = part()?;
    Some(Row {
        record,
        request,
        response,
        history: input.0,
    })
}

/// What a redb `ops` value holds of one operation: its record, kept request, stored response
/// (as `encode_response` writes it) and history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::ledger) struct Row<'a> {
    pub(in crate::ledger) record: &'a [u8],
    pub(in crate::ledger) request: Option<&'a [u8]>,
    pub(in crate::ledger) response: Option<&'a [u8]>,
    pub(in crate::ledger) history: &'a [u8],
}

/// The first byte of a row.
const ROW: u8 = 4;
