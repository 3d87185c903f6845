//! The redb layout: table definitions, and the writes that keep the index and counters; the
//! `meta` table is `meta`'s, the queries on read snapshots `query`'s.
//!
//! This file owns every table definition and every key format; they never leave `ledger`.
//! It runs inside transactions it is handed and never begins, commits or aborts one (the
//! writer and the read helpers do that), so a group of writes can share one commit.
//!
//! Layout. `ops` maps an operation ID to its row: its record, its kept request, its stored
//! response and its events, in one value (`codec::encode_row`). `index` holds one empty entry
//! `(prefix, created_at, id)` per operation and prefix, where the prefixes are `s/{state}`,
//! `p/{provider}` and `r/{route}`; `counters` holds, per prefix, how many entries it has. So
//! listing by any filter is a reverse range scan (the unfiltered list merges the by-state
//! scans, which together hold every operation), the by-state index finds orphans and prune
//! candidates without a full scan, and stats are point reads. Ledgers written before the
//! compact layout also have `events`, one entry per event keyed `(id, seq)`, read before
//! the row's events, `requests` and `responses`, the kept request and stored response of an
//! operation whose row has none, and a `c` prefix holding every operation, which nothing reads and pruning
//! removes with its operation (docs/decisions.md, "A compact record encoding"). The
//! tombstone tables are `tombstone`'s and the replay counts `replays`'; `Tables` opens them
//! with the rest.

use std::ops::Bound;

use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};

use crate::clock::Timestamp;
use crate::ledger::change::{self, Left, leaves_tombstone, orphan_reason};
use crate::ledger::codec;
use crate::ledger::copy::page::Live;
use crate::ledger::fault::Fault;
use crate::ledger::redb::counts::{self, ReplayTable};
use crate::ledger::redb::tombstone::Tombs;
use crate::operation::{Event, Operation, RequestChange, State, StoredResponse, Write};

pub(in crate::ledger) const OPS: TableDefinition<&str, &[u8]> = TableDefinition::new("ops");
/// Events as builds before the compact layout kept them, one entry each (read, never added to).
pub(in crate::ledger) const EVENTS: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("events");
pub(in crate::ledger) const RESPONSES: TableDefinition<&str, &[u8]> =
    TableDefinition::new("responses");
pub(in crate::ledger) const REQUESTS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("requests");
pub(in crate::ledger) const INDEX: TableDefinition<(&str, i64, &str), ()> =
    TableDefinition::new("index");
pub(in crate::ledger) const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

/// The index prefix older builds kept of every operation (see the layout above).
pub(in crate::ledger) const ALL: &str = "c";

/// Where an entry sits inside one index prefix: `(created_at, id)`.
pub(in crate::ledger) type Position = (i64, String);

/// Where one prune transaction starts and how much it may delete.
pub(in crate::ledger) struct PruneBatch {
    pub(in crate::ledger) state: State,
    pub(in crate::ledger) older_than: Timestamp,
    /// Resume strictly after this entry of the by-state index.
    pub(in crate::ledger) after: Option<Position>,
    pub(in crate::ledger) max: usize,
    /// The `pruned_at` of the tombstones this batch leaves.
    pub(in crate::ledger) now: Timestamp,
}

/// What one prune transaction did.
pub(in crate::ledger) struct Pruned {
    pub(in crate::ledger) deleted: usize,
    /// Set when the batch filled up: where the next one resumes.
    pub(in crate::ledger) resume: Option<Position>,
}

macro_rules! fault_from {
    ($($t:ty),+) => {$(
        impl From<$t> for Fault {
            fn from(e: $t) -> Fault {
                Fault::new(e.to_string())
            }
        }
    )+};
}

fault_from!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::SetDurabilityError,
    redb::DatabaseError
);

/// The three index prefixes of an operation, in a fixed order so two versions compare slot by
/// slot.
pub(in crate::ledger) fn prefixes(op: &Operation) -> [String; 3] {
    [
        state_prefix(op.state),
        format!("p/{}", op.provider),
        format!("r/{}", op.route),
    ]
}

