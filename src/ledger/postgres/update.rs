//! The locked read-decide-write transaction of `update`, and the writes it shares with the
//! orphaning of lapsed replicas' operations.
//!
//! Every write of an operation runs inside a transaction holding that operation's row in
//! `op_locks`, so two replicas never interleave a read and a write of one ID. Inside it: an
//! `in_flight` operation whose owner's lease lapsed (by the database's clock) is orphaned
//! first; the caller's closure decides on what is then stored; its `Write` is applied with the
//! rules every backend shares (`change`); a new claim is written only while this replica's
//! own lease is live. It never decides what a request means.

use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_postgres::Row;

use super::super::LedgerError;
use super::super::change::{self, Left};
use super::super::codec;
use super::super::fault::Fault;
use super::super::hot;
use super::Core;
use super::connect::{Tx, WriteFailed, sqlstate};
use super::schema;
use crate::clock::Timestamp;
use crate::operation::{Event, Operation, RequestChange, Write};

/// What a committed transaction appended, for the feed: each operation as the commit left it
/// with the events it gained.
pub(super) type Appended = Vec<(Operation, Vec<Event>)>;

/// The refusal of a claim while this replica's lease is not live in the database.
pub(super) fn lease_lapsed() -> LedgerError {
    LedgerError::Unavailable("this replica's lease lapsed; it claims again once renewed".into())
}

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
async fn orphan(tx: &Tx, old: &Operation, reach: Duration) -> Result<(Operation, Event), Fault> {
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

/// `Ledger::update` as one transaction of two round trips: `BEGIN` with the lock and the read
/// (`idemproxy_read_v1`), then the write (`idemproxy_write_v1`) with the `COMMIT`, each pair
/// sent together. An `in_flight` operation of a lapsed owner is orphaned in between (its own
/// statements, rare). Returns `f`'s value, what the commit appended and the operation it
/// orphaned first, if any. `staged` gets the fence of a new claim (and what a sweep must know
/// of it, `Left`) just before its write and `COMMIT` are sent, and loses it again when the
/// write is refused (then nothing was committed).
pub(super) async fn run<T, F>(
    core: &Core,
    id: &str,
    f: F,
    staged: &Mutex<Option<(u64, Left)>>,
) -> Result<(T, Appended, Vec<Operation>), LedgerError>
where
    F: FnOnce(Option<Operation>) -> (Option<Write>, T),
{
    let (tx, row) = core
        .conn()
        .await?
        .begin_with(
            "SELECT record, lapsed, tomb FROM idemproxy_read_v1($1, $2)",
            &[&id, &core.me],
        )
        .await?;
    let found = found_in(row)?;
    let mut appended = Vec::new();
    let mut orphaned = Vec::new();
    let existing = match found.op {
        Some(old) if found.lapsed => {
            let (op, event) = orphan(&tx, &old, core.reach).await?;
            appended.push((op.clone(), vec![event]));
            orphaned.push(op.clone());
            Some(op)
        }
        other => other,
    };
    let decided = std::panic::catch_unwind(AssertUnwindSafe(|| f(existing.clone())));
    let Ok((write, value)) = decided else {
        tx.rollback().await;
        let why = format!("the update of {id} panicked; nothing was written");
        return Err(LedgerError::Unavailable(why));
    };
    let started = Instant::now();
    let Some(write) = write else {
        if appended.is_empty() && existing.is_none() {
            // Nothing is stored under `id`: its lock row would only take room.
            let unlocked = "DELETE FROM op_locks WHERE id = $1";
            tx.execute_and_commit(unlocked, &[&id])
                .await
                .map_err(|failed| failed.into_fault())?;
        } else {
            tx.commit(true).await?;
        }
        core.committed(started, true);
        return Ok((value, appended, orphaned));
    };
    if core.fail_writes {
        tx.rollback().await;
        return Err(super::injected());
    }
    let old = existing.as_ref();
    change::admissible(id, &write, old.is_some_and(|o| o.pruned_at.is_some()))?;
    let op_changed = old != Some(&write.op);
    let record = match op_changed {
        true => Some(codec::encode_op(&write.op)?),
        false => None,
    };
    let fence = i64::try_from(write.op.fence)
        .map_err(|_| Fault::new(format!("fence {} of {id} is out of range", write.op.fence)))?;
    let events = write
        .events
        .iter()
        .map(codec::encode_event)
        .collect::<Result<Vec<_>, _>>()?;
    let response = write.response.as_ref().map(codec::encode_response);
    let (request, sealed): (i16, Option<&[u8]>) = match &write.request {
        RequestChange::Keep => (0, None),
        RequestChange::Store(sealed) => (1, Some(sealed)),
        RequestChange::Erase => (2, None),
    };
    // Durable when the operation, its response or its kept request changes (an erased
    // request counts only when there was one: the function decides), or an orphaning came
    // first; else only history was appended.
    let durable = op_changed || write.response.is_some() || request == 1 || !appended.is_empty();
    // What another replica may keep in memory for a replay changes (`hot`).
    let notify =
        old.is_some_and(|o| hot::kept(o.state)) && (op_changed || write.response.is_some());
    let claim = change::new_claim(old, &write);
    if let Some(fence) = claim {
        let left = Left::never(old);
        *staged.lock().unwrap_or_else(PoisonError::into_inner) = Some((fence, left));
    }
    crate::crash_point!("ledger.staged");
    let written = tx
        .execute_and_commit(
            "SELECT idemproxy_write_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             $13, $14, $15, $16)",
            &[
                &id,
                &core.me,
                &record,
                &write.op.state.as_str(),
                &write.op.provider,
                &write.op.route,
                &write.op.created_at.0,
                &write.op.updated_at.0,
                &fence,
                &events,
                &response,
                &request,
                &sealed,
                &claim.is_some(),
                &durable,
                &notify,
            ],
        )
        .await;
    if notify
        && !matches!(
            written,
            Err(WriteFailed::Before(_) | WriteFailed::Statement(_))
        )
    {
        // Committed, or perhaps: this replica's kept answer goes before anyone is answered.
        core.hot.forget(&[id.to_owned()]);
    }
    if let Err(failed) = written {
        if !matches!(failed, WriteFailed::Commit(_)) {
            // Refused before the commit: nothing was written, so nothing is left to abandon.
            staged.lock().unwrap_or_else(PoisonError::into_inner).take();
        }
        return Err(match failed {
            WriteFailed::Statement(e) if sqlstate(&e) == Some(schema::LEASE_LAPSED) => {
                lease_lapsed()
            }
            other => other.into_fault().into(),
        });
    }
    core.committed(started, durable);
    appended.push((write.op, write.events));
    Ok((value, appended, orphaned))
}

/// What `idemproxy_read_v1` returned.
fn found_in(row: Option<Row>) -> Result<Found, Fault> {
    let row = row.ok_or_else(|| Fault::new("idemproxy_read_v1 returned no row".to_owned()))?;
    if let Some(record) = row.get::<_, Option<&[u8]>>(0) {
        return Ok(Found {
            op: Some(codec::decode_op(record)?),
            lapsed: row.get::<_, Option<bool>>(1).unwrap_or(false),
        });
    }
    let op = match row.get::<_, Option<&[u8]>>(2) {
        Some(tomb) => Some(codec::decode_op(tomb)?),
        None => None,
    };
    Ok(Found { op, lapsed: false })
}
