//! Replay counts: how often each operation was answered from the ledger, and when first and
//! last, written coalesced instead of one event per replay (issue 8).
//!
//! This file owns the `replays` table (`id -> (count, first_at, last_at)`) and the writer job
//! that merges a batch of in-memory counts into it. Like `store`, it runs inside transactions
//! it is handed. A batch only adds history: it commits without an fsync (`Staged::History`)
//! and becomes durable with the next durable commit, so a crash may lose the counts of the
//! last moments, never a state or an answer. An operation's first counted replay also appends
//! one `operation.replayed` event (published on the feed when its batch commits, so up to
//! about a second after the replay); later ones only move the count and `last_at`. Counts for an
//! operation that is gone (pruned) are dropped; `store` deletes a pruned operation's row.

use redb::{ReadTransaction, Table, TableDefinition, WriteTransaction};

use crate::clock::Timestamp;
use crate::ledger::Replays;
use crate::ledger::fault::Fault;
use crate::ledger::redb::read::readable;

/// `id -> (count, first_at, last_at)` in milliseconds since the epoch.
pub(in crate::ledger) const REPLAYS: TableDefinition<&str, (u64, i64, i64)> =
    TableDefinition::new("replays");

/// The table as `Tables` holds it.
pub(in crate::ledger) type ReplayTable<'t> = Table<'t, &'static str, (u64, i64, i64)>;

/// Opens the table in a write transaction, creating it on first use.
pub(in crate::ledger) fn open<'t>(txn: &'t WriteTransaction) -> Result<ReplayTable<'t>, Fault> {
    Ok(txn.open_table(REPLAYS)?)
}

/// The replays of `id` on a read snapshot. A ledger file written before replays were
/// counted has no table yet: none.
pub(in crate::ledger) fn get(txn: &ReadTransaction, id: &str) -> Result<Option<Replays>, Fault> {
    let Some(table) = readable(txn, REPLAYS)? else {
        return Ok(None);
    };
    Ok(table.get(id)?.map(|v| {
        let (count, first, last) = v.value();
        Replays {
            count,
            first_at: Timestamp(first),
            last_at: Timestamp(last),
        }
    }))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::ledger::LedgerOptions;
    use crate::ledger::ReplayNote;
    use crate::ledger::change::merged;
    use crate::ledger::tests::{Kind, fresh};
    use crate::operation::Operation;
    use crate::operation::{EventKind, State, Write};

    const T0: i64 = 1_800_000_000_000;

    fn note(count: u64, first: i64, last: i64) -> ReplayNote {
        ReplayNote {
            id: "p/r/x".into(),
            count,
            first: Timestamp(first),
            last: Timestamp(last),
        }
    }

    #[test]
    fn a_note_adds_its_count_and_widens_the_times() {
        assert_eq!(merged(None, &note(3, 10, 20)), (3, 10, 20));
        assert_eq!(merged(Some((5, 1, 9)), &note(3, 10, 20)), (8, 1, 20));
        assert_eq!(
            merged(Some((u64::MAX, 1, 30)), &note(3, 10, 20)),
            (u64::MAX, 1, 30),
            "saturates; a late note never moves last_at back"
        );
    }

    on_both_backends!(
        notes_merge_into_one_row_and_one_event_and_go_with_their_operation,
        an_unwritable_ledger_refuses_notes,
    );

    async fn notes_merge_into_one_row_and_one_event_and_go_with_their_operation(kind: Kind) {
        let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
        let op = Operation::example("p/r/x", State::Succeeded, Timestamp(T0));
        let write = Write::of(op, vec![]);
        ledger.update("p/r/x", |_| (Some(write), ())).await.unwrap();

        let notes = vec![
            note(3, T0 + 10, T0 + 20),
            ReplayNote {
                id: "p/r/gone".into(),
                ..note(1, T0, T0)
            },
        ];
        assert_eq!(
            ledger.note_replays(notes).await.unwrap(),
            1,
            "the gone one is dropped"
        );
        assert_eq!(
            ledger
                .note_replays(vec![note(2, T0 + 5, T0 + 30)])
                .await
                .unwrap(),
            1
        );
        let kept = ledger.replays("p/r/x").await.unwrap();
        let want = Replays {
            count: 5,
            first_at: Timestamp(T0 + 5),
            last_at: Timestamp(T0 + 30),
        };
        assert_eq!(kept, Some(want));
        assert_eq!(ledger.replays("p/r/gone").await.unwrap(), None);
        let events = ledger.events("p/r/x").await.unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::Replayed],
            "one event, at the first flush's first replay"
        );
        assert_eq!(events[0].at, Timestamp(T0 + 10));

        let pruned = ledger.prune(Timestamp(T0 + 1), Timestamp(T0 + 2), 10);
        assert_eq!(pruned.await.unwrap(), 1);
        assert_eq!(
            ledger.replays("p/r/x").await.unwrap(),
            None,
            "pruned with it"
        );
        assert_eq!(ledger.note_replays(vec![note(1, T0, T0)]).await.unwrap(), 0);
    }

    async fn an_unwritable_ledger_refuses_notes(kind: Kind) {
        let opts = LedgerOptions {
            fail_writes: true,
            ..LedgerOptions::default()
        };
        let (_kept, ledger) = fresh(kind, opts).await;
        assert!(ledger.note_replays(vec![note(1, T0, T0)]).await.is_err());
    }
}
