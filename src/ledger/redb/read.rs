//! Reading the redb ledger's tables on a read snapshot: a table the file may not have yet
//! (written by an older build), and pages of records in ID order (for `ledger copy`).

use std::ops::Bound;

use redb::{ReadOnlyTable, ReadTransaction, TableDefinition};

use crate::ledger::fault::Fault;

/// `def` on a read snapshot, or `None` when the file has no such table yet (a ledger never
/// opened for writing, or written before the table existed): reads then find nothing.
pub(in crate::ledger) fn readable<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &ReadTransaction,
    def: TableDefinition<K, V>,
) -> Result<Option<ReadOnlyTable<K, V>>, Fault> {
    match txn.open_table(def) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Up to `max` records of `def` whose IDs sort after `after`, in ID order, each decoded by
/// `decode` (for `ledger copy`).
pub(in crate::ledger) fn decoded_after<T>(
    txn: &ReadTransaction,
    def: TableDefinition<&'static str, &'static [u8]>,
    after: Option<&str>,
    max: usize,
    decode: impl Fn(&[u8]) -> Result<T, Fault>,
) -> Result<Vec<T>, Fault> {
    let Some(table) = readable(txn, def)? else {
        return Ok(Vec::new());
    };
    let start = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut out = Vec::new();
    for entry in table.range::<&str>((start, Bound::Unbounded))?.take(max) {
        let (_, bytes) = entry?;
        out.push(decode(bytes.value())?);
    }
    Ok(out)
}
