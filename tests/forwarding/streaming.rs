//! Unguarded bodies stream both ways: a 1 GiB download and a 256 MiB upload cross the proxy
//! intact while its memory stays flat (peak resident size well under the transfer size).

use http::{Request, StatusCode};

use crate::common::client::full;
use crate::common::{self, Behavior, FakeProvider, Proxy, download, h2c_client, upload};

const GIB: u64 = 1024 * 1024 * 1024;
const MIB: u64 = 1024 * 1024;
/// The proxy's peak resident memory may not reach this, whatever it forwarded.
const MEMORY_BOUND: u64 = 200 * MIB;

/// The process's peak resident set size (`VmHWM`) in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM value");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gigabyte_down_and_256_mib_up_pass_with_flat_memory() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .env("IDEMPROXY_LOG", "info")
        .policy("files", &provider.policy("files", ""))
        .start()
        .await;
    let pid = proxy.pid().expect("running");

    let (status, bytes, intact) = download(&proxy.url(&format!("/files/v1/download/{GIB}"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes, GIB, "every byte of the download arrives");
    assert!(intact, "the download arrives unaltered");

    let resp = upload(&proxy.url("/files/v1/upload"), 256 * MIB).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let answer = resp.json();
    assert_eq!(
        answer["bytes"],
        256 * MIB,
        "every byte of the upload arrives"
    );
    assert_eq!(answer["pattern_ok"], true, "the upload arrives unaltered");
    assert_eq!(provider.uploaded_bytes(), 256 * MIB);

    let peak = peak_rss(pid);
    assert!(peak < MEMORY_BOUND, "proxy peak RSS {} MiB", peak / MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_on_both_legs_streams_with_flat_memory() {
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .env("IDEMPROXY_LOG", "info")
        .policy("files", &provider.policy("files", ""))
        .start()
        .await;
    let len = 256 * MIB;
    let url = proxy.url(&format!("/files/v1/download/{len}"));
    let request = Request::get(url).body(full("")).expect("request");
    let response = h2c_client().request(request).await.expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
    let (bytes, intact) = common::pattern::drain(response.into_body())
        .await
        .expect("body");
    assert_eq!((bytes, intact), (len, true));
    assert_eq!(provider.requests()[0].version, http::Version::HTTP_2);

    let peak = peak_rss(proxy.pid().expect("running"));
    assert!(peak < MEMORY_BOUND, "proxy peak RSS {} MiB", peak / MIB);
}
