//! The redb ledger's queries on a read snapshot: an operation, its history, stored response
//! and kept request, lists by filter (a reverse scan of one index prefix, or of the by-state
//! prefixes merged) and the counts.

use std::ops::Bound;

use redb::{ReadOnlyTable, ReadTransaction};

use crate::clock::Timestamp;
use crate::ledger::codec;
use crate::ledger::fault::Fault;
use crate::ledger::redb::read::{decoded_after, readable};
use crate::ledger::redb::store::*;
use crate::ledger::{Filter, Page, Stats};
use crate::operation::{Event, Operation, State, StoredResponse};

/// Up to `max` live operations whose IDs sort after `after`, in ID order (for `ledger copy`).
pub(in crate::ledger) fn ops_after(
    txn: &ReadTransaction,
    after: Option<&str>,
    max: usize,
) -> Result<Vec<Operation>, Fault> {
    decoded_after(txn, OPS, after, max, codec::decode_op)
}

pub(in crate::ledger) fn get(txn: &ReadTransaction, id: &str) -> Result<Option<Operation>, Fault> {
    read_op(&txn.open_table(OPS)?, id)
}

/// `id`'s events in order: those an older build kept one by one, then its row's.
pub(in crate::ledger) fn events(txn: &ReadTransaction, id: &str) -> Result<Vec<Event>, Fault> {
    let mut out = Vec::new();
    if let Some(table) = readable(txn, EVENTS)? {
        for entry in table.range((id, 0)..=(id, u32::MAX))? {
            let (_, value) = entry?;
            out.push(codec::decode_event(value.value())?);
        }
    }
    if let Some(row) = txn.open_table(OPS)?.get(id)? {
        let history = codec::split_row(row.value())?.history;
        out.extend(codec::decode_history(history)?);
    }
    Ok(out)
}

pub(in crate::ledger) fn kept_request(
    txn: &ReadTransaction,
    id: &str,
) -> Result<Option<Vec<u8>>, Fault> {
    if let Some(row) = txn.open_table(OPS)?.get(id)?
        && let Some(request) = codec::split_row(row.value())?.request
    {
        return Ok(Some(request.to_vec()));
    }
    // Where older builds kept it; a ledger written before requests were kept has no such
    // table yet.
    let Some(table) = readable(txn, REQUESTS)? else {
        return Ok(None);
    };
    Ok(table.get(id)?.map(|bytes| bytes.value().to_vec()))
}

pub(in crate::ledger) fn response(
    txn: &ReadTransaction,
    id: &str,
) -> Result<Option<StoredResponse>, Fault> {
    let row = txn.open_table(OPS)?.get(id)?;
    if let Some(row) = &row
        && let Some(bytes) = codec::split_row(row.value())?.response
    {
        return codec::decode_response(bytes).map(Some);
    }
    old_response(txn, id)
}

/// The stored response of `id` where builds before the row kept it.
fn old_response(txn: &ReadTransaction, id: &str) -> Result<Option<StoredResponse>, Fault> {
    let Some(table) = readable(txn, RESPONSES)? else {
        return Ok(None);
    };
    match table.get(id)? {
        Some(bytes) => codec::decode_response(bytes.value()).map(Some),
        None => Ok(None),
    }
}

/// What a replay of `id` reads, from one row: the operation without its per-field hashes
/// (see `codec::decode_op_for_replay`) and, once it succeeded, its stored response.
pub(in crate::ledger) fn replayable(
    txn: &ReadTransaction,
    id: &str,
) -> Result<Option<(Operation, Option<StoredResponse>)>, Fault> {
    let Some(row) = txn.open_table(OPS)?.get(id)? else {
        return Ok(None);
    };
    let row = codec::split_row(row.value())?;
    let op = codec::decode_op_for_replay(row.record)?;
    let stored = match (op.state, row.response) {
        (State::Succeeded, Some(bytes)) => Some(codec::decode_response(bytes)?),
        (State::Succeeded, None) => old_response(txn, id)?,
        _ => None,
    };
    Ok(Some((op, stored)))
}

