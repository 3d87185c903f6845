//! Loading the shipped configuration and the fixtures under `fixtures/config/`: what loads,
//! which defaults apply, and that every broken fixture is refused with an error naming the
//! file, the key and the fix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemproxy::config::{self, Config, ConfigErrors, LedgerAt, Limits, Retention};
use idemproxy::ledger::SslMode;
use idemproxy::policy::{
    Approval, Dedupe, Effect, KeyFormat, KeyPlacement, OnMissingId, Outcomes, Scheme, Segment,
    StatusRule, Unmatched,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    root().join("fixtures/config").join(name).join("proxy.toml")
}

fn load_ok(path: &Path) -> Config {
    config::load(path).unwrap_or_else(|e| panic!("{} should load:\n{e}", path.display()))
}

fn load_broken(name: &str) -> ConfigErrors {
    match config::load(&fixture(&format!("broken/{name}"))) {
        Ok(_) => panic!("broken/{name} loaded"),
        Err(errors) => errors,
    }
}

/// The one error line that mentions `file`, checked to contain every `parts` substring.
fn assert_error(errors: &ConfigErrors, file: &str, parts: &[&str]) {
    let text = errors.to_string();
    let found = text
        .lines()
        .any(|line| line.contains(file) && parts.iter().all(|p| line.contains(p)));
    assert!(found, "no error in {file} with {parts:?}; got:\n{text}");
}

