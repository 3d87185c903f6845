//! Redo records: every change a write transaction makes to the ledger's tables, recorded as it
//! is made, so that the batch can be made durable by appending the records to the write-ahead
//! log (`wal`) instead of by a durable redb commit.
//!
//! A table opened through `Logged` records each `insert` and `remove` (the key and value in
//! redb's own byte encoding) into the transaction's `Redo` buffer before making it. Reads go
//! straight to the table. `apply` makes the same changes again, in order, in another
//! transaction: replaying a batch's records onto the state the batch started from gives the
//! state it committed. This file knows every table of the ledger by a one-byte tag; it never
//! decides what a change means.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::ops::Deref;
use std::rc::Rc;

use redb::{Key, Table, TableDefinition, Value, WriteTransaction};

use super::fault::Fault;
use super::store::{self};
use super::{replays, tombstone};

/// Each table of the ledger, as it is named in a redo record. Never renumbered: the log of a
/// killed proxy is replayed by the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Tag {
    Ops = 1,
    Events = 2,
    Responses = 3,
    Requests = 4,
    Index = 5,
    Counters = 6,
    Tombstones = 7,
    TombstoneAge = 8,
    Replays = 9,
}

impl Tag {
    fn of(byte: u8) -> Option<Tag> {
        Some(match byte {
            1 => Tag::Ops,
            2 => Tag::Events,
            3 => Tag::Responses,
            4 => Tag::Requests,
            5 => Tag::Index,
            6 => Tag::Counters,
            7 => Tag::Tombstones,
            8 => Tag::TombstoneAge,
            9 => Tag::Replays,
            _ => return None,
        })
    }
}

const PUT: u8 = 0;
const DELETE: u8 = 1;

/// The records of one transaction, shared by the tables it opened. `Redo::off()` records
/// nothing: for transactions that commit durably themselves (start-up, `ledger copy`).
#[derive(Clone)]
pub(super) struct Redo(Option<Rc<RefCell<Vec<u8>>>>);

impl Redo {
    /// A buffer that records, after what `buf` already holds (the room for a log frame's
    /// head, see `wal::Wal::scratch`).
    pub(super) fn on(buf: Vec<u8>) -> Redo {
        Redo(Some(Rc::new(RefCell::new(buf))))
    }

    /// A buffer that records nothing.
    pub(super) fn off() -> Redo {
        Redo(None)
    }

    /// The buffer with the records so far (empty when off).
    pub(super) fn take(&self) -> Vec<u8> {
        self.0
            .as_ref()
            .map(|buf| std::mem::take(&mut *buf.borrow_mut()))
            .unwrap_or_default()
    }

    fn record(&self, tag: Tag, key: &[u8], value: Option<&[u8]>) {
        let Some(buf) = &self.0 else { return };
        let mut buf = buf.borrow_mut();
        buf.push(tag as u8);
        buf.push(if value.is_some() { PUT } else { DELETE });
        put_bytes(&mut buf, key);
        if let Some(value) = value {
            put_bytes(&mut buf, value);
        }
    }
}

fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    // redb refuses keys and values of 3 GiB or more, so a length always fits.
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

/// A table of a write transaction whose changes are recorded. Reads deref to the table.
pub(super) struct Logged<'t, K: Key + 'static, V: Value + 'static> {
    table: Table<'t, K, V>,
    tag: Tag,
    redo: Redo,
}

impl<'t, K: Key + 'static, V: Value + 'static> Logged<'t, K, V> {
    pub(super) fn open(
        txn: &'t WriteTransaction,
        def: TableDefinition<K, V>,
        tag: Tag,
        redo: &Redo,
    ) -> Result<Logged<'t, K, V>, Fault> {
        Ok(Logged {
            table: txn.open_table(def)?,
            tag,
            redo: redo.clone(),
        })
    }

    pub(super) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), Fault> {
        let (key, value) = (key.borrow(), value.borrow());
        self.redo.record(
            self.tag,
            K::as_bytes(key).as_ref(),
            Some(V::as_bytes(value).as_ref()),
        );
        self.table.insert(key, value)?;
        Ok(())
    }

    /// Removes `key`; returns whether it was there.
    pub(super) fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool, Fault> {
        let key = key.borrow();
        let removed = self.table.remove(key)?.is_some();
        if removed {
            self.redo.record(self.tag, K::as_bytes(key).as_ref(), None);
        }
        Ok(removed)
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> Deref for Logged<'t, K, V> {
    type Target = Table<'t, K, V>;

    fn deref(&self) -> &Table<'t, K, V> {
        &self.table
    }
}

