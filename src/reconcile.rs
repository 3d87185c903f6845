//! Reconciliation (SPEC 2 `[route.reconcile]`, 5b): asking the provider whether an effect happened.
//!
//! (stub: being written; until then an unknown operation stays unknown.)

use crate::app::App;
use crate::ledger::StoredResponse;
use crate::policy::{Captures, Provider, Route};

/// What a lookup proved.
pub enum Verdict {
    /// The effect exists; its body is now the stored response.
    Found(StoredResponse),
    /// Proven absent: the operation was claimed again for this attempt.
    Resend { fence: u64, attempt: u32 },
    /// Nothing proven.
    Unknown,
}

pub async fn run(
    _app: &App,
    _provider: &Provider,
    _route: &Route,
    _captures: &Captures,
    _id: &str,
    _key: &str,
) -> Verdict {
    Verdict::Unknown
}
