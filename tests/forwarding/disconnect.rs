//! An agent that gives up (docs/reference.md section 5.3): the exchange with the provider and the recording
//! of its answer run to the end after the agent's connection closes, so the agent's timeout
//! never turns a known outcome into an unknown one.

use std::time::Duration;

use http::StatusCode;
use idemproxy::operation::State;
use tokio::io::AsyncWriteExt;

use crate::common::client::full;
use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider, Proxy};

/// Acceptance 8: the agent's client times out after 1 s, the provider answers after 3 s;
/// the operation ends `succeeded` and a replay gets the answer with no second request.
#[tokio::test]
async fn an_agent_timeout_does_not_cancel_the_exchange_or_its_recording() {
    let slow =
        Behavior::json(201, serde_json::json!({"id": "re_slow"})).delay(Duration::from_secs(3));
    let provider = FakeProvider::start(slow).await;
    let mut proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nin_flight_wait = \"20s\"\n")
        .start()
        .await;
    let id = op_id("wf-gave-up");

    let gave_up = send_and_give_up(&proxy, "wf-gave-up", Duration::from_secs(1)).await;
    assert!(
        gave_up,
        "the provider answers after 3 s, not within the agent's 1 s"
    );
    assert_eq!(provider.request_count(), 1);

    // A replay now waits for the in-flight attempt; it gets the recorded answer.
    let replay = refund(&proxy, "wf-gave-up", "amount=500").await;
    assert_eq!(replay.status, StatusCode::CREATED, "{}", replay.text());
    assert_eq!(replay.json()["id"], "re_slow");
    assert_op_headers(&replay, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 1, "no second request");

    let stored = ledger(&mut proxy, &id).await;
    assert_eq!(stored.op.state, State::Succeeded);
    assert_eq!(stored.op.attempts, 1);
}

/// Agents that hang up right after sending (while the proxy commits their claim) never
/// leave an operation `in_flight` with nothing sent: each operation is sent exactly once,
/// and its replay gets its answer instead of a 202 `in-flight`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_hanging_up_during_the_claim_leave_no_operation_stuck() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nin_flight_wait = \"10s\"\n")
        .start()
        .await;
    let n = 40;
    let hang_ups: Vec<_> = (0..n)
        .map(|i| tokio::spawn(send_and_hang_up(proxy.proxy_addr(), format!("wf-{i}"))))
        .collect();
    for task in hang_ups {
        task.await.expect("hang-up task");
    }

    let replays: Vec<_> = (0..n)
        .map(|i| refund_in_background(&proxy, &format!("wf-{i}"), "amount=5"))
        .collect();
    for (i, task) in replays.into_iter().enumerate() {
        let resp = task.await.expect("task").expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "wf-{i}: {}", resp.text());
        assert_eq!(resp.header("idem-state"), Some("succeeded"), "wf-{i}");
    }
    assert_eq!(
        provider.request_count(),
        n,
        "each operation sent exactly once"
    );
}

/// Writes a whole refund request on a raw connection and closes it at once.
async fn send_and_hang_up(addr: std::net::SocketAddr, rendered: String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body = "amount=5";
    let request = format!(
        "POST {PATH} HTTP/1.1\r\nhost: {addr}\r\n{OP_HEADER}: {rendered}\r\n\
         {}: {}\r\ncontent-length: {}\r\n\r\n{body}",
        FORM.0,
        FORM.1,
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.expect("send");
}

/// Sends the refund on a connection of its own and, if no answer came within `patience`,
/// closes that connection as an agent's client does on its timeout. True if it gave up.
async fn send_and_give_up(proxy: &Proxy, rendered: &str, patience: Duration) -> bool {
    let tcp = tokio::net::TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect to the proxy");
    let io = hyper_util::rt::TokioIo::new(tcp);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("HTTP/1.1 handshake");
    let conn = tokio::spawn(conn);
    let request = http::Request::post(PATH)
        .header("host", proxy.proxy_addr().to_string())
        .header(OP_HEADER, rendered)
        .header(FORM.0, FORM.1)
        .body(full("amount=500"))
        .expect("valid request");
    let answered = tokio::time::timeout(patience, sender.send_request(request)).await;
    // Dropping the connection task closes the socket: the agent is gone.
    conn.abort();
    let _ = conn.await;
    answered.is_err()
}