/// Makes the changes `records` holds, in order, in `txn`; returns how many. Damaged records
/// (which a checksummed log frame never holds) are a fault, and nothing is half-applied
/// that the caller commits: it aborts the transaction on an error.
pub(super) fn apply(txn: &WriteTransaction, mut records: &[u8]) -> Result<usize, Fault> {
    let mut tables = All::open(txn)?;
    let mut count = 0;
    while !records.is_empty() {
        let (tag, key, value, rest) =
            next(records).ok_or_else(|| Fault::new("a damaged redo record".to_owned()))?;
        tables.redo(tag, key, value)?;
        records = rest;
        count += 1;
    }
    Ok(count)
}

type Record<'a> = (Tag, &'a [u8], Option<&'a [u8]>, &'a [u8]);

fn next(records: &[u8]) -> Option<Record<'_>> {
    let (&[tag, kind], rest) = records.split_first_chunk::<2>()?;
    let tag = Tag::of(tag)?;
    let (key, rest) = take_bytes(rest)?;
    match kind {
        PUT => {
            let (value, rest) = take_bytes(rest)?;
            Some((tag, key, Some(value), rest))
        }
        DELETE => Some((tag, key, None, rest)),
        _ => None,
    }
}

fn take_bytes(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = buf.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// Every table a redo record may name, opened once for a replay.
struct All<'t> {
    ops: Table<'t, &'static str, &'static [u8]>,
    events: Table<'t, (&'static str, u32), &'static [u8]>,
    responses: Table<'t, &'static str, &'static [u8]>,
    requests: Table<'t, &'static str, &'static [u8]>,
    index: Table<'t, (&'static str, i64, &'static str), ()>,
    counters: Table<'t, &'static str, u64>,
    tombstones: Table<'t, &'static str, &'static [u8]>,
    age: Table<'t, (i64, &'static str), ()>,
    replays: Table<'t, &'static str, (u64, i64, i64)>,
}

impl<'t> All<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<All<'t>, Fault> {
        Ok(All {
            ops: txn.open_table(store::OPS)?,
            events: txn.open_table(store::EVENTS)?,
            responses: txn.open_table(store::RESPONSES)?,
            requests: txn.open_table(store::REQUESTS)?,
            index: txn.open_table(store::INDEX)?,
            counters: txn.open_table(store::COUNTERS)?,
            tombstones: txn.open_table(tombstone::TOMBSTONES)?,
            age: txn.open_table(tombstone::AGE)?,
            replays: txn.open_table(replays::REPLAYS)?,
        })
    }

    fn redo(&mut self, tag: Tag, key: &[u8], value: Option<&[u8]>) -> Result<(), Fault> {
        match tag {
            Tag::Ops => redo_in(&mut self.ops, key, value),
            Tag::Events => redo_in(&mut self.events, key, value),
            Tag::Responses => redo_in(&mut self.responses, key, value),
            Tag::Requests => redo_in(&mut self.requests, key, value),
            Tag::Index => redo_in(&mut self.index, key, value),
            Tag::Counters => redo_in(&mut self.counters, key, value),
            Tag::Tombstones => redo_in(&mut self.tombstones, key, value),
            Tag::TombstoneAge => redo_in(&mut self.age, key, value),
            Tag::Replays => redo_in(&mut self.replays, key, value),
        }
    }
}

fn redo_in<K: Key + 'static, V: Value + 'static>(
    table: &mut Table<'_, K, V>,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), Fault> {
    let key = K::from_bytes(key);
    match value {
        Some(value) => {
            table.insert(key, V::from_bytes(value))?;
        }
        None => {
            table.remove(key)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let redo = Redo::on(Vec::new());
        redo.record(Tag::Ops, b"op-1", Some(b"{}"));
        redo.record(Tag::Index, b"k", None);
        let bytes = redo.take();
        let (tag, key, value, rest) = next(&bytes).expect("first");
        assert_eq!(
            (tag, key, value),
            (Tag::Ops, &b"op-1"[..], Some(&b"{}"[..]))
        );
        let (tag, key, value, rest) = next(rest).expect("second");
        assert_eq!((tag, key, value), (Tag::Index, &b"k"[..], None));
        assert!(rest.is_empty());
        assert!(redo.take().is_empty(), "taken once");
    }

    #[test]
    fn a_cut_or_unknown_record_is_refused() {
        let redo = Redo::on(Vec::new());
        redo.record(Tag::Responses, b"id", Some(b"body"));
        let bytes = redo.take();
        for cut in 0..bytes.len() {
            assert!(next(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut unknown = bytes.clone();
        unknown[0] = 0xff;
        assert!(next(&unknown).is_none());
    }

    #[test]
    fn off_records_nothing() {
        let redo = Redo::off();
        redo.record(Tag::Ops, b"x", Some(b"y"));
        assert!(redo.take().is_empty());
    }
}