pub(in crate::ledger) fn state_prefix(state: State) -> String {
    format!("s/{}", state.as_str())
}

/// Bounds covering exactly the entries of `prefix`: no string sorts strictly between
/// `prefix` and `prefix + "\0"`, so the exclusive end never cuts a longer prefix's entries in.
pub(in crate::ledger) fn prefix_end(prefix: &str) -> String {
    format!("{prefix}\0")
}

/// What one write changes of an operation's row.
struct RowChange<'a> {
    /// The new record, if it changed.
    record: Option<&'a Operation>,
    /// Appended to the history.
    events: &'a [Event],
    request: &'a RequestChange,
    /// The new stored response, if any.
    response: Option<&'a StoredResponse>,
}

impl<'a> RowChange<'a> {
    /// A change that only appends `events`.
    fn events(events: &'a [Event]) -> RowChange<'a> {
        RowChange {
            record: None,
            events,
            request: &RequestChange::Keep,
            response: None,
        }
    }
}

/// The ledger's tables opened in one write transaction.
pub(in crate::ledger) struct Tables<'t> {
    ops: Table<'t, &'static str, &'static [u8]>,
    events: Table<'t, (&'static str, u32), &'static [u8]>,
    responses: Table<'t, &'static str, &'static [u8]>,
    requests: Table<'t, &'static str, &'static [u8]>,
    index: Table<'t, (&'static str, i64, &'static str), ()>,
    counters: Table<'t, &'static str, u64>,
    /// What the staged writes add to each prefix's counter, written by `close`: every
    /// operation of a batch moves the same few counters, so each is written once per batch
    /// instead of twice per index entry.
    deltas: Vec<(String, i64)>,
    /// The operations whose record or stored response the staged writes changed (a repeat
    /// possible), whose answers kept for replays go once the batch commits (`take_written`).
    written: Vec<String>,
    tombs: Tombs<'t>,
    replays: ReplayTable<'t>,
}

