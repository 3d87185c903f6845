//! Requests under a mount that match no route follow the provider's `unmatched` setting;
//! a `read_only` route is forwarded unguarded.

use http::{Method, StatusCode};

use crate::common::{Behavior, FakeProvider, Proxy, problem, route, send};

/// A guarded refund route and a read-only balance route, then `extra_provider` keys.
fn routes() -> String {
    let refund = route(
        "create_refund",
        "POST /v1/refunds",
        &["{header:x-operation-id}"],
    );
    format!(
        "{refund}\n[[route]]\nname = \"balance\"\nmatch = \"GET /v1/balance/{{account}}\"\n\
         effect = \"read_only\"\n"
    )
}

async fn start(unmatched: &str) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "from provider")).await;
    let extra = format!("unmatched = \"{unmatched}\"\n{}", routes());
    let proxy = Proxy::builder()
        .policy("acme", &provider.policy("acme", &extra))
        .start()
        .await;
    (provider, proxy)
}

#[tokio::test]
async fn unmatched_reject_answers_403_route_not_allowed_and_sends_nothing() {
    let (provider, proxy) = start("reject").await;
    // Another path, and the refund path with another method: neither matches a route.
    for (method, path) in [
        (Method::GET, "/acme/v1/charges"),
        (Method::GET, "/acme/v1/refunds"),
    ] {
        let resp = send(method, &proxy.url(path), &[], "")
            .await
            .expect("answer");
        let body = problem(&resp, StatusCode::FORBIDDEN, "route-not-allowed");
        assert_eq!(body["provider"], "acme", "{path}");
    }
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn a_read_only_route_is_forwarded_even_when_unmatched_is_reject() {
    let (provider, proxy) = start("reject").await;
    let resp = send(
        Method::GET,
        &proxy.url("/acme/v1/balance/acct_1?x=1"),
        &[],
        "",
    )
    .await
    .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.text(), "from provider");
    assert_eq!(resp.header("idem-state"), None, "read_only is unguarded");
    assert_eq!(
        provider.requests()[0].path_and_query,
        "/v1/balance/acct_1?x=1"
    );
}

#[tokio::test]
async fn unmatched_pass_forwards_unguarded() {
    let (provider, proxy) = start("pass").await;
    let resp = send(
        Method::POST,
        &proxy.url("/acme/v1/charges"),
        &[],
        "amount=5",
    )
    .await
    .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.text(), "from provider");
    assert_eq!(resp.header("idem-state"), None);
    let got = &provider.requests()[0];
    assert_eq!(
        (got.method.as_str(), got.path_and_query.as_str()),
        ("POST", "/v1/charges")
    );
    assert_eq!(&got.body[..], b"amount=5");
}

// Dot segments under a provider with guarded routes are refused instead
// (tests/forwarding/path_spellings.rs).
#[tokio::test]
async fn other_spellings_of_a_guarded_path_are_guarded_and_sent_normalized() {
    let (provider, proxy) = start("pass").await;
    let spellings = [
        "/acme/v1/refunds/",
        "/acme/v1//refunds",
        "/acme/v1/%72efunds",
    ];
    for (i, path) in spellings.iter().enumerate() {
        let op = format!("op-{i}");
        let resp = send(
            Method::POST,
            &proxy.url(path),
            &[("x-operation-id", op.as_str())],
            "a=1",
        )
        .await
        .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{path}: {}", resp.text());
        assert_eq!(
            resp.header("idem-state"),
            Some("succeeded"),
            "{path} went unguarded"
        );
        let expected = format!("acme/create_refund/{op}");
        assert_eq!(resp.header("idem-operation-id"), Some(expected.as_str()));
    }
    let paths: Vec<String> = provider
        .requests()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(paths, vec!["/v1/refunds"; spellings.len()]);
}

/// A request for exactly the mount goes to exactly the upstream's base path (no slash added),
/// with its query, unguarded or guarded; an upstream without a base path gets `/`.
#[tokio::test]
async fn a_request_for_exactly_the_mount_goes_to_exactly_the_base_path() {
    let mut providers = Vec::new();
    for _ in 0..3 {
        providers.push(FakeProvider::start(Behavior::fixed(200, "from provider")).await);
    }
    let based = |name: &str, provider: &FakeProvider, extra: &str| {
        format!(
            "[provider]\nname = \"{name}\"\nupstream = \"{}/mcp\"\nmount = \"/mcp/{name}\"\n{extra}",
            provider.url()
        )
    };
    let guarded = route("root", "POST /", &["{header:x-operation-id}"]);
    let proxy = Proxy::builder()
        .policy("billing", &based("billing", &providers[0], ""))
        .policy("guarded", &based("guarded", &providers[1], &guarded))
        .policy("bare", &providers[2].policy("bare", ""))
        .start()
        .await;
    let op = [("x-operation-id", "op-1")];
    for (i, method, path, headers, sent) in [
        (0, Method::POST, "/mcp/billing", &[][..], "/mcp"),
        (0, Method::POST, "/mcp/billing?x=1", &[][..], "/mcp?x=1"),
        (0, Method::GET, "/mcp/billing", &[][..], "/mcp"),
        (0, Method::POST, "/mcp/billing/tools", &[][..], "/mcp/tools"),
        (1, Method::POST, "/mcp/guarded?x=1", &op[..], "/mcp?x=1"),
        (2, Method::GET, "/bare", &[][..], "/"),
        (2, Method::GET, "/bare?x=1", &[][..], "/?x=1"),
    ] {
        let provider = &providers[i];
        let before = provider.request_count();
        let resp = send(method, &proxy.url(path), headers, "{}")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{path}: {}", resp.text());
        assert_eq!(provider.request_count(), before + 1, "{path}");
        assert_eq!(provider.requests()[before].path_and_query, sent, "{path}");
    }
}
