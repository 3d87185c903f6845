//! Replicas and their leases: registration, renewal, and the orphaning of the operations a
//! lapsed replica left `in_flight`.
//!
//! A replica registers once at open; its database-issued ID is the epoch of its fencing
//! tokens, so `fence >> 32` names the owner of every claim. A background task renews the lease
//! every third of it; the local deadline (the start of the last renewal that succeeded, plus
//! the lease) is what `writable` trusts, so a replica that cannot reach the database stops
//! calling itself writable before the database could call it lapsed. The orphan sweep runs on
//! every replica every half lease, each orphaning in its own locked transaction, so two
//! sweepers never both orphan one operation; the same transaction ends an abandoned claim.
//! Whether a lease lapsed is always decided by the database's clock.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::super::change::{self, Left};
use super::super::fault::Fault;
use super::Core;
use super::connect::{Conn, Tx};
use super::update::{self, Appended};
use crate::clock::Timestamp;
use crate::operation::{Event, Operation, State};

/// Replica rows lapsed for this many leases (and owning nothing in flight) are deleted.
const FORGET_AFTER: u32 = 10;
/// How often an abandoned claim is tried again while the database cannot be reached.
const ABANDON_RETRY: Duration = Duration::from_secs(1);

/// This replica's view of its own lease.
pub(super) struct Lease {
    pub(super) length: Duration,
    /// When the last renewal that succeeded was sent.
    renewed: Mutex<Instant>,
    /// False from a failed statement until the next renewal succeeds.
    reachable: AtomicBool,
    /// Moves on every lapse this replica learns of: a renewal sent after the lease had run out
    /// by the local clock, or one the database found lapsed. A claimed attempt is sent only
    /// while it is the epoch its claim began in (`may_send`): a replica that wakes from a
    /// pause and renews before its attempt's connection is ready must not send it, since
    /// another replica may have orphaned that claim in the gap.
    epoch: AtomicU64,
}

impl Lease {
    pub(super) fn new(length: Duration, renewed: Instant) -> Lease {
        Lease {
            length,
            renewed: Mutex::new(renewed),
            reachable: AtomicBool::new(true),
            epoch: AtomicU64::new(0),
        }
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether an attempt claimed in `epoch` may send its first byte now: no lapse since, the
    /// database reachable at the last try, and the lease live for a tenth of a lease more by
    /// the local clock (which runs out before the database's: a renewal's start is no later than
    /// its commit). The margin covers the moments between this check and the first byte.
    pub(super) fn may_send(&self, epoch: u64) -> Result<(), &'static str> {
        if self.epoch() != epoch {
            return Err(
                "this replica's lease lapsed after the claim, so another replica may                         have taken the operation over",
            );
        }
        let renewed = *self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        if !self.reachable.load(Ordering::SeqCst) {
            return Err(
                "the ledger's database could not be reached at the last try, so this                         replica's lease may lapse before the request is sent",
            );
        }
        if Instant::now() + self.length / 10 >= renewed + self.length {
            return Err("this replica's lease runs out before the request could be sent");
        }
        Ok(())
    }

    /// Whether the database was reachable at the last try and the lease has not lapsed by
    /// the local clock.
    pub(super) fn writable(&self) -> bool {
        let renewed = *self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        self.reachable.load(Ordering::Relaxed) && Instant::now() < renewed + self.length
    }

    pub(super) fn unreachable(&self) {
        self.reachable.store(false, Ordering::Relaxed);
    }

