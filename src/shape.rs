//! The proxy's own problem answers, shaped for the provider's SDK where they leave the proxy.
//!
//! A policy may answer the "not yet" problems (`outcome-unknown`, `in-flight`,
//! `awaiting-approval`) with its `pending_status` instead of 202, since official SDKs take
//! every 2xx for the object they asked for. This module owns that change, applied once, in
//! `proxy`, to every problem answer of a provider (found by the [`Own`] mark `problem` leaves
//! in its extensions). It never touches a provider's answer or a replay (they carry no mark),
//! and the body's `status` always matches the answer's.

use http::{Response, StatusCode};
use serde_json::Value;

use crate::policy::Provider;
use crate::problem::Own;
use crate::wire::{ProxyBody, full};

/// Shapes `resp` for `provider` if it is one of the proxy's own problem answers.
pub fn apply(provider: &Provider, resp: &mut Response<ProxyBody>) {
    let Some(mut own) = resp.extensions_mut().remove::<Own>() else {
        return;
    };
    if !own.pending || provider.pending_status == 202 {
        return;
    }
    let Ok(status) = StatusCode::from_u16(provider.pending_status) else {
        return;
    };
    *resp.status_mut() = status;
    own.body
        .insert("status".into(), Value::from(status.as_u16()));
    *resp.body_mut() = full(Value::Object(own.body).to_string());
}
