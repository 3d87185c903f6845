//! The answers of replays already read: a bounded map from operation ID to what a backend's
//! `replayable` read for it (a `succeeded` operation with its stored response, or a `failed`
//! one), so an agent polling one result reads the store once, not on every poll. Both
//! backends keep one; each says what drops an entry.
//!
//! On redb only the writer changes operations. Every operation a batch stores or deletes (an
//! update, a prune, a sweep: `store::Tables::take_written`) has its entry dropped by `forget`
//! once the batch's commit has returned, before any of its jobs is answered; a reopened file
//! `clear`s the map. On PostgreSQL, another replica's change arrives as a notification
//! (`postgres::listen`), and this replica's own is forgotten before it is answered.
//!
//! A reader fills the map only with what it read from a snapshot that began after every
//! change it could miss: it takes the map's `epoch` before its snapshot begins, and the fill
//! is dropped if the epoch moved since (each `forget` and `clear` moves it, under the same
//! lock as the fill). So an entry is never older than the last change to its operation that
//! was forgotten here.
//!
//! Bounded by `MAX_BYTES` (an entry's ID, body and headers, and a fixed overhead); a
//! response body over `MAX_BODY` is never kept. When full, entries are dropped in no
//! particular order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::ledger::Replayable;
use crate::operation::State;

/// The most bytes the map accounts for.
const MAX_BYTES: usize = 4 << 20;
/// The largest response body kept.
const MAX_BODY: usize = 64 << 10;
/// What an entry costs beyond its ID, body and headers (the operation's other fields, the
/// map's own slot).
const OVERHEAD: usize = 512;

/// The map, shared by the readers and the writer.
pub(in crate::ledger) struct Hot {
    /// Moved by every `forget` and `clear`; a fill that saw another value is dropped.
    epoch: AtomicU64,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, (Arc<Replayable>, usize)>,
    bytes: usize,
}

impl Hot {
    pub(in crate::ledger) fn new() -> Hot {
        Hot {
            epoch: AtomicU64::new(0),
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The epoch a reader takes before its snapshot begins, and hands to `fill`.
    pub(in crate::ledger) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The kept answer for `id`, if any.
    pub(in crate::ledger) fn get(&self, id: &str) -> Option<Arc<Replayable>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.map.get(id).map(|(kept, _)| Arc::clone(kept))
    }

    /// Keeps what a reader read for `id` from a snapshot begun after `epoch` was taken, unless
    /// the epoch moved since, or the operation is one a replay does not answer alone, or the
    /// entry is too large. Returns the answer, shared.
    pub(in crate::ledger) fn fill(
        &self,
        id: &str,
        epoch: u64,
        read: Replayable,
    ) -> Arc<Replayable> {
        let read = Arc::new(read);
        let Some(size) = cost(id, &read) else {
            return read;
        };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if self.epoch.load(Ordering::Acquire) != epoch {
            return read;
        }
        while entries.bytes + size > MAX_BYTES {
            let Some(victim) = entries.map.keys().next().cloned() else {
                break;
            };
            if let Some((_, freed)) = entries.map.remove(&victim) {
                entries.bytes -= freed;
            }
        }
        if let Some((_, replaced)) = entries.map.insert(id.to_owned(), (Arc::clone(&read), size)) {
            entries.bytes -= replaced;
        }
        entries.bytes += size;
        read
    }

    /// Drops the entries of `ids`, whose new versions a commit wrote: called once it has
    /// returned, before any of its jobs is answered.
    pub(in crate::ledger) fn forget(&self, ids: &[String]) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for id in ids {
            if let Some((_, freed)) = entries.map.remove(id.as_str()) {
                entries.bytes -= freed;
            }
        }
    }

    /// Drops every entry: the file was reopened, and holds what the disk does.
    pub(in crate::ledger) fn clear(&self) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        *entries = Entries::default();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().map.len()
    }
}

/// Whether an operation in `state` may be kept: a final answer, which only a rebind, a
/// resolution or a prune changes.
pub(in crate::ledger) fn kept(state: State) -> bool {
    matches!(state, State::Succeeded | State::Failed)
}