#[test]
fn shipped_config_loads_the_whole_policy_library() {
    let config = load_ok(&root().join("proxy.toml"));
    assert_eq!(
        config.listen,
        "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(
        config.admin_listen,
        "127.0.0.1:9901".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(
        config.ledger,
        LedgerAt::File(root().join("data/ledger.redb"))
    );
    assert_eq!(config.policies, root().join("policies"));
    assert_eq!(config.limits, Limits::default());
    let adyen_window = Retention {
        completed: Duration::from_secs(32 * 86400),
        ..Retention::default()
    };
    assert_eq!(config.retention, adyen_window, "Adyen keeps keys 31 days");
    let names: Vec<&str> = config.providers.iter().map(|p| p.name.as_str()).collect();
    let library = [
        "adyen",
        "anthropic",
        "checkout",
        "github",
        "gocardless",
        "increase",
        "moderntreasury",
        "openai",
        "paypal",
        "postmark",
        "resend",
        "sendgrid",
        "slack",
        "square",
        "stripe",
        "twilio",
    ];
    assert_eq!(names, library, "sorted by name");

    let stripe = config
        .providers
        .iter()
        .find(|p| p.name == "stripe")
        .unwrap();
    assert_eq!(stripe.mount, "/stripe");
    assert_eq!(stripe.upstream.scheme, Scheme::Https);
    assert_eq!(stripe.upstream.host, "api.stripe.com");
    assert_eq!(
        (stripe.upstream.port, stripe.upstream.explicit_port),
        (443, false)
    );
    assert_eq!(stripe.dedupe, Dedupe::Key);
    assert_eq!(
        stripe.key,
        KeyPlacement::Header(http::HeaderName::from_static("idempotency-key"))
    );
    assert_eq!(stripe.key_retention, Duration::from_secs(24 * 3600));
    assert_eq!(stripe.request_id_header.as_ref().unwrap(), "request-id");
    assert_eq!(stripe.file, root().join("policies/stripe.toml"));
    let refund = &stripe.routes[0];
    assert_eq!(
        (refund.name.as_str(), refund.effect),
        ("create_refund", Effect::Irreversible)
    );
    assert_eq!(refund.operation_id.len(), 2);
    assert_eq!(refund.fingerprint_ignore, ["metadata[trace_id]"]);
    assert!(
        refund.reconcile.is_none(),
        "Stripe's refund list has no filter a lookup could use"
    );
    let (route, captures) = stripe
        .route_for(&http::Method::GET, "/v1/refunds/re_1")
        .expect("the read route matches");
    assert_eq!(route.name, "retrieve_refund");
    assert_eq!(captures, [("id".to_string(), "re_1".to_string())]);

    let square = config
        .providers
        .iter()
        .find(|p| p.name == "square")
        .unwrap();
    assert_eq!(
        square.key,
        KeyPlacement::JsonField("/idempotency_key".into())
    );
}

#[test]
fn absent_keys_take_the_spec_defaults() {
    let config = load_ok(&fixture("defaults"));
    assert_eq!(
        config.listen,
        "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(
        config.admin_listen,
        "127.0.0.1:9901".parse::<SocketAddr>().unwrap()
    );
    let folder = root().join("fixtures/config/defaults");
    assert_eq!(
        config.ledger,
        LedgerAt::File(folder.join("data/ledger.redb"))
    );
    assert_eq!(config.policies, folder.join("policies"));
    assert_eq!(config.limits.max_request_body, 1024 * 1024);
    assert_eq!(config.limits.max_stored_response, 8 * 1024 * 1024);
    assert_eq!(config.limits.in_flight_wait, Duration::from_secs(30));
    assert_eq!(config.limits.shutdown_grace, Duration::from_secs(10));
    assert_eq!(config.retention.completed, Duration::from_secs(30 * 86_400));
    assert_eq!(
        config.retention.tombstones,
        Duration::from_secs(400 * 86_400)
    );

    let p = &config.providers[0];
    assert_eq!(p.dedupe, Dedupe::None);
    assert_eq!(
        p.key,
        KeyPlacement::Header(http::HeaderName::from_static("idempotency-key"))
    );
    assert_eq!(p.key_format, KeyFormat::Opaque);
    assert_eq!(p.key_length, 64);
    assert_eq!(p.pending_status, 202);
    assert_eq!(p.key_retention, Duration::from_secs(86_400));
    assert_eq!(p.timeout, Duration::from_secs(30));
    assert_eq!(p.ca_file, None);
    assert_eq!(p.request_id_header, None);
    assert_eq!(p.control_headers, ["x-operation-id", "x-workflow-id"]);
    assert!(p.redact_headers.is_empty());
    assert_eq!(p.unmatched, Unmatched::Pass);
    assert_eq!(p.outcomes, Outcomes::default());
    assert_eq!((p.upstream.port, p.upstream.base_path.as_str()), (80, ""));

    let r = &p.routes[0];
    assert_eq!(r.effect, Effect::Irreversible);
    assert_eq!(r.on_missing_id, OnMissingId::Reject);
    assert_eq!(r.approval, Approval::None);
    assert!(r.fingerprint_ignore.is_empty() && r.fingerprint_headers.is_empty());
    assert!(r.approval_show.is_empty());
    assert!(r.reconcile.is_none());
}

#[test]
fn every_key_set_is_taken() {
    let config = load_ok(&fixture("full"));
    let folder = root().join("fixtures/config/full");
    assert_eq!(config.listen.port(), 18080);
    assert_eq!(config.ledger, LedgerAt::File(folder.join("var/ops.redb")));
    let limits = Limits {
        max_request_body: 2048,
        max_stored_response: 64 * 1024,
        in_flight_wait: Duration::from_millis(250),
        shutdown_grace: Duration::ZERO,
        inbound: idemproxy::config::Inbound {
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(7),
            max_connections: 64,
            max_buffered: 1 << 20,
        },
    };
    assert_eq!(config.limits, limits);
    assert_eq!(config.retention.completed, Duration::from_secs(7 * 86_400));
    assert_eq!(
        config.retention.tombstones,
        Duration::from_secs(90 * 86_400)
    );

    let p = &config.providers[0];
    assert_eq!(p.name, "local-bank");
    assert_eq!(p.mount, "/bank/v2");
    assert_eq!(p.upstream.host, "::1");
    assert_eq!((p.upstream.port, p.upstream.explicit_port), (8443, true));
    assert_eq!(p.upstream.base_path, "/api", "trailing slash dropped");
    assert_eq!(
        p.key,
        KeyPlacement::JsonField("/meta/idempotency~1key".into()),
        "json field replaces the header"
    );
    assert_eq!(p.key_format, KeyFormat::Plain);
    assert_eq!(p.pending_status, 503);
    assert_eq!(p.connect_to, Some("[::1]:9443".parse().unwrap()));
    let rule = &p.rules[0];
    assert_eq!(
        (rule.status, rule.pointer.as_deref(), rule.means),
        (
            StatusRule::Class(4),
            Some("/error/code"),
            idemproxy::policy::rule::Means::Pending
        )
    );
    assert_eq!(rule.equals, Some(serde_json::json!(704)));
    assert_eq!(p.answers.len(), 1);
    assert_eq!(
        p.answers[0].problems.as_deref(),
        Some(&["parameter-mismatch".to_string()][..])
    );
    assert_eq!(p.answers[0].headers[0].0, "x-retry");
    assert_eq!(p.answers[0].body[0].0, "error");
    assert_eq!(p.timeout, Duration::from_millis(1));
    assert_eq!(
        p.ca_file.as_deref(),
        Some(folder.join("policies/test-ca.pem").as_path())
    );
    assert_eq!(p.request_id_header.as_ref().unwrap(), "x-request-id");
    assert_eq!(p.control_headers, ["x-op"]);
    assert_eq!(p.redact_headers, ["x-secret"]);
    assert_eq!(p.unmatched, Unmatched::Reject);
    assert_eq!(
        p.outcomes.succeeded,
        [StatusRule::Class(2), StatusRule::Exact(409)]
    );
    assert_eq!(p.outcomes.failed, [StatusRule::Class(4)]);

    let transfer = &p.routes[0];
    assert_eq!(transfer.effect, Effect::Compensable);
    assert_eq!(
        transfer.on_missing_id,
        OnMissingId::Reject,
        "approval needs an ID"
    );
    assert_eq!(transfer.approval, Approval::Required);
    assert_eq!(transfer.fingerprint_headers, ["x-tenant"]);
    let shown: Vec<&str> = transfer
        .approval_show
        .iter()
        .map(|f| f.text.as_str())
        .collect();
    assert_eq!(shown, ["amount", "meta[note]", "query:currency"]);
    assert_eq!(
        transfer.matcher.segments,
        [
            Segment::Literal("accounts".into()),
            Segment::Capture("account".into()),
            Segment::Literal("transfers".into()),
            Segment::Rest("rest".into()),
        ]
    );
    let reconcile = transfer.reconcile.as_ref().unwrap();
    assert_eq!(reconcile.found, "");
    assert_eq!(reconcile.not_found_final_after, Duration::from_millis(1));
    assert!(
        p.routes[1].matcher.segments.is_empty(),
        "GET / is the root pattern"
    );
    assert_eq!(p.routes[1].on_missing_id, OnMissingId::Pass);
}

#[test]
fn minimal_fixture_loads() {
    let config = load_ok(&fixture("minimal"));
    assert_eq!(config.listen.port(), 0);
    assert_eq!(config.providers.len(), 1);
    assert_eq!(config.providers[0].routes.len(), 2);
}

#[test]
fn missing_proxy_toml_is_named() {
    let path = root().join("fixtures/config/no-such-dir/proxy.toml");
    let errors = config::load(&path).expect_err("no file");
    assert_eq!(errors.0.len(), 1);
    assert_error(
        &errors,
        "no-such-dir/proxy.toml",
        &["cannot read this file"],
    );
}

#[test]
fn a_bad_postgres_ledger_is_refused_without_showing_its_password() {
    let errors = load_broken("postgres_ledger");
    assert_error(
        &errors,
        "postgres_ledger/proxy.toml",
        &[
            "ledger: ",
            "postgres://idem:***@127.0.0.1:5432/idem",
            "sslmode \"allow\"",
        ],
    );
    assert_error(
        &errors,
        "postgres_ledger/proxy.toml",
        &["replicas.lease: ", "at least 500ms"],
    );
    assert!(!errors.to_string().contains("s3cret-pw"), "{errors}");
}

#[test]
fn a_postgres_ledger_url_is_a_shared_ledger_with_a_lease() {
    let config = load_ok(&fixture("postgres"));
    let LedgerAt::Postgres(url) = &config.ledger else {
        panic!("a file: {:?}", config.ledger);
    };
    let shown = "postgres://idem:***@db.internal:5433/idem?application_name=idemproxy-a";
    assert_eq!(url.to_string(), shown);
    assert_eq!(config.ledger.to_string(), shown);
    assert_eq!(url.ssl(), SslMode::Verified);
    assert!(!format!("{config:?}").contains("s3cret-pw"));
    assert_eq!(config.replicas.lease, Duration::from_secs(3));
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn replicas_beside_a_file_ledger_load_with_a_warning() {
    let config = load_ok(&fixture("replicas_on_file"));
    assert!(matches!(config.ledger, LedgerAt::File(_)));
    let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("replicas: ignored") && w.contains("PostgreSQL")),
        "{warnings:?}"
    );
    let defaults = load_ok(&fixture("defaults"));
    assert_eq!(defaults.replicas.lease, Duration::from_secs(10));
}

