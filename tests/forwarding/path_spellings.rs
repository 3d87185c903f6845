//! Path spellings (issue 7 item 5): every request leaves in its normalized form and never
//! outside the upstream's base path; under a provider with guarded routes, spellings that
//! servers read differently (encoded `/` or `\`, `;` parameters, control characters, dot
//! segments, another letter case of a guarded route, a spelling that decoded once more or
//! with trailing whitespace trimmed is a guarded path, lowercase methods, method overrides)
//! are refused with 400 before anything is sent.

use http::{Method, StatusCode};

use crate::common::{self, Behavior, FakeProvider, Proxy, problem, route, send};

/// `pay` (upstream base `/base`, a guarded `POST /v1/refunds{/rest*}`, `unmatched = "pass"`)
/// and `plain` (upstream base `/other`, no route at all) on one fake provider.
async fn start() -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "from provider")).await;
    let upstream = format!("{}/base", provider.url());
    let other = format!("{}/other", provider.url());
    let refund = route(
        "create_refund",
        "POST /v1/refunds/{id*}",
        &["{header:x-operation-id}"],
    );
    let pay = common::policy("pay", &upstream, &format!("unmatched = \"pass\"\n{refund}"));
    let proxy = Proxy::builder()
        .policy("pay", &pay)
        .policy("plain", &common::policy("plain", &other, ""))
        .start()
        .await;
    (provider, proxy)
}

const OP: (&str, &str) = ("x-operation-id", "op-1");

#[tokio::test]
async fn spellings_servers_read_as_a_guarded_path_are_refused_400_invalid_path() {
    let (provider, proxy) = start().await;
    let spellings = [
        "/pay/v1%2Frefunds",
        "/pay/v1%2frefunds",
        "/pay/V1/refunds",
        "/pay/v1/REFUNDS/re_1",
        "/pay/v1/refunds;jsessionid=1",
        "/pay/v1/refunds%3Bx=1",
        "/pay/refunds%2F",
        "/pay/v1/x/..%2Frefunds",
        "/pay/v1/x/../refunds",
        "/pay/v1/x/%2e%2e/refunds",
        "/pay/v1/./refunds",
        "/pay/v1%5Crefunds",
        "/pay/v1/refunds%00",
        "/pay/v1/refunds%0A",
        "/pay/v1/other%2Fthing",
        // Near-spellings: decoded once more, or with trailing whitespace trimmed, a server
        // reads them as a guarded path the proxy does not see in them.
        "/pay/v1/refunds%20",
        "/pay/v1/refunds%20%20",
        "/pay/v1/refunds%3F",
        "/pay/v1/refunds%3Fx=1",
        "/pay/v1/refunds%23",
        "/pay/v1/refunds%252F",
        "/pay/v1/refunds%252f",
        "/pay/v1/refunds%2520",
        "/pay/v1/refunds%2509",
        "/pay/v1/refunds%09",
        "/pay/V1/Refunds%20",
        "/pay/v1/refunds/re_1%20",
        "/pay/v1/refunds/re_1%2520",
        "/pay/v1/refunds%20/re_1",
    ];
    for path in spellings {
        let resp = send(Method::POST, &proxy.url(path), &[OP], "a=1")
            .await
            .expect("answer");
        let body = problem(&resp, StatusCode::BAD_REQUEST, "invalid-path");
        assert_eq!(body["provider"], "pay", "{path}: {body}");
        assert_eq!(resp.header("idem-state"), None, "{path}");
    }
    assert_eq!(provider.request_count(), 0, "nothing was sent");
    let resp = send(Method::POST, &proxy.url("/pay/v1/refunds%2520"), &[OP], "")
        .await
        .expect("answer");
    let body = problem(&resp, StatusCode::BAD_REQUEST, "invalid-path");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("`/v1/refunds`") && detail.contains("`POST /v1/refunds/{id*}`"),
        "names the reading and the route: {detail}"
    );
}

/// What comes near no guarded route passes: a longer name, whitespace inside a segment, an
/// unguarded path with `%20`, and a method the guarded route does not take. A guarded
/// request whose capture holds an escape that reads the same once more is guarded as usual.
#[tokio::test]
async fn spellings_near_no_guarded_route_still_pass() {
    let (provider, proxy) = start().await;
    for (method, path) in [
        (Method::POST, "/pay/v1/refundsX"),
        (Method::POST, "/pay/v1/refunds%20x"),
        (Method::POST, "/pay/v1/charges%20"),
        (Method::POST, "/pay/v1/charges%2520"),
        (Method::GET, "/pay/v1/refunds%20"),
    ] {
        let resp = send(method, &proxy.url(path), &[OP], "a=1")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{path}: {}", resp.text());
        assert_eq!(resp.header("idem-state"), None, "{path} is unguarded");
    }
    let guarded = send(
        Method::POST,
        &proxy.url("/pay/v1/refunds/re%201"),
        &[OP],
        "a=1",
    )
    .await
    .expect("answer");
    assert_eq!(guarded.status, StatusCode::OK, "{}", guarded.text());
    assert_eq!(guarded.header("idem-state"), Some("succeeded"));
    let paths: Vec<String> = provider
        .requests()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(
        paths,
        [
            "/base/v1/refundsX",
            "/base/v1/refunds%20x",
            "/base/v1/charges%20",
            "/base/v1/charges%2520",
            "/base/v1/refunds%20",
            "/base/v1/refunds/re%201",
        ]
    );
}

