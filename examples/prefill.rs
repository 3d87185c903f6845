//! Pre-fills a ledger with N succeeded operations (each with its four events and a stored
//! response) through the crate's `Ledger` API, for the benchmark's big-ledger scenario.
//!
//!   cargo run --release --example prefill -- PATH [N]      (N defaults to 1,000,000)
//!
//! Keeps many updates in flight at once so the writer's group commit takes them in large
//! batches. The operations belong to provider `bench`, route `refund`, IDs `bench/refund/fill-<i>`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::{HeaderMap, HeaderName};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};
use idemproxy::operation::{
    Approval, Event, EventKind, Operation, RequestChange, State, StoredResponse, Write,
};
use idemproxy::policy::{Effect, KeyPlacement};

/// Updates kept in flight: enough to fill every batch the writer gathers.
const IN_FLIGHT: usize = 4096;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: prefill PATH [N]");
        std::process::exit(2);
    };
    let n: usize = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("N: a number"));
    let started = Instant::now();
    let (ledger, _) = Ledger::open(&path, Timestamp::now(), LedgerOptions::default())
        .await
        .expect("open the ledger");
    let mut pending = FuturesUnordered::new();
    for i in 0..n {
        if pending.len() >= IN_FLIGHT {
            pending.next().await.expect("a pending update");
        }
        pending.push(write_one(ledger.clone(), i));
    }
    while pending.next().await.is_some() {}
    drop(ledger);
    eprintln!(
        "prefill: {n} operations into {} in {:.1?}",
        path.display(),
        started.elapsed()
    );
}

/// Writes operation `i` as a succeeded refund with its history and response.
async fn write_one(ledger: Ledger, i: usize) {
    let id = format!("bench/refund/fill-{i}");
    let now = Timestamp::now();
    let response = StoredResponse {
        status: 200,
        headers: HeaderMap::new(),
        body: Bytes::from(format!(
            r#"{{"id":"re_{i}","object":"refund","amount":100}}"#
        )),
    };
    let op = operation(&id, now, &response);
    let events = [
        EventKind::Claimed,
        EventKind::ProviderRequested,
        EventKind::ProviderResponded,
        EventKind::ResultPersisted,
    ]
    .map(|kind| Event {
        at: now,
        kind,
        attempt: 1,
        detail: String::new(),
    })
    .to_vec();
    let write = Write {
        op,
        events,
        response: Some(response),
        request: RequestChange::Erase,
    };
    ledger
        .update(&id, move |_| (Some(write), ()))
        .await
        .expect("write an operation");
}

fn operation(id: &str, now: Timestamp, response: &StoredResponse) -> Operation {
    Operation {
        id: id.to_owned(),
        provider: "bench".to_owned(),
        route: "refund".to_owned(),
        effect: Effect::Irreversible,
        state: State::Succeeded,
        fingerprint: hex_of(id),
        fields: BTreeMap::from([("/amount".to_owned(), "5d41402a".to_owned())]),
        idempotency_key: hex_of(id),
        key_placement: Some(KeyPlacement::Header(HeaderName::from_static(
            "idempotency-key",
        ))),
        attempts: 1,
        created_at: now,
        updated_at: now,
        first_dispatched_at: Some(now),
        last_dispatched_at: Some(now),
        maybe_effect_at: None,
        provider_request_id: Some(format!("req_{id}")),
        response: Some(response.meta()),
        error: None,
        fence: 0,
        approval: Approval::NotRequired,
        pruned_at: None,
        principal: None,
    }
}

/// A 64-hex-digit stand-in for a sha256, distinct per operation.
fn hex_of(id: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(id.as_bytes()))
}
