//! The admin API (docs/reference.md section 7) against the real binary: auth, listing and paging, an
//! operation with its events, the stored response, operator resolutions, the approval gate,
//! metrics, and the refusal to expose an untokened admin API.

use http::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{Behavior, FakeProvider, Proxy, Resp, problem, route, send};

const TOKEN: &str = "t0k-admin";

/// Two routes on provider `shop`, both keyed on `x-operation-id`; `extra` goes on `create`.
fn shop(provider: &FakeProvider, extra: &str) -> String {
    let create = route("create", "POST /v1/things", &["{header:x-operation-id}"]);
    let cancel = route("cancel", "POST /v1/cancel", &["{header:x-operation-id}"]);
    provider.policy("shop", &format!("{create}{extra}\n{cancel}"))
}

async fn start(provider: &FakeProvider, extra: &str) -> Proxy {
    Proxy::builder()
        .policy("shop", &shop(provider, extra))
        .start()
        .await
}

/// An agent's request on `create` (or `cancel`) with this operation ID.
async fn agent(proxy: &Proxy, path: &str, op: &str) -> Resp {
    let url = proxy.url(&format!("/shop/v1/{path}"));
    send(Method::POST, &url, &[("x-operation-id", op)], "amount=5")
        .await
        .expect("proxy answers")
}

/// `{id}` as a path segment (test IDs hold no characters besides `/` that need escaping).
fn seg(id: &str) -> String {
    id.replace('/', "%2F")
}

/// An admin call; a POST says its body is JSON, as the admin API requires.
async fn call(proxy: &Proxy, method: Method, path: &str, body: &str, token: Option<&str>) -> Resp {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    if method == Method::POST {
        headers.push(("content-type", "application/json"));
    }
    send(method, &proxy.admin_url(path), &headers, body.to_string())
        .await
        .expect("admin answers")
}

async fn get(proxy: &Proxy, path: &str) -> Resp {
    call(proxy, Method::GET, path, "", None).await
}

async fn post(proxy: &Proxy, path: &str, body: Value) -> Resp {
    call(proxy, Method::POST, path, &body.to_string(), None).await
}

async fn show(proxy: &Proxy, id: &str) -> Value {
    let resp = get(proxy, &format!("/ops/{}", seg(id))).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    resp.json()
}

#[tokio::test]
async fn healthz_is_open_and_every_other_call_needs_the_token() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy("shop", &shop(&provider, ""))
        .env("IDEMPROXY_ADMIN_TOKEN", TOKEN)
        .start()
        .await;
    assert_eq!(get(&proxy, "/healthz").await.status, StatusCode::OK);
    let id = seg("shop/create/op-1");
    let calls = [
        (Method::GET, "/ops".to_string()),
        (Method::GET, format!("/ops/{id}")),
        (Method::GET, format!("/ops/{id}/response")),
        (Method::POST, format!("/ops/{id}/resolve")),
        (Method::POST, format!("/ops/{id}/approve")),
        (Method::POST, format!("/ops/{id}/reject")),
        (Method::GET, "/metrics".to_string()),
    ];
    for (method, path) in &calls {
        for token in [None, Some("wrong"), Some("t0k-admin2")] {
            let resp = call(&proxy, method.clone(), path, "{}", token).await;
            problem(&resp, StatusCode::UNAUTHORIZED, "unauthorized");
            assert_eq!(resp.header("www-authenticate"), Some("Bearer"));
        }
    }
    let listed = call(&proxy, Method::GET, "/ops", "", Some(TOKEN)).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    let metrics = call(&proxy, Method::GET, "/metrics", "", Some(TOKEN)).await;
    assert_eq!(metrics.status, StatusCode::OK);
    let missing = call(&proxy, Method::GET, &format!("/ops/{id}"), "", Some(TOKEN)).await;
    problem(&missing, StatusCode::NOT_FOUND, "not-found");
    assert!(
        !proxy.log_text().contains(TOKEN),
        "the token must never be logged"
    );
}

