//! Loading the shipped configuration and the fixtures under `fixtures/config/`: what loads,
//! which defaults apply, and that every broken fixture is refused with an error naming the
//! file, the key and the fix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemproxy::config::{self, Config, ConfigErrors, LedgerAt, Limits, Retention};
use idemproxy::ledger::SslMode;
use idemproxy::policy::{
    ApprovalMode, Dedupe, Effect, KeyFormat, KeyPlacement, OnMissingId, Outcomes, Scheme, Segment,
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
    assert_eq!(r.approval, ApprovalMode::None);
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
    assert_eq!(transfer.approval, ApprovalMode::Required);
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
    // The fixture's policy leaves pending_status at 202 (warned), nothing about the ledger.
    let about_ledger = |w: &&idemproxy::config::ConfigError| w.key != "provider.pending_status";
    assert!(
        !config.warnings.iter().any(|w| about_ledger(&w)),
        "{:?}",
        config.warnings
    );
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

// The two tests below exercise template checks that need the real template parser (the stub
// parses every template as one literal).

/// `approval_show` on a route with `approval = "none"` and its own `operator_show`: it loads,
/// and `check` warns that nobody will see it (before 2026-12-03 it was refused). Without
/// `operator_show` (the external contract's example policy), the operator is shown it.
#[test]
fn approval_show_without_approval_loads_with_a_warning() {
    let config = load_ok(&fixture("approval_show_unused"));
    let route = &config.providers[0].routes[0];
    assert_eq!(route.approval, ApprovalMode::None);
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

/// The contract's example policy, verbatim, loads (`protocol = "http"`, and `approval_show`
/// and `operator_show` beside `approval = "none"`, among its keys). Before 2026-12-03 the
/// example was refused twice over.
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
}

/// A pass-through provider whose upstream holds a guarded provider's is refused (the
/// `nested_upstreams` row of `BROKEN`); with `unmatched = "reject"` on the outer one it loads.
#[test]
fn a_pass_through_upstream_holding_a_guarded_one_loads_with_unmatched_reject() {
    load_ok(&fixture("nested_upstreams_rejected"));
}

/// One broken fixture under `fixtures/config/broken/` and what its refusal must say.
struct Broken {
    fixture: &'static str,
    /// Error lines, each `(file, parts)`: one line names `file` and holds every part.
    lines: &'static [(&'static str, &'static [&'static str])],
    /// How many errors in all, where the row pins it.
    count: Option<usize>,
    /// Text no error may hold.
    absent: &'static [&'static str],
    /// The file the first error names, where the row pins the order.
    first: Option<&'static str>,
}

const ROW: Broken = Broken {
    fixture: "",
    lines: &[],
    count: None,
    absent: &[],
    first: None,
};

const EFFECTS: &str =
    "expected one of \"read_only\", \"idempotent\", \"compensable\", \"irreversible\"";
const STATUS_FIX: &str = "expected a status code from 100 to 599";
const SHOP: &str = "policies/shop.toml";

