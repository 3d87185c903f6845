//! Upstream TLS trust: a provider's `ca_file` is trusted besides the bundled web roots, and
//! a certificate nobody vouches for is refused (verification is never switched off), with a
//! 502 `upstream-unreachable` answer because nothing was sent.

use http::{Method, StatusCode, Version};

use crate::common::files::policy;
use crate::common::{Behavior, FakeProvider, Proxy, problem, send};

#[tokio::test]
async fn a_provider_signed_by_its_ca_file_is_reached_over_h2() {
    let provider = FakeProvider::start_tls(Behavior::fixed(200, "secure")).await;
    let proxy = Proxy::builder()
        .policy("safe", &provider.policy("safe", ""))
        .start()
        .await;
    let resp = send(Method::GET, &proxy.url("/safe/v1/ping"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.text(), "secure");
    assert_eq!(provider.requests()[0].version, Version::HTTP_2);
}

#[tokio::test]
async fn an_untrusted_certificate_is_502_upstream_unreachable() {
    let provider = FakeProvider::start_tls(Behavior::fixed(200, "must not be seen")).await;
    // The same provider, but its policy names no ca_file: only the web roots are trusted.
    let proxy = Proxy::builder()
        .policy("unsafe", &policy("unsafe", &provider.url(), ""))
        .start()
        .await;
    let resp = send(Method::POST, &proxy.url("/unsafe/v1/pay"), &[], "amount=1")
        .await
        .expect("answer");
    let body = problem(&resp, StatusCode::BAD_GATEWAY, "upstream-unreachable");
    assert_eq!(body["provider"], "unsafe");
    assert_eq!(
        provider.request_count(),
        0,
        "no request may cross an untrusted TLS session"
    );
}