/// A request with two `Authorization` headers is refused 401, whichever holds the token: one
/// reader would take the first, another the last.
#[tokio::test]
async fn two_authorization_headers_are_refused() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy("shop", &shop(&provider, ""))
        .env("IDEMPROXY_ADMIN_TOKEN", TOKEN)
        .start()
        .await;
    let bearer = format!("Bearer {TOKEN}");
    for pair in [
        [bearer.as_str(), "Bearer wrong"],
        ["Bearer wrong", bearer.as_str()],
        [bearer.as_str(), bearer.as_str()],
    ] {
        let headers = [("authorization", pair[0]), ("authorization", pair[1])];
        let url = proxy.admin_url("/ops");
        let resp = send(Method::GET, &url, &headers, "")
            .await
            .expect("admin answers");
        problem(&resp, StatusCode::UNAUTHORIZED, "unauthorized");
        assert_eq!(resp.header("www-authenticate"), Some("Bearer"));
    }
    let listed = call(&proxy, Method::GET, "/ops", "", Some(TOKEN)).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
}

/// Five operations, oldest first: op-1..op-3 succeeded on `create`, op-4 and op-5 failed
/// (402) on `cancel`.
async fn five_ops(proxy: &Proxy, provider: &FakeProvider) -> Vec<String> {
    for n in 1..=3 {
        assert_eq!(
            agent(proxy, "things", &format!("op-{n}")).await.status,
            StatusCode::OK
        );
    }
    provider.set_behavior(Behavior::fixed(402, "card declined"));
    for n in 4..=5 {
        let resp = agent(proxy, "cancel", &format!("op-{n}")).await;
        assert_eq!(resp.status, StatusCode::PAYMENT_REQUIRED);
    }
    let route = |n| if n <= 3 { "create" } else { "cancel" };
    (1..=5)
        .map(|n| format!("shop/{}/op-{n}", route(n)))
        .collect()
}

