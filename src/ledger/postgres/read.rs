//! The reads of the PostgreSQL ledger: plain statements outside any transaction, each one
//! consistent on its own (PostgreSQL gives every statement one snapshot).
//!
//! `list` pages in the order redb does (`created_at` descending, ties by ID descending,
//! bytewise) with the same cursors (`codec`). It never writes.

use super::super::Replays;
use super::super::codec;
use super::super::fault::Fault;
use super::super::{Filter, Page, Stats};
use super::connect::Conn;
use crate::clock::Timestamp;
use crate::operation::{Event, Operation, State, StoredResponse};

fn op_of(bytes: &[u8]) -> Result<Operation, Fault> {
    codec::decode_op(bytes)
}

pub(super) async fn get(conn: &Conn, id: &str) -> Result<Option<Operation>, Fault> {
    let row = conn
        .query_opt("SELECT record FROM ops WHERE id = $1", &[&id])
        .await?;
    row.map(|r| op_of(r.get(0))).transpose()
}

/// The operation and, when it is `succeeded`, its response, in one statement.
pub(super) async fn replayable(
    conn: &Conn,
    id: &str,
) -> Result<Option<(Operation, Option<StoredResponse>)>, Fault> {
    let row = conn
        .query_opt(
            "SELECT o.record, r.record FROM ops o \
             LEFT JOIN responses r ON r.id = o.id AND o.state = 'succeeded' WHERE o.id = $1",
            &[&id],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let op = op_of(row.get(0))?;
    let stored = match row.get::<_, Option<&[u8]>>(1) {
        Some(bytes) if op.state == State::Succeeded => Some(codec::decode_response(bytes)?),
        _ => None,
    };
    Ok(Some((op, stored)))
}

pub(super) async fn events(conn: &Conn, id: &str) -> Result<Vec<Event>, Fault> {
    let rows = conn
        .query(
            "SELECT record FROM events WHERE id = $1 ORDER BY seq",
            &[&id],
        )
        .await?;
    rows.iter().map(|r| codec::decode_event(r.get(0))).collect()
}

pub(super) async fn kept_request(conn: &Conn, id: &str) -> Result<Option<Vec<u8>>, Fault> {
    let row = conn
        .query_opt("SELECT sealed FROM requests WHERE id = $1", &[&id])
        .await?;
    Ok(row.map(|r| r.get(0)))
}

pub(super) async fn response(conn: &Conn, id: &str) -> Result<Option<StoredResponse>, Fault> {
    let row = conn
        .query_opt("SELECT record FROM responses WHERE id = $1", &[&id])
        .await?;
    row.map(|r| codec::decode_response(r.get(0))).transpose()
}

pub(super) async fn tombstone(conn: &Conn, id: &str) -> Result<Option<Operation>, Fault> {
    let row = conn
        .query_opt("SELECT record FROM tombstones WHERE id = $1", &[&id])
        .await?;
    let Some(row) = row else { return Ok(None) };
    let op = op_of(row.get(0))?;
    if op.pruned_at.is_none() {
        return Err(Fault::new(format!("tombstone {} has no pruned_at", op.id)));
    }
    Ok(Some(op))
}

pub(super) async fn replays(conn: &Conn, id: &str) -> Result<Option<Replays>, Fault> {
    let row = conn
        .query_opt(
            "SELECT count, first_at, last_at FROM replays WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| Replays {
        count: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
        first_at: Timestamp(r.get(1)),
        last_at: Timestamp(r.get(2)),
    }))
}

/// One page, newest first, strictly older than `after` in `(created_at, id)` order.
pub(super) async fn list(
    conn: &Conn,
    filter: &Filter,
    limit: usize,
    after: Option<(i64, String)>,
) -> Result<Page, Fault> {
    let limit = limit.max(1);
    let state = filter.state.map(|s| s.as_str().to_owned());
    let mut terms = Vec::new();
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = Vec::new();
    for (column, value) in [
        ("state", &state),
        ("provider", &filter.provider),
        ("route", &filter.route),
    ] {
        if let Some(value) = value {
            params.push(value);
            terms.push(format!("{column} = ${}", params.len()));
        }
    }
    let (created, id);
    if let Some(position) = after {
        (created, id) = position;
        params.push(&created);
        params.push(&id);
        let n = params.len();
        terms.push(format!("(created_at, id) < (${}, ${n})", n - 1));
    }
    // One row beyond the page tells whether a next page exists.
    let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
    params.push(&fetch);
    let filter = match terms.is_empty() {
        true => String::new(),
        false => format!("WHERE {}", terms.join(" AND ")),
    };
    let sql = format!(
        "SELECT record FROM ops {filter} ORDER BY created_at DESC, id DESC LIMIT ${}",
        params.len()
    );
    let rows = conn.query(&sql, &params).await?;
    let mut ops = rows
        .iter()
        .map(|r| op_of(r.get(0)))
        .collect::<Result<Vec<_>, _>>()?;
    if ops.len() <= limit {
        return Ok(Page { ops, next: None });
    }
    ops.truncate(limit);
    let next = ops
        .last()
        .map(|op| codec::encode_cursor(op.created_at.0, &op.id));
    Ok(Page { ops, next })
}

/// Counts per state (every state present) and the oldest `unknown` and `in_flight`
/// operations' `created_at`, from the by-state index.
pub(super) async fn stats(conn: &Conn) -> Result<Stats, Fault> {
    let rows = conn
        .query("SELECT state, count(*) FROM ops GROUP BY state", &[])
        .await?;
    let mut stats = Stats::default();
    for state in State::ALL {
        stats.by_state.insert(state.as_str(), 0);
    }
    for row in &rows {
        let name: &str = row.get(0);
        if let Some(state) = State::ALL.into_iter().find(|s| s.as_str() == name) {
            let count = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
            stats.by_state.insert(state.as_str(), count);
        }
    }
    let oldest = "SELECT min(created_at) FROM ops WHERE state = $1";
    for (state, slot) in [
        (State::Unknown, &mut stats.oldest_unknown),
        (State::InFlight, &mut stats.oldest_in_flight),
    ] {
        let row = conn.query_opt(oldest, &[&state.as_str()]).await?;
        *slot = row.and_then(|r| r.get::<_, Option<i64>>(0)).map(Timestamp);
    }
    Ok(stats)
}
