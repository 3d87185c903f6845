//! Sends N fresh guarded requests through a running proxy, a few at a time, and waits for
//! every answer: `bench/bytes.sh` fills a fresh ledger with N completed operations with it.
//!
//!   cargo run --release --example fill -- URL N [CONCURRENT] [PREFIX]
//!
//! Each request is `POST URL` with `x-operation-id: PREFIX-i` (i from 1 to N, PREFIX `fill`
//! unless given) and the body of `bench/fresh.lua`, on keep-alive connections. Exits non-zero
//! if any answer is not a 2xx.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(url), Some(n)) = (args.first(), args.get(1)) else {
        eprintln!("usage: fill URL N [CONCURRENT] [PREFIX]");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("N: a number");
    let concurrent: usize = args.get(2).map_or(64, |c| c.parse().expect("CONCURRENT"));
    let prefix = args.get(3).cloned().unwrap_or_else(|| "fill".to_owned());
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let next = Arc::new(AtomicUsize::new(1));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for _ in 0..concurrent {
        let (client, next, failed) = (client.clone(), next.clone(), failed.clone());
        let (url, prefix) = (url.clone(), prefix.clone());
        senders.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i > n {
                    return;
                }
                let request = http::Request::post(url.as_str())
                    .header("x-operation-id", format!("{prefix}-{i}"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(
                        br#"{"amount":100,"currency":"usd"}"#,
                    )))
                    .expect("a request");
                let ok = match client.request(request).await {
                    Ok(answer) => {
                        let ok = answer.status().is_success();
                        ok && answer.into_body().collect().await.is_ok()
                    }
                    Err(_) => false,
                };
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for sender in senders {
        sender.await.expect("a sender");
    }
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        eprintln!("fill: {failed} of {n} requests failed");
        std::process::exit(1);
    }
}