impl<'t> Tables<'t> {
    /// Opens the tables.
    pub(in crate::ledger) fn open(txn: &'t WriteTransaction) -> Result<Tables<'t>, Fault> {
        Ok(Tables {
            ops: txn.open_table(OPS)?,
            events: txn.open_table(EVENTS)?,
            responses: txn.open_table(RESPONSES)?,
            requests: txn.open_table(REQUESTS)?,
            index: txn.open_table(INDEX)?,
            counters: txn.open_table(COUNTERS)?,
            deltas: Vec::new(),
            written: Vec::new(),
            tombs: Tombs::open(txn)?,
            replays: counts::open(txn)?,
        })
    }

    /// Writes the counters the staged writes moved. Called once all of a transaction's
    /// writes are staged and before it commits: tables dropped without it leave the counters
    /// as they were, which is right only when the transaction is aborted.
    pub(in crate::ledger) fn close(mut self) -> Result<(), Fault> {
        for (prefix, delta) in std::mem::take(&mut self.deltas) {
            if delta == 0 {
                continue;
            }
            let current = self.counters.get(prefix.as_str())?.map_or(0, |v| v.value());
            let next = current.saturating_add_signed(delta);
            if next == 0 {
                self.counters.remove(prefix.as_str())?;
            } else {
                self.counters.insert(prefix.as_str(), next)?;
            }
        }
        Ok(())
    }

    /// The operations whose record or stored response the writes staged so far changed,
    /// stored or deleted, whatever wrote them (an update, a prune, a sweep).
    pub(in crate::ledger) fn take_written(&mut self) -> Vec<String> {
        std::mem::take(&mut self.written)
    }

    /// The live operation `id`, else the one rebuilt from its tombstone (`pruned_at` set).
    pub(in crate::ledger) fn get_op_or_tombstone(
        &self,
        id: &str,
    ) -> Result<Option<Operation>, Fault> {
        match self.get_op(id)? {
            Some(op) => Ok(Some(op)),
            None => self.tombs.get(id),
        }
    }

    /// Stores one live operation copied from another ledger, as its source held it: its
    /// record, index entries and counters, history, response, kept request and replay count.
    pub(in crate::ledger) fn load_live(&mut self, live: Live) -> Result<(), Fault> {
        let (write, replays) = live.into_write();
        let id = write.op.id.clone();
        // A ledger being filled holds no live copy of `id`; a tombstone of it refuses the load.
        let tomb = self.tombs.get(&id)?;
        self.apply(&id, tomb.as_ref(), &write)?;
        if let Some(r) = replays {
            let row = (r.count, r.first_at.0, r.last_at.0);
            self.replays.insert(id.as_str(), row)?;
        }
        Ok(())
    }

    /// Stores one tombstone copied from another ledger, with its `pruned_at`.
    pub(in crate::ledger) fn load_tombstone(&mut self, tomb: &Operation) -> Result<(), Fault> {
        let Some(at) = tomb.pruned_at else {
            return Err(Fault::new(format!(
                "tombstone {} has no pruned_at",
                tomb.id
            )));
        };
        self.tombs.put(tomb, at)
    }

    /// Deletes up to `max` tombstones made before `older_than`; returns how many went.
    pub(in crate::ledger) fn sweep_tombstones(
        &mut self,
        older_than: Timestamp,
        max: usize,
    ) -> Result<usize, Fault> {
        self.tombs.sweep(older_than, max)
    }

    pub(in crate::ledger) fn get_op(&self, id: &str) -> Result<Option<Operation>, Fault> {
        read_op(&self.ops, id)
    }

    /// Applies one `Write` to the operation stored under `id`; `old` is what `id` holds now,
    /// as `get_op_or_tombstone` reads it (a tombstone's operation has `pruned_at` set).
    /// Returns whether it changed the operation, its response or its kept request (else it only
    /// added history).
    pub(in crate::ledger) fn apply(
        &mut self,
        id: &str,
        old: Option<&Operation>,
        write: &Write,
    ) -> Result<bool, Fault> {
        // No write may turn a tombstone back into a live operation (docs/reference.md section
        // 5.8); `old` already says whether `id` has one, so it is not looked up again.
        let tombstoned = old.is_some_and(|o| o.pruned_at.is_some());
        change::admissible(id, write, tombstoned)?;
        let op_changed = old != Some(&write.op);
        let change = RowChange {
            record: op_changed.then_some(&write.op),
            events: &write.events,
            request: &write.request,
            response: write.response.as_ref(),
        };
        let request_changed = self.put_row(id, old.is_none(), change)?;
        if op_changed {
            self.reindex(old, &write.op)?;
        }
        if write.response.is_some() && !op_changed {
            self.written.push(id.to_owned());
        }
        Ok(op_changed || write.response.is_some() || request_changed)
    }

    /// Rewrites `id`'s row as `change` says; nothing when it changes nothing. `new` says `id`
    /// has no row yet, so it is not looked up. Returns whether the kept request changed.
    fn put_row(&mut self, id: &str, new: bool, change: RowChange<'_>) -> Result<bool, Fault> {
        let RowChange {
            record,
            events,
            request,
            response,
        } = change;
        let keep = matches!(request, RequestChange::Keep);
        if record.is_none() && events.is_empty() && keep && response.is_none() {
            return Ok(false);
        }
        let stored = match new {
            true => None,
            false => self.ops.get(id)?.map(|v| v.value().to_vec()),
        };
        let kept = match &stored {
            Some(bytes) => codec::split_row(bytes)?,
            None => codec::Row {
                record: &[],
                request: None,
                response: None,
                history: &[],
            },
        };
        // Requests and responses older builds kept went into tables of their own: a change
        // of one goes there too (a lookup only for operations that have a row already).
        let (request, request_changed) = match request {
            RequestChange::Keep => (kept.request, false),
            RequestChange::Store(sealed) => {
                if !new {
                    self.requests.remove(id)?;
                }
                (Some(sealed.as_slice()), true)
            }
            RequestChange::Erase => match kept.request {
                Some(_) => (None, true),
                None => (None, self.requests.remove(id)?.is_some()),
            },
        };
        let encoded_response = response.map(codec::encode_response);
        if encoded_response.is_some() && !new {
            self.responses.remove(id)?;
        }
        let encoded;
        let record = match record {
            Some(op) => {
                encoded = codec::encode_op(op)?;
                self.written.push(id.to_owned());
                &encoded[..]
            }
            None if stored.is_some() => kept.record,
            None => return Err(Fault::new(format!("no operation {id} to write to"))),
        };
        let history = match events.is_empty() {
            true => kept.history.to_vec(),
            false => codec::append_history(kept.history, events)?,
        };
        let row = codec::encode_row(&codec::Row {
            record,
            request,
            response: encoded_response.as_deref().or(kept.response),
            history: &history,
        });
        self.ops.insert(id, row.as_slice())?;
        Ok(request_changed)
    }

    /// Moves `new`'s index entries and counters from where `old` had them.
    fn reindex(&mut self, old: Option<&Operation>, new: &Operation) -> Result<(), Fault> {
        let new_keys = prefixes(new);
        let old_keys = old.map(|o| (prefixes(o), o.created_at.0));
        for (slot, prefix) in new_keys.iter().enumerate() {
            if let Some((keys, created)) = &old_keys {
                if keys[slot] == *prefix && *created == new.created_at.0 {
                    continue;
                }
                self.unindex(&keys[slot], *created, &new.id)?;
            }
            self.index
                .insert((prefix.as_str(), new.created_at.0, new.id.as_str()), ())?;
            self.bump(prefix, 1);
        }
        Ok(())
    }

    fn unindex(&mut self, prefix: &str, created: i64, id: &str) -> Result<(), Fault> {
        if self.index.remove((prefix, created, id))?.is_some() {
            self.bump(prefix, -1);
        }
        Ok(())
    }

    /// Adds `delta` to a prefix's counter when the tables close; a counter that reaches zero
    /// is removed then.
    fn bump(&mut self, prefix: &str, delta: i64) {
        match self.deltas.iter_mut().find(|(p, _)| p == prefix) {
            Some((_, sum)) => *sum += delta,
            None => self.deltas.push((prefix.to_owned(), delta)),
        }
    }

    /// The replay counts (see `replays`).
    pub(in crate::ledger) fn replays(&mut self) -> &mut ReplayTable<'t> {
        &mut self.replays
    }

