//! Unit tests of the CLI's pure parts: ID encoding, the call each verb makes, the tables.

use super::*;

fn no_file(_: &Path) -> Result<String, String> {
    Err("no file expected".into())
}

#[test]
fn list_passes_only_the_given_filters() {
    let all = Verb::List {
        state: None,
        provider: None,
        route: None,
        limit: None,
        after: None,
    };
    assert_eq!(plan(&all, &no_file).map(|c| c.path), Ok("/ops".into()));
    let some = Verb::List {
        state: Some("unknown".into()),
        provider: Some("a&b".into()),
        route: None,
        limit: Some(2),
        after: None,
    };
    let call = plan(&some, &no_file).expect("call");
    assert_eq!((call.method, call.body), (Method::GET, None));
    assert_eq!(call.path, "/ops?state=unknown&provider=a%26b&limit=2");
}

fn resolve(succeeded: bool, reason: Option<&str>) -> Verb {
    Verb::Resolve {
        id: "p/r/x".into(),
        outcome: outcome(succeeded, reason),
    }
}

fn outcome(succeeded: bool, reason: Option<&str>) -> Outcome {
    Outcome {
        succeeded,
        failed: !succeeded,
        status: succeeded.then_some(201),
        body_file: succeeded.then(|| PathBuf::from("body.json")),
        headers: if succeeded {
            vec!["content-type: application/json".into()]
        } else {
            vec![]
        },
        reason: reason.map(str::to_string),
        empty_body: false,
    }
}

