//! Tombstones (docs/reference.md section 5.8): what a pruned succeeded or operator-rejected operation leaves behind,
//! so that pruning never turns an old intent into a new effect.
//!
//! This file owns the two tombstone tables (the only tables defined outside `store`) and runs,
//! like `store`, inside transactions it is handed. `tombstones` maps an operation ID to the
//! operation as it was pruned (its ID, fingerprint, final state and times; no response, no
//! per-field hashes) with `pruned_at` set; `tombstone_age` holds one empty entry
//! `(pruned_at, id)` per tombstone, so the sweep deletes the oldest first without a scan.
//! It never decides what a tombstone means: `decide` refuses every request for one.

use redb::{ReadTransaction, ReadableTable, Table, TableDefinition, WriteTransaction};

use crate::clock::Timestamp;
use crate::ledger::change::tombstone_of;
use crate::ledger::codec;
use crate::ledger::fault::Fault;
use crate::ledger::redb::read::{decoded_after, readable};
use crate::operation::Operation;

pub(in crate::ledger) const TOMBSTONES: TableDefinition<&str, &[u8]> =
    TableDefinition::new("tombstones");
pub(in crate::ledger) const AGE: TableDefinition<(i64, &str), ()> =
    TableDefinition::new("tombstone_age");

/// The tombstone tables opened in one write transaction.
pub(in crate::ledger) struct Tombs<'t> {
    table: Table<'t, &'static str, &'static [u8]>,
    age: Table<'t, (i64, &'static str), ()>,
}