    pub(in crate::ledger) fn append_events(
        &mut self,
        id: &str,
        events: &[Event],
    ) -> Result<(), Fault> {
        self.put_row(id, false, RowChange::events(events)).map(drop)
    }

    /// Removes an operation with its events, response, replay counts, index entries and counts.
    fn delete_op(&mut self, op: &Operation) -> Result<(), Fault> {
        let id = op.id.as_str();
        self.ops.remove(id)?;
        self.written.push(op.id.clone());
        self.responses.remove(id)?;
        self.requests.remove(id)?;
        self.replays.remove(id)?;
        let mut seqs = Vec::new();
        for entry in self.events.range((id, 0)..=(id, u32::MAX))? {
            seqs.push(entry?.0.value().1);
        }
        for seq in seqs {
            self.events.remove((id, seq))?;
        }
        for prefix in prefixes(op) {
            self.unindex(&prefix, op.created_at.0, id)?;
        }
        // The entry an older build kept under the prefix of every operation, if any.
        self.unindex(ALL, op.created_at.0, id)?;
        Ok(())
    }

    /// Turns every `in_flight` operation into `unknown`, found through the by-state index;
    /// returns them as they now are.
    pub(in crate::ledger) fn orphan_in_flight(
        &mut self,
        now: Timestamp,
    ) -> Result<Vec<Operation>, Fault> {
        let prefix = state_prefix(State::InFlight);
        let ids = scan_ids(&self.index, &prefix, usize::MAX)?;
        let mut orphaned = Vec::with_capacity(ids.len());
        for (_, id) in &ids {
            let Some(old) = self.get_op(id)? else {
                return Err(Fault::new(format!("index names a missing operation {id}")));
            };
            let settled = change::orphaned(&old, now, orphan_reason());
            orphaned.push(self.put_settled(&old, settled)?);
        }
        Ok(orphaned)
    }