/// Every broken fixture, with the error lines (file, key, fix) `check` and `serve` print.
const BROKEN: &[Broken] = &[
    // The PostgreSQL password is never shown.
    Broken {
        fixture: "postgres_ledger",
        lines: &[
            (
                "postgres_ledger/proxy.toml",
                &[
                    "ledger: ",
                    "postgres://idem:***@127.0.0.1:5432/idem",
                    "sslmode \"allow\"",
                ],
            ),
            (
                "postgres_ledger/proxy.toml",
                &["replicas.lease: ", "at least 500ms"],
            ),
        ],
        absent: &["s3cret-pw"],
        ..ROW
    },
    Broken {
        fixture: "missing_policies",
        lines: &[(
            "missing_policies/proxy.toml",
            &["policies: ", "no-such-folder", "create it"],
        )],
        ..ROW
    },
    Broken {
        fixture: "unknown_key_proxy",
        lines: &[(
            "unknown_key_proxy/proxy.toml",
            &[
                "limits.max_body (line 3)",
                "unknown key \"max_body\"",
                "check its spelling",
                "max_request_body",
            ],
        )],
        ..ROW
    },
    Broken {
        fixture: "unknown_key_policy",
        lines: &[(
            SHOP,
            &[
                "route.efect (line 9)",
                "unknown key \"efect\"",
                "known keys here",
                "effect",
            ],
        )],
        ..ROW
    },
    // A TOML syntax error names the line.
    Broken {
        fixture: "toml_syntax",
        lines: &[(SHOP, &["mount (line 4)", "invalid TOML", "fix the syntax"])],
        ..ROW
    },
    Broken {
        fixture: "bad_duration",
        lines: &[(
            SHOP,
            &[
                "provider.timeout",
                "\"30 parsecs\"",
                "write durations like \"250ms\"",
            ],
        )],
        ..ROW
    },
    // Zero where zero makes no sense.
    Broken {
        fixture: "zero_duration",
        lines: &[("proxy.toml", &["limits.in_flight_wait", "at least 1ms"])],
        ..ROW
    },
    Broken {
        fixture: "bad_size",
        lines: &[(
            "bad_size/proxy.toml",
            &[
                "limits.max_request_body",
                "\"MB\"",
                "units: B, KiB, MiB, GiB",
            ],
        )],
        ..ROW
    },
    Broken {
        fixture: "duplicate_mount",
        lines: &[(
            "policies/b.toml",
            &["provider.mount", "already mounted by", "policies/a.toml"],
        )],
        count: Some(1),
        ..ROW
    },
    Broken {
        fixture: "duplicate_provider",
        lines: &[(
            "policies/b.toml",
            &[
                "provider.name",
                "\"shop\" is already the name",
                "policies/a.toml",
                "unique",
            ],
        )],
        ..ROW
    },
    Broken {
        fixture: "nested_mounts",
        lines: &[(
            "policies/b.toml",
            &[
                "provider.mount",
                "\"/api/v2\" and \"/api\"",
                "nested",
                "prefix",
            ],
        )],
        ..ROW
    },
    Broken {
        fixture: "bad_upstream",
        lines: &[(SHOP, &["provider.upstream", "\"ftp\"", "use http or https"])],
        ..ROW
    },
    Broken {
        fixture: "bad_match",
        lines: &[(
            SHOP,
            &[
                "route \"order\": match",
                "{name*}",
                "last segment",
                "METHOD /path",
            ],
        )],
        ..ROW
    },
    // Bad names, methods and values.
    Broken {
        fixture: "bad_names",
        lines: &[
            (
                "bad_names/policies/shop.toml",
                &["provider.name", "\"Shop\"", "a-z, 0-9, _ and -"],
            ),
            (
                "bad_names/policies/shop.toml",
                &["provider.mount", "\"/shop/\"", "no trailing"],
            ),
            (
                "bad_names/policies/shop.toml",
                &["provider.key_header", "\"Idem Key\"", "header name"],
            ),
            (
                "bad_names/policies/shop.toml",
                &["route \"create-order\": name", "a-z, 0-9 and _"],
            ),
            (
                "bad_names/policies/shop.toml",
                &["route \"create-order\": match", "\"post\"", "capitals"],
            ),
            (
                "bad_names/policies/shop.toml",
                &["route \"create-order\": effect", "\"destructive\"", EFFECTS],
            ),
        ],
        count: Some(6),
        ..ROW
    },
    Broken {
        fixture: "missing_required",
        lines: &[
            (SHOP, &["provider.name: missing"]),
            (SHOP, &["provider.mount: missing"]),
            (SHOP, &["route[0]: name: missing"]),
        ],
        count: Some(3),
        ..ROW
    },
    // An operation_id is required on a guarded route.
    Broken {
        fixture: "missing_operation_id",
        lines: &[(
            SHOP,
            &[
                "route \"order\": operation_id",
                "missing",
                "unless effect = \"read_only\"",
            ],
        )],
        ..ROW
    },
    // Two routes that match the same requests: under other capture names, or (path_case =
    // "insensitive") in other letter case too (until 2026-12-03 these loaded, the second route
    // never used); and a guarded route whose every request an earlier unguarded route takes
    // would never guard anything (its requests are refused 400); one only partly overlapped
    // ("amend") loads.
    Broken {
        fixture: "duplicate_route",
        lines: &[
            (SHOP, &["route \"order\": name", "unique per provider"]),
            (
                SHOP,
                &[
                    "route \"order_again\": match",
                    "same match as route \"order\"",
                ],
            ),
            (
                SHOP,
                &[
                    "route \"refund_by_refund\": match",
                    "same match as route \"refund_by_id\"",
                ],
            ),
            (
                "policies/cased.toml",
                &["route \"lower\": match", "same match as route \"upper\""],
            ),
            (
                SHOP,
                &[
                    "route \"cancel\": match",
                    "earlier route \"peek\"",
                    "list this route before it",
                ],
            ),
        ],
        absent: &["route \"amend\""],
        ..ROW
    },
    Broken {
        fixture: "bad_outcomes",
        lines: &[(
            SHOP,
            &[
                "provider.outcomes",
                "404 in both succeeded and failed",
                "failed defaults to",
            ],
        )],
        ..ROW
    },
    Broken {
        fixture: "bad_status",
        lines: &[
            (SHOP, &["provider.outcomes.failed[1]", "600", STATUS_FIX]),
            (
                SHOP,
                &["provider.outcomes.failed[2]", "\"6xx\"", STATUS_FIX],
            ),
        ],
        ..ROW
    },
    // A ca_file must exist and hold a certificate.
    Broken {
        fixture: "ca_file_missing",
        lines: &[(
            SHOP,
            &[
                "provider.ca_file",
                "certs/missing.pem",
                "relative to the policy file's folder",
            ],
        )],
        ..ROW
    },
    Broken {
        fixture: "ca_file_not_pem",
        lines: &[(SHOP, &["provider.ca_file", "holds no certificate"])],
        ..ROW
    },
    Broken {
        fixture: "reconcile_read_only",
        lines: &[(
            SHOP,
            &["route \"get_order\": reconcile", "read_only", "remove it"],
        )],
        ..ROW
    },
    // Many errors are reported at once, proxy.toml's first.
    Broken {
        fixture: "many_errors",
        lines: &[
            (
                "many_errors/proxy.toml",
                &["listen", "\"localhost:8080\"", "IP address and a port"],
            ),
            (
                "many_errors/proxy.toml",
                &["limits.shutdown_grace", "10 is not a duration"],
            ),
            (
                "many_errors/proxy.toml",
                &["retention.completed", "\"30 days later\""],
            ),
            ("policies/a.toml", &["provider.upstream", "user info"]),
            (
                "policies/a.toml",
                &["provider.dedupe", "\"maybe\"", "\"key\", \"none\""],
            ),
            ("policies/a.toml", &["route \"r\": operation_id", "missing"]),
            ("policies/b.toml", &["provider.unmatched", "\"drop\""]),
            ("policies/b.toml", &["provider.mount", "nested"]),
        ],
        count: Some(8),
        first: Some("many_errors/proxy.toml"),
        ..ROW
    },
    // The template checks below need the real template parser. A `path` part must name a
    // capture.
    Broken {
        fixture: "path_capture_missing",
        lines: &[(
            SHOP,
            &[
                "route \"cancel\": operation_id[1]",
                "{path:order_id}",
                "it has id",
            ],
        )],
        ..ROW
    },
    Broken {
        fixture: "unknown_template_source",
        lines: &[(
            "policies/stripe.toml",
            &[
                "policies/stripe.toml: route \"create_refund\": operation_id[1]: ",
                "hedaer",
            ],
        )],
        ..ROW
    },
    // Approval cannot be skipped by on_missing_id = "pass".
    Broken {
        fixture: "approval_skipped",
        lines: &[(
            SHOP,
            &[
                "route \"refund\": on_missing_id",
                "skip the approval",
                "on_missing_id = \"reject\"",
            ],
        )],
        ..ROW
    },
    // approval_show and fingerprint_ignore take field paths, each listed once. In
    // `fingerprint_ignore`, bare names and `query:NAME` load ([0] and [3]); an empty `query:` and
    // a header (in the fingerprint only through fingerprint_headers) are refused, not left to
    // do nothing.
    Broken {
        fixture: "approval_show",
        lines: &[
            (
                SHOP,
                &[
                    "route \"payout\": approval_show[1]",
                    "\"amount[\"",
                    "bracket notation",
                ],
            ),
            (
                SHOP,
                &["route \"payout\": approval_show[2]", "listed twice"],
            ),
            (
                SHOP,
                &[
                    "route \"payout\": approval_show[3]",
                    "`query:` names no parameter",
                ],
            ),
            (
                SHOP,
                &[
                    "route \"trace\": fingerprint_ignore[1]",
                    "`query:` names no parameter",
                ],
            ),
            (
                SHOP,
                &[
                    "route \"trace\": fingerprint_ignore[2]",
                    "only when fingerprint_headers lists them",
                ],
            ),
        ],
        absent: &["fingerprint_ignore[0]", "fingerprint_ignore[3]"],
        ..ROW
    },
    // Credentials are never part of an identity or a fingerprint.
    Broken {
        fixture: "credential_in_identity",
        lines: &[
            (
                SHOP,
                &[
                    "route \"refund\": operation_id[1]",
                    "{header:authorization}",
                    "credential",
                ],
            ),
            (
                SHOP,
                &[
                    "route \"charge\": operation_id",
                    "{header:cookie}",
                    "credential",
                ],
            ),
            (
                SHOP,
                &[
                    "route \"payout\": operation_id",
                    "{header:x-api-secret}",
                    "redact_headers",
                ],
            ),
            (
                SHOP,
                &[
                    "route \"transfer\": fingerprint_headers[1]",
                    "\"proxy-authorization\"",
                    "credential",
                ],
            ),
        ],
        count: Some(4),
        ..ROW
    },
    // The key header is neither framing nor a credential.
    Broken {
        fixture: "key_header_framing",
        lines: &[
            (
                "policies/a_shop.toml",
                &[
                    "provider.key_header",
                    "\"content-length\"",
                    "Idempotency-Key",
                ],
            ),
            (
                "policies/b_bank.toml",
                &["provider.key_header", "\"authorization\"", "credential"],
            ),
        ],
        ..ROW
    },
    // Lookup templates use only what exists at lookup time: the kept first request's body and
    // query are read by a lookup, so "charge", "payout" and "transfer" are valid.
    Broken {
        fixture: "lookup_request_part",
        lines: &[
            (
                SHOP,
                &[
                    "route \"refund\": reconcile.lookup",
                    "{header:x-workflow-id}",
                    "never kept",
                    "{json:/pointer}",
                ],
            ),
            (
                SHOP,
                &[
                    "route \"cancel\": reconcile.lookup",
                    "{path:order}",
                    "it has id",
                ],
            ),
        ],
        absent: &["route \"charge\"", "route \"payout\"", "route \"transfer\""],
        ..ROW
    },
    // A not_found_final_after of zero is refused.
    Broken {
        fixture: "zero_final_after",
        lines: &[(
            SHOP,
            &[
                "route \"refund\": reconcile.not_found_final_after",
                "at least 1ms",
            ],
        )],
        ..ROW
    },
    // An MCP provider's routes name tools, an HTTP provider's name paths: each mistake names
    // the file, the route's match and the fix.
    Broken {
        fixture: "mcp_matches",
        lines: &[
            (
                "policies/tools.toml",
                &[
                    "route \"refund\": match",
                    "\"POST /refunds\" is not a tool",
                    "\"tools/call NAME\"",
                ],
            ),
            (
                "policies/plain.toml",
                &[
                    "route \"refund\": match",
                    "names an MCP tool",
                    "protocol = \"mcp\"",
                ],
            ),
            (
                "policies/tools.toml",
                &[
                    "route \"charge\": reconcile",
                    "MCP tool",
                    "cannot be looked up",
                ],
            ),
            (
                "policies/tools.toml",
                &[
                    "route \"charge\": fingerprint_headers",
                    "Mcp-Session-Id never counts",
                ],
            ),
        ],
        count: Some(4),
        ..ROW
    },
    // Keys of the external contract not available yet are refused by name (the contract's
    // example policy itself loads: `the_contracts_example_policy_loads_as_written`).
    Broken {
        fixture: "intercept",
        lines: &[
            (
                "proxy.toml",
                &[
                    "intercept.ca_cert",
                    "cannot read the CA certificate",
                    "ca init",
                ],
            ),
            (
                "proxy.toml",
                &["intercept.ca_key", "cannot read the CA key", "ca init"],
            ),
        ],
        ..ROW
    },
    // A pass-through provider whose upstream holds a guarded provider's (same host and port,
    // its base path under the other's) would carry that provider's effects unguarded:
    // `/outer/K/v1/refunds` reaches `payk`'s `/k/v1/refunds`. Before 2026-12-03 it loaded.
    Broken {
        fixture: "nested_upstreams",
        lines: &[(
            "policies/outer.toml",
            &[
                "provider.upstream",
                "payk.toml",
                "unguarded",
                "unmatched = \"reject\"",
            ],
        )],
        ..ROW
    },
];

