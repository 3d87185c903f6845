//! Lookups that read the first request (docs/reference.md section 4.4) through the real
//! binary: a provider that cannot deduplicate loses the answer to a payment, so the
//! operation is `unknown`; the route's lookup asks the provider for the payment by a field
//! the agent sent (`{json:/reference}`, `{form:reference}`, `{query:channel}`), read from the
//! operation's kept first request. A template whose field is absent gives way to the next;
//! with nothing kept, no template reading the request renders and nothing is sent.

use http::{Method, StatusCode};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};
use idemproxy::operation::{Operation, RequestChange, Write};

use crate::common::{Behavior, FakeProvider, Proxy, Resp, route, send};

const JSON: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";

/// A payment route of a provider without dedupe, reconciled by the fields of the request:
/// by a JSON `reference`, else by a form `reference` and the query's `channel`, else (when
/// `by_key`) by the key.
fn policy(provider: &FakeProvider, by_key: bool) -> String {
    let route = route(
        "create_payment",
        "POST /v1/payments",
        &["{header:x-operation-id}"],
    );
    let mut lookups = vec![
        "\"GET /v1/payments?limit=1&reference={json:/reference}\"",
        "\"GET /v1/payments?limit=1&reference={form:reference}&channel={query:channel}\"",
    ];
    if by_key {
        lookups.push("\"GET /v1/payments?limit=1&key={key}\"");
    }
    let reconcile = format!(
        "[route.reconcile]\nlookup = [{}]\nfound = \"/data/0\"\nnot_found_final_after = \"1h\"\n",
        lookups.join(", ")
    );
    provider.policy("pay", &format!("timeout = \"5s\"\n{route}{reconcile}"))
}

fn op(id: &str) -> String {
    format!("pay/create_payment/{id}")
}

/// The agent's payment request (the same every time it is replayed).
async fn pay(proxy: &Proxy, id: &str, query: &str, content_type: &str, body: &str) -> Resp {
    send(
        Method::POST,
        &proxy.url(&format!("/pay/v1/payments{query}")),
        &[
            ("x-operation-id", id),
            ("authorization", "Bearer sk_test_1"),
            ("content-type", content_type),
        ],
        body.to_owned(),
    )
    .await
    .expect("the proxy answers")
}

/// A proxy whose first payment was committed by the provider but whose answer was lost;
/// the provider now answers every request with `list` (its payments list).
async fn unknown_payment(
    by_key: bool,
    request: (&str, &str, &str, &str),
    list: serde_json::Value,
) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = Proxy::builder()
        .policy("pay", &policy(&provider, by_key))
        .start()
        .await;
    let (id, query, content_type, body) = request;
    let first = pay(&proxy, id, query, content_type, body).await;
    assert_outcome_unknown(&first);
    assert_eq!(provider.effects(), 1);
    provider.set_behavior(Behavior::json(200, list));
    (provider, proxy)
}

fn payment() -> serde_json::Value {
    serde_json::json!({"id": "pay_1", "reference": "ORD 7/1", "approved": true})
}

fn listed() -> serde_json::Value {
    serde_json::json!({"limit": 1, "skip": 0, "data": [payment()]})
}

fn assert_outcome_unknown(resp: &Resp) {
    assert_eq!(resp.status, StatusCode::ACCEPTED, "{}", resp.text());
    assert_eq!(resp.json()["type"], "urn:idemproxy:outcome-unknown");
    assert_eq!(resp.header("idem-state"), Some("unknown"));
}

fn assert_found(resp: &Resp) {
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.json(), payment());
    assert_eq!(resp.header("idem-state"), Some("succeeded"));
    assert_eq!(resp.header("idempotent-replayed"), Some("true"));
}

/// The requests the provider received after the first POST, as method and path.
fn later_requests(provider: &FakeProvider) -> Vec<(Method, String)> {
    let requests = provider.requests().into_iter().skip(1);
    requests.map(|r| (r.method, r.path_and_query)).collect()
}

fn get(path_and_query: &str) -> (Method, String) {
    (Method::GET, path_and_query.to_string())
}

/// Stops the proxy and reads the operation and its event kinds from its ledger.
async fn stop_and_read(proxy: &mut Proxy, id: &str) -> (Operation, Vec<String>) {
    proxy.terminate().await;
    let ledger = open(proxy).await;
    let op = ledger.get(id).await.expect("read").expect("the operation");
    let events = ledger.events(id).await.expect("read");
    let kinds = events.iter().map(|e| e.kind.as_str().to_string()).collect();
    (op, kinds)
}

async fn open(proxy: &Proxy) -> Ledger {
    let opts = LedgerOptions::default();
    let (ledger, _) = Ledger::open(&proxy.ledger_path(), Timestamp::now(), opts)
        .await
        .expect("the ledger opens after the proxy stopped");
    ledger
}

