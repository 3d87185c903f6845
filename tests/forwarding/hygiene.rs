//! HTTP hygiene of forwarded requests (issue 7 item 15): `Expect` is never forwarded (the
//! proxy answers `100 Continue` itself), guarded requests ask the provider for an identity
//! encoding (their answer is stored and replayed to agents that never asked for gzip),
//! every forwarded request carries this proxy's `Via`, and a request that already carries
//! it is a loop: refused with 508, nothing sent.

use http::{Method, StatusCode};

use crate::common::guarded::{self, FORM, OP_HEADER, PATH, refund_with};
use crate::common::{Behavior, FakeProvider, Proxy, problem, send};

/// `pay` with the guarded `create_refund` route and unguarded everything else.
async fn start() -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "from provider")).await;
    let proxy = guarded::start(&provider, "").await;
    (provider, proxy)
}

const AGENT: [(&str, &str); 2] = [("expect", "100-continue"), ("accept-encoding", "gzip, br")];

#[tokio::test]
async fn a_guarded_request_loses_expect_and_asks_for_identity() {
    let (provider, proxy) = start().await;
    let headers = [AGENT[0], AGENT[1], (OP_HEADER, "op-1"), FORM];
    let resp = refund_with(&proxy, &headers, "a=1").await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.header("idem-state"), Some("succeeded"));
    let got = &provider.requests()[0];
    assert_eq!(got.header("expect"), None);
    assert_eq!(got.header("accept-encoding"), Some("identity"));
    let via = got.header("via").expect("a Via header");
    assert!(via.starts_with("1.1 idemproxy-"), "{via}");
}

#[tokio::test]
async fn an_unguarded_request_loses_expect_and_keeps_its_accept_encoding() {
    let (provider, proxy) = start().await;
    let resp = send(Method::POST, &proxy.url("/pay/v1/charges"), &AGENT, "a=1")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let got = &provider.requests()[0];
    assert_eq!(got.header("expect"), None);
    assert_eq!(got.header("accept-encoding"), Some("gzip, br"));
    assert!(
        got.header("via").is_some(),
        "unguarded requests carry Via too"
    );
}

#[tokio::test]
async fn another_proxys_via_is_kept_and_ours_appended() {
    let (provider, proxy) = start().await;
    let resp = send(
        Method::GET,
        &proxy.url("/pay/v1/charges"),
        &[("via", "1.0 fred, 1.1 p.example.net")],
        "",
    )
    .await
    .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let via = provider.requests()[0]
        .header("via")
        .unwrap_or("")
        .to_string();
    let (theirs, ours) = via.rsplit_once(", ").expect("two entries");
    assert_eq!(theirs, "1.0 fred, 1.1 p.example.net");
    assert!(ours.starts_with("1.1 idemproxy-"), "{via}");
}

#[tokio::test]
async fn a_request_that_already_passed_this_proxy_is_a_loop_508_and_nothing_is_sent() {
    let (provider, proxy) = start().await;
    send(Method::GET, &proxy.url("/pay/v1/charges"), &[], "")
        .await
        .expect("answer");
    let ours = provider.requests()[0]
        .header("via")
        .expect("a Via header")
        .to_string();
    // As the request would arrive again had the provider's upstream led back to the proxy.
    let looped = format!("1.1 agent-gw, {ours}");
    for (method, path) in [(Method::GET, "/pay/v1/charges"), (Method::POST, PATH)] {
        let headers = [("via", looped.as_str()), (OP_HEADER, "op-loop"), FORM];
        let resp = send(method, &proxy.url(path), &headers, "a=1")
            .await
            .expect("answer");
        problem(&resp, StatusCode::LOOP_DETECTED, "loop-detected");
    }
    assert_eq!(
        provider.request_count(),
        1,
        "the looped requests were not sent"
    );
}

/// A `Connection` header naming end-to-end headers drops them from the request before
/// anything reads it, so what is identified is what is sent, and never what this proxy sets:
/// `Accept-Encoding: identity` and `Via` survive `Connection: accept-encoding, via`, and a
/// `Content-Type` it names is neither read nor sent (the body is bytes on both sides). Before
/// 2026-12-03 the proxy's own headers were stripped after it set them, and the body was read
/// as a form and then sent without its `Content-Type`.
#[tokio::test]
async fn connection_drops_the_headers_it_names_before_the_guard_reads_them() {
    let (provider, proxy) = start().await;
    let connection = ("connection", "accept-encoding, via, content-type");
    let headers = [connection, (OP_HEADER, "op-conn"), FORM];
    let resp = refund_with(&proxy, &headers, "amount=1").await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let got = &provider.requests()[0];
    assert_eq!(got.header("accept-encoding"), Some("identity"));
    assert!(
        got.header("via")
            .is_some_and(|v| v.starts_with("1.1 idemproxy-"))
    );
    assert_eq!(
        got.header("content-type"),
        None,
        "named in Connection: not sent"
    );
    assert_eq!(got.header("connection"), None);

    // Identified as sent: the same body with a Content-Type is another intent (bytes then,
    // a form now), not a replay of what went out without one.
    let typed = refund_with(&proxy, &[(OP_HEADER, "op-conn"), FORM], "amount=1").await;
    assert_eq!(typed.status, StatusCode::CONFLICT, "{}", typed.text());
    assert_eq!(provider.request_count(), 1);
}