impl<'t> Tombs<'t> {
    /// Opens the tables, creating them on first use.
    pub(in crate::ledger) fn open(txn: &'t WriteTransaction) -> Result<Tombs<'t>, Fault> {
        Ok(Tombs {
            table: txn.open_table(TOMBSTONES)?,
            age: txn.open_table(AGE)?,
        })
    }

    /// The operation rebuilt from the tombstone of `id` (`pruned_at` set), if there is one.
    pub(in crate::ledger) fn get(&self, id: &str) -> Result<Option<Operation>, Fault> {
        decode(self.table.get(id)?.as_ref().map(|v| v.value()))
    }

    /// Records the tombstone of `op`, pruned at `at`, replacing any older one of its ID.
    pub(in crate::ledger) fn put(&mut self, op: &Operation, at: Timestamp) -> Result<(), Fault> {
        let tomb = tombstone_of(op, at);
        if let Some(old) = self.get(&op.id)? {
            let when = old.pruned_at.map_or(0, |t| t.0);
            self.age.remove((when, op.id.as_str()))?;
        }
        let bytes = codec::encode_op(&tomb)?;
        self.table.insert(op.id.as_str(), bytes.as_slice())?;
        self.age.insert((at.0, op.id.as_str()), ())?;
        Ok(())
    }

    /// Deletes up to `max` tombstones made before `older_than`, oldest first; returns how
    /// many went (fewer than `max`: none of that age is left).
    pub(in crate::ledger) fn sweep(
        &mut self,
        older_than: Timestamp,
        max: usize,
    ) -> Result<usize, Fault> {
        let mut doomed = Vec::new();
        for entry in self.age.range(..(older_than.0, ""))?.take(max) {
            let (key, _) = entry?;
            let (at, id) = key.value();
            doomed.push((at, id.to_owned()));
        }
        for (at, id) in &doomed {
            self.age.remove((*at, id.as_str()))?;
            self.table.remove(id.as_str())?;
        }
        Ok(doomed.len())
    }
}

/// The tombstone of `id` on a read snapshot. A ledger file written before tombstones existed
/// has no table yet: no tombstone.
pub(in crate::ledger) fn get(txn: &ReadTransaction, id: &str) -> Result<Option<Operation>, Fault> {
    let Some(table) = readable(txn, TOMBSTONES)? else {
        return Ok(None);
    };
    decode(table.get(id)?.as_ref().map(|v| v.value()))
}

/// Up to `max` tombstones whose IDs sort after `after`, in ID order (for `ledger copy`).
pub(in crate::ledger) fn after(
    txn: &ReadTransaction,
    after: Option<&str>,
    max: usize,
) -> Result<Vec<Operation>, Fault> {
    decoded_after(txn, TOMBSTONES, after, max, decode_one)
}

fn decode(bytes: Option<&[u8]>) -> Result<Option<Operation>, Fault> {
    bytes.map(decode_one).transpose()
}

/// A tombstone's record; one without `pruned_at` is corrupt.
fn decode_one(bytes: &[u8]) -> Result<Operation, Fault> {
    let op = codec::decode_op(bytes)?;
    if op.pruned_at.is_none() {
        return Err(Fault::new(format!("tombstone {} has no pruned_at", op.id)));
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ledger::tests::{Kind, fresh};
    use crate::ledger::{Filter, Ledger, LedgerError, LedgerOptions};
    use crate::operation::{Approval, State, Write};

    const T0: Timestamp = Timestamp(1_800_000_000_000);
    const LATER: Timestamp = Timestamp(1_800_000_010_000);

    on_both_backends!(
        update_sees_the_tombstone_and_no_write_can_bring_it_back,
        only_succeeded_and_rejected_operations_leave_tombstones,
        swept_tombstones_free_their_ids_oldest_first_in_batches,
    );

    async fn put(ledger: &Ledger, op: Operation) -> Result<(), LedgerError> {
        let id = op.id.clone();
        let write = Write::of(op, Vec::new());
        ledger.update(&id, move |_| (Some(write), ())).await
    }

    /// Puts `op` and prunes it at `LATER`.
    async fn pruned(ledger: &Ledger, op: Operation) {
        put(ledger, op).await.expect("test write");
        let cutoff = LATER.minus(Duration::from_secs(1));
        ledger.prune(cutoff, LATER, 10).await.expect("prune");
    }

    async fn update_sees_the_tombstone_and_no_write_can_bring_it_back(kind: Kind) {
        let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
        let id = "p/r/done";
        pruned(&ledger, Operation::example(id, State::Succeeded, T0)).await;

        let seen = ledger.update(id, |existing| (None, existing)).await;
        let seen = seen
            .expect("read")
            .expect("the tombstone is handed to the closure");
        assert_eq!(
            (seen.state, seen.pruned_at),
            (State::Succeeded, Some(LATER))
        );
        let anew = Operation::example(id, State::InFlight, LATER);
        assert!(matches!(
            put(&ledger, anew).await,
            Err(LedgerError::Unavailable(_))
        ));
        assert_eq!(
            ledger.get(id).await.unwrap(),
            None,
            "GET lists live operations only"
        );
        assert!(
            ledger
                .list(&Filter::default(), 10, None)
                .await
                .unwrap()
                .ops
                .is_empty()
        );
        assert_eq!(ledger.tombstone(id).await.unwrap(), Some(seen));
    }

    async fn only_succeeded_and_rejected_operations_leave_tombstones(kind: Kind) {
        let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
        let rejected = Operation {
            approval: Approval::Rejected,
            ..Operation::example("p/r/rejected", State::Failed, T0)
        };
        pruned(&ledger, rejected).await;
        pruned(&ledger, Operation::example("p/r/failed", State::Failed, T0)).await;
        let tomb = ledger.tombstone("p/r/rejected").await.unwrap();
        assert_eq!(tomb.map(|t| t.state), Some(State::Failed));
        assert_eq!(ledger.tombstone("p/r/failed").await.unwrap(), None);
        let free = Operation::example("p/r/failed", State::InFlight, LATER);
        put(&ledger, free)
            .await
            .expect("a plainly failed ID is free again");
    }

    async fn swept_tombstones_free_their_ids_oldest_first_in_batches(kind: Kind) {
        let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
        for n in 0..3 {
            let id = format!("p/r/{n}");
            pruned(&ledger, Operation::example(&id, State::Succeeded, T0)).await;
        }
        assert_eq!(
            ledger.prune_tombstones(LATER, 1).await.unwrap(),
            0,
            "not yet"
        );
        let after = LATER.plus(Duration::from_millis(1));
        assert_eq!(ledger.prune_tombstones(after, 1).await.unwrap(), 3);
        for n in 0..3 {
            assert_eq!(ledger.tombstone(&format!("p/r/{n}")).await.unwrap(), None);
        }
        let anew = Operation::example("p/r/0", State::InFlight, after);
        put(&ledger, anew).await.expect("the ID is free again");
    }
}
