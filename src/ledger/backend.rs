//! What a backend of the ledger offers: the domain API of `Ledger`, implemented once per store
//! (`Redb`, `Postgres`). `Ledger` dispatches each call to its backend through this trait, so a
//! method one backend has and the other lacks does not compile. `Ledger`'s methods carry the
//! contract of each call; a backend's carry only what is its own.

use std::sync::Arc;

use super::Replayable;
use super::feed::Published;
use super::{Fences, Filter, LedgerError, Page, Stats};
use super::{ReplayNote, Replays};
use crate::clock::Timestamp;
use crate::operation::{Event, Operation, StoredResponse, Write};

/// The storage one `Ledger` runs on. Only `ledger` names it.
pub(super) trait Backend {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Published>;
    fn fence(&self) -> u64;
    fn fences(&self) -> Fences;
    async fn update<T, F>(&self, id: &str, f: F) -> Result<T, LedgerError>
    where
        F: FnOnce(Option<Operation>) -> (Option<Write>, T) + Send + 'static,
        T: Send + 'static;
    fn writable(&self) -> bool;
    /// The epoch of this process's hold on the ledger (`Ledger::permit`); a ledger no other
    /// process can act on has one that never moves.
    fn lease_epoch(&self) -> u64 {
        0
    }
    /// `Ledger::may_send`; a ledger no other process can act on always lets it send.
    fn may_send(&self, _epoch: u64) -> Result<(), &'static str> {
        Ok(())
    }
    fn abandon(&self, id: &str, fence: u64);
    /// `Ledger::release`; a ledger held by a lock that goes with the process has nothing to end.
    async fn release(&self) {}
    async fn get(&self, id: &str) -> Result<Option<Operation>, LedgerError>;
    async fn replayable(&self, id: &str) -> Result<Option<Arc<Replayable>>, LedgerError>;
    async fn events(&self, id: &str) -> Result<Vec<Event>, LedgerError>;
    async fn kept_request(&self, id: &str) -> Result<Option<Vec<u8>>, LedgerError>;
    async fn response(&self, id: &str) -> Result<Option<StoredResponse>, LedgerError>;
    async fn list(
        &self,
        filter: &Filter,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Page, LedgerError>;
    async fn tombstone(&self, id: &str) -> Result<Option<Operation>, LedgerError>;
    async fn prune(
        &self,
        older_than: Timestamp,
        now: Timestamp,
        max: usize,
    ) -> Result<usize, LedgerError>;
    async fn prune_tombstones(
        &self,
        older_than: Timestamp,
        max: usize,
    ) -> Result<usize, LedgerError>;
    async fn note_replays(&self, notes: Vec<ReplayNote>) -> Result<usize, LedgerError>;
    async fn replays(&self, id: &str) -> Result<Option<Replays>, LedgerError>;
    async fn stats(&self) -> Result<Stats, LedgerError>;
}