/// What keeping `read` costs, or `None` when it is not kept: only the final answers a replay
/// gives alone (a `succeeded` operation with its response, a `failed` one), and no body over
/// `MAX_BODY`.
fn cost(id: &str, (op, stored): &Replayable) -> Option<usize> {
    let response = match (op.state, stored) {
        (State::Succeeded, Some(stored)) if stored.body.len() <= MAX_BODY => {
            let headers: usize = stored
                .headers
                .iter()
                .map(|(name, value)| name.as_str().len() + value.len() + 32)
                .sum();
            stored.body.len() + headers
        }
        (State::Failed, _) => 0,
        _ => return None,
    };
    Some(OVERHEAD + 2 * id.len() + op.error.as_ref().map_or(0, String::len) + response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use crate::operation::{Operation, StoredResponse};

    fn op(id: &str, state: State) -> Operation {
        Operation::example(id, state, Timestamp(1_800_000_000_000))
    }

    fn succeeded(id: &str, body: &'static [u8]) -> Replayable {
        let op = op(id, State::Succeeded);
        let stored = StoredResponse {
            status: 200,
            headers: http::HeaderMap::new(),
            body: bytes::Bytes::from_static(body),
        };
        (op, Some(stored))
    }

    #[test]
    fn a_fill_is_kept_until_its_operation_is_forgotten() {
        let hot = Hot::new();
        let epoch = hot.epoch();
        hot.fill("a", epoch, succeeded("a", b"{}"));
        hot.fill("b", epoch, succeeded("b", b"{}"));
        assert!(hot.get("a").is_some());
        hot.forget(&["a".to_owned()]);
        assert!(hot.get("a").is_none());
        assert!(hot.get("b").is_some());
        hot.clear();
        assert!(hot.get("b").is_none());
    }

    #[test]
    fn a_fill_that_began_before_a_change_is_dropped() {
        let hot = Hot::new();
        let before = hot.epoch();
        // The writer committed a new version of some operation while the read ran.
        hot.forget(&["other".to_owned()]);
        let answer = hot.fill("a", before, succeeded("a", b"{}"));
        assert_eq!(answer.0.id, "a", "the reader still gets what it read");
        assert!(hot.get("a").is_none(), "but it is not kept");
        let before = hot.epoch();
        hot.clear();
        hot.fill("a", before, succeeded("a", b"{}"));
        assert!(hot.get("a").is_none());
    }

    #[test]
    fn only_final_answers_of_bounded_size_are_kept() {
        let hot = Hot::new();
        let epoch = hot.epoch();
        hot.fill("running", epoch, (op("running", State::InFlight), None));
        hot.fill("failed", epoch, (op("failed", State::Failed), None));
        static BIG: [u8; MAX_BODY + 1] = [b'x'; MAX_BODY + 1];
        hot.fill("big", epoch, succeeded("big", &BIG));
        hot.fill("missing", epoch, (succeeded("missing", b"").0, None));
        assert!(hot.get("running").is_none());
        assert!(hot.get("failed").is_some());
        assert!(hot.get("big").is_none());
        assert!(
            hot.get("missing").is_none(),
            "succeeded without its response"
        );
    }

    #[test]
    fn the_map_stays_within_its_bytes() {
        let hot = Hot::new();
        static BODY: [u8; 32 << 10] = [b'x'; 32 << 10];
        for i in 0..1000 {
            let id = format!("op-{i}");
            hot.fill(&id, hot.epoch(), succeeded(&id, &BODY));
        }
        let entries = hot.entries.lock().unwrap();
        assert!(entries.bytes <= MAX_BYTES, "{} bytes", entries.bytes);
        let sum: usize = entries.map.values().map(|(_, size)| size).sum();
        assert_eq!(sum, entries.bytes);
        drop(entries);
        assert!(hot.len() >= MAX_BYTES / (BODY.len() + 2 * OVERHEAD));
    }
}
