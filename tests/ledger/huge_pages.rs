//! `serve` runs with transparent huge pages off, so a burst of writes does not leave the
//! allocator's 2 MiB pages resident (peak RSS under 256 concurrent fresh operations on a
//! 1,000,000-operation ledger: 61-64 MiB instead of 76.6); `MIMALLOC_ALLOW_THP` set hands
//! the choice back to the allocator. Linux only: the kernel shows the flag in
//! `/proc/PID/status` as `THP_enabled`.
#![cfg(target_os = "linux")]

use crate::common::{Proxy, policy};

/// The `THP_enabled` line of a running process's status.
fn thp_enabled(proxy: &Proxy) -> String {
    let pid = proxy.pid().expect("the proxy is running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_owned())
        .expect("this kernel shows THP_enabled")
}

#[tokio::test]
async fn serve_runs_without_huge_pages_unless_the_allocator_is_told_otherwise() {
    let plain = Proxy::builder()
        .policy("p", &policy("p", "https://api.example.com", ""))
        .start()
        .await;
    assert_eq!(thp_enabled(&plain), "0", "huge pages are off by default");

    let asked = Proxy::builder()
        .env("MIMALLOC_ALLOW_THP", "1")
        .policy("p", &policy("p", "https://api.example.com", ""))
        .start()
        .await;
    assert_eq!(
        thp_enabled(&asked),
        "1",
        "MIMALLOC_ALLOW_THP=1 leaves them to the allocator"
    );
}