/// One page, newest first, strictly older than `after` in `(created_at, id)` order: a
/// reverse scan of the most selective filter term's index prefix, or without a filter of
/// every by-state prefix at once, merged.
pub(in crate::ledger) fn list(
    txn: &ReadTransaction,
    filter: &Filter,
    limit: usize,
    after: Option<Position>,
) -> Result<Page, Fault> {
    let counters = txn.open_table(COUNTERS)?;
    let prefixes = match most_selective(&counters, filter)? {
        Some(prefix) => vec![prefix],
        None => State::ALL.map(state_prefix).to_vec(),
    };
    let index = txn.open_table(INDEX)?;
    let ops = txn.open_table(OPS)?;
    let mut scans = Vec::with_capacity(prefixes.len());
    let mut heads = Vec::with_capacity(prefixes.len());
    for prefix in &prefixes {
        let stop = prefix_end(prefix);
        let end = match &after {
            Some((created, id)) => Bound::Excluded((prefix.as_str(), *created, id.as_str())),
            None => Bound::Excluded((stop.as_str(), i64::MIN, "")),
        };
        let start = Bound::Included((prefix.as_str(), i64::MIN, ""));
        let mut scan = index.range((start, end))?.rev();
        heads.push(next_position(&mut scan)?);
        scans.push(scan);
    }
    let limit = limit.max(1);
    let mut found = Vec::new();
    // The newest head of all scans, until one match beyond the page tells whether a next
    // page exists.
    while let Some(i) = newest(&heads) {
        let Some((_, id)) = std::mem::replace(&mut heads[i], next_position(&mut scans[i])?) else {
            break;
        };
        let Some(op) = read_op(&ops, &id)? else {
            return Err(Fault::new(format!("index names a missing operation {id}")));
        };
        if matches(filter, &op) {
            found.push(op);
            if found.len() > limit {
                break;
            }
        }
    }
    Ok(paginate(found, limit))
}

/// A reverse scan of one index prefix.
type Scan<'a> = std::iter::Rev<redb::Range<'a, (&'static str, i64, &'static str), ()>>;

/// The next `(created_at, id)` of a scan of the index.
fn next_position(scan: &mut Scan<'_>) -> Result<Option<Position>, Fault> {
    match scan.next().transpose()? {
        Some((key, _)) => {
            let (_, created, id) = key.value();
            Ok(Some((created, id.to_owned())))
        }
        None => Ok(None),
    }
}

/// Which of the heads sorts last in `(created_at, id)` order, if any is left.
fn newest(heads: &[Option<Position>]) -> Option<usize> {
    heads
        .iter()
        .enumerate()
        .filter_map(|(i, head)| head.as_ref().map(|h| (i, h)))
        .max_by(|a, b| a.1.cmp(b.1))
        .map(|(i, _)| i)
}

/// Cuts `found` (up to `limit + 1` matches) to one page; the extra match means a next page.
fn paginate(mut found: Vec<Operation>, limit: usize) -> Page {
    if found.len() <= limit {
        return Page {
            ops: found,
            next: None,
        };
    }
    found.truncate(limit);
    let next = found
        .last()
        .map(|op| codec::encode_cursor(op.created_at.0, &op.id));
    Page { ops: found, next }
}

fn matches(filter: &Filter, op: &Operation) -> bool {
    filter.state.is_none_or(|s| s == op.state)
        && filter.provider.as_ref().is_none_or(|p| *p == op.provider)
        && filter.route.as_ref().is_none_or(|r| *r == op.route)
}

/// The index prefix of the filter term with the fewest operations; `None` without a filter.
fn most_selective(
    counters: &ReadOnlyTable<&'static str, u64>,
    filter: &Filter,
) -> Result<Option<String>, Fault> {
    let candidates = [
        filter.state.map(state_prefix),
        filter.provider.as_ref().map(|p| format!("p/{p}")),
        filter.route.as_ref().map(|r| format!("r/{r}")),
    ];
    let mut best: Option<(u64, String)> = None;
    for prefix in candidates.into_iter().flatten() {
        let count = counters.get(prefix.as_str())?.map_or(0, |v| v.value());
        if best.as_ref().is_none_or(|(n, _)| count < *n) {
            best = Some((count, prefix));
        }
    }
    Ok(best.map(|(_, prefix)| prefix))
}

pub(in crate::ledger) fn stats(txn: &ReadTransaction) -> Result<Stats, Fault> {
    let counters = txn.open_table(COUNTERS)?;
    let index = txn.open_table(INDEX)?;
    let mut stats = Stats::default();
    for state in State::ALL {
        let prefix = state_prefix(state);
        let count = counters.get(prefix.as_str())?.map_or(0, |v| v.value());
        stats.by_state.insert(state.as_str(), count);
    }
    let oldest = |state| -> Result<Option<Timestamp>, Fault> {
        let first = scan_ids(&index, &state_prefix(state), 1)?;
        Ok(first.first().map(|(created, _)| Timestamp(*created)))
    };
    stats.oldest_unknown = oldest(State::Unknown)?;
    stats.oldest_in_flight = oldest(State::InFlight)?;
    Ok(stats)
}
