//! `connect_to`: a provider's requests go to a fixed `ip:port` instead of the upstream's
//! resolved host, while TLS still verifies the upstream's own name: a certificate valid for
//! it is accepted, one that is not is refused and nothing is sent.

use http::{Method, StatusCode};

use crate::common::files::{policy_with_ca, toml_str};
use crate::common::{self, Behavior, FakeProvider, Proxy, problem, send};

/// A policy for `upstream`, trusting the provider's CA, connecting to the provider itself.
fn redirected(provider: &FakeProvider, upstream: &str) -> String {
    let to = format!("connect_to = {}\n", toml_str(&provider.addr().to_string()));
    policy_with_ca("pay", upstream, Some(&provider.ca_file()), &to)
}

#[tokio::test]
async fn requests_go_to_connect_to_and_tls_verifies_the_upstreams_name() {
    let provider = FakeProvider::start_tls(Behavior::fixed(200, "reached")).await;
    // Port 1 of localhost: nothing listens there, so only connect_to can reach the provider.
    let proxy = Proxy::builder()
        .policy("pay", &redirected(&provider, "https://localhost:1"))
        .start()
        .await;
    let resp = send(Method::GET, &proxy.url("/pay/v1/ping"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.text(), "reached");
    assert_eq!(provider.requests()[0].path_and_query, "/v1/ping");
}

#[tokio::test]
async fn a_certificate_not_for_the_upstreams_name_is_refused() {
    let provider = FakeProvider::start_tls(Behavior::fixed(200, "must not be seen")).await;
    // The certificate is for localhost and 127.0.0.1, not for this name.
    let proxy = Proxy::builder()
        .policy("pay", &redirected(&provider, "https://pay.example.test"))
        .start()
        .await;
    let resp = send(Method::POST, &proxy.url("/pay/v1/pay"), &[], "amount=1")
        .await
        .expect("answer");
    problem(&resp, StatusCode::BAD_GATEWAY, "upstream-unreachable");
    assert_eq!(provider.request_count(), 0, "nothing was sent");
}

#[tokio::test]
async fn check_refuses_a_connect_to_that_is_not_an_ip_and_a_port() {
    for bad in ["localhost:443", "10.0.0.7", "10.0.0.7:http"] {
        let keys = format!("connect_to = {}", toml_str(bad));
        let text = common::policy("pay", "https://pay.example.com", &keys);
        let dir = Proxy::builder().policy("pay", &text).write();
        let config = dir.config_path().to_string_lossy().into_owned();
        let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
        assert!(!status.success(), "{bad} was accepted");
        assert!(
            stderr.contains("policies/pay.toml: provider.connect_to:")
                && stderr.contains("host names are not resolved"),
            "{bad}: {stderr}"
        );
    }
}
