//! Unit tests of the admin module's pure parts: routing, the token, the exposure check and
//! the operator transitions.

use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};

use super::action::{
    Resolution, approve, parse_approve, parse_reject, parse_resolution, re_resolve, reject, resolve,
};
use super::*;
use crate::clock::Timestamp;
use crate::config::Config;
use crate::config::{Limits, Retention};
use crate::operation::{Approval, Event, EventKind, Operation, RequestChange, State};

const NOW: Timestamp = Timestamp(5_000);
const ID: &str = "stripe/create_refund/wf-81";

fn op(state: State, approval: Approval) -> Operation {
    Operation {
        fingerprint: "f".into(),
        updated_at: Timestamp(2),
        error: Some("timed out".into()),
        fence: 9,
        approval,
        ..Operation::example(ID, state, Timestamp(1))
    }
}

fn config(admin_listen: &str) -> Config {
    Config {
        file: "proxy.toml".into(),
        listen: "127.0.0.1:0".parse().expect("addr"),
        admin_listen: admin_listen.parse().expect("addr"),
        ledger: PathBuf::from("ledger.redb").into(),
        replicas: Default::default(),
        policies: "policies".into(),
        limits: Limits {
            max_request_body: 1 << 20,
            max_stored_response: 8 << 20,
            in_flight_wait: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            ..Limits::default()
        },
        retention: Retention {
            completed: Duration::from_secs(86_400),
            tombstones: Duration::from_secs(86_400),
        },
        notify: None,
        intercept: None,
        providers: Vec::new(),
        warnings: Vec::new(),
    }
}

#[test]
fn endpoints_decode_the_id_and_check_the_method() {
    let of = |m: &Method, p: &str| Endpoint::of(m, p);
    let id = || ID.to_string();
    let encoded = "/ops/stripe%2Fcreate_refund%2Fwf-81";
    assert_eq!(of(&Method::GET, encoded), Ok(Endpoint::Show(id())));
    let resp = format!("{encoded}/response");
    assert_eq!(of(&Method::GET, &resp), Ok(Endpoint::Response(id())));
    let resolve = format!("{encoded}/resolve");
    assert_eq!(of(&Method::POST, &resolve), Ok(Endpoint::Resolve(id())));
    assert_eq!(of(&Method::GET, "/ops"), Ok(Endpoint::List));
    let status = |m: &Method, p: &str| of(m, p).err().map(|e| e.status());
    assert_eq!(
        status(&Method::GET, &resolve),
        Some(StatusCode::METHOD_NOT_ALLOWED)
    );
    assert_eq!(
        status(&Method::POST, "/ops"),
        Some(StatusCode::METHOD_NOT_ALLOWED)
    );
    assert_eq!(
        status(&Method::DELETE, encoded),
        Some(StatusCode::METHOD_NOT_ALLOWED)
    );
    // An unencoded ID has more segments than any endpoint.
    assert_eq!(
        status(&Method::GET, "/ops/stripe/create_refund/x"),
        Some(StatusCode::NOT_FOUND)
    );
    assert_eq!(status(&Method::GET, "/nope"), Some(StatusCode::NOT_FOUND));
    assert_eq!(
        status(&Method::GET, "/ops/a%zz"),
        Some(StatusCode::BAD_REQUEST)
    );
}

fn auth(value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(value).expect("value"),
    );
    h
}

#[test]
fn the_token_admits_only_its_own_bearer() {
    let token = Token::new("s3cret").expect("token");
    assert!(token.admits(&auth("Bearer s3cret")));
    assert!(token.admits(&auth("bearer s3cret")));
    assert!(!token.admits(&auth("Bearer s3cre")));
    assert!(!token.admits(&auth("Bearer s3cret2")));
    assert!(!token.admits(&auth("Basic s3cret")));
    assert!(!token.admits(&auth("s3cret")));
    assert!(!token.admits(&HeaderMap::new()));
    let mut twice = auth("Bearer s3cret");
    twice.append(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer s3cret"),
    );
    assert!(!token.admits(&twice), "two `Authorization` headers");
    assert!(Token::new("  ").is_none());
    assert!(!format!("{token:?}").contains("s3cret"));
}