fn ids(page: &Value) -> Vec<String> {
    page["ops"]
        .as_array()
        .map(|ops| {
            ops.iter()
                .filter_map(|op| op["operation_id"].as_str())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn list_filters_and_pages_newest_first() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let created = five_ops(&proxy, &provider).await;
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();

    let all = get(&proxy, "/ops").await;
    assert_eq!(all.header("content-type"), Some("application/json"));
    let all = all.json();
    assert_eq!(ids(&all), newest_first);
    assert_eq!(all["next"], Value::Null);
    assert_eq!(all["ops"][0]["state"], "failed");
    assert_eq!(all["ops"][0]["provider"], "shop");
    assert!(
        all["ops"][0].get("events").is_none(),
        "lists carry no events"
    );

    let mut paged = Vec::new();
    let mut path = "/ops?limit=2".to_string();
    for _ in 0..5 {
        let page = get(&proxy, &path).await.json();
        assert!(ids(&page).len() <= 2);
        paged.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => path = format!("/ops?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(paged, newest_first);

    let filtered = |q: &'static str| {
        let proxy = &proxy;
        async move { ids(&get(proxy, &format!("/ops?{q}")).await.json()) }
    };
    assert_eq!(filtered("state=failed").await, newest_first[..2]);
    assert_eq!(
        filtered("route=create&state=succeeded").await,
        newest_first[2..]
    );
    assert_eq!(
        filtered("provider=shop&route=cancel&limit=1").await,
        newest_first[..1]
    );
    assert_eq!(filtered("provider=other").await, Vec::<String>::new());
    assert_eq!(
        filtered("state=&provider=&route=&limit=&after=").await,
        newest_first
    );

    for bad in [
        "state=done",
        "limit=0",
        "limit=1001",
        "after=zz",
        "after=00",
        "sort=asc",
    ] {
        let resp = get(&proxy, &format!("/ops?{bad}")).await;
        problem(&resp, StatusCode::BAD_REQUEST, "bad-request");
    }
}

/// `show`, polled until the operation's replays have been written (bounded).
async fn show_once_replayed(proxy: &Proxy, id: &str) -> Value {
    for _ in 0..400 {
        let op = show(proxy, id).await;
        if op["replays"]["count"].as_u64().is_some_and(|n| n > 0) {
            return op;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the replays of {id} were never written");
}

#[tokio::test]
async fn an_operation_shows_its_fields_and_ordered_events() {
    let provider =
        FakeProvider::start(Behavior::fixed(201, "made").header("request-id", "req_9")).await;
    let proxy = start(&provider, "").await;
    let first = agent(&proxy, "things", "op-1").await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        agent(&proxy, "things", "op-1").await.status,
        StatusCode::CREATED
    );

    // The replay is counted in memory and written within about a second, with its one event.
    let op = show_once_replayed(&proxy, "shop/create/op-1").await;
    assert_eq!(op["replays"]["count"], 1);
    assert_eq!(op["replays"]["first_at"], op["replays"]["last_at"]);
    assert_eq!(op["operation_id"], "shop/create/op-1");
    assert_eq!(
        (&op["provider"], &op["route"]),
        (&json!("shop"), &json!("create"))
    );
    assert_eq!(
        (&op["effect"], &op["state"]),
        (&json!("irreversible"), &json!("succeeded"))
    );
    assert_eq!(op["attempts"], 1);
    assert_eq!(op["error"], Value::Null);
    assert_eq!(op["fingerprint"].as_str().map(str::len), Some(64));
    let key = hex::encode(Sha256::digest(b"shop/create/op-1"));
    assert_eq!(op["idempotency_key"], key);
    assert_eq!(op["response"]["status"], 201);
    assert_eq!(op["response"]["body_bytes"], 4);
    assert_eq!(
        op["response"]["body_sha256"],
        hex::encode(Sha256::digest(b"made"))
    );
    for field in ["created_at", "updated_at", "first_dispatched_at"] {
        let at = op[field].as_str().unwrap_or_default();
        assert!(
            at.len() == 24 && at.ends_with('Z') && at.contains('T'),
            "{field}: {at}"
        );
    }

    let events = op["events"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "operation.claimed",
            "provider.requested",
            "provider.responded",
            "result.persisted",
            "operation.replayed"
        ]
    );
    let times: Vec<&str> = events.iter().filter_map(|e| e["at"].as_str()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(events[0]["attempt"], 1);
    assert!(events.iter().all(|e| e["detail"].is_string()));

    let unknown = get(&proxy, &format!("/ops/{}", seg("shop/create/nope"))).await;
    problem(&unknown, StatusCode::NOT_FOUND, "not-found");
    assert_eq!(unknown.json()["operation_id"], "shop/create/nope");
    let unencoded = get(&proxy, "/ops/shop/create/op-1").await;
    problem(&unencoded, StatusCode::NOT_FOUND, "not-found");
}

#[tokio::test]
async fn the_response_endpoint_answers_what_a_replay_answers() {
    let behavior = Behavior::json(200, json!({"id": "re_1"})).header("x-provider", "yes");
    let provider = FakeProvider::start(behavior).await;
    let proxy = start(&provider, "").await;
    agent(&proxy, "things", "op-1").await;
    let replay = agent(&proxy, "things", "op-1").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    let stored = get(
        &proxy,
        &format!("/ops/{}/response", seg("shop/create/op-1")),
    )
    .await;
    assert_eq!(stored.status, replay.status);
    assert_eq!(stored.body, replay.body);
    for name in [
        "content-type",
        "x-provider",
        "x-fake-effect",
        "idem-operation-id",
        "idem-state",
        "idempotent-replayed",
    ] {
        assert_eq!(stored.header(name), replay.header(name), "{name}");
        assert!(stored.header(name).is_some(), "{name}");
    }
    assert_eq!(provider.request_count(), 1);

    let none = get(
        &proxy,
        &format!("/ops/{}/response", seg("shop/create/op-2")),
    )
    .await;
    problem(&none, StatusCode::NOT_FOUND, "not-found");
}

/// An `unknown` operation: the provider commits the effect and drops its answer.
async fn unknown_op(proxy: &Proxy, provider: &FakeProvider, op: &str) -> String {
    provider.set_behavior(Behavior::fixed(200, "first").drop_first_response(1));
    let resp = agent(proxy, "things", op).await;
    assert_eq!(resp.status, StatusCode::ACCEPTED, "{}", resp.text());
    assert_eq!(resp.header("idem-state"), Some("unknown"));
    let id = format!("shop/create/{op}");
    assert_eq!(show(proxy, &id).await["state"], "unknown");
    id
}

#[tokio::test]
async fn resolving_succeeded_makes_replays_answer_the_given_response() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let id = unknown_op(&proxy, &provider, "op-1").await;
    assert_eq!(
        agent(&proxy, "things", "op-1").await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(provider.request_count(), 1);

    let body = json!({"outcome": "succeeded", "status": 201,
        "headers": {"content-type": "application/json", "set-cookie": "s=1"},
        "body": "{\"id\":\"re_1\"}", "reason": "seen in the dashboard"});
    let resolved = post(&proxy, &format!("/ops/{}/resolve", seg(&id)), body).await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.text());
    let op = resolved.json();
    assert_eq!(op["state"], "succeeded");
    assert_eq!(op["response"]["status"], 201);
    assert_eq!(
        op["response"]["body_sha256"],
        hex::encode(Sha256::digest(br#"{"id":"re_1"}"#))
    );

    let replay = agent(&proxy, "things", "op-1").await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.text(), r#"{"id":"re_1"}"#);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("idem-state"), Some("succeeded"));
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(replay.header("set-cookie"), None);
    assert_eq!(provider.request_count(), 1, "nothing more was sent");

    let events = show(&proxy, &id).await["events"].clone();
    let resolved: Vec<&Value> = events
        .as_array()
        .map(|e| {
            e.iter()
                .filter(|e| e["kind"] == "operator.resolved")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(resolved.len(), 1);
    let detail = resolved[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("succeeded") && detail.contains("seen in the dashboard"),
        "{detail}"
    );

    let again = post(
        &proxy,
        &format!("/ops/{}/resolve", seg(&id)),
        json!({"outcome": "failed", "reason": "x"}),
    )
    .await;
    problem(&again, StatusCode::CONFLICT, "conflict");
    assert_eq!(again.json()["state"], "succeeded");
}

/// POSTs `body` to `id`'s resolve: it must be refused (400 `bad-request`) with the operation
/// left `unknown`; the refusal's detail.
async fn refused_resolution(proxy: &Proxy, id: &str, body: Value) -> String {
    let refused = post(proxy, &format!("/ops/{}/resolve", seg(id)), body.clone()).await;
    problem(&refused, StatusCode::BAD_REQUEST, "bad-request");
    assert_eq!(show(proxy, id).await["state"], "unknown", "{body}");
    let answer = refused.json();
    answer["detail"].as_str().unwrap_or_default().to_owned()
}

/// A succeeded resolution without `body` would store an empty answer that every later replay
/// returns (an SDK then fails to parse it); the API refuses it as the CLI does, and an answer
/// that really had no body says so with `"body": ""`.
#[tokio::test]
async fn resolving_succeeded_needs_the_body_said_even_when_empty() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let id = unknown_op(&proxy, &provider, "op-1").await;
    let path = format!("/ops/{}/resolve", seg(&id));
    for body in [
        json!({"outcome": "succeeded"}),
        json!({"outcome": "succeeded", "status": 201, "headers": {}}),
        json!({"outcome": "succeeded", "body": null}),
    ] {
        let detail = refused_resolution(&proxy, &id, body.clone()).await;
        assert!(detail.contains("`body`"), "{body}: {detail}");
    }
    let empty = json!({"outcome": "succeeded", "status": 204, "body": ""});
    let resolved = post(&proxy, &path, empty).await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.text());
    let replay = agent(&proxy, "things", "op-1").await;
    assert_eq!(replay.status, StatusCode::NO_CONTENT);
    assert_eq!(provider.request_count(), 1, "nothing more was sent");
}

/// An empty body resolved as a 2xx other than 204 would be replayed to every later caller,
/// whose SDK fails to parse it, and the resolution could not be taken back: refused (400,
/// nothing written) unless the operator says the provider really answered with nothing.
#[tokio::test]
async fn an_empty_body_for_a_2xx_other_than_204_needs_empty_body_said() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let id = unknown_op(&proxy, &provider, "op-1").await;
    let path = format!("/ops/{}/resolve", seg(&id));
    for status in [200, 201, 202] {
        let body = json!({"outcome": "succeeded", "status": status, "body": ""});
        let detail = refused_resolution(&proxy, &id, body).await;
        assert!(detail.contains("empty_body"), "{status}: {detail}");
    }
    let said = json!({"outcome": "succeeded", "status": 200, "body": "", "empty_body": true});
    let resolved = post(&proxy, &path, said).await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.text());
    let replay = agent(&proxy, "things", "op-1").await;
    assert_eq!(
        (replay.status, replay.text()),
        (StatusCode::OK, String::new())
    );
    assert_eq!(provider.request_count(), 1, "nothing more was sent");
}

#[tokio::test]
async fn resolving_failed_lets_the_next_replay_dispatch_again() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let id = unknown_op(&proxy, &provider, "op-1").await;
    let path = format!("/ops/{}/resolve", seg(&id));

    let no_reason = post(&proxy, &path, json!({"outcome": "failed"})).await;
    problem(&no_reason, StatusCode::BAD_REQUEST, "bad-request");
    let broken = call(&proxy, Method::POST, &path, "{\"outcome\":", None).await;
    problem(&broken, StatusCode::BAD_REQUEST, "bad-request");
    assert!(
        broken.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("JSON")
    );
    let wrong_method = get(&proxy, &path).await;
    problem(
        &wrong_method,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    );
    assert_eq!(wrong_method.header("allow"), Some("POST"));

    let resolved = post(
        &proxy,
        &path,
        json!({"outcome": "failed", "reason": "no charge at the provider"}),
    )
    .await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.text());
    let op = resolved.json();
    assert_eq!(
        (&op["state"], &op["error"]),
        (&json!("failed"), &json!("no charge at the provider"))
    );

    let before = provider.request_count();
    let replay = agent(&proxy, "things", "op-1").await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.header("idempotent-replayed"), Some("false"));
    assert_eq!(provider.request_count(), before + 1);
    let op = show(&proxy, &id).await;
    assert_eq!(
        (&op["state"], &op["attempts"]),
        (&json!("succeeded"), &json!(2))
    );

    let unknown_id = format!("/ops/{}/resolve", seg("shop/create/none"));
    let missing = post(
        &proxy,
        &unknown_id,
        json!({"outcome": "failed", "reason": "x"}),
    )
    .await;
    problem(&missing, StatusCode::NOT_FOUND, "not-found");
}

