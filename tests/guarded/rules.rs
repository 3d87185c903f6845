//! `[[provider.rule]]`: ordered rules on the provider's answer (status or class, optional
//! JSON pointer and value), tried before `[provider.outcomes]` wherever an answer is
//! classified, the agent's attempts and the settler's re-sends alike.
//! `pending` keeps the operation `unknown` (never `failed`) and answers `in-flight`;
//! `reconcile` runs the route's lookup at once with the answer readable as `{answer:...}`,
//! and a found resource becomes the operation's stored response (GoCardless'
//! `idempotent_creation_conflict` and its `conflicting_resource_id`).

use http::{Method, StatusCode};
use idemproxy::operation::{EventKind, State};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::common::guarded::{ledger, problem};
use crate::common::{self, Behavior, FakeProvider, Proxy, Resp, route, send};

/// GoCardless' answer to a retried create whose first request already made the payment.
fn conflict() -> serde_json::Value {
    json!({"error": {"type": "invalid_state", "code": 409, "errors": [{
        "reason": "idempotent_creation_conflict",
        "message": "A resource has already been created with this idempotency key",
        "links": {"conflicting_resource_id": "PM123"}
    }]}})
}

fn payment() -> serde_json::Value {
    json!({"id": "PM123", "amount": 500, "currency": "GBP", "status": "pending_submission"})
}

const CONFLICT_RULE: &str = "\n[[provider.rule]]\nstatus = 409\n\
     pointer = \"/error/errors/0/reason\"\nequals = \"idempotent_creation_conflict\"\n\
     means = \"reconcile\"\n";

const LOOKUP: &str = "\n[route.reconcile]\n\
     lookup = [\"GET /payments/{answer:/error/errors/0/links/conflicting_resource_id}\", \
               \"GET /payments?idempotency_key={key}\"]\n\
     found = \"/payments\"\n";

/// A deduplicating provider `gc` with a `create_payment` route (`POST /payments`) and
/// `extra` appended after the route (its reconcile table).
fn gc_policy(provider: &FakeProvider, rules: &str, extra: &str) -> String {
    let route = route(
        "create_payment",
        "POST /payments",
        &["{header:x-operation-id}"],
    );
    provider.policy("gc", &format!("dedupe = \"key\"\n{rules}{route}{extra}"))
}

async fn create(proxy: &Proxy, op: &str) -> Resp {
    let headers = [
        ("x-operation-id", op),
        ("content-type", "application/json"),
        ("authorization", "Bearer live_gc"),
    ];
    let body = r#"{"payments":{"amount":500,"currency":"GBP"}}"#;
    send(Method::POST, &proxy.url("/gc/payments"), &headers, body)
        .await
        .expect("the proxy answers")
}

fn id(op: &str) -> String {
    format!("gc/create_payment/{op}")
}

/// The requests the provider saw, as `METHOD path`.
fn seen(provider: &FakeProvider) -> Vec<String> {
    let requests = provider.requests();
    requests
        .iter()
        .map(|r| format!("{} {}", r.method, r.path_and_query))
        .collect()
}

/// The first create's answer is lost after the payment was made; the provider then answers
/// every create with the conflict and holds the payment for a read.
async fn lost_then_conflicting(rules: &str, extra: &str) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = Proxy::builder()
        .policy("gc", &gc_policy(&provider, rules, extra))
        .start()
        .await;
    let lost = create(&proxy, "pay-1").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    provider.set_behavior(Behavior::json(409, conflict()).read(
        "GET /payments/PM123",
        200,
        json!({"payments": payment()}),
    ));
    (provider, proxy)
}

#[tokio::test]
async fn a_creation_conflict_is_reconciled_at_once_and_the_payment_replayed() {
    let (provider, mut proxy) = lost_then_conflicting(CONFLICT_RULE, LOOKUP).await;

    let retried = create(&proxy, "pay-1").await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.text());
    assert_eq!(retried.json(), payment());
    assert_eq!(retried.header("idem-state"), Some("succeeded"));
    assert_eq!(retried.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        seen(&provider),
        ["POST /payments", "POST /payments", "GET /payments/PM123"]
    );
    let requests = provider.requests();
    let key = hex::encode(Sha256::digest(id("pay-1").as_bytes()));
    assert_eq!(requests[1].header("idempotency-key"), Some(key.as_str()));
    assert_eq!(requests[2].header("authorization"), Some("Bearer live_gc"));

    let again = create(&proxy, "pay-1").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json(), payment(), "later replays give the same body");
    assert_eq!(provider.request_count(), 3, "answered from the ledger");

    let stored = ledger(&mut proxy, &id("pay-1")).await;
    assert_eq!(stored.op.state, State::Succeeded);
    assert!(stored.has_event(EventKind::ReconcileFound));
}

