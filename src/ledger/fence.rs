//! Fencing tokens: unique across restarts, so an attempt's result is written only while its
//! operation still carries the token of that attempt's claim.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Issues fencing tokens; a cheap `Clone`, so an `update` closure can take a token only when
/// it writes a claim.
#[derive(Clone)]
pub struct Fences {
    inner: Arc<(u64, AtomicU64)>,
}

impl Fences {
    /// A source for a ledger whose boot epoch is `epoch`; its first token is `(epoch << 32) | 1`.
    pub(super) fn from_epoch(epoch: u64) -> Fences {
        Fences {
            inner: Arc::new((epoch, AtomicU64::new(1))),
        }
    }

    /// A source whose first token is `first` (epoch 0), for unit tests.
    #[cfg(test)]
    pub(crate) fn starting_at(first: u64) -> Fences {
        Fences {
            inner: Arc::new((0, AtomicU64::new(first))),
        }
    }

    /// A fresh, non-zero fencing token, unique across restarts: the boot epoch (persisted and
    /// bumped at every open) in the high 32 bits, an in-process counter in the low 32 bits.
    /// Unique for the first 2^32 tokens of a process; only written claims take one.
    pub fn next(&self) -> u64 {
        let (epoch, counter) = &*self.inner;
        let n = counter.fetch_add(1, Ordering::Relaxed);
        (epoch << 32) | (n & 0xFFFF_FFFF)
    }
}
