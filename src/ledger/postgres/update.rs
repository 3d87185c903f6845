//! The statements on one operation that the orphaning of lapsed replicas' operations (`lease`,
//! and a batch of updates, `group`, that finds one) and `ledger copy` share: the locked read,
//! the record's upsert, the history's append, and `apply` of one `Write`.
//!
//! Every write of an operation runs inside a transaction holding that operation's row in
//! `op_locks`, so two replicas never interleave a read and a write of one ID. It applies the
//! rules every backend shares (`change`) and never decides what a request means.

use std::time::Duration;

use super::super::change;
use super::super::codec;
use super::super::fault::Fault;
use super::connect::Tx;
use crate::clock::Timestamp;
use crate::operation::{Event, Operation, RequestChange, Write};

/// What a committed transaction appended, for the feed: each operation as the commit left it
/// with the events it gained.
pub(super) type Appended = Vec<(Operation, Vec<Event>)>;

/// The operation stored under `id` as a locked transaction sees it.
pub(super) struct Found {
    /// The live operation, else the one rebuilt from its tombstone.
    pub(super) op: Option<Operation>,
    /// Whether it is `in_flight` under an owner (other than `me`) whose lease lapsed or
    /// whose replica row is gone.
    pub(super) lapsed: bool,
}

/// Reads `id` (its lock already held).
pub(super) async fn read(tx: &Tx, id: &str, me: i64) -> Result<Found, Fault> {
    let row = tx
        .query_opt(
            "SELECT o.record, (o.state = 'in_flight' AND o.owner <> $2 AND NOT EXISTS \
             (SELECT 1 FROM replicas r WHERE r.id = o.owner AND r.expires_at > now())) \
             FROM ops o WHERE o.id = $1",
            &[&id, &me],
        )
        .await?;
    if let Some(row) = row {
        return Ok(Found {
            op: Some(codec::decode_op(row.get::<_, &[u8]>(0))?),
            lapsed: row.get(1),
        });
    }
    let tomb = tx
        .query_opt("SELECT record FROM tombstones WHERE id = $1", &[&id])
        .await?;
    let op = match tomb {
        Some(row) => Some(codec::decode_op(row.get::<_, &[u8]>(0))?),
        None => None,
    };
    Ok(Found { op, lapsed: false })
}

/// Stores `op` with the copies of its fields the indexes need.
pub(super) async fn put_op(tx: &Tx, op: &Operation) -> Result<(), Fault> {
    let record = codec::encode_op(op)?;
    let fence = i64::try_from(op.fence)
        .map_err(|_| Fault::new(format!("fence {} of {} is out of range", op.fence, op.id)))?;
    let owner = fence >> 32;
    tx.execute(
        "INSERT INTO ops (id, state, provider, route, created_at, updated_at, fence, owner, record) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, provider = EXCLUDED.provider, \
         route = EXCLUDED.route, created_at = EXCLUDED.created_at, \
         updated_at = EXCLUDED.updated_at, fence = EXCLUDED.fence, owner = EXCLUDED.owner, \
         record = EXCLUDED.record",
        &[
            &op.id,
            &op.state.as_str(),
            &op.provider,
            &op.route,
            &op.created_at.0,
            &op.updated_at.0,
            &fence,
            &owner,
            &record,
        ],
    )
    .await?;
    Ok(())
}

/// Appends `events` to the history of `id`, after its last one.
pub(super) async fn append_events(tx: &Tx, id: &str, events: &[Event]) -> Result<(), Fault> {
    if events.is_empty() {
        return Ok(());
    }
    let records = events
        .iter()
        .map(codec::encode_event)
        .collect::<Result<Vec<_>, _>>()?;
    tx.execute(
        "INSERT INTO events (id, seq, record) \
         SELECT $1, COALESCE((SELECT MAX(seq) FROM events WHERE id = $1), -1) + t.ord, t.rec \
         FROM unnest($2::bytea[]) WITH ORDINALITY AS t (rec, ord)",
        &[&id, &records],
    )
    .await?;
    Ok(())
}

/// Makes `old`, whose owner's lease lapsed, `unknown` (see `change::lapsed`) and stores it
/// with its orphaned event; returns it as it now is with that event.
pub(super) async fn orphan(
    tx: &Tx,
    old: &Operation,
    reach: Duration,
) -> Result<(Operation, Event), Fault> {
    let (op, event) = change::lapsed(old, Timestamp::now(), reach);
    store_changed(tx, &op, &event).await?;
    Ok((op, event))
}

/// Stores `op`, changed by one of `change`'s rules, with its one `event`.
pub(super) async fn store_changed(tx: &Tx, op: &Operation, event: &Event) -> Result<(), Fault> {
    put_op(tx, op).await?;
    append_events(tx, &op.id, std::slice::from_ref(event)).await
}

/// Applies one `Write` to `id` (`old` is what is stored now); whether it changed the
/// operation, its response or its kept request (else it only appended history).
pub(super) async fn apply(
    tx: &Tx,
    id: &str,
    old: Option<&Operation>,
    write: &Write,
) -> Result<bool, Fault> {
    change::admissible(id, write, old.is_some_and(|o| o.pruned_at.is_some()))?;
    let op_changed = old != Some(&write.op);
    if op_changed {
        put_op(tx, &write.op).await?;
    }
    append_events(tx, id, &write.events).await?;
    if let Some(response) = &write.response {
        let record = codec::encode_response(response);
        tx.execute(
            "INSERT INTO responses (id, record) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
            &[&id, &record],
        )
        .await?;
    }
    let request_changed = match &write.request {
        RequestChange::Keep => false,
        RequestChange::Store(sealed) => {
            tx.execute(
                "INSERT INTO requests (id, sealed) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET sealed = EXCLUDED.sealed",
                &[&id, sealed],
            )
            .await?;
            true
        }
        RequestChange::Erase => {
            tx.execute("DELETE FROM requests WHERE id = $1", &[&id])
                .await?
                > 0
        }
    };
    Ok(op_changed || write.response.is_some() || request_changed)
}