/// The lookup list falls back to `{key}` where the answer part is absent, and a lookup that
/// finds nothing (an empty list) leaves the operation `unknown` with the provider's own
/// answer, never re-sent by that lookup.
#[tokio::test]
async fn a_conflict_whose_lookup_finds_nothing_stays_unknown() {
    let rule = "\n[[provider.rule]]\nstatus = \"4xx\"\npointer = \"/error/type\"\n\
                means = \"reconcile\"\n";
    let (provider, mut proxy) = lost_then_conflicting(rule, LOOKUP).await;
    let key = hex::encode(Sha256::digest(id("pay-1").as_bytes()));
    let lookup = format!("GET /payments?idempotency_key={key}");
    provider.set_behavior(
        Behavior::json(409, json!({"error": {"type": "invalid_state"}})).read(
            &lookup,
            200,
            json!({"payments": []}),
        ),
    );

    let retried = create(&proxy, "pay-1").await;
    assert_eq!(retried.status, StatusCode::CONFLICT, "{}", retried.text());
    assert_eq!(retried.header("idem-state"), Some("unknown"));
    assert_eq!(
        seen(&provider),
        ["POST /payments", "POST /payments", &lookup]
    );

    let stored = ledger(&mut proxy, &id("pay-1")).await;
    assert_eq!(stored.op.state, State::Unknown);
    assert!(stored.has_event(EventKind::ReconcileNotFound));
}

/// A rule meaning `pending` beats a status list that calls the answer failed: the operation
/// stays `unknown`, the agent is told `in-flight` (at `pending_status`), and the next
/// request re-sends with the same key and gets the result.
#[tokio::test]
async fn a_pending_answer_is_never_failed_and_answers_in_flight() {
    let provider = FakeProvider::start(Behavior::json(
        409,
        json!({"error": {"code": "idempotency_key_in_use"}}),
    ))
    .await;
    let rules = "pending_status = 503\n[provider.outcomes]\nfailed = [409]\n\
                 \n[[provider.rule]]\nstatus = 409\npointer = \"/error/code\"\n\
                 equals = \"idempotency_key_in_use\"\nmeans = \"pending\"\n";
    let mut proxy = Proxy::builder()
        .policy("gc", &gc_policy(&provider, rules, ""))
        .start()
        .await;

    let busy = create(&proxy, "pay-2").await;
    let body = problem(&busy, StatusCode::SERVICE_UNAVAILABLE, "in-flight");
    assert_eq!(busy.header("retry-after"), Some("5"));
    assert_eq!(busy.header("idem-state"), Some("unknown"));
    assert_eq!(body["state"], "unknown");

    provider.set_behavior(Behavior::json(201, payment()));
    let done = create(&proxy, "pay-2").await;
    assert_eq!(done.status, StatusCode::CREATED, "{}", done.text());
    assert_eq!(done.json(), payment());
    let requests = provider.requests();
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );

    let stored = ledger(&mut proxy, &id("pay-2")).await;
    assert_eq!(stored.op.state, State::Succeeded);
    assert!(
        stored.op.maybe_effect_at.is_some(),
        "the pending answer marked the operation as one whose effect may have happened"
    );
    let unknown = stored.events.iter().find(|e| e.kind == EventKind::Unknown);
    let detail = &unknown
        .expect("the pending answer was recorded unknown")
        .detail;
    assert!(detail.contains("still processing"), "{detail}");
}

/// The settler's re-send of an unknown create meets the conflict too, and reconciles it.
#[tokio::test]
async fn the_settlers_resend_is_classified_by_the_rules() {
    let (provider, proxy) = lost_then_conflicting(CONFLICT_RULE, LOOKUP).await;
    provider.wait_for_requests(3).await;
    proxy.until_state(&id("pay-1"), "succeeded").await;
    assert_eq!(
        seen(&provider),
        ["POST /payments", "POST /payments", "GET /payments/PM123"]
    );
    let replay = create(&proxy, "pay-1").await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.json(), payment());
    assert_eq!(provider.request_count(), 3);
}

/// A `reconcile` rule on a route without a lookup counts as `unknown`; `check` warns.
#[tokio::test]
async fn a_reconcile_rule_without_a_lookup_is_unknown_and_check_warns() {
    let (provider, proxy) = lost_then_conflicting(CONFLICT_RULE, "").await;
    let (status, stdout, stderr) = proxy
        .run_cli(&["check", "-c", &proxy.dir().config_path().to_string_lossy()])
        .await;
    assert!(status.success(), "a warning, not an error: {stderr}");
    assert!(stdout.contains("ok"), "{stdout}");
    let warning = stderr.lines().find(|l| l.starts_with("warning: "));
    let warning = warning.unwrap_or_else(|| panic!("no warning in:\n{stderr}"));
    for part in [
        "policies/gc.toml",
        "provider.rule[0].means",
        "\"create_payment\"",
    ] {
        assert!(warning.contains(part), "{part} missing from {warning}");
    }

    let retried = create(&proxy, "pay-1").await;
    assert_eq!(
        retried.status,
        StatusCode::CONFLICT,
        "the provider's own answer"
    );
    assert_eq!(retried.header("idem-state"), Some("unknown"));
    assert_eq!(retried.json(), conflict());
    assert_eq!(seen(&provider), ["POST /payments", "POST /payments"]);
}