/// What is wrong with one row's refusal, each as a line of the report; empty when it is right.
fn check_broken(row: &Broken) -> Vec<String> {
    let errors = match config::load(&fixture(&format!("broken/{}", row.fixture))) {
        Ok(_) => return vec!["loaded".into()],
        Err(errors) => errors,
    };
    let text = errors.to_string();
    let mut wrong = Vec::new();
    for (file, parts) in row.lines {
        let found = text
            .lines()
            .any(|line| line.contains(file) && parts.iter().all(|p| line.contains(p)));
        if !found {
            wrong.push(format!("no error in {file} with {parts:?}"));
        }
    }
    if let Some(count) = row.count
        && errors.0.len() != count
    {
        wrong.push(format!("{} errors, expected {count}", errors.0.len()));
    }
    for absent in row.absent {
        if text.contains(absent) {
            wrong.push(format!("an error holds {absent:?}"));
        }
    }
    if let Some(first) = row.first
        && !errors.0.first().is_some_and(|e| e.file.ends_with(first))
    {
        wrong.push(format!("the first error is not in {first}"));
    }
    if !wrong.is_empty() {
        wrong.push(format!("got:\n{text}"));
    }
    wrong
}

/// Every broken fixture is refused with error lines naming the file, the key and the fix; all
/// rows are checked, and a failure names each row that failed and what it missed.
#[test]
fn broken_configurations_are_refused_naming_file_key_and_fix() {
    let mut failed = Vec::new();
    for row in BROKEN {
        let wrong = check_broken(row);
        if !wrong.is_empty() {
            failed.push(format!("broken/{}:\n  {}", row.fixture, wrong.join("\n  ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} broken fixtures wrong:\n{}",
        failed.len(),
        BROKEN.len(),
        failed.join("\n")
    );
}

/// Every fixture under `fixtures/config/broken/` is a row of `BROKEN` (or is checked through
/// `idemproxy check` in check_cli.rs).
#[test]
fn every_broken_fixture_has_a_row() {
    let checked_by_the_cli = ["settle_literal"];
    let dir = root().join("fixtures/config/broken");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("fixtures/config/broken") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let known = BROKEN.iter().any(|row| row.fixture == name)
            || checked_by_the_cli.contains(&name.as_str());
        if !known {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "broken fixtures without a row: {missing:?}"
    );
}
