//! The shipped policy library: `idemproxy check` passes the shipped proxy.toml with every
//! policy enabled, and each file states the facts that decide what the proxy may do with that
//! provider: whether it deduplicates, where the key goes and how long it may be, how long the
//! provider remembers it, and which answers mean "a request with this key is still running"
//! or "this key was used for something else". The facts are read from the files as a user
//! reads them (TOML), so a file edited into a wrong claim fails here, not at a provider.

use std::collections::BTreeSet;
use std::path::PathBuf;

use toml::{Table, Value};

use crate::common::Proxy;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn load(name: &str) -> Table {
    let path = repo(&format!("policies/{name}.toml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.parse().unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn provider(policy: &Table) -> &Table {
    policy["provider"].as_table().expect("[provider]")
}

fn text<'a>(table: &'a Table, key: &str) -> Option<&'a str> {
    table.get(key).and_then(Value::as_str)
}

fn int(table: &Table, key: &str) -> Option<i64> {
    table.get(key).and_then(Value::as_integer)
}

fn tables<'a>(table: &'a Table, key: &str) -> Vec<&'a Table> {
    let items = table.get(key).and_then(Value::as_array);
    items.map_or_else(Vec::new, |items| {
        items.iter().filter_map(Value::as_table).collect()
    })
}

fn routes(policy: &Table) -> Vec<&Table> {
    tables(policy, "route")
}

fn guarded(policy: &Table) -> Vec<&Table> {
    let read_only = |r: &&Table| text(r, "effect") == Some("read_only");
    routes(policy)
        .into_iter()
        .filter(|r| !read_only(r))
        .collect()
}

/// What one shipped file must say.
struct Facts {
    name: &'static str,
    dedupe: &'static str,
    /// Where the key goes: `header:NAME` or `json:/pointer`.
    key: &'static str,
    key_length: i64,
    retention: &'static str,
    /// `(status, pointer value, means)` of rules that must exist.
    rules: &'static [(&'static str, &'static str, &'static str)],
}

const DEDUPLICATING: &[Facts] = &[
    Facts {
        name: "stripe",
        dedupe: "key",
        key: "header:Idempotency-Key",
        key_length: 64,
        retention: "24h",
        rules: &[
            ("409", "idempotency_key_in_use", "pending"),
            ("4xx", "idempotency_error", "unknown"),
        ],
    },
    Facts {
        name: "adyen",
        dedupe: "key",
        key: "header:Idempotency-Key",
        key_length: 64,
        retention: "31d",
        rules: &[("409", "704", "pending"), ("422", "704", "pending")],
    },
    Facts {
        name: "checkout",
        dedupe: "key",
        key: "header:Cko-Idempotency-Key",
        key_length: 36,
        retention: "24h",
        rules: &[("409", "", "pending")],
    },
    Facts {
        name: "paypal",
        dedupe: "key",
        key: "header:PayPal-Request-Id",
        key_length: 36,
        retention: "6h",
        rules: &[("422", "PAYPAL_REQUEST_ID_PREVIOUSLY_USED", "unknown")],
    },
    Facts {
        name: "square",
        dedupe: "key",
        key: "json:/idempotency_key",
        key_length: 45,
        retention: "6h",
        rules: &[("400", "IDEMPOTENCY_KEY_REUSED", "unknown")],
    },
    Facts {
        name: "gocardless",
        dedupe: "key",
        key: "header:Idempotency-Key",
        key_length: 36,
        retention: "6h",
        rules: &[("409", "idempotent_creation_conflict", "reconcile")],
    },
    Facts {
        name: "increase",
        dedupe: "key",
        key: "header:Idempotency-Key",
        key_length: 64,
        retention: "6h",
        rules: &[("409", "idempotency_key_already_used_error", "reconcile")],
    },
    Facts {
        name: "moderntreasury",
        dedupe: "key",
        key: "header:Idempotency-Key",
        key_length: 59,
        retention: "24h",
        rules: &[("409", "", "pending")],
    },
    Facts {
        name: "resend",
        dedupe: "key",
        key: "header:Idempotency-Key",
        key_length: 64,
        retention: "24h",
        rules: &[
            ("409", "concurrent_idempotent_requests", "pending"),
            ("409", "invalid_idempotent_request", "unknown"),
        ],
    },
];

/// Providers that do not deduplicate: held on unknown, so every file says `dedupe = "none"`.
const HELD: &[&str] = &["twilio", "sendgrid", "postmark", "slack", "github"];
/// Model APIs: forwarded, never guarded.
const PASS_THROUGH: &[&str] = &["openai", "anthropic"];