#[tokio::test]
async fn approval_lets_the_next_request_dispatch_once() {
    let provider = FakeProvider::start(Behavior::fixed(200, "sent")).await;
    let proxy = start(&provider, "approval = \"required\"").await;
    let id = "shop/create/op-1";
    let first = agent(&proxy, "things", "op-1").await;
    problem(&first, StatusCode::ACCEPTED, "awaiting-approval");
    assert_eq!(
        agent(&proxy, "things", "op-1").await.status,
        StatusCode::ACCEPTED
    );
    let op = show(&proxy, id).await;
    assert_eq!(
        (&op["state"], &op["approval"]),
        (&json!("prepared"), &json!("pending"))
    );
    assert_eq!(provider.request_count(), 0);

    let approve = format!("/ops/{}/approve", seg(id));
    let approved = call(&proxy, Method::POST, &approve, "", None).await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text());
    assert_eq!(approved.json()["state"], "prepared");
    assert_eq!(approved.json()["approval"], "approved");
    assert_eq!(provider.request_count(), 0, "approving sends nothing");
    let twice = post(&proxy, &approve, json!({"reason": "again"})).await;
    problem(&twice, StatusCode::CONFLICT, "conflict");

    let sent = agent(&proxy, "things", "op-1").await;
    assert_eq!((sent.status, sent.text()), (StatusCode::OK, "sent".into()));
    let replayed = agent(&proxy, "things", "op-1").await;
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(provider.request_count(), 1);

    let reject = format!("/ops/{}/reject", seg(id));
    let late = post(&proxy, &reject, json!({"reason": "too late"})).await;
    problem(&late, StatusCode::CONFLICT, "conflict");
    let events = show(&proxy, id).await["events"].clone();
    let kinds: Vec<&str> = events
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(&kinds[..2], ["operation.prepared", "operator.approved"]);
    assert_eq!(kinds[2], "operation.claimed");
}

