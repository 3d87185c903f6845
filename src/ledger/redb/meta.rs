//! The redb ledger's `meta` and `checks` tables: the boot epoch behind fences, the
//! installation secret's check value, and the mark of an unfinished `ledger copy`.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use crate::ledger::fault::Fault;
use crate::ledger::redb::read::readable;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The installation secret's check value (never the secret), under [`SECRET_CHECK`].
const CHECKS: TableDefinition<&str, &str> = TableDefinition::new("checks");
const SECRET_CHECK: &str = "installation_secret";
/// The `meta` key of the boot epoch, bumped at every open.
const EPOCH: &str = "boot_epoch";

/// Keeps `check` when the ledger has no secret check value yet; whether the one it keeps
/// (now) is `check`.
pub(in crate::ledger) fn keep_secret_check(
    txn: &WriteTransaction,
    check: &str,
) -> Result<bool, Fault> {
    let mut checks = txn.open_table(CHECKS)?;
    let kept = checks.get(SECRET_CHECK)?.map(|v| v.value().to_owned());
    match kept {
        Some(kept) => Ok(kept == check),
        None => {
            checks.insert(SECRET_CHECK, check)?;
            Ok(true)
        }
    }
}

/// Bumps the persisted boot epoch, creating every table on first use; returns the new epoch.
pub(in crate::ledger) fn bump_epoch(txn: &WriteTransaction) -> Result<u64, Fault> {
    let mut meta = txn.open_table(META)?;
    let epoch = meta.get(EPOCH)?.map_or(0, |v| v.value()).saturating_add(1);
    meta.insert(EPOCH, epoch)?;
    Ok(epoch)
}

/// The `meta` key set while `ledger copy` fills this ledger; its last commit removes it.
const COPYING: &str = "copy_unfinished";

/// Whether a `ledger copy` into this ledger began and never finished (it then holds only part
/// of its source, and opening it would forget operations that happened).
pub(in crate::ledger) fn copy_unfinished(txn: &WriteTransaction) -> Result<bool, Fault> {
    Ok(txn.open_table(META)?.get(COPYING)?.is_some())
}

/// `copy_unfinished` on a read snapshot.
pub(in crate::ledger) fn copy_unfinished_in(txn: &ReadTransaction) -> Result<bool, Fault> {
    match readable(txn, META)? {
        Some(meta) => Ok(meta.get(COPYING)?.is_some()),
        None => Ok(false),
    }
}

/// Marks this ledger as being filled by `ledger copy` (`true`), or as complete (`false`).
pub(in crate::ledger) fn mark_copying(txn: &WriteTransaction, copying: bool) -> Result<(), Fault> {
    let mut meta = txn.open_table(META)?;
    if copying {
        meta.insert(COPYING, 1)?;
    } else {
        meta.remove(COPYING)?;
    }
    Ok(())
}

/// Sets what a copied ledger inherits from its source: the secret's check value (`None`:
/// none, so the first open keeps its own) and a boot epoch at least `epoch`, so no fence of
/// a copied claim is ever issued again.
pub(in crate::ledger) fn inherit(
    txn: &WriteTransaction,
    secret_check: Option<&str>,
    epoch: u64,
) -> Result<(), Fault> {
    let mut checks = txn.open_table(CHECKS)?;
    match secret_check {
        Some(check) => checks.insert(SECRET_CHECK, check)?,
        None => checks.remove(SECRET_CHECK)?,
    };
    let mut meta = txn.open_table(META)?;
    let kept = meta.get(EPOCH)?.map_or(0, |v| v.value());
    meta.insert(EPOCH, kept.max(epoch))?;
    Ok(())
}

/// The secret's check value a ledger keeps and its boot epoch, on a read snapshot (`None`
/// and 0 for a ledger never opened with a secret, or never opened).
pub(in crate::ledger) fn heritage(txn: &ReadTransaction) -> Result<(Option<String>, u64), Fault> {
    let check = match readable(txn, CHECKS)? {
        Some(table) => table.get(SECRET_CHECK)?.map(|v| v.value().to_owned()),
        None => None,
    };
    let epoch = match readable(txn, META)? {
        Some(table) => table.get(EPOCH)?.map_or(0, |v| v.value()),
        None => 0,
    };
    Ok((check, epoch))
}