    /// A renewal sent `at` succeeded; `was_live`: the database still held the lease then.
    fn renewed(&self, at: Instant, was_live: bool) {
        let mut renewed = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        if !was_live || at >= *renewed + self.length {
            // Moved before the new deadline is visible: `may_send` reads the epoch first.
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        *renewed = at;
        self.reachable.store(true, Ordering::SeqCst);
    }

    fn millis(&self) -> i64 {
        i64::try_from(self.length.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Registers a replica named `name` with a fresh lease of `length`; returns its ID.
pub(super) async fn register(conn: &Conn, name: &str, length: Duration) -> Result<i64, Fault> {
    let millis = i64::try_from(length.as_millis()).unwrap_or(i64::MAX);
    let row = conn
        .query_opt(
            "INSERT INTO replicas (id, name, started_at, expires_at) \
             VALUES (nextval('replica_ids'), $1, now(), now() + $2::bigint * interval '1 millisecond') \
             RETURNING id",
            &[&name, &millis],
        )
        .await?
        .ok_or_else(|| Fault::new("the replica registration returned nothing".into()))?;
    let id: i64 = row.get(0);
    if !(1..=i64::from(u32::MAX)).contains(&id) {
        return Err(Fault::new(format!(
            "replica ID {id} is outside the fencing range (reset the replica_ids sequence)"
        )));
    }
    Ok(id)
}

/// Renews this replica's lease; a row deleted meanwhile (it lapsed long ago) is written
/// again under the same ID: its operations were orphaned, so fencing still holds.
pub(super) async fn renew(core: &Core) -> Result<(), Fault> {
    let sent = Instant::now();
    let conn = core.conn().await?;
    // `was_live`: the lease had not lapsed by the database's clock before this renewal (a
    // missing row lapsed long ago).
    let row = conn
        .query_opt(
            "WITH before AS (SELECT expires_at > clock_timestamp() AS live FROM replicas \
             WHERE id = $1) \
             INSERT INTO replicas (id, name, started_at, expires_at) \
             VALUES ($1, '', now(), now() + $2::bigint * interval '1 millisecond') \
             ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at \
             RETURNING COALESCE((SELECT live FROM before), false)",
            &[&core.me, &core.lease.millis()],
        )
        .await?;
    let was_live = row.is_some_and(|row| row.get::<_, bool>(0));
    crate::crash_point!("postgres.lease_renewed");
    core.lease.renewed(sent, was_live);
    Ok(())
}

/// Ends this replica's lease now (a graceful stop): from the database's next instant it is
/// lapsed, so what it left in flight is the others' to orphan (their next sweep, or the next
/// request for it) and `ledger copy` may run, instead of a whole lease later. Fencing holds
/// as for any lapsed lease.
pub(super) async fn release(core: &Core) -> Result<(), Fault> {
    let conn = core.conn().await?;
    conn.query(
        "UPDATE replicas SET expires_at = now() WHERE id = $1 AND expires_at > now()",
        &[&core.me],
    )
    .await?;
    Ok(())
}

/// Renews the lease every third of it until the ledger stops.
pub(super) async fn heartbeat(core: Arc<Core>) {
    let every = core.lease.length / 3;
    loop {
        tokio::select! {
            () = core.stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(fault) = core.timed(renew(&core)).await {
            core.lease.unreachable();
            tracing::warn!(error = %fault, "the ledger lease could not be renewed");
        }
    }
}

/// Orphans lapsed replicas' operations every half lease until the ledger stops.
pub(super) async fn sweeper(core: Arc<Core>) {
    let every = core.lease.length / 2;
    loop {
        tokio::select! {
            () = core.stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        match core.timed(sweep(&core)).await {
            Ok(orphaned) if !orphaned.is_empty() => {
                tracing::warn!(
                    orphaned = orphaned.len(),
                    "operations of a replica whose lease lapsed are now unknown"
                );
                core.orphaned(&orphaned);
            }
            Ok(_) => {}
            Err(fault) => tracing::warn!(error = %fault, "the orphan sweep failed"),
        }
    }
}

/// Orphans every `in_flight` operation whose owner's lease lapsed (never this replica's own),
/// each in its own locked transaction, and forgets replicas lapsed long ago. Returns the
/// orphaned operations as they now are.
pub(super) async fn sweep(core: &Core) -> Result<Vec<Operation>, Fault> {
    let conn = core.conn().await?;
    let rows = conn
        .query(
            "SELECT o.id FROM ops o WHERE o.state = 'in_flight' AND o.owner <> $1 AND NOT EXISTS \
             (SELECT 1 FROM replicas r WHERE r.id = o.owner AND r.expires_at > now()) \
             ORDER BY o.id",
            &[&core.me],
        )
        .await?;
    let forget = core.lease.millis().saturating_mul(i64::from(FORGET_AFTER));
    conn.query(
        "DELETE FROM replicas r WHERE r.expires_at < now() - $1::bigint * interval '1 millisecond' \
         AND NOT EXISTS (SELECT 1 FROM ops o WHERE o.state = 'in_flight' AND o.owner = r.id) \
         RETURNING r.id",
        &[&forget],
    )
    .await?;
    drop(conn);
    let mut orphaned = Vec::new();
    for row in &rows {
        let id: String = row.get(0);
        if let Some(op) = orphan_one(core, &id, None).await? {
            orphaned.push(op);
        }
    }
    Ok(orphaned)
}

/// In one locked transaction: orphans `id` if it is still `in_flight` under a lapsed owner
/// (`fence` `None`), or under exactly `fence` (an abandoned claim). Publishes what it wrote.
pub(super) async fn orphan_one(
    core: &Core,
    id: &str,
    claim: Option<(u64, Left)>,
) -> Result<Option<Operation>, Fault> {
    let tx = core.begin().await?;
    tx.lock(id).await?;
    let found = update::read(&tx, id, core.me).await?;
    let now = Timestamp::now();
    let settled = match (found.op, claim) {
        (Some(old), Some((fence, left))) if old.state == State::InFlight && old.fence == fence => {
            change::abandoned(&old, left, now)
        }
        (Some(old), None) if found.lapsed => change::lapsed(&old, now, core.reach),
        _ => {
            tx.rollback().await;
            return Ok(None);
        }
    };
    let written = store_in(&tx, settled).await?;
    core.commit(tx, true).await?;
    core.publish(&written);
    Ok(written.into_iter().next().map(|(op, _)| op))
}

async fn store_in(tx: &Tx, (op, event): (Operation, Event)) -> Result<Appended, Fault> {
    update::store_changed(tx, &op, &event).await?;
    Ok(vec![(op, vec![event])])
}

/// Retries, until it is written or found moot, the orphaning of a claim its holder abandoned.
pub(super) async fn abandon(core: Arc<Core>, id: String, claim: (u64, Left)) {
    loop {
        match core.timed(orphan_one(&core, &id, Some(claim))).await {
            Ok(_) => return,
            Err(fault) => tracing::warn!(
                operation = %crate::operation::Logged(&id),
                error = %fault,
                "an abandoned claim could not be made unknown yet; trying again"
            ),
        }
        tokio::select! {
            () = core.stop.cancelled() => return,
            () = tokio::time::sleep(ABANDON_RETRY) => {}
        }
    }
}
