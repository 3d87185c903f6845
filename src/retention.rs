//! Retention (docs/reference.md sections 2 and 5.8, `[retention]`): the background task that prunes finished operations and
//! sweeps expired tombstones.
//!
//! It owns only the schedule: every `min(shorter of completed and tombstones / 10, 60s)` (at
//! least 10ms) it asks the ledger to delete `succeeded` and `failed` operations last updated
//! more than `completed` ago, with their events and responses, then the tombstones made more
//! than `tombstones` ago, in batches so agents' writes interleave. It never chooses what may
//! be deleted or what leaves a tombstone: the ledger's `prune` never touches `prepared`,
//! `in_flight` or `unknown` operations, so an outcome nobody knows is never forgotten, and
//! leaves the tombstone of every succeeded or rejected one (docs/reference.md section 5.8).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::app::Live;
use crate::clock::Timestamp;
use crate::config::Retention;
use crate::ledger::Ledger;

/// Deletions per ledger transaction, so one sweep never holds the writer for long.
const BATCH: usize = 1000;
const SHORTEST: Duration = Duration::from_millis(10);
const LONGEST: Duration = Duration::from_secs(60);

/// Prunes the ledger on the retention schedule until `stop` resolves, each sweep with the
/// `[retention]` of the current app (a reload may change it). The first sweep runs at once;
/// a sweep in progress is abandoned at `stop` (each batch is its own commit, so nothing is
/// left half-deleted). Ledger failures are logged and retried next time.
pub async fn run(live: Arc<Live>, stop: impl Future) {
    let ledger = live.current().ledger.clone();
    sweep_until(
        ledger,
        move || live.current().config.retention.clone(),
        stop,
    )
    .await;
}

/// How often to sweep for a retention of `completed`: a tenth of it, within [10ms, 60s].
pub fn interval(completed: Duration) -> Duration {
    (completed / 10).clamp(SHORTEST, LONGEST)
}

/// The loop behind `run`, on any ledger.
async fn sweep_until(ledger: Ledger, current: impl Fn() -> Retention, stop: impl Future) {
    let every = |r: &Retention| interval(r.completed.min(r.tombstones));
    let mut period = every(&current());
    let mut ticker = tokio::time::interval(period);
    // A slow sweep is not followed by a burst of catch-up sweeps.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        let sweep = async {
            ticker.tick().await;
            let retention = current();
            sweep(&ledger, &retention, Timestamp::now()).await;
            retention
        };
        tokio::select! {
            _ = &mut stop => break,
            retention = sweep => {
                // A reload changed the schedule: the next sweep is one new period away.
                if every(&retention) != period {
                    period = every(&retention);
                    ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
                }
            }
        }
    }
}

/// One sweep: deletes the tombstones made before `now - tombstones`, then what finished
/// before `now - completed` (leaving tombstones); returns how many operations went.
async fn sweep(ledger: &Ledger, retention: &Retention, now: Timestamp) -> usize {
    sweep_tombstones(ledger, retention.tombstones, now).await;
    match ledger
        .prune(now.minus(retention.completed), now, BATCH)
        .await
    {
        Ok(0) => 0,
        Ok(pruned) => {
            tracing::info!(
                pruned,
                "pruned finished operations past [retention] completed"
            );
            pruned
        }
        Err(e) => {
            tracing::warn!(error = %e, "retention could not prune the ledger; will retry");
            0
        }
    }
}

async fn sweep_tombstones(ledger: &Ledger, tombstones: Duration, now: Timestamp) {
    match ledger.prune_tombstones(now.minus(tombstones), BATCH).await {
        Ok(0) => {}
        Ok(swept) => tracing::info!(swept, "deleted tombstones past [retention] tombstones"),
        Err(e) => tracing::warn!(error = %e, "retention could not sweep tombstones; will retry"),
    }
}

#[cfg(test)]
mod tests {

    use bytes::Bytes;
    use http::HeaderMap;

    use super::*;
    use crate::ledger::LedgerOptions;
    use crate::operation::{Event, EventKind, Operation, State, StoredResponse, Write};

    fn op(id: &str, state: State, updated: Timestamp) -> Operation {
        Operation {
            provider: "pay".into(),
            route: "refund".into(),
            ..Operation::example(id, state, updated)
        }
    }