#[tokio::test]
async fn rejection_ends_an_operation_for_good() {
    let provider = FakeProvider::start(Behavior::fixed(200, "sent")).await;
    let proxy = start(&provider, "approval = \"required\"").await;
    let id = "shop/create/op-1";
    agent(&proxy, "things", "op-1").await;
    let reject = format!("/ops/{}/reject", seg(id));
    let no_reason = call(&proxy, Method::POST, &reject, "", None).await;
    problem(&no_reason, StatusCode::BAD_REQUEST, "bad-request");

    let rejected = post(&proxy, &reject, json!({"reason": "amount too large"})).await;
    assert_eq!(rejected.status, StatusCode::OK, "{}", rejected.text());
    let op = rejected.json();
    assert_eq!(
        (&op["state"], &op["approval"]),
        (&json!("failed"), &json!("rejected"))
    );
    assert_eq!(op["error"], "amount too large");

    let replay = agent(&proxy, "things", "op-1").await;
    problem(&replay, StatusCode::FORBIDDEN, "operation-rejected");
    assert_eq!(provider.request_count(), 0);
    let approve = post(&proxy, &format!("/ops/{}/approve", seg(id)), json!({})).await;
    problem(&approve, StatusCode::CONFLICT, "conflict");
    let again = post(&proxy, &reject, json!({"reason": "again"})).await;
    problem(&again, StatusCode::CONFLICT, "conflict");
    let missing = post(
        &proxy,
        &format!("/ops/{}/approve", seg("shop/create/x")),
        json!({}),
    )
    .await;
    problem(&missing, StatusCode::NOT_FOUND, "not-found");
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_name_the_spec_series_with_current_values() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    agent(&proxy, "things", "op-1").await;
    agent(&proxy, "things", "op-1").await;
    unknown_op(&proxy, &provider, "op-2").await;

    let resp = get(&proxy, "/metrics").await;
    assert_eq!(resp.status, StatusCode::OK);
    let text = resp.text();
    let requests = r#"idemproxy_requests_total{provider="shop",route="create",outcome="#;
    assert_eq!(
        metric(&text, &format!("{requests}\"forwarded\"}}")),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, &format!("{requests}\"replayed\"}}")),
        Some(1.0),
        "{text}"
    );
    let ops = |state: &str| metric(&text, &format!("idemproxy_operations{{state=\"{state}\"}}"));
    assert_eq!(ops("succeeded"), Some(1.0), "{text}");
    assert_eq!(ops("unknown"), Some(1.0), "{text}");
    assert_eq!(ops("in_flight"), Some(0.0), "{text}");
    assert_eq!(ops("prepared"), Some(0.0), "{text}");
    assert_eq!(ops("failed"), Some(0.0), "{text}");
    let unknown_age = metric(&text, "idemproxy_oldest_unknown_age_seconds").expect("unknown age");
    assert!((0.0..60.0).contains(&unknown_age), "{unknown_age}");
    assert_eq!(
        metric(&text, "idemproxy_oldest_in_flight_age_seconds"),
        Some(0.0)
    );
    assert!(
        metric(
            &text,
            r#"idemproxy_upstream_seconds_count{provider="shop"}"#
        )
        .is_some_and(|n| n >= 2.0),
        "{text}"
    );
    assert!(
        metric(&text, "idemproxy_ledger_commit_seconds_count").is_some_and(|n| n >= 3.0),
        "{text}"
    );
}

#[tokio::test]
async fn an_untokened_admin_api_beyond_loopback_is_refused_at_start() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let config =
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"0.0.0.0:0\"\nledger = \"ledger.redb\"\n";
    let (status, stderr) = Proxy::builder()
        .raw_config(config)
        .policy("shop", &shop(&provider, ""))
        .start_expect_failure()
        .await;
    assert!(!status.success());
    assert!(
        stderr.contains("admin_listen") && stderr.contains("IDEMPROXY_ADMIN_TOKEN"),
        "{stderr}"
    );

    let proxy = Proxy::builder()
        .raw_config(config)
        .policy("shop", &shop(&provider, ""))
        .env("IDEMPROXY_ADMIN_TOKEN", TOKEN)
        .start()
        .await;
    let ops = call(&proxy, Method::GET, "/ops", "", Some(TOKEN)).await;
    assert_eq!(ops.status, StatusCode::OK);
}