#[test]
fn resolve_builds_the_spec_bodies() {
    let read = |p: &Path| {
        assert_eq!(p, Path::new("body.json"));
        Ok(r#"{"id":"re_1"}"#.to_string())
    };
    let call = plan(&resolve(true, None), &read).expect("call");
    assert_eq!(
        (call.method, call.path.as_str()),
        (Method::POST, "/ops/p%2Fr%2Fx/resolve")
    );
    assert_eq!(
        call.body,
        Some(json!({"outcome": "succeeded", "status": 201,
            "headers": {"content-type": "application/json"}, "body": r#"{"id":"re_1"}"#}))
    );
    let call = plan(&resolve(false, Some("nothing at Stripe")), &no_file).expect("call");
    assert_eq!(
        call.body,
        Some(json!({"outcome": "failed", "reason": "nothing at Stripe"}))
    );
    let mut bad = resolve(true, None);
    if let Verb::Resolve { outcome, .. } = &mut bad {
        outcome.headers = vec!["no colon".into()];
    }
    assert!(plan(&bad, &read).is_err());
    let mut bodiless = resolve(true, None);
    if let Verb::Resolve { outcome, .. } = &mut bodiless {
        outcome.body_file = None;
    }
    let err = plan(&bodiless, &read).unwrap_err();
    assert!(err.contains("--body-file"), "{err}");
}

#[test]
fn re_resolve_posts_the_resolve_body_to_its_own_call() {
    let read = |_: &Path| Ok(r#"{"id":"re_1"}"#.to_string());
    let verb = Verb::ReResolve {
        id: "p/r/x".into(),
        outcome: outcome(true, Some("the first body was empty")),
    };
    let call = plan(&verb, &read).expect("call");
    assert_eq!(
        (call.method, call.path.as_str()),
        (Method::POST, "/ops/p%2Fr%2Fx/re-resolve")
    );
    assert_eq!(
        call.body,
        Some(json!({"outcome": "succeeded", "status": 201,
            "headers": {"content-type": "application/json"}, "body": r#"{"id":"re_1"}"#,
            "reason": "the first body was empty"}))
    );
}

#[test]
fn approve_and_reject_post_their_reason() {
    let approve = Verb::Approve {
        id: "a b".into(),
        reason: None,
    };
    let call = plan(&approve, &no_file).expect("call");
    assert_eq!(
        (call.path.as_str(), call.body),
        ("/ops/a%20b/approve", Some(json!({})))
    );
    let reject = Verb::Reject {
        id: "x".into(),
        reason: "too much".into(),
    };
    let call = plan(&reject, &no_file).expect("call");
    assert_eq!(call.body, Some(json!({"reason": "too much"})));
}

#[test]
fn list_table_aligns_columns_and_names_the_next_page() {
    let page = json!({"ops": [
        {"operation_id": "p/r/long-id-1", "state": "succeeded", "attempts": 1, "updated_at": "T1"},
        {"operation_id": "p/r/2\u{1b}[31m", "state": "unknown", "attempts": 12, "updated_at": "T2"}
    ], "next": "abc"});
    let text = render_list(&page, "idemproxy ops list --limit 2");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "ID               STATE      ATTEMPTS  UPDATED");
    assert_eq!(lines[1], "p/r/long-id-1    succeeded  1         T1");
    // A control character in an ID is shown escaped, never sent to the terminal.
    assert_eq!(lines[2], "p/r/2\\u{1b}[31m  unknown    12        T2");
    assert_eq!(lines[3], "more: idemproxy ops list --limit 2 --after abc");
    assert_eq!(
        render_list(&json!({"ops": [], "next": null}), "idemproxy ops list"),
        "no operations\n"
    );
}

#[test]
fn the_next_page_hint_repeats_the_filters_given() {
    let verb = Verb::List {
        state: Some("unknown".into()),
        provider: Some("my shop".into()),
        route: None,
        limit: Some(5),
        after: Some("old".into()),
    };
    assert_eq!(
        list_again(&verb, Some("http://127.0.0.1:9901")),
        "idemproxy ops list --state unknown --provider 'my shop' --limit 5 --admin http://127.0.0.1:9901"
    );
}

#[test]
fn operation_shows_fields_then_events() {
    let op = json!({"operation_id": "p/r/x", "state": "succeeded", "error": null,
        "response": {"status": 200, "body_bytes": 3, "body_sha256": "ab"},
        "events": [{"at": "T", "kind": "operation.claimed", "attempt": 1, "detail": "new"}]});
    let text = render_op(&op);
    assert!(text.contains("operation_id         p/r/x\n"), "{text}");
    assert!(
        text.contains("response             status 200, 3 bytes, sha256 ab\n"),
        "{text}"
    );
    assert!(text.contains("error                -\n"), "{text}");
    assert!(
        !text.contains("replays"),
        "an action's answer has none: {text}"
    );
    assert!(
        text.ends_with("events:\n  T  operation.claimed    attempt 1  new\n"),
        "{text}"
    );
    let shown = json!({"replays": {"count": 2, "first_at": "T1", "last_at": "T2"}});
    let counted = render_op(&shown);
    assert!(
        counted.contains("replays              2, first T1, last T2\n"),
        "{counted}"
    );
    let none = render_op(&json!({"replays": {"count": 0, "first_at": null, "last_at": null}}));
    assert!(none.contains("replays              0\n"), "{none}");
    assert!(!none.contains("to approve"), "{none}");
}

#[test]
fn a_waiting_operation_prints_the_fields_to_approve() {
    let op = json!({"approval_request": {
        "fields": {"amount": "1000", "card[cvc]": "[masked]", "note": "a\u{1b}[2J"},
        "masked": ["card[cvc]"], "missing": ["reason"]}});
    let text = render_op(&op);
    let want = "to approve:\n  amount             1000\n  card[cvc]          [masked]\n  \
                note               a\\u{1b}[2J\n  reason             (not in the request)\n";
    assert!(text.contains(want), "{text}");
}

#[test]
fn problems_print_their_detail() {
    let body = br#"{"type":"urn:idemproxy:conflict","status":409,"detail":"it is succeeded"}"#;
    assert_eq!(
        problem_detail(StatusCode::CONFLICT, body),
        "it is succeeded (409)"
    );
    let text = problem_detail(StatusCode::BAD_GATEWAY, b"oops");
    assert!(text.contains("502") && text.contains("oops"), "{text}");
}

#[test]
fn the_admin_url_comes_from_the_config_or_the_default() {
    let missing = Path::new("/nonexistent/proxy.toml");
    assert_eq!(admin_from_config(missing), DEFAULT_ADMIN);
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("policies")).expect("policies");
    let policy = "[provider]\nname = \"p\"\nupstream = \"http://127.0.0.1:1\"\nmount = \"/p\"\n";
    std::fs::write(dir.path().join("policies/p.toml"), policy).expect("write");
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, "admin_listen = \"0.0.0.0:9911\"\n").expect("write");
    assert_eq!(admin_from_config(&path), "http://127.0.0.1:9911");
}

#[test]
fn rebind_posts_its_reason() {
    let rebind = Verb::Rebind {
        id: "p/r/wf 1".into(),
        reason: "rotated the key".into(),
    };
    let call = plan(&rebind, &no_file).expect("call");
    assert_eq!(call.method, Method::POST);
    assert_eq!(call.path, "/ops/p%2Fr%2Fwf%201/rebind");
    assert_eq!(call.body, Some(json!({"reason": "rotated the key"})));
}