    async fn put(ledger: &Ledger, op: Operation) {
        let id = op.id.clone();
        let events = vec![Event {
            at: op.updated_at,
            kind: EventKind::ResultPersisted,
            attempt: 1,
            detail: op.state.as_str().into(),
        }];
        let response = Some(StoredResponse {
            status: 200,
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"{}"),
        });
        let write = Write {
            op,
            events,
            response,
            request: Default::default(),
        };
        ledger
            .update(&id, move |_| (Some(write), ()))
            .await
            .expect("test write");
    }

    async fn ledger(dir: &tempfile::TempDir) -> Ledger {
        let path = dir.path().join("ledger.redb");
        let opened = Ledger::open(&path, Timestamp::now(), LedgerOptions::default()).await;
        opened.expect("open test ledger").0
    }

    /// A retention of `completed` and `tombstones` seconds.
    fn keep(completed: u64, tombstones: u64) -> Retention {
        Retention {
            completed: Duration::from_secs(completed),
            tombstones: Duration::from_secs(tombstones),
        }
    }

    #[tokio::test]
    async fn a_sweep_leaves_tombstones_then_deletes_them_past_their_retention() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = ledger(&dir).await;
        let now = Timestamp::now();
        let old = now.minus(Duration::from_secs(120));
        put(&ledger, op("pay/refund/ok", State::Succeeded, old)).await;
        put(&ledger, op("pay/refund/failed", State::Failed, old)).await;
        assert_eq!(sweep(&ledger, &keep(60, 600), now).await, 2);
        let tomb = ledger.tombstone("pay/refund/ok").await.expect("read");
        let tomb = tomb.expect("a succeeded operation leaves a tombstone");
        assert_eq!((tomb.state, tomb.pruned_at), (State::Succeeded, Some(now)));
        assert_eq!(tomb.response, None, "a tombstone keeps no response");
        let failed = ledger.tombstone("pay/refund/failed").await.expect("read");
        assert_eq!(failed, None, "a plainly failed operation leaves none");

        sweep(&ledger, &keep(60, 600), now.plus(Duration::from_secs(599))).await;
        assert!(
            ledger
                .tombstone("pay/refund/ok")
                .await
                .expect("read")
                .is_some()
        );
        sweep(&ledger, &keep(60, 600), now.plus(Duration::from_secs(601))).await;
        assert_eq!(ledger.tombstone("pay/refund/ok").await.expect("read"), None);
    }

    #[test]
    fn interval_is_a_tenth_within_bounds() {
        assert_eq!(interval(Duration::from_secs(30)), Duration::from_secs(3));
        assert_eq!(interval(Duration::from_millis(50)), SHORTEST);
        assert_eq!(interval(Duration::ZERO), SHORTEST);
        assert_eq!(interval(Duration::from_secs(30 * 86_400)), LONGEST);
    }

    #[tokio::test]
    async fn a_sweep_deletes_only_finished_operations_past_retention() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = ledger(&dir).await;
        let now = Timestamp::now();
        let old = now.minus(Duration::from_secs(120));
        for (id, state, at) in [
            ("pay/refund/old-ok", State::Succeeded, old),
            ("pay/refund/old-failed", State::Failed, old),
            ("pay/refund/old-unknown", State::Unknown, old),
            ("pay/refund/old-prepared", State::Prepared, old),
            ("pay/refund/new-ok", State::Succeeded, now),
        ] {
            put(&ledger, op(id, state, at)).await;
        }
        assert_eq!(sweep(&ledger, &keep(60, 86_400), now).await, 2);
        for (id, kept) in [
            ("pay/refund/old-ok", false),
            ("pay/refund/old-failed", false),
            ("pay/refund/old-unknown", true),
            ("pay/refund/old-prepared", true),
            ("pay/refund/new-ok", true),
        ] {
            let found = ledger.get(id).await.expect("read");
            assert_eq!(found.is_some(), kept, "{id}");
        }
        assert!(
            ledger
                .events("pay/refund/old-ok")
                .await
                .expect("read")
                .is_empty()
        );
        assert!(
            ledger
                .response("pay/refund/old-ok")
                .await
                .expect("read")
                .is_none()
        );
    }

    #[tokio::test]
    async fn the_loop_prunes_on_schedule_and_ends_at_stop() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = ledger(&dir).await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let retention = Retention {
            completed: Duration::from_millis(100),
            ..Retention::default()
        };
        let task = tokio::spawn(sweep_until(
            ledger.clone(),
            move || retention.clone(),
            stopped,
        ));
        // Written after the first sweep may have run: only a later sweep can delete it.
        let done = Timestamp::now().minus(Duration::from_millis(50));
        put(&ledger, op("pay/refund/a", State::Succeeded, done)).await;
        put(&ledger, op("pay/refund/b", State::Unknown, done)).await;
        let gone = async {
            while ledger.get("pay/refund/a").await.expect("read").is_some() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), gone)
            .await
            .expect("the succeeded operation is pruned");
        assert!(ledger.get("pay/refund/b").await.expect("read").is_some());
        stop.send(()).expect("loop still running");
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the loop ends at stop")
            .expect("the loop does not panic");
    }
}
