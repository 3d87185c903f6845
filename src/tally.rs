//! Replay counts kept in memory and written coalesced, off the request path (issue 8).
//!
//! A replay of a `succeeded` operation is a read and an answer: it notes itself here (`Tally`,
//! a small map `id -> count, first, last` behind a mutex) and goes. A background task (`run`,
//! spawned by `server` beside retention and the settler) hands everything noted to the ledger
//! about once a second (`FLUSH`) as one history-only write without an fsync of its own
//! (`Ledger::note_replays`), and once more when the server stops. A flush the ledger refuses
//! (a full disk) is put back and tried again by the next one. So a crash loses at most the
//! counts of the last moments (not yet flushed, or flushed but not yet made durable by a later
//! durable commit), never a state or an answer. While more than `PENDING` operations wait for
//! a flush, replays of yet others are answered but not counted.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::clock::Timestamp;
use crate::ledger::{Ledger, ReplayNote};

/// How often the counted replays are written.
pub const FLUSH: Duration = Duration::from_secs(1);
/// Operations whose replays may wait for a flush at once.
const PENDING: usize = 65_536;

/// Replays counted since the last flush: `id -> (count, first, last)`.
#[derive(Default)]
pub struct Tally {
    pending: Mutex<HashMap<String, (u64, Timestamp, Timestamp)>>,
}

impl Tally {
    /// Counts one replay of `id` at `at`.
    pub fn note(&self, id: &str, at: Timestamp) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((count, first, last)) = pending.get_mut(id) {
            *count = count.saturating_add(1);
            *first = (*first).min(at);
            *last = (*last).max(at);
        } else if pending.len() < PENDING {
            pending.insert(id.to_owned(), (1, at, at));
        }
    }

    /// Everything counted so far, leaving the tally empty.
    pub fn take(&self) -> Vec<ReplayNote> {
        let drained =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        drained
            .into_iter()
            .map(|(id, (count, first, last))| ReplayNote {
                id,
                count,
                first,
                last,
            })
            .collect()
    }

    /// What is counted of `id` so far: `(count, first, last)`.
    pub fn get(&self, id: &str) -> Option<(u64, Timestamp, Timestamp)> {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.get(id).copied()
    }

    /// Puts back notes a flush could not write, merged with what was counted since.
    fn restore(&self, notes: Vec<ReplayNote>) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        for note in notes {
            let entry = pending.entry(note.id).or_insert((0, note.first, note.last));
            entry.0 = entry.0.saturating_add(note.count);
            entry.1 = entry.1.min(note.first);
            entry.2 = entry.2.max(note.last);
        }
    }
}

/// Writes what `tally` counted to `ledger` every `FLUSH` until `stop` resolves, then once
/// more (the stop's flush).
pub async fn run(ledger: Ledger, tally: std::sync::Arc<Tally>, stop: impl Future) {
    let mut ticker = tokio::time::interval(FLUSH);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        // A flush is never cut short by the stop: it runs to its end outside the select.
        tokio::select! {
            _ = &mut stop => break,
            _ = ticker.tick() => {}
        }
        flush(&ledger, &tally).await;
    }
    flush(&ledger, &tally).await;
}

/// One flush; notes the ledger refused go back into the tally.
pub async fn flush(ledger: &Ledger, tally: &Tally) {
    let notes = tally.take();
    if notes.is_empty() {
        return;
    }
    if let Err(e) = ledger.note_replays(notes.clone()).await {
        tracing::debug!(error = %e, "replay counts not written yet; kept for the next flush");
        tally.restore(notes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_of_one_operation_coalesce_into_one_note() {
        let tally = Tally::default();
        tally.note("p/r/a", Timestamp(20));
        tally.note("p/r/a", Timestamp(10));
        tally.note("p/r/a", Timestamp(30));
        tally.note("p/r/b", Timestamp(5));
        let mut notes = tally.take();
        notes.sort_by(|a, b| a.id.cmp(&b.id));
        let a = &notes[0];
        assert_eq!(
            (a.count, a.first, a.last),
            (3, Timestamp(10), Timestamp(30))
        );
        assert_eq!(notes[1].count, 1);
        assert!(tally.take().is_empty(), "taken means gone");
    }

    #[test]
    fn refused_notes_are_put_back_with_what_came_since() {
        let tally = Tally::default();
        tally.note("p/r/a", Timestamp(10));
        let refused = tally.take();
        tally.note("p/r/a", Timestamp(40));
        tally.restore(refused);
        let notes = tally.take();
        assert_eq!(notes.len(), 1);
        let a = &notes[0];
        assert_eq!(
            (a.count, a.first, a.last),
            (2, Timestamp(10), Timestamp(40))
        );
    }
}