#[test]
fn exposure_is_refused_only_beyond_loopback_without_a_token() {
    let token = Token::new("t");
    assert_eq!(check_exposure(&config("127.0.0.1:9901"), None), Ok(()));
    assert_eq!(check_exposure(&config("[::1]:9901"), None), Ok(()));
    assert_eq!(
        check_exposure(&config("0.0.0.0:9901"), token.as_ref()),
        Ok(())
    );
    let refused = check_exposure(&config("0.0.0.0:9901"), None).expect_err("refused");
    assert!(
        refused.contains("admin_listen") && refused.contains(TOKEN_VAR),
        "{refused}"
    );
    assert!(check_exposure(&config("10.1.2.3:9901"), None).is_err());
}

fn succeeded(body: &str) -> Resolution {
    let json = format!(
        r#"{{"outcome":"succeeded","body":{body:?},"headers":{{"content-type":"text/plain"}}}}"#
    );
    parse_resolution(json.as_bytes(), &[], 1024).expect("valid resolution")
}

#[test]
fn resolution_bodies_are_validated() {
    let Resolution::Succeeded { response, reason } = succeeded("done") else {
        panic!("succeeded expected");
    };
    assert_eq!(
        (response.status, &response.body[..], reason),
        (200, &b"done"[..], None)
    );
    assert_eq!(
        response.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/plain"[..])
    );
    let failed = parse_resolution(br#"{"outcome":"failed","reason":" no refund "}"#, &[], 1024);
    assert_eq!(
        failed,
        Ok(Resolution::Failed {
            reason: "no refund".into()
        })
    );
    for bad in [
        &br#"{"outcome":"failed"}"#[..],
        br#"{"outcome":"failed","reason":"x","body":"b"}"#,
        br#"{"outcome":"done"}"#,
        br#"{"outcome":"succeeded","status":99}"#,
        br#"{"outcome":"succeeded","headers":{"bad name":"v"}}"#,
        br#"{"outcome":"succeeded","extra":1}"#,
        br#"{"outcome":"succeeded"}"#,
        br#"{"outcome":"succeeded","status":204,"body":null}"#,
        b"{not json",
        b"",
    ] {
        let err = parse_resolution(bad, &[], 1024).expect_err("refused");
        assert_eq!(
            err.status(),
            StatusCode::BAD_REQUEST,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let big = parse_resolution(br#"{"outcome":"succeeded","body":"12345"}"#, &[], 4);
    assert_eq!(
        big.err().map(|e| e.status()),
        Some(StatusCode::PAYLOAD_TOO_LARGE)
    );
}

#[test]
fn stored_headers_lose_cookies_hop_by_hop_length_and_redacted() {
    let body =
        br#"{"outcome":"succeeded","body":"","empty_body":true,"headers":{"set-cookie":"a=b","connection":"close",
        "content-length":"99","x-secret":"s","idempotent-replayed":"false","x-keep":"1"}}"#;
    let redact = [HeaderName::from_static("x-secret")];
    let Ok(Resolution::Succeeded { response, .. }) = parse_resolution(body, &redact, 1024) else {
        panic!("succeeded expected");
    };
    let names: Vec<&str> = response.headers.keys().map(|n| n.as_str()).collect();
    assert_eq!(names, ["x-keep"]);
}

#[test]
fn resolve_only_from_unknown() {
    let (write, result) = resolve(
        Some(op(State::Unknown, Approval::NotRequired)),
        ID,
        succeeded("ok"),
        NOW,
    );
    let write = write.expect("a write");
    let resolved = result.expect("resolved");
    assert_eq!(resolved.state, State::Succeeded);
    assert_eq!(
        (resolved.updated_at, resolved.error.clone(), resolved.fence),
        (NOW, None, 0)
    );
    let meta = resolved.response.expect("meta");
    assert_eq!((meta.status, meta.body_bytes), (200, 2));
    assert_eq!(
        write.response.map(|r| r.body),
        Some(bytes::Bytes::from_static(b"ok"))
    );
    assert_eq!(write.events.len(), 1);
    assert_eq!(write.events[0].kind, EventKind::OperatorResolved);

    assert_eq!(
        write.request,
        RequestChange::Erase,
        "succeeded: never sent again"
    );

    let failed = Resolution::Failed {
        reason: "provider shows nothing".into(),
    };
    let doubted = Operation {
        maybe_effect_at: Some(NOW),
        ..op(State::Unknown, Approval::NotRequired)
    };
    let (write, result) = resolve(Some(doubted), ID, failed.clone(), NOW);
    let resolved = result.expect("resolved");
    assert_eq!(resolved.state, State::Failed);
    assert_eq!(resolved.error.as_deref(), Some("provider shows nothing"));
    assert_eq!(
        resolved.maybe_effect_at, None,
        "the operator settled the doubt"
    );
    assert_eq!(
        write.as_ref().map(|w| w.request.clone()),
        Some(RequestChange::Keep),
        "a retry repeats the first request"
    );
    let detail = write
        .map(|w| w.events[0].detail.clone())
        .unwrap_or_default();
    assert!(detail.contains("provider shows nothing"), "{detail}");

    for state in [
        State::Succeeded,
        State::Failed,
        State::InFlight,
        State::Prepared,
    ] {
        let (write, result) = resolve(
            Some(op(state, Approval::NotRequired)),
            ID,
            failed.clone(),
            NOW,
        );
        assert!(write.is_none());
        assert_eq!(result.err().map(|e| e.status()), Some(StatusCode::CONFLICT));
    }
    let (write, result) = resolve(None, ID, failed, NOW);
    assert!(write.is_none());
    assert_eq!(result.err(), Some(AdminError::NotFound(ID.into())));
}

fn history(kinds: &[EventKind]) -> Vec<Event> {
    let event = |kind: &EventKind| Event {
        at: Timestamp(3),
        kind: *kind,
        attempt: 1,
        detail: String::new(),
    };
    kinds.iter().map(event).collect()
}

#[test]
fn re_resolve_only_what_an_operator_resolved_last() {
    use EventKind::*;
    let (_, first) = resolve(
        Some(op(State::Unknown, Approval::NotRequired)),
        ID,
        succeeded("no"),
        NOW,
    );
    let resolved = first.expect("resolved");
    // Replays and a rebinding since add history only: still the operator's resolution.
    let events = history(&[
        Claimed,
        Unknown,
        OperatorResolved,
        Replayed,
        OperatorRebound,
    ]);
    let (write, result) = re_resolve(Some(resolved.clone()), &events, ID, succeeded("{}"), NOW);
    let corrected = result.expect("corrected");
    let write = write.expect("a write");
    assert_eq!(write.events[0].kind, OperatorReResolved);
    assert!(
        write.events[0]
            .detail
            .contains("from succeeded (status 200, 2 bytes) to succeeded (status 200, 2 bytes)"),
        "{}",
        write.events[0].detail
    );
    assert_eq!(corrected.response.map(|m| m.body_bytes), Some(2));
    assert_eq!(write.request, RequestChange::Erase);

    // Corrected to failed: the operator's answer is void.
    let failed = Resolution::Failed {
        reason: "not there".into(),
    };
    let (write, result) = re_resolve(Some(resolved.clone()), &events, ID, failed.clone(), NOW);
    let voided = result.expect("corrected");
    assert_eq!((voided.state, voided.response), (State::Failed, None));
    assert!(write.is_some_and(|w| w.response.is_none()));

    for refused in [
        vec![Claimed, ResultPersisted],
        vec![
            OperatorResolved,
            Claimed,
            ProviderRequested,
            ResultPersisted,
        ],
        vec![
            Claimed,
            Unknown,
            ReconcileStarted,
            ReconcileFound,
            ResultPersisted,
        ],
        vec![Prepared, OperatorRejected],
        vec![],
    ] {
        let (write, result) = re_resolve(
            Some(resolved.clone()),
            &history(&refused),
            ID,
            failed.clone(),
            NOW,
        );
        assert!(write.is_none(), "{refused:?}");
        assert_eq!(
            result.err().map(|e| e.status()),
            Some(StatusCode::CONFLICT),
            "{refused:?}"
        );
    }
    let still_unknown = op(State::Unknown, Approval::NotRequired);
    let (write, _) = re_resolve(Some(still_unknown), &events, ID, failed.clone(), NOW);
    assert!(
        write.is_none(),
        "an unknown operation is resolved, not corrected"
    );
    let (_, gone) = re_resolve(None, &[], ID, failed, NOW);
    assert_eq!(gone.err().map(|e| e.status()), Some(StatusCode::NOT_FOUND));
}

#[test]
fn approve_only_a_pending_prepared_operation() {
    let (write, result) = approve(
        Some(op(State::Prepared, Approval::Pending)),
        ID,
        Some("ok by me".into()),
        NOW,
    );
    let approved = result.expect("approved");
    assert_eq!(
        (approved.state, approved.approval),
        (State::Prepared, Approval::Approved)
    );
    let event = write.map(|w| w.events[0].clone()).expect("event");
    assert_eq!(event.kind, EventKind::OperatorApproved);
    assert!(event.detail.contains("ok by me"));
    for (state, gate) in [
        (State::Prepared, Approval::Approved),
        (State::InFlight, Approval::Approved),
        (State::Failed, Approval::Rejected),
        (State::Succeeded, Approval::NotRequired),
    ] {
        let (write, result) = approve(Some(op(state, gate)), ID, None, NOW);
        assert!(write.is_none());
        assert_eq!(result.err().map(|e| e.status()), Some(StatusCode::CONFLICT));
    }
}

#[test]
fn reject_from_prepared_approved_or_not() {
    for gate in [Approval::Pending, Approval::Approved] {
        let (write, result) = reject(Some(op(State::Prepared, gate)), ID, "too big".into(), NOW);
        let rejected = result.expect("rejected");
        assert_eq!(
            (rejected.state, rejected.approval),
            (State::Failed, Approval::Rejected)
        );
        assert_eq!(rejected.error.as_deref(), Some("too big"));
        assert_eq!(
            write.map(|w| w.events[0].kind),
            Some(EventKind::OperatorRejected)
        );
    }
    for state in [
        State::InFlight,
        State::Succeeded,
        State::Failed,
        State::Unknown,
    ] {
        let (write, result) = reject(Some(op(state, Approval::Approved)), ID, "x".into(), NOW);
        assert!(write.is_none());
        assert_eq!(result.err().map(|e| e.status()), Some(StatusCode::CONFLICT));
    }
}

#[test]
fn approve_and_reject_bodies() {
    assert_eq!(parse_approve(b""), Ok(None));
    assert_eq!(
        parse_approve(br#"{"reason":"fine"}"#),
        Ok(Some("fine".into()))
    );
    assert!(parse_approve(br#"{"why":"fine"}"#).is_err());
    assert_eq!(parse_reject(br#"{"reason":"no"}"#), Ok("no".into()));
    for bad in [&b""[..], br#"{}"#, br#"{"reason":"  "}"#, b"[1]"] {
        assert!(
            parse_reject(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let long = format!(r#"{{"reason":"{}"}}"#, "x".repeat(MAX_REASON + 1));
    assert!(parse_reject(long.as_bytes()).is_err());
}

#[test]
fn rebind_unbinds_in_any_state_and_needs_a_reason() {
    use super::action::{parse_rebind, rebind};
    for state in State::ALL {
        let bound = Operation {
            principal: Some("caller".into()),
            ..op(state, Approval::NotRequired)
        };
        let (write, result) = rebind(Some(bound.clone()), ID, "rotated".into(), NOW);
        let rebound = result.expect("rebound");
        assert_eq!(rebound.principal, None);
        assert_eq!(
            (rebound.state, rebound.fence),
            (state, bound.fence),
            "{state:?}"
        );
        let write = write.expect("written");
        assert_eq!(write.events[0].kind, EventKind::OperatorRebound);
        assert!(write.events[0].detail.contains("rotated"));
    }
    let (write, result) = rebind(None, ID, "x".into(), NOW);
    assert!(write.is_none() && matches!(result, Err(AdminError::NotFound(_))));
    assert_eq!(
        parse_rebind(br#"{"reason":" new key "}"#),
        Ok("new key".into())
    );
    assert!(parse_rebind(b"{}").is_err());
    assert!(parse_rebind(b"").is_err());
    let rebind_path = format!("/ops/{}/rebind", ID.replace('/', "%2F"));
    assert_eq!(
        Endpoint::of(&Method::POST, &rebind_path),
        Ok(Endpoint::Rebind(ID.into()))
    );
}
