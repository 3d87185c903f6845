//! An agent that gives up (SPEC 5 step 4): the exchange with the provider and the recording
//! of its answer run to the end after the agent's connection closes, so the agent's timeout
//! never turns a known outcome into an unknown one.

mod common;
mod guarded;

use std::time::Duration;

use common::client::full;
use common::{Behavior, FakeProvider, Proxy};
use guarded::*;
use http::StatusCode;
use idemproxy::ledger::State;

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