    /// Settles `id` if it is still `in_flight` under `fence` (a claim nobody will finish;
    /// `change::abandoned`); returns it as it now is, or `None` when something else happened
    /// since.
    pub(in crate::ledger) fn orphan_claim(
        &mut self,
        id: &str,
        fence: u64,
        left: Left,
        now: Timestamp,
    ) -> Result<Option<Operation>, Fault> {
        match self.get_op(id)? {
            Some(old) if old.state == State::InFlight && old.fence == fence => {
                let settled = change::abandoned(&old, left, now);
                self.put_settled(&old, settled).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Stores `op`, which one of `change`'s rules made of `old`, with its one `event`.
    fn put_settled(
        &mut self,
        old: &Operation,
        (op, event): (Operation, Event),
    ) -> Result<Operation, Fault> {
        let change = RowChange {
            record: Some(&op),
            ..RowChange::events(std::slice::from_ref(&event))
        };
        self.put_row(&op.id, false, change)?;
        self.reindex(Some(old), &op)?;
        Ok(op)
    }

    /// Deletes up to `batch.max` operations in `batch.state` last updated before
    /// `batch.older_than`, scanning the by-state index upward from `batch.after`; a succeeded
    /// or rejected one leaves its tombstone, in the same transaction.
    pub(in crate::ledger) fn prune_batch(&mut self, batch: &PruneBatch) -> Result<Pruned, Fault> {
        let prefix = state_prefix(batch.state);
        let start = match &batch.after {
            Some((created, id)) => Bound::Excluded((prefix.as_str(), *created, id.as_str())),
            None => Bound::Included((prefix.as_str(), i64::MIN, "")),
        };
        let older_than = batch.older_than;
        // updated_at >= created_at, so nothing created at or after the cut-off can qualify.
        let end = Bound::Excluded((prefix.as_str(), older_than.0, ""));
        let mut doomed = Vec::new();
        let mut resume = None;
        for entry in self.index.range((start, end))? {
            if doomed.len() == batch.max {
                break;
            }
            let (key, _) = entry?;
            let (_, created, id) = key.value();
            let op = read_op(&self.ops, id)?;
            if let Some(op) = op.filter(|op| op.updated_at < older_than) {
                doomed.push(op);
            }
            resume = Some((created, id.to_owned()));
        }
        for op in &doomed {
            self.delete_op(op)?;
            if leaves_tombstone(op) {
                self.tombs.put(op, batch.now)?;
            }
        }
        let full = doomed.len() == batch.max;
        Ok(Pruned {
            deleted: doomed.len(),
            resume: if full { resume } else { None },
        })
    }
}

/// The first `max` `(created_at, id)` entries of `prefix`, oldest first.
pub(in crate::ledger) fn scan_ids(
    index: &impl ReadableTable<(&'static str, i64, &'static str), ()>,
    prefix: &str,
    max: usize,
) -> Result<Vec<Position>, Fault> {
    let stop = prefix_end(prefix);
    let range = (prefix, i64::MIN, "")..(stop.as_str(), i64::MIN, "");
    let mut out = Vec::new();
    for entry in index.range(range)?.take(max) {
        let (key, _) = entry?;
        let (_, created, id) = key.value();
        out.push((created, id.to_owned()));
    }
    Ok(out)
}

pub(in crate::ledger) fn read_op(
    ops: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &str,
) -> Result<Option<Operation>, Fault> {
    match ops.get(id)? {
        Some(bytes) => codec::decode_op(bytes.value()).map(Some),
        None => Ok(None),
    }
}
