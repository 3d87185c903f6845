//! The last check before a guarded attempt's first byte: `Gate`.
//!
//! A claim is committed before its request leaves, but connecting (and TLS) can take up to the
//! provider's `timeout` after it, and the process can be paused in between. Whoever claimed
//! may by then have lost the right to send (a replica whose lease lapsed: another replica may
//! have orphaned the claim and acted on it), or the attempt may be past its deadline. So a
//! guarded exchange carries a `Gate`, checked once the connection is ready (a pooled one, or a
//! new one after its TLS handshake) and before anything is written on it. This module owns
//! where that check runs; what it checks is the caller's (`dispatch`).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;

use crate::wire::BoxError;

/// Checked right before a guarded request's first byte is written: `Err` says why it must not
/// be sent, and then nothing of it is (the exchange fails as `SendError::Connect`).
pub type Gate = Arc<dyn Fn() -> Result<(), Refusal> + Send + Sync>;

/// Why a gate keeps a guarded request's first byte back.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    /// The attempt's claim plus the provider's timeout passed while it was connecting.
    #[error(
        "the attempt's deadline (its claim plus the provider's timeout, {0:?}) passed before its connection was ready"
    )]
    Deadline(std::time::Duration),
    /// The ledger's word that this replica may no longer send for the claim.
    #[error("{0}")]
    Ledger(&'static str),
}

tokio::task_local! {
    /// The gate of the guarded exchange running on this task, for the connector, which
    /// hyper-util's client calls with nothing but the URI.
    static GATE: Gate;
}

/// The gate's verdict as an exchange's error: a refusal is a connect error (nothing sent).
pub(super) fn check(gate: &Gate) -> Result<(), super::SendError> {
    gate().map_err(|why| super::SendError::Connect(NotSent(why).to_string()))
}

/// Runs `exchange` with `gate` visible to the connections it makes (`Gated`).
pub(super) async fn scoped<F: Future>(gate: Gate, exchange: F) -> F::Output {
    GATE.scope(gate, exchange).await
}

/// Why a gate refused, as the error of a connection that was made but not used.
#[derive(Debug, thiserror::Error)]
#[error("not sent: {0}")]
pub(super) struct NotSent(pub(super) Refusal);

/// A connector that checks the gate of the exchange it connects for (if any) once its
/// connection is ready, after the inner connector's TLS handshake: a refusal is a connect
/// error, so hyper-util writes nothing and reports the exchange as never sent.
#[derive(Clone)]
pub struct Gated<C> {
    pub(super) inner: C,
}

type Connecting<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<C> tower_service::Service<Uri> for Gated<C>
where
    C: tower_service::Service<Uri> + Send,
    C::Response: Send + 'static,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Connecting<C::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // Read now: the client calls its connector on the exchange's own task.
        let gate = GATE.try_with(Arc::clone).ok();
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let conn = connecting.await.map_err(Into::into)?;
            if let Some(gate) = gate {
                gate().map_err(NotSent)?;
            }
            Ok(conn)
        })
    }
}
