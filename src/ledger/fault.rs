//! A storage failure, as words: what every backend's storage errors become inside `ledger`
//! (each backend converts its own library's errors), and never outside it.

use super::LedgerError;

/// A storage failure, as words. It never leaves `ledger`: it becomes `LedgerError::Unavailable`.
#[derive(Debug)]
pub(super) struct Fault(String);

impl Fault {
    pub(super) fn new(reason: String) -> Fault {
        Fault(reason)
    }
}

impl From<Fault> for LedgerError {
    fn from(fault: Fault) -> LedgerError {
        LedgerError::Unavailable(fault.0)
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