#[tokio::test]
async fn a_json_field_of_the_first_request_finds_the_effect() {
    let body = r#"{"reference":"ORD 7/1","amount":500}"#;
    let request = ("wf-j1", "", JSON, body);
    let (provider, mut proxy) = unknown_payment(false, request, listed()).await;

    let replay = pay(&proxy, "wf-j1", "", JSON, body).await;
    assert_found(&replay);
    assert_eq!(
        later_requests(&provider),
        [get("/v1/payments?limit=1&reference=ORD%207%2F1")]
    );
    let lookup = &provider.requests()[1];
    assert_eq!(lookup.header("authorization"), Some("Bearer sk_test_1"));
    assert!(lookup.body.is_empty());

    let again = pay(&proxy, "wf-j1", "", JSON, body).await;
    assert_found(&again);
    assert_eq!(provider.request_count(), 2, "answered from the ledger");
    let log = proxy.log_text();
    assert!(
        !log.contains("ORD 7/1") && !log.contains("ORD%207"),
        "{log}"
    );

    let (op, kinds) = stop_and_read(&mut proxy, &op("wf-j1")).await;
    assert_eq!((op.state.as_str(), op.attempts), ("succeeded", 1));
    assert_eq!(kinds[3..5], ["reconcile.started", "reconcile.found"]);
}

/// The agent never comes back: the settler runs the same lookup from the kept request.
#[tokio::test]
async fn the_settler_looks_up_by_the_json_field_too() {
    let body = r#"{"reference":"ORD 7/1","amount":500}"#;
    let request = ("wf-j2", "", JSON, body);
    let (provider, proxy) = unknown_payment(false, request, listed()).await;

    provider.wait_for_requests(2).await;
    assert_eq!(
        later_requests(&provider),
        [get("/v1/payments?limit=1&reference=ORD%207%2F1")]
    );
    proxy.until_state(&op("wf-j2"), "succeeded").await;
    let replay = pay(&proxy, "wf-j2", "", JSON, body).await;
    assert_found(&replay);
    assert_eq!(provider.request_count(), 2, "nothing re-sent");
}

#[tokio::test]
async fn a_form_field_and_the_query_of_the_first_request_find_the_effect() {
    let body = "reference=ORD+7%2F1&amount=500";
    let request = ("wf-f1", "?channel=web+shop", FORM, body);
    let (provider, mut proxy) = unknown_payment(false, request, listed()).await;

    let replay = pay(&proxy, "wf-f1", "?channel=web+shop", FORM, body).await;
    assert_found(&replay);
    assert_eq!(
        later_requests(&provider),
        [get(
            "/v1/payments?limit=1&reference=ORD%207%2F1&channel=web%20shop"
        )],
        "the JSON template cannot read a form: the form template is sent"
    );

    let (op, _) = stop_and_read(&mut proxy, &op("wf-f1")).await;
    assert_eq!(op.state.as_str(), "succeeded");
}

#[tokio::test]
async fn a_field_the_first_request_lacks_gives_way_to_the_next_template() {
    let body = r#"{"amount":500}"#;
    let request = ("wf-k1", "", JSON, body);
    let (provider, mut proxy) = unknown_payment(true, request, listed()).await;

    let replay = pay(&proxy, "wf-k1", "", JSON, body).await;
    assert_found(&replay);
    let key = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(op("wf-k1")));
    assert_eq!(
        later_requests(&provider),
        [get(&format!("/v1/payments?limit=1&key={key}"))]
    );

    let (op, _) = stop_and_read(&mut proxy, &op("wf-k1")).await;
    assert_eq!(op.state.as_str(), "succeeded");
}

/// The first request is no longer kept (here erased from the ledger file while the proxy was
/// stopped, as for an operation recorded before requests were kept): no template renders,
/// so nothing is looked up and nothing re-sent; the operation stays `unknown`.
#[tokio::test]
async fn with_nothing_kept_no_lookup_is_sent_and_the_operation_stays_unknown() {
    let body = r#"{"reference":"ORD 7/1","amount":500}"#;
    let request = ("wf-n1", "", JSON, body);
    let (provider, mut proxy) = unknown_payment(false, request, listed()).await;
    let id = op("wf-n1");
    proxy.terminate().await;
    erase_kept_request(&proxy, &id).await;
    proxy.restart().await;

    assert_outcome_unknown(&pay(&proxy, "wf-n1", "", JSON, body).await);
    assert_eq!(provider.request_count(), 1, "no lookup, no re-send");
    assert!(
        proxy.log_text().contains("not kept"),
        "{}",
        proxy.log_text()
    );

    let (op, kinds) = stop_and_read(&mut proxy, &id).await;
    assert_eq!((op.state.as_str(), op.attempts), ("unknown", 1));
    assert!(!kinds.iter().any(|k| k == "reconcile.found"), "{kinds:?}");
}

async fn erase_kept_request(proxy: &Proxy, id: &str) {
    let ledger = open(proxy).await;
    assert!(ledger.kept_request(id).await.expect("read").is_some());
    let erased = ledger
        .update(id, |op| {
            let op = op.expect("the operation");
            let write = Write {
                request: RequestChange::Erase,
                ..Write::of(op, Vec::new())
            };
            (Some(write), ())
        })
        .await;
    erased.expect("erased");
    assert!(ledger.kept_request(id).await.expect("read").is_none());
}
