//! The batch writes of the PostgreSQL ledger: retention pruning, the tombstone sweep and the
//! replay counts. Each batch is its own transaction and takes the same per-operation locks
//! as `update` (in ID order, so two replicas pruning at once wait for each other instead of
//! deadlocking), and re-checks each candidate under its lock: any number of replicas may run
//! them at once. It applies the rules every backend shares (`change`).

use super::super::ReplayNote;
use super::super::change::{first_replay, leaves_tombstone, merged, tombstone_of};
use super::super::codec;
use super::super::fault::Fault;
use super::Core;
use super::connect::Tx;
use super::schema::CHANGED;
use super::update::{Appended, append_events};
use crate::clock::Timestamp;
use crate::operation::{Operation, State};

/// Deletes up to `max` operations in `state` last updated before `older_than`; a succeeded
/// or rejected one leaves its tombstone (`pruned_at = now`). Returns how many were deleted
/// and whether the batch was full (more may be left).
pub(super) async fn prune_batch(
    core: &Core,
    state: State,
    older_than: Timestamp,
    now: Timestamp,
    max: usize,
) -> Result<(usize, bool), Fault> {
    let limit = i64::try_from(max).unwrap_or(i64::MAX);
    let candidates = core
        .conn()
        .await?
        .query(
            "SELECT id FROM ops WHERE state = $1 AND updated_at < $2 \
             ORDER BY updated_at, id LIMIT $3",
            &[&state.as_str(), &older_than.0, &limit],
        )
        .await?;
    let mut ids: Vec<String> = candidates.iter().map(|r| r.get(0)).collect();
    let full = ids.len() == max;
    if ids.is_empty() {
        return Ok((0, false));
    }
    ids.sort();
    let tx = core.begin().await?;
    let mut pruned = Vec::new();
    for id in &ids {
        tx.lock(id).await?;
        let row = tx
            .query_opt("SELECT record FROM ops WHERE id = $1", &[id])
            .await?;
        let Some(row) = row else { continue };
        let op = codec::decode_op(row.get(0))?;
        // Changed since it was selected: no longer a candidate.
        if op.state != state || op.updated_at >= older_than {
            continue;
        }
        delete_op(&tx, &op).await?;
        if leaves_tombstone(&op) {
            put_tombstone(&tx, &tombstone_of(&op, now)).await?;
        } else {
            tx.execute("DELETE FROM op_locks WHERE id = $1", &[id])
                .await?;
        }
        pruned.push(op.id);
    }
    if !pruned.is_empty() {
        // Every replica forgets what it kept of them (`listen`).
        tx.execute("SELECT pg_notify($1, '*')", &[&CHANGED]).await?;
    }
    let committed = core.commit(tx, true).await;
    core.hot.forget(&pruned);
    committed?;
    Ok((pruned.len(), full))
}

/// Removes an operation with its events, response, kept request and replay counts.
async fn delete_op(tx: &Tx, op: &Operation) -> Result<(), Fault> {
    for sql in [
        "DELETE FROM ops WHERE id = $1",
        "DELETE FROM events WHERE id = $1",
        "DELETE FROM responses WHERE id = $1",
        "DELETE FROM requests WHERE id = $1",
        "DELETE FROM replays WHERE id = $1",
    ] {
        tx.execute(sql, &[&op.id]).await?;
    }
    Ok(())
}

pub(super) async fn put_tombstone(tx: &Tx, tomb: &Operation) -> Result<(), Fault> {
    let record = codec::encode_op(tomb)?;
    let pruned_at = tomb.pruned_at.map_or(0, |t| t.0);
    tx.execute(
        "INSERT INTO tombstones (id, pruned_at, record) VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET pruned_at = EXCLUDED.pruned_at, record = EXCLUDED.record",
        &[&tomb.id, &pruned_at, &record],
    )
    .await?;
    Ok(())
}

/// Deletes up to `max` tombstones made before `older_than`, oldest first; their IDs are free
/// again. Returns how many went.
pub(super) async fn sweep_tombstones(
    core: &Core,
    older_than: Timestamp,
    max: usize,
) -> Result<usize, Fault> {
    let limit = i64::try_from(max).unwrap_or(i64::MAX);
    let tx = core.begin().await?;
    let rows = tx
        .query(
            "DELETE FROM tombstones WHERE id IN (SELECT id FROM tombstones WHERE pruned_at < $1 \
             ORDER BY pruned_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id",
            &[&older_than.0, &limit],
        )
        .await?;
    let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    tx.execute(
        "DELETE FROM op_locks l WHERE l.id = ANY($1) \
         AND NOT EXISTS (SELECT 1 FROM ops o WHERE o.id = l.id)",
        &[&ids],
    )
    .await?;
    core.commit(tx, true).await?;
    Ok(ids.len())
}

/// Merges `notes` in one history-only transaction; returns how many operations were noted
/// and the `operation.replayed` events appended (an operation's first replays).
pub(super) async fn note_replays(
    core: &Core,
    mut notes: Vec<ReplayNote>,
) -> Result<(usize, Appended), Fault> {
    notes.sort_by(|a, b| a.id.cmp(&b.id));
    let tx = core.begin().await?;
    let mut noted = 0;
    let mut appended = Vec::new();
    for note in &notes {
        // The lock serializes this event's sequence number with `update`'s appends.
        tx.lock(&note.id).await?;
        let row = tx
            .query_opt("SELECT record FROM ops WHERE id = $1", &[&note.id])
            .await?;
        let Some(row) = row else { continue };
        let op = codec::decode_op(row.get(0))?;
        let kept = tx
            .query_opt(
                "SELECT count, first_at, last_at FROM replays WHERE id = $1",
                &[&note.id],
            )
            .await?
            .map(|r| {
                let count = u64::try_from(r.get::<_, i64>(0)).unwrap_or(0);
                (count, r.get::<_, i64>(1), r.get::<_, i64>(2))
            });
        let (count, first, last) = merged(kept, note);
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO replays (id, count, first_at, last_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO UPDATE SET count = EXCLUDED.count, \
             first_at = EXCLUDED.first_at, last_at = EXCLUDED.last_at",
            &[&note.id, &count, &first, &last],
        )
        .await?;
        if kept.is_none() {
            let event = first_replay(&op, note);
            append_events(&tx, &note.id, std::slice::from_ref(&event)).await?;
            appended.push((op, vec![event]));
        }
        noted += 1;
    }
    core.commit(tx, false).await?;
    Ok((noted, appended))
}