/// Where a provider's key goes, as `Facts::key` says it.
fn key_of(provider: &Table) -> String {
    match text(provider, "key_json_field") {
        Some(pointer) => format!("json:{pointer}"),
        None => format!(
            "header:{}",
            text(provider, "key_header").unwrap_or("Idempotency-Key")
        ),
    }
}

fn has_rule(provider: &Table, (status, value, means): (&str, &str, &str)) -> bool {
    tables(provider, "rule").iter().any(|rule| {
        let status_matches = match rule.get("status") {
            Some(Value::Integer(code)) => code.to_string() == status,
            Some(Value::String(class)) => class == status,
            _ => false,
        };
        let value_matches = value.is_empty() && rule.get("pointer").is_none()
            || text(rule, "equals") == Some(value);
        status_matches && value_matches && text(rule, "means") == Some(means)
    })
}

#[test]
fn the_library_has_one_file_per_provider() {
    let mut expected: BTreeSet<String> = DEDUPLICATING.iter().map(|f| f.name.into()).collect();
    expected.extend(HELD.iter().chain(PASS_THROUGH).map(|s| s.to_string()));
    let mut shipped = BTreeSet::new();
    for entry in std::fs::read_dir(repo("policies")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let policy = load(&stem);
            assert_eq!(text(provider(&policy), "name"), Some(stem.as_str()));
            assert_eq!(
                text(provider(&policy), "mount"),
                Some(format!("/{stem}").as_str()),
                "{stem}: mounted at its own name"
            );
            shipped.insert(stem);
        }
    }
    assert_eq!(shipped, expected);
}

#[test]
fn deduplicating_providers_state_key_length_retention_and_their_answers() {
    for facts in DEDUPLICATING {
        let policy = load(facts.name);
        let p = provider(&policy);
        let name = facts.name;
        assert_eq!(text(p, "dedupe"), Some(facts.dedupe), "{name}: dedupe");
        assert_eq!(key_of(p), facts.key, "{name}: where the key goes");
        assert_eq!(
            int(p, "key_length"),
            Some(facts.key_length),
            "{name}: key_length"
        );
        assert_eq!(
            text(p, "key_retention"),
            Some(facts.retention),
            "{name}: retention"
        );
        for rule in facts.rules {
            assert!(has_rule(p, *rule), "{name}: no rule {rule:?}");
        }
        assert!(!guarded(&policy).is_empty(), "{name}: guards something");
    }
}

#[test]
fn messaging_providers_without_dedupe_hold_unknown_outcomes() {
    for name in HELD {
        let policy = load(name);
        let p = provider(&policy);
        assert_eq!(text(p, "dedupe"), Some("none"), "{name}: no dedupe");
        let routes = guarded(&policy);
        assert!(!routes.is_empty(), "{name}: guards its sends");
        for route in routes {
            let effect = text(route, "effect");
            assert_ne!(
                effect,
                Some("idempotent"),
                "{name}: a send is never re-sent blindly"
            );
        }
    }
}

#[test]
fn model_apis_pass_through_unguarded() {
    for name in PASS_THROUGH {
        let policy = load(name);
        let p = provider(&policy);
        assert_eq!(
            text(p, "unmatched"),
            Some("pass"),
            "{name}: forwards everything"
        );
        assert!(guarded(&policy).is_empty(), "{name}: no guarded route");
    }
}

#[test]
fn every_guarded_route_names_an_explicit_operation_id_first() {
    for name in DEDUPLICATING
        .iter()
        .map(|f| f.name)
        .chain(HELD.iter().copied())
    {
        let policy = load(name);
        for route in guarded(&policy) {
            let first = match &route["operation_id"] {
                Value::String(one) => one.as_str(),
                Value::Array(list) => list[0].as_str().unwrap(),
                other => panic!("{name}: operation_id {other:?}"),
            };
            assert_eq!(first, "{header:x-operation-id}", "{name}: {route:?}");
            let effect = text(route, "effect");
            assert!(effect.is_some(), "{name}: every route states its effect");
        }
    }
}

