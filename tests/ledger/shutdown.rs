//! Graceful shutdown: on SIGTERM the proxy stops accepting at once, lets the request in
//! flight finish, and exits 0.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Method, StatusCode};
use tokio::net::TcpStream;

use crate::common::{self, Behavior, FakeProvider, Proxy, send, send_with};

/// Waits until `addr` refuses connections (the listener is closed); fails after 10 s.
/// There is no signal for "listener closed" but the refused connect itself, hence polling.
async fn wait_refused(addr: SocketAddr) {
    let refused = async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), refused)
        .await
        .unwrap_or_else(|_| panic!("{addr} still accepts connections after SIGTERM"));
}

#[tokio::test]
async fn sigterm_lets_the_request_in_flight_finish_and_refuses_new_connections() {
    // The provider holds the request until released: it is in flight for as long as the
    // test needs, with no timing involved.
    let provider = FakeProvider::start(Behavior::fixed(200, "finished").hold()).await;
    let mut proxy = Proxy::builder()
        .policy("slow", &provider.policy("slow", ""))
        .start()
        .await;
    let (listen, admin) = (proxy.proxy_addr(), proxy.admin_addr());
    let url = proxy.url("/slow/v1/work");
    let in_flight = tokio::spawn(async move { send(Method::POST, &url, &[], "x").await });
    provider.wait_for_requests(1).await;

    let drain = async {
        wait_refused(listen).await;
        wait_refused(admin).await;
        assert!(
            !in_flight.is_finished(),
            "the held request cannot have finished yet"
        );
        provider.release();
        in_flight
            .await
            .expect("task")
            .expect("the in-flight request is answered")
    };
    let (status, resp) = tokio::join!(proxy.terminate(), drain);
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(resp.text(), "finished");
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn sigterm_on_an_idle_proxy_exits_0() {
    let policy = common::policy("idle", "https://api.example.com", "");
    let mut proxy = Proxy::builder().policy("idle", &policy).start().await;
    let status = proxy.terminate().await;
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn idle_keep_alive_connections_do_not_hold_up_the_exit() {
    let provider = FakeProvider::start(Behavior::fixed(200, "ok")).await;
    // A grace longer than the harness's 20 s exit wait: only a prompt close can pass.
    let mut proxy = Proxy::builder()
        .config("[limits]\nshutdown_grace = \"60s\"\n")
        .policy("p", &provider.policy("p", ""))
        .start()
        .await;
    let (h1, h2) = (common::client(), common::h2c_client());
    for client in [&h1, &h2] {
        let body = common::client::full("");
        let resp = send_with(client, Method::GET, &proxy.url("/p/x"), &[], body)
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK);
    }
    // Both clients keep their connection open and idle in their pools.
    let status = proxy.terminate().await;
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn a_request_still_running_after_shutdown_grace_does_not_keep_the_proxy_alive() {
    let provider = FakeProvider::start(Behavior::fixed(200, "never").hold()).await;
    let mut proxy = Proxy::builder()
        .config("[limits]\nshutdown_grace = \"200ms\"\n")
        .policy("stuck", &provider.policy("stuck", ""))
        .start()
        .await;
    let url = proxy.url("/stuck/v1/work");
    let stuck = tokio::spawn(async move { send(Method::POST, &url, &[], "x").await });
    provider.wait_for_requests(1).await;
    // The provider never answers; the exit comes from the grace running out.
    let status = proxy.terminate().await;
    assert!(status.success(), "exit status {status:?}");
    let answer = stuck.await.expect("task");
    assert!(
        answer.is_err(),
        "the agent's connection is closed: {answer:?}"
    );
}
