//! The feed of committed events: every event a write transaction appended is published here
//! once that transaction has committed, with the operation as the same commit left it.
//!
//! A bounded broadcast: the writer thread publishes without ever waiting (a full channel
//! overwrites its oldest entry), so a slow subscriber loses events, is told how many
//! (`Lagged`), and never slows a commit. Nothing is published for a write that failed or was
//! rolled back. A history-only commit (no fsync, see `writer::Staged`) publishes too: its
//! events are as visible to readers as the ledger's own `events`. It never holds anything the
//! ledger does not: no request header, no request body.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::operation::{Event, Operation};

/// Events a subscriber may fall behind by before it loses the oldest ones.
const BACKLOG: usize = 4096;

/// One committed event and its operation as the commit left it.
#[derive(Debug, Clone)]
pub struct Published {
    pub op: Arc<Operation>,
    pub event: Event,
}

/// The sending side, held by the writer thread; cheap to clone.
#[derive(Clone)]
pub(super) struct Feed {
    sender: broadcast::Sender<Published>,
}

impl Feed {
    pub(super) fn new() -> Feed {
        Feed {
            sender: broadcast::Sender::new(BACKLOG),
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<Published> {
        self.sender.subscribe()
    }

    /// Whether anyone listens: a job builds what it publishes only then.
    pub(super) fn heard(&self) -> bool {
        self.sender.receiver_count() > 0
    }

    /// Publishes `events` of `op`, in order; never blocks.
    pub(super) fn publish(&self, op: &Operation, events: &[Event]) {
        if events.is_empty() || !self.heard() {
            return;
        }
        let op = Arc::new(op.clone());
        for event in events {
            let _ = self.sender.send(Published {
                op: Arc::clone(&op),
                event: event.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::broadcast::error::TryRecvError;

    use super::super::tests::{Kept, Kind, fresh};
    use super::super::{Ledger, LedgerOptions, ReplayNote};
    use super::*;
    use crate::clock::Timestamp;
    use crate::operation::{EventKind, State, Write};

    const T0: i64 = 1_800_000_000_000;

    fn event(kind: EventKind) -> Event {
        Event {
            at: Timestamp(T0),
            kind,
            attempt: 1,
            detail: kind.as_str().to_owned(),
        }
    }

    async fn open(kind: Kind, fail_writes: bool) -> (Kept, Ledger) {
        let opts = LedgerOptions {
            fail_writes,
            ..LedgerOptions::default()
        };
        fresh(kind, opts).await
    }

    on_both_backends!(
        a_commit_publishes_its_events_in_order_with_the_operation,
        a_write_that_fails_publishes_nothing,
        a_slow_subscriber_is_told_what_it_lost_and_never_holds_the_writer,
    );

    async fn a_commit_publishes_its_events_in_order_with_the_operation(kind: Kind) {
        let (_kept, ledger) = open(kind, false).await;
        let mut feed = ledger.subscribe();
        let op = Operation::example("p/r/x", State::Succeeded, Timestamp(T0));
        let events = vec![event(EventKind::Claimed), event(EventKind::ResultPersisted)];
        let write = Write::of(op, events);
        ledger.update("p/r/x", |_| (Some(write), ())).await.unwrap();
        let kinds: Vec<_> = (0..2)
            .map(|_| feed.try_recv().unwrap())
            .inspect(|p| assert_eq!(p.op.state, State::Succeeded))
            .map(|p| p.event.kind)
            .collect();
        assert_eq!(kinds, [EventKind::Claimed, EventKind::ResultPersisted]);
        assert!(matches!(feed.try_recv(), Err(TryRecvError::Empty)));

        // The first replay note appends (and publishes) one event; the next, none.
        let note = ReplayNote {
            id: "p/r/x".into(),
            count: 1,
            first: Timestamp(T0),
            last: Timestamp(T0),
        };
        ledger.note_replays(vec![note.clone()]).await.unwrap();
        assert_eq!(feed.try_recv().unwrap().event.kind, EventKind::Replayed);
        ledger.note_replays(vec![note]).await.unwrap();
        assert!(matches!(feed.try_recv(), Err(TryRecvError::Empty)));
    }

    async fn a_write_that_fails_publishes_nothing(kind: Kind) {
        let (_kept, ledger) = open(kind, true).await;
        let mut feed = ledger.subscribe();
        let op = Operation::example("p/r/x", State::Prepared, Timestamp(T0));
        let write = Write::of(op, vec![event(EventKind::Prepared)]);
        let written = ledger.update("p/r/x", |_| (Some(write), ())).await;
        assert!(written.is_err());
        assert!(matches!(feed.try_recv(), Err(TryRecvError::Empty)));
    }

    async fn a_slow_subscriber_is_told_what_it_lost_and_never_holds_the_writer(kind: Kind) {
        let (_kept, ledger) = open(kind, false).await;
        let mut feed = ledger.subscribe();
        let events: Vec<Event> = (0..BACKLOG + 10)
            .map(|_| event(EventKind::Conflict))
            .collect();
        let op = Operation::example("p/r/x", State::Failed, Timestamp(T0));
        let write = Write::of(op, events);
        ledger.update("p/r/x", |_| (Some(write), ())).await.unwrap();
        assert!(matches!(feed.try_recv(), Err(TryRecvError::Lagged(10))));
        assert_eq!(feed.try_recv().unwrap().event.kind, EventKind::Conflict);
    }
}