#[test]
fn missing_policies_folder() {
    let errors = load_broken("missing_policies");
    assert_error(
        &errors,
        "missing_policies/proxy.toml",
        &["policies: ", "no-such-folder", "create it"],
    );
}

#[test]
fn unknown_key_in_proxy_toml() {
    let errors = load_broken("unknown_key_proxy");
    let parts = [
        "limits.max_body (line 3)",
        "unknown key \"max_body\"",
        "check its spelling",
        "max_request_body",
    ];
    assert_error(&errors, "unknown_key_proxy/proxy.toml", &parts);
}

#[test]
fn unknown_key_in_a_policy() {
    let errors = load_broken("unknown_key_policy");
    let parts = [
        "route.efect (line 9)",
        "unknown key \"efect\"",
        "known keys here",
        "effect",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
}

#[test]
fn toml_syntax_error_names_the_line() {
    let errors = load_broken("toml_syntax");
    assert_error(
        &errors,
        "policies/shop.toml",
        &["mount (line 4)", "invalid TOML", "fix the syntax"],
    );
}

#[test]
fn bad_duration() {
    let errors = load_broken("bad_duration");
    let parts = [
        "provider.timeout",
        "\"30 parsecs\"",
        "write durations like \"250ms\"",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
}

#[test]
fn zero_where_zero_makes_no_sense() {
    let errors = load_broken("zero_duration");
    assert_error(
        &errors,
        "proxy.toml",
        &["limits.in_flight_wait", "at least 1ms"],
    );
}

#[test]
fn bad_size() {
    let errors = load_broken("bad_size");
    let parts = [
        "limits.max_request_body",
        "\"MB\"",
        "units: B, KiB, MiB, GiB",
    ];
    assert_error(&errors, "bad_size/proxy.toml", &parts);
}

#[test]
fn duplicate_mount() {
    let errors = load_broken("duplicate_mount");
    assert_error(
        &errors,
        "policies/b.toml",
        &["provider.mount", "already mounted by", "policies/a.toml"],
    );
    assert_eq!(errors.0.len(), 1);
}

#[test]
fn duplicate_provider_name() {
    let errors = load_broken("duplicate_provider");
    let parts = [
        "provider.name",
        "\"shop\" is already the name",
        "policies/a.toml",
        "unique",
    ];
    assert_error(&errors, "policies/b.toml", &parts);
}

#[test]
fn nested_mounts() {
    let errors = load_broken("nested_mounts");
    let parts = [
        "provider.mount",
        "\"/api/v2\" and \"/api\"",
        "nested",
        "prefix",
    ];
    assert_error(&errors, "policies/b.toml", &parts);
}

#[test]
fn bad_upstream() {
    let errors = load_broken("bad_upstream");
    assert_error(
        &errors,
        "policies/shop.toml",
        &["provider.upstream", "\"ftp\"", "use http or https"],
    );
}

#[test]
fn bad_match_pattern() {
    let errors = load_broken("bad_match");
    let parts = [
        "route \"order\": match",
        "{name*}",
        "last segment",
        "METHOD /path",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
}

#[test]
fn bad_names_methods_and_values() {
    let errors = load_broken("bad_names");
    let file = "bad_names/policies/shop.toml";
    assert_error(
        &errors,
        file,
        &["provider.name", "\"Shop\"", "a-z, 0-9, _ and -"],
    );
    assert_error(
        &errors,
        file,
        &["provider.mount", "\"/shop/\"", "no trailing"],
    );
    assert_error(
        &errors,
        file,
        &["provider.key_header", "\"Idem Key\"", "header name"],
    );
    assert_error(
        &errors,
        file,
        &["route \"create-order\": name", "a-z, 0-9 and _"],
    );
    assert_error(
        &errors,
        file,
        &["route \"create-order\": match", "\"post\"", "capitals"],
    );
    let effects =
        "expected one of \"read_only\", \"idempotent\", \"compensable\", \"irreversible\"";
    assert_error(
        &errors,
        file,
        &["route \"create-order\": effect", "\"destructive\"", effects],
    );
    assert_eq!(errors.0.len(), 6, "{errors}");
}

#[test]
fn missing_required_keys() {
    let errors = load_broken("missing_required");
    let file = "policies/shop.toml";
    assert_error(&errors, file, &["provider.name: missing"]);
    assert_error(&errors, file, &["provider.mount: missing"]);
    assert_error(&errors, file, &["route[0]: name: missing"]);
    assert_eq!(errors.0.len(), 3, "{errors}");
}

#[test]
fn missing_operation_id_on_a_guarded_route() {
    let errors = load_broken("missing_operation_id");
    let parts = [
        "route \"order\": operation_id",
        "missing",
        "unless effect = \"read_only\"",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
}

#[test]
fn duplicate_routes() {
    let errors = load_broken("duplicate_route");
    let file = "policies/shop.toml";
    assert_error(
        &errors,
        file,
        &["route \"order\": name", "unique per provider"],
    );
    assert_error(
        &errors,
        file,
        &[
            "route \"order_again\": match",
            "same match as route \"order\"",
        ],
    );
    // The same requests under other capture names, or (path_case = "insensitive") in other
    // letter case: until 2026-12-03 these loaded, the second route never used.
    assert_error(
        &errors,
        file,
        &[
            "route \"refund_by_refund\": match",
            "same match as route \"refund_by_id\"",
        ],
    );
    assert_error(
        &errors,
        "policies/cased.toml",
        &["route \"lower\": match", "same match as route \"upper\""],
    );
    // A guarded route whose every request an earlier unguarded route takes would never guard
    // anything (its requests are refused 400); one only partly overlapped loads.
    assert_error(
        &errors,
        file,
        &[
            "route \"cancel\": match",
            "earlier route \"peek\"",
            "list this route before it",
        ],
    );
    let text = errors.to_string();
    assert!(!text.contains("route \"amend\""), "{text}");
}

#[test]
fn bad_outcomes() {
    let errors = load_broken("bad_outcomes");
    let parts = [
        "provider.outcomes",
        "404 in both succeeded and failed",
        "failed defaults to",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
    let errors = load_broken("bad_status");
    let fix = "expected a status code from 100 to 599";
    assert_error(
        &errors,
        "policies/shop.toml",
        &["provider.outcomes.failed[1]", "600", fix],
    );
    assert_error(
        &errors,
        "policies/shop.toml",
        &["provider.outcomes.failed[2]", "\"6xx\"", fix],
    );
}

#[test]
fn ca_file_must_exist_and_hold_a_certificate() {
    let errors = load_broken("ca_file_missing");
    let parts = [
        "provider.ca_file",
        "certs/missing.pem",
        "relative to the policy file's folder",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
    let errors = load_broken("ca_file_not_pem");
    assert_error(
        &errors,
        "policies/shop.toml",
        &["provider.ca_file", "holds no certificate"],
    );
}

#[test]
fn reconcile_on_a_read_only_route() {
    let errors = load_broken("reconcile_read_only");
    let parts = ["route \"get_order\": reconcile", "read_only", "remove it"];
    assert_error(&errors, "policies/shop.toml", &parts);
}

#[test]
fn many_errors_are_reported_at_once() {
    let errors = load_broken("many_errors");
    let proxy = "many_errors/proxy.toml";
    assert_error(
        &errors,
        proxy,
        &["listen", "\"localhost:8080\"", "IP address and a port"],
    );
    assert_error(
        &errors,
        proxy,
        &["limits.shutdown_grace", "10 is not a duration"],
    );
    assert_error(
        &errors,
        proxy,
        &["retention.completed", "\"30 days later\""],
    );
    let a = "policies/a.toml";
    assert_error(&errors, a, &["provider.upstream", "user info"]);
    assert_error(
        &errors,
        a,
        &["provider.dedupe", "\"maybe\"", "\"key\", \"none\""],
    );
    assert_error(&errors, a, &["route \"r\": operation_id", "missing"]);
    let b = "policies/b.toml";
    assert_error(&errors, b, &["provider.unmatched", "\"drop\""]);
    assert_error(&errors, b, &["provider.mount", "nested"]);
    assert_eq!(errors.0.len(), 8, "{errors}");
    assert!(
        errors.0[0].file.ends_with(proxy),
        "proxy.toml's errors come first"
    );
}

// The two tests below exercise template checks that need the real template parser (the stub
// parses every template as one literal).

#[test]
fn path_part_must_name_a_capture() {
    let errors = load_broken("path_capture_missing");
    let parts = [
        "route \"cancel\": operation_id[1]",
        "{path:order_id}",
        "it has id",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
}

#[test]
fn unknown_template_source() {
    let errors = load_broken("unknown_template_source");
    let parts = [
        "policies/stripe.toml: route \"create_refund\": operation_id[1]: ",
        "hedaer",
    ];
    assert_error(&errors, "policies/stripe.toml", &parts);
}

#[test]
fn approval_cannot_be_skipped_by_on_missing_id_pass() {
    let errors = load_broken("approval_skipped");
    let parts = [
        "route \"refund\": on_missing_id",
        "skip the approval",
        "on_missing_id = \"reject\"",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
}

#[test]
fn approval_show_and_fingerprint_ignore_take_field_paths_each_listed_once() {
    let errors = load_broken("approval_show");
    let file = "policies/shop.toml";
    let bad = [
        "route \"payout\": approval_show[1]",
        "\"amount[\"",
        "bracket notation",
    ];
    assert_error(&errors, file, &bad);
    let twice = ["route \"payout\": approval_show[2]", "listed twice"];
    assert_error(&errors, file, &twice);
    let empty = [
        "route \"payout\": approval_show[3]",
        "`query:` names no parameter",
    ];
    assert_error(&errors, file, &empty);
    // `fingerprint_ignore`: bare names and `query:NAME` load; an empty `query:` and a header
    // (in the fingerprint only through fingerprint_headers) are refused, not left to do nothing.
    let no_name = [
        "route \"trace\": fingerprint_ignore[1]",
        "`query:` names no parameter",
    ];
    assert_error(&errors, file, &no_name);
    let header = [
        "route \"trace\": fingerprint_ignore[2]",
        "only when fingerprint_headers lists them",
    ];
    assert_error(&errors, file, &header);
    let text = errors.to_string();
    for fine in ["fingerprint_ignore[0]", "fingerprint_ignore[3]"] {
        assert!(!text.contains(fine), "{fine} is refused: {text}");
    }
}

/// `approval_show` on a route with `approval = "none"` and its own `operator_show`: it loads,
/// and `check` warns that nobody will see it (before 2026-12-03 it was refused). Without
/// `operator_show` (the external contract's example policy), the operator is shown it.
#[test]
fn approval_show_without_approval_loads_with_a_warning() {
    let config = load_ok(&fixture("approval_show_unused"));
    let route = &config.providers[0].routes[0];
    assert_eq!(route.approval, Approval::None);
    assert_eq!(route.approval_show.len(), 2);
    assert_eq!(route.operator_show.len(), 1);
    let full = load_ok(&fixture("full"));
    let shown = full.providers.iter().flat_map(|p| &p.routes);
    let listed: Vec<_> = shown.filter(|r| !r.approval_show.is_empty()).collect();
    assert!(!listed.is_empty());
    for route in listed {
        assert_eq!(
            route.operator_show, route.approval_show,
            "operator_show defaults to it"
        );
    }
    let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("route \"refund\": approval_show")
                && w.contains("ignored")
                && w.contains("approval = \"none\"")),
        "{warnings:?}"
    );
}

#[test]
fn credentials_are_never_part_of_an_identity_or_a_fingerprint() {
    let errors = load_broken("credential_in_identity");
    let file = "policies/shop.toml";
    let refund = [
        "route \"refund\": operation_id[1]",
        "{header:authorization}",
        "credential",
    ];
    assert_error(&errors, file, &refund);
    let cookie = [
        "route \"charge\": operation_id",
        "{header:cookie}",
        "credential",
    ];
    assert_error(&errors, file, &cookie);
    let redacted = [
        "route \"payout\": operation_id",
        "{header:x-api-secret}",
        "redact_headers",
    ];
    assert_error(&errors, file, &redacted);
    let fingerprint = [
        "route \"transfer\": fingerprint_headers[1]",
        "\"proxy-authorization\"",
        "credential",
    ];
    assert_error(&errors, file, &fingerprint);
    assert_eq!(errors.0.len(), 4, "{errors}");
}

#[test]
fn key_header_is_neither_framing_nor_a_credential() {
    let errors = load_broken("key_header_framing");
    let framing = [
        "provider.key_header",
        "\"content-length\"",
        "Idempotency-Key",
    ];
    assert_error(&errors, "policies/a_shop.toml", &framing);
    let credential = ["provider.key_header", "\"authorization\"", "credential"];
    assert_error(&errors, "policies/b_bank.toml", &credential);
}

#[test]
fn lookup_templates_use_only_what_exists_at_lookup_time() {
    let errors = load_broken("lookup_request_part");
    let file = "policies/shop.toml";
    let refund = [
        "route \"refund\": reconcile.lookup",
        "{header:x-workflow-id}",
        "never kept",
        "{json:/pointer}",
    ];
    assert_error(&errors, file, &refund);
    let cancel = [
        "route \"cancel\": reconcile.lookup",
        "{path:order}",
        "it has id",
    ];
    assert_error(&errors, file, &cancel);
    // The kept first request's body and query are read by a lookup: no error for those.
    let text = errors.to_string();
    for route in ["charge", "payout", "transfer"] {
        let key = format!("route \"{route}\"");
        assert!(!text.contains(&key), "{route} is a valid lookup: {text}");
    }
}

#[test]
fn not_found_final_after_of_zero_is_refused() {
    let errors = load_broken("zero_final_after");
    let parts = [
        "route \"refund\": reconcile.not_found_final_after",
        "at least 1ms",
    ];
    assert_error(&errors, "policies/shop.toml", &parts);
}

/// The contract's example policy, verbatim, loads (`protocol = "http"`, and `approval_show`
/// and `operator_show` beside `approval = "none"`, among its keys); `protocol = "mcp"` is refused by name. Before
/// 2026-12-03 the example was refused twice over.
#[test]
fn the_contracts_example_policy_loads_as_written() {
    let config = load_ok(&fixture("contract_example"));
    let stripe = &config.providers[0];
    assert_eq!(stripe.name, "stripe");
    assert_eq!(stripe.routes[0].name, "create_refund");
    // Its operator is shown the fields the approver would be: `approval_show` is not unused.
    assert_eq!(stripe.routes[0].operator_show.len(), 2);
    let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        !warnings.iter().any(|w| w.contains("approval_show")),
        "{warnings:?}"
    );
    let errors = load_broken("protocol_mcp");
    assert_error(
        &errors,
        "policies/tools.toml",
        &["provider.protocol", "\"mcp\"", "not available"],
    );
    let errors = load_broken("intercept");
    assert_error(
        &errors,
        "proxy.toml",
        &["intercept", "HTTPS interception", "not available"],
    );
}

/// A pass-through provider whose upstream holds a guarded provider's (same host and port, its
/// base path under the other's) would carry that provider's effects unguarded:
/// `/outer/K/v1/refunds` reaches `payk`'s `/k/v1/refunds`. `check` refuses it; with
/// `unmatched = "reject"` on the outer one it loads. Before 2026-12-03 it loaded.
#[test]
fn a_pass_through_upstream_holding_a_guarded_one_is_refused() {
    let errors = load_broken("nested_upstreams");
    assert_error(
        &errors,
        "policies/outer.toml",
        &[
            "provider.upstream",
            "payk.toml",
            "unguarded",
            "unmatched = \"reject\"",
        ],
    );
    load_ok(&fixture("nested_upstreams_rejected"));
}