/// Runs `check` on a policy with these `[provider]` keys and rules and one route with `route`
/// appended; returns whether it passed and its stderr.
async fn check(provider_keys: &str, route_extra: &str) -> (bool, String) {
    let route = route(
        "create_payment",
        "POST /payments",
        &["{header:x-operation-id}"],
    );
    let text = common::policy(
        "gc",
        "https://api.example.com",
        &format!("{provider_keys}{route}{route_extra}"),
    );
    let dir = Proxy::builder().policy("gc", &text).write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    (status.success(), stderr)
}

#[tokio::test]
async fn check_names_the_rule_and_the_key_of_every_mistake() {
    let cases: [(&str, &[&str]); 7] = [
        (
            "status = 700\nmeans = \"failed\"",
            &["provider.rule[0].status", "status code"],
        ),
        (
            "means = \"failed\"",
            &["provider.rule[0].status", "missing"],
        ),
        (
            "status = 409\nmeans = \"retry\"",
            &["provider.rule[0].means", "\"pending\""],
        ),
        ("status = 409", &["provider.rule[0].means", "missing"]),
        (
            "status = 409\npointer = \"error/code\"\nmeans = \"pending\"",
            &["provider.rule[0].pointer", "\"/\""],
        ),
        (
            "status = 409\nequals = \"x\"\nmeans = \"pending\"",
            &["provider.rule[0].equals", "needs a pointer"],
        ),
        (
            "status = 409\npointer = \"/a\"\nequals = [1]\nmeans = \"pending\"",
            &["provider.rule[0].equals", "string, a number or a boolean"],
        ),
    ];
    for (rule, parts) in cases {
        let (ok, stderr) = check(&format!("\n[[provider.rule]]\n{rule}\n"), "").await;
        assert!(!ok, "{rule} was accepted");
        let line = stderr.lines().find(|l| l.contains("policies/gc.toml"));
        let line = line.unwrap_or_else(|| panic!("{rule}: no error line in {stderr}"));
        for part in parts {
            assert!(line.contains(part), "{rule}: {part} missing from {line}");
        }
    }
    let second = "\n[[provider.rule]]\nstatus = 409\nmeans = \"pending\"\n\
                  \n[[provider.rule]]\nstatus = \"6xx\"\nmeans = \"failed\"\n";
    let (_, stderr) = check(second, "").await;
    assert!(stderr.contains("provider.rule[1].status"), "{stderr}");
    let good = "\n[[provider.rule]]\nstatus = \"4xx\"\npointer = \"/n\"\nequals = 704\n\
                means = \"unknown\"\n";
    let (ok, stderr) = check(good, "").await;
    assert!(ok, "{stderr}");
}

#[tokio::test]
async fn answer_parts_exist_only_in_lookups() {
    let rule = "\n[[provider.rule]]\nstatus = 409\nmeans = \"reconcile\"\n";
    let other = route("refund", "POST /refunds", &["{answer:/id}"]);
    let (ok, stderr) = check(rule, &other).await;
    assert!(!ok);
    assert!(
        stderr.contains("route \"refund\": operation_id[0]")
            && stderr.contains("only in reconcile.lookup"),
        "{stderr}"
    );
    let list = "[route.reconcile]\nlookup = [\"GET /p/{answer:/id}\", \"GET /p?k={key}\"]\n\
                found = \"/p\"\n";
    let (ok, stderr) = check(rule, list).await;
    assert!(ok, "{stderr}");
    let others = |l: &&str| l.starts_with("warning") && !l.contains("pending_status");
    assert!(!stderr.lines().any(|l| others(&l)), "{stderr}");
    let empty = "[route.reconcile]\nlookup = []\nfound = \"/p\"\n";
    let (ok, stderr) = check(rule, empty).await;
    assert!(!ok && stderr.contains("reconcile.lookup"), "{stderr}");
    let only_answer = "[route.reconcile]\nlookup = \"GET /p/{answer:/id}\"\nfound = \"/p\"\n";
    let (ok, stderr) = check("", only_answer).await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("warning: ") && stderr.contains("never sent"),
        "no reconcile rule: the lookup never renders: {stderr}"
    );
}