#[tokio::test]
async fn lowercase_methods_and_method_overrides_are_refused_400() {
    let (provider, proxy) = start().await;
    let lower = Method::from_bytes(b"post").expect("an extension method");
    let resp = send(lower, &proxy.url("/pay/v1/refunds"), &[OP], "a=1")
        .await
        .expect("answer");
    problem(&resp, StatusCode::BAD_REQUEST, "invalid-method");
    for header in [
        "x-http-method-override",
        "x-http-method",
        "x-method-override",
    ] {
        let resp = send(
            Method::GET,
            &proxy.url("/pay/v1/refunds"),
            &[OP, (header, "POST")],
            "a=1",
        )
        .await
        .expect("answer");
        let body = problem(&resp, StatusCode::BAD_REQUEST, "invalid-method");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(header), "{detail}");
    }
    assert_eq!(provider.request_count(), 0, "nothing was sent");
}

#[tokio::test]
async fn the_plain_spelling_is_still_guarded_and_sent_under_the_base_path() {
    let (provider, proxy) = start().await;
    for path in ["/pay/v1/refunds", "/pay/v1//refunds/", "/pay/v1/%72efunds"] {
        let resp = send(Method::POST, &proxy.url(path), &[OP], "a=1")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{path}: {}", resp.text());
        assert_eq!(resp.header("idem-state"), Some("succeeded"), "{path}");
    }
    // The first was sent; the other two are replays of the same operation.
    let paths: Vec<String> = provider
        .requests()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(paths, ["/base/v1/refunds"]);
}

