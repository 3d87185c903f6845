//! The table: one test per (crash point, ledger), each running its three provider kinds at
//! once; a failure names every cell that broke (point, actions, provider kind, ledger) and why.
//! A point that a provider kind or a ledger cannot reach is skipped here, by name, with the
//! reason.

use crate::cell::{Cell, Kind, Provoke, Store, name, run};

/// One row: a point armed with `actions` (the `fail` crate's syntax: `1*off->return` lets the
/// first pass go and dies at the second), reached by `provoke`.
struct Row {
    point: &'static str,
    actions: &'static str,
    provoke: Provoke,
    /// What a provider that does not deduplicate ends with (`Cell::no_dedupe`).
    no_dedupe: (&'static str, usize),
    /// The provider kinds that never reach the point, and why.
    skip: &'static [(Kind, &'static str)],
}

const NO_LOOKUP: &str = "the route has no [route.reconcile] lookup: nothing is ever looked up";
const NO_RESEND: &str = "the settler never re-sends an irreversible operation to a provider \
                         that does not deduplicate: it is left to an operator";

/// Nothing was recorded: the replay after the restart is a new operation.
const ANEW: (&str, usize) = ("succeeded", 1);
/// Claimed, never sent: held, and nothing happened.
const HELD_UNSENT: (&str, usize) = ("unknown", 0);
/// Sent and executed, its answer lost with the process: held.
const HELD_SENT: (&str, usize) = ("unknown", 1);
/// The answer was recorded before the crash: a replay answers it.
const RECORDED: (&str, usize) = ("succeeded", 1);

const fn sent(point: &'static str, actions: &'static str, no_dedupe: (&'static str, usize)) -> Row {
    Row {
        point,
        actions,
        provoke: Provoke::Send,
        no_dedupe,
        skip: &[],
    }
}

const CLAIM_BEFORE_COMMIT: Row = sent("claim.before_commit", "return", ANEW);
const CLAIM_AFTER_COMMIT: Row = sent("claim.after_commit", "return", HELD_UNSENT);
/// The first write of the operation is its claim.
const LEDGER_STAGED_CLAIM: Row = sent("ledger.staged", "return", ANEW);
const DISPATCH_AFTER_SEND: Row = sent("dispatch.after_send", "return", HELD_SENT);
const DISPATCH_BEFORE_RESULT_COMMIT: Row =
    sent("dispatch.before_result_commit", "return", HELD_SENT);
/// The second write of the operation is its result.
const LEDGER_STAGED_RESULT: Row = sent("ledger.staged", "1*off->return", HELD_SENT);
const DISPATCH_AFTER_RESULT_COMMIT: Row = sent("dispatch.after_result_commit", "return", RECORDED);
const SETTLE_RESEND: Row = Row {
    point: "settle.resend",
    actions: "return",
    provoke: Provoke::TimeoutThenSettler,
    no_dedupe: HELD_UNSENT,
    skip: &[(Kind::NoDedupe, NO_RESEND)],
};
const RECONCILE_ANSWERED: Row = Row {
    point: "reconcile.answered",
    actions: "return",
    provoke: Provoke::LostThenReplay,
    no_dedupe: HELD_SENT,
    skip: &[(Kind::Dedupe, NO_LOOKUP), (Kind::NoDedupe, NO_LOOKUP)],
};
/// The first renewal, a third of the lease after the start (`cell::LEASE_HELD`).
const LEASE_RENEWED: Row = Row {
    point: "postgres.lease_renewed",
    actions: "return",
    provoke: Provoke::HeldThenLease,
    no_dedupe: HELD_UNSENT,
    skip: &[],
};

/// Runs the row's cells on `store` at once; fails naming every cell that broke.
async fn matrix(row: Row, store: Store) {
    let mut cells = Vec::new();
    for kind in [Kind::Dedupe, Kind::NoDedupe, Kind::Lookup] {
        if let Some((_, why)) = row.skip.iter().find(|(k, _)| *k == kind) {
            eprintln!("skipped {} x {kind:?} x {store:?}: {why}", row.point);
            continue;
        }
        let cell = Cell {
            point: row.point,
            actions: row.actions,
            provoke: row.provoke,
            no_dedupe: row.no_dedupe,
            kind,
            store,
        };
        cells.push((cell, tokio::spawn(run(cell))));
    }
    let mut failed = Vec::new();
    for (cell, task) in cells {
        match task.await {
            Ok(Ok(settled)) => eprintln!(
                "passed {}: {} with {} effect(s)",
                name(&cell),
                settled.state,
                settled.effects
            ),
            Ok(Err(why)) => failed.push(format!("{}: {why}", name(&cell))),
            Err(panicked) => failed.push(format!("{}: {}", name(&cell), panic_text(panicked))),
        }
    }
    assert!(failed.is_empty(), "\n{}", failed.join("\n\n"));
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into()),
        Err(e) => e.to_string(),
    }
}

macro_rules! cells {
    ($($redb:ident, $postgres:ident: $row:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redb() {
            matrix($row, Store::Redb).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            matrix($row, Store::Postgres).await;
        }
    )*};
}

cells! {
    claim_before_commit_redb, claim_before_commit_postgres: CLAIM_BEFORE_COMMIT;
    claim_after_commit_redb, claim_after_commit_postgres: CLAIM_AFTER_COMMIT;
    ledger_staged_claim_redb, ledger_staged_claim_postgres: LEDGER_STAGED_CLAIM;
    dispatch_after_send_redb, dispatch_after_send_postgres: DISPATCH_AFTER_SEND;
    dispatch_before_result_commit_redb, dispatch_before_result_commit_postgres: DISPATCH_BEFORE_RESULT_COMMIT;
    ledger_staged_result_redb, ledger_staged_result_postgres: LEDGER_STAGED_RESULT;
    dispatch_after_result_commit_redb, dispatch_after_result_commit_postgres: DISPATCH_AFTER_RESULT_COMMIT;
    settle_resend_redb, settle_resend_postgres: SETTLE_RESEND;
    reconcile_answered_redb, reconcile_answered_postgres: RECONCILE_ANSWERED;
}

// A redb ledger has no lease (one process owns the file): the lease point is PostgreSQL's only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewed_postgres() {
    matrix(LEASE_RENEWED, Store::Postgres).await;
}