#[test]
fn lookups_are_shipped_only_where_the_provider_can_answer_them() {
    let lookup = |policy: &Table, route: &str| -> Option<String> {
        let found = routes(policy)
            .into_iter()
            .find(|r| text(r, "name") == Some(route));
        let reconcile = found?.get("reconcile")?.as_table()?;
        Some(reconcile["lookup"].to_string())
    };
    let stripe = load("stripe");
    assert_eq!(
        lookup(&stripe, "create_refund"),
        None,
        "Stripe cannot search refunds by key"
    );
    let increase = load("increase");
    let ach = lookup(&increase, "create_ach_transfer").expect("Increase lists by key");
    assert!(ach.contains("idempotency_key={key}"), "{ach}");
    let gocardless = load("gocardless");
    let payment = lookup(&gocardless, "create_payment").expect("GoCardless follows the conflict");
    assert!(payment.contains("{answer:/error/errors/0/links/conflicting_resource_id}"));
    let postmark = load("postmark");
    let email = lookup(&postmark, "send_email").expect("Postmark searches metadata");
    assert!(email.contains("metadata_idemproxy_key={key}"), "{email}");
    let checkout = load("checkout");
    let payment = lookup(&checkout, "request_payment").expect("Checkout.com lists by reference");
    assert!(payment.contains("reference={json:/reference}"), "{payment}");
    let mt = load("moderntreasury");
    let order = lookup(&mt, "create_payment_order").expect("Modern Treasury lists by metadata");
    let by_metadata = "metadata[operation_id]={json:/metadata/operation_id}";
    assert!(order.contains(by_metadata), "{order}");
    for name in ["square", "adyen", "paypal", "resend"] {
        let policy = load(name);
        let any = routes(&policy).iter().any(|r| r.contains_key("reconcile"));
        assert!(
            !any,
            "{name}: no lookup can be rendered from what a lookup may read"
        );
    }
}

#[test]
fn a_parameter_mismatch_is_not_retried_by_the_sdks_that_can_be_told() {
    let header = |name: &str, header: &str| -> Option<String> {
        let policy = load(name);
        let answers = tables(provider(&policy), "answer");
        let entry = answers.into_iter().find(|a| {
            let problems = a["problems"].as_array().unwrap();
            problems
                .iter()
                .any(|p| p.as_str() == Some("parameter-mismatch"))
        })?;
        let headers = entry.get("headers")?.as_table()?;
        headers
            .get(header)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    assert_eq!(
        header("stripe", "Stripe-Should-Retry").as_deref(),
        Some("false")
    );
    for stainless in ["increase", "moderntreasury"] {
        let value = header(stainless, "x-should-retry");
        assert_eq!(value.as_deref(), Some("false"), "{stainless}");
    }
}

#[test]
fn guarded_providers_answer_pending_with_a_status_sdks_do_not_take_for_success() {
    for name in DEDUPLICATING
        .iter()
        .map(|f| f.name)
        .chain(HELD.iter().copied())
    {
        let policy = load(name);
        assert_eq!(
            int(provider(&policy), "pending_status"),
            Some(503),
            "{name}"
        );
    }
}

#[test]
fn every_file_names_its_sources() {
    let names = DEDUPLICATING.iter().map(|f| f.name);
    for name in names
        .chain(HELD.iter().copied())
        .chain(PASS_THROUGH.iter().copied())
    {
        let path = repo(&format!("policies/{name}.toml"));
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains("# Sources:"), "{name}: no Sources block");
        assert!(text.contains("https://"), "{name}: no source address");
    }
}

#[tokio::test]
async fn check_passes_the_shipped_config_with_every_policy() {
    let dir = Proxy::builder().write();
    let config = repo("proxy.toml").to_string_lossy().into_owned();
    let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(status.success(), "{status:?}\n{stderr}");
    let names = DEDUPLICATING.iter().map(|f| f.name);
    for name in names
        .chain(HELD.iter().copied())
        .chain(PASS_THROUGH.iter().copied())
    {
        let mount = format!("/{name}");
        let listed = stdout
            .lines()
            .any(|l| l.starts_with(name) && l.contains(&mount));
        assert!(listed, "{name} is not in the routes table:\n{stdout}");
    }
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("proxy.toml") && l.contains("ok"))
    );
}

/// The MCP example (`policies/examples/mcp-billing.toml`) passes `check` with no warning once
/// copied into a policies folder, its tool routes in the routes table; the shipped proxy.toml
/// does not load it (its folder is not `policies/` itself).
#[tokio::test]
async fn check_passes_the_mcp_example_policy_which_the_shipped_config_leaves_out() {
    let text = std::fs::read_to_string(repo("policies/examples/mcp-billing.toml")).unwrap();
    let dir = Proxy::builder().policy("mcp-billing", &text).write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(status.success(), "{status:?}\n{stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("billing   /mcp/billing")),
        "{stdout}"
    );
    for route in ["refund  tools/call refund", "lookup  tools/call lookup"] {
        assert!(
            stdout.contains(route),
            "{route} is not in the routes table:\n{stdout}"
        );
    }
    let shipped = repo("proxy.toml").to_string_lossy().into_owned();
    let (status, stdout, _) = dir.run_cli(&["check", "-c", &shipped]).await;
    assert!(status.success());
    assert!(!stdout.contains("tools/call"), "{stdout}");
}