#[tokio::test]
async fn no_path_escapes_the_upstreams_base_path() {
    let (provider, proxy) = start().await;
    // Out of the mount: no provider, nothing sent.
    for path in [
        "/pay/../v1/refunds",
        "/plain/../v1/refunds",
        "/plain/a/../../x",
        "/plain/%2e%2e/x",
    ] {
        let resp = send(Method::POST, &proxy.url(path), &[], "a=1")
            .await
            .expect("answer");
        problem(&resp, StatusCode::NOT_FOUND, "no-route");
    }
    assert_eq!(provider.request_count(), 0, "nothing was sent");
    // Inside the mount of a provider without guarded routes: resolved, under the base path.
    let resp = send(Method::GET, &proxy.url("/plain/a/../b/./c"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(provider.requests()[0].path_and_query, "/other/b/c");
}

#[tokio::test]
async fn unguarded_requests_go_out_in_their_normalized_form() {
    let (provider, proxy) = start().await;
    let cases = [
        ("/plain/v1//things/?x=1", "/other/v1/things?x=1"),
        ("/plain/v1/%74hings", "/other/v1/things"),
        // Not refused where nothing is guarded, but still one spelling: escapes uppercased.
        ("/plain/v1/a%2fb", "/other/v1/a%2Fb"),
        ("/plain/v1/a;b=1", "/other/v1/a;b=1"),
        ("/pay/v1/charges/", "/base/v1/charges"),
    ];
    for (sent, expected) in cases {
        let resp = send(Method::GET, &proxy.url(sent), &[], "")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{sent}: {}", resp.text());
        assert_eq!(resp.header("idem-state"), None, "{sent} is unguarded");
        let got = provider.requests().pop().expect("a request");
        assert_eq!(got.path_and_query, expected, "{sent}");
    }
}

#[tokio::test]
async fn a_percent_that_begins_no_escape_goes_out_escaped_so_decoding_makes_no_new_escape() {
    let (provider, proxy) = start().await;
    // `%2` then `%65` (an `e`): decoding the escape must not leave `%2e`, a dot segment to
    // the provider, where the agent wrote none.
    let cases = [
        ("/plain/v1/a/%2%65", "/other/v1/a/%252e"),
        ("/plain/v1/100%", "/other/v1/100%25"),
        ("/plain/v1/%zz", "/other/v1/%25zz"),
    ];
    for (sent, expected) in cases {
        let resp = send(Method::GET, &proxy.url(sent), &[], "")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{sent}: {}", resp.text());
        let got = provider.requests().pop().expect("a request");
        assert_eq!(got.path_and_query, expected, "{sent}");
    }
}

#[tokio::test]
async fn under_path_case_insensitive_other_cases_are_guarded_and_sent_as_the_route_spells_them() {
    let provider = FakeProvider::start(Behavior::fixed(200, "from provider")).await;
    let refund = route(
        "create_refund",
        "POST /v1/refunds/{id*}",
        &["{header:x-operation-id}"],
    );
    let pay = provider.policy("pay", &format!("path_case = \"insensitive\"\n{refund}"));
    let proxy = Proxy::builder().policy("pay", &pay).start().await;
    for path in ["/pay/V1/Refunds/Re_1", "/pay/v1/refunds/Re_1"] {
        let resp = send(Method::POST, &proxy.url(path), &[OP], "a=1")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{path}: {}", resp.text());
        assert_eq!(resp.header("idem-state"), Some("succeeded"), "{path}");
    }
    // One operation, sent once, in the route's spelling; the capture keeps its case.
    let paths: Vec<String> = provider
        .requests()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(paths, ["/v1/refunds/Re_1"]);
    // The other refusals still apply.
    let resp = send(Method::POST, &proxy.url("/pay/V1/refunds;x"), &[OP], "")
        .await
        .expect("answer");
    problem(&resp, StatusCode::BAD_REQUEST, "invalid-path");
}

/// A request an unguarded route listed first takes, that a guarded route listed after it
/// matches too, exactly as written: refused 400, nothing sent, and the answer says why
/// (routes are tried in file order; list the guarded one first). Before 2026-12-03 it was
/// refused as "differs only in letter case", which it does not.
#[tokio::test]
async fn a_request_an_earlier_unguarded_route_takes_from_a_guarded_one_is_refused_naming_both() {
    let provider = FakeProvider::start(Behavior::fixed(200, "from provider")).await;
    let special =
        "[[route]]\nname = \"peek\"\nmatch = \"POST /v1/items/special\"\neffect = \"read_only\"\n";
    let update = route(
        "update",
        "POST /v1/items/{id}",
        &["{header:x-operation-id}"],
    );
    let shop = common::policy("shop", &provider.url(), &format!("{special}{update}"));
    let proxy = Proxy::builder().policy("shop", &shop).start().await;

    let resp = send(
        Method::POST,
        &proxy.url("/shop/v1/items/special"),
        &[OP],
        "a=1",
    )
    .await
    .expect("answer");
    let body = problem(&resp, StatusCode::BAD_REQUEST, "invalid-path");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("POST /v1/items/special") && detail.contains("POST /v1/items/{id}"),
        "names both routes: {body}"
    );
    assert!(!detail.contains("letter case"), "{body}");
    assert_eq!(provider.request_count(), 0, "nothing was sent");

    let other = send(Method::POST, &proxy.url("/shop/v1/items/i_1"), &[OP], "a=1")
        .await
        .expect("answer");
    assert_eq!(other.status, StatusCode::OK, "{}", other.text());
    assert_eq!(other.header("idem-state"), Some("succeeded"), "guarded");
}

/// `_method`, the field many web frameworks read as the request's real method, cannot turn
/// an unguarded request into a guarded effect: in the query it is refused under a provider
/// with guarded routes; in a form body it is refused where a guarded route takes the same
/// path under another method (the body is read for that, and sent as it came when it holds no
/// `_method`), and on a guarded request. Before 2026-12-03 `POST .../sub_1` with
/// `_method=DELETE` went through unguarded to a route whose `DELETE` is guarded.
#[tokio::test]
async fn a_method_override_field_is_refused_where_it_could_reach_a_guarded_route() {
    let provider = FakeProvider::start(Behavior::fixed(200, "from provider")).await;
    let routes = format!(
        "{}{}",
        route(
            "cancel",
            "DELETE /v1/subscriptions/{id}",
            &["{header:x-operation-id}"]
        ),
        route("refund", "POST /v1/refunds", &["{header:x-operation-id}"]),
    );
    let shop = common::policy("shop", &provider.url(), &routes);
    let proxy = Proxy::builder().policy("shop", &shop).start().await;
    let form = ("content-type", "application/x-www-form-urlencoded");
    let post = |path: &'static str, body: &'static str| {
        let url = proxy.url(path);
        async move {
            send(Method::POST, &url, &[OP, form], body)
                .await
                .expect("answer")
        }
    };
    for (path, body, why) in [
        (
            "/shop/v1/subscriptions/sub_1?_method=DELETE",
            "plan=gold",
            "query parameter",
        ),
        (
            "/shop/v1/subscriptions/sub_1",
            "plan=gold&_method=DELETE",
            "form field",
        ),
        ("/shop/v1/refunds", "amount=1&_method=PUT", "form field"),
    ] {
        let resp = post(path, body).await;
        let refused = problem(&resp, StatusCode::BAD_REQUEST, "invalid-method");
        let detail = refused["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("_method") && detail.contains(why),
            "{path}: {detail}"
        );
    }
    assert_eq!(provider.request_count(), 0, "nothing was sent");

    let update = post("/shop/v1/subscriptions/sub_1", "plan=gold").await;
    assert_eq!(update.status, StatusCode::OK, "{}", update.text());
    assert_eq!(update.header("idem-state"), None, "unguarded");
    let sent = &provider.requests()[0];
    assert_eq!(sent.body, "plan=gold".as_bytes(), "sent as it came");
}
