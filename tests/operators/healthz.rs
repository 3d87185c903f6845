//! The admin listener answers `GET /healthz` with 200 once the proxy is up, so scripts and
//! tests know when to start; it needs no token even when one is set.

use http::{Method, StatusCode};

use crate::common::{Proxy, policy, send};

#[tokio::test]
async fn healthz_answers_200_on_the_admin_listener_without_a_token() {
    let proxy = Proxy::builder()
        .env("IDEMPROXY_ADMIN_TOKEN", "admin-secret")
        .policy("p", &policy("p", "https://api.example.com", ""))
        .start()
        .await;
    let resp = send(Method::GET, &proxy.admin_url("/healthz"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK);
    // The agents' listener does not serve it: /healthz there is a path under no mount.
    let resp = send(Method::GET, &proxy.url("/healthz"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::NOT_FOUND);
}
