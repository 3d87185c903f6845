//! The installation secret (docs/reference.md sections 4.5, 10 and 12): fingerprints and field hashes are keyed with a
//! per-installation secret kept outside the ledger (`IDEMPROXY_SECRET`, or a 0600 file
//! `<ledger>.secret` created at first start); a ledger first used with one secret refuses
//! to be served with another, naming where the secret came from and what to do.

use std::path::Path;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};
use idemproxy::operation::{Approval, Operation, State, StoredResponse, Write};
use idemproxy::policy::Effect;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider};

const SECRET_A: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const SECRET_B: &str = "2222222222222222222222222222222222222222222222222222222222222222";

/// The fingerprint the admin API shows and the field hashes the ledger keeps for one
/// refund made through a proxy with `secret` (`None`: a secret file of its own).
async fn fingerprint_with(secret: Option<&str>) -> (String, Vec<String>) {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let mut builder = builder(&provider, "", &refund_route(""));
    if let Some(secret) = secret {
        builder = builder.env("IDEMPROXY_SECRET", secret);
    }
    let mut proxy = builder.start().await;
    let id = op_id("wf-same");
    let first = refund(&proxy, "wf-same", "amount=500&currency=usd").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let path = format!("/ops/{}", id.replace('/', "%2F"));
    let shown = common::send(Method::GET, &proxy.admin_url(&path), &[], "")
        .await
        .expect("the admin API answers")
        .json();
    let stored = ledger(&mut proxy, &id).await;
    assert_eq!(shown["fingerprint"], stored.op.fingerprint.as_str());
    (
        stored.op.fingerprint,
        stored.op.fields.values().cloned().collect(),
    )
}

/// Two installations with different secrets fingerprint the same request differently, in
/// every hash; the same secret gives the same ones (the hashes stay comparable).
#[tokio::test]
async fn installations_with_other_secrets_fingerprint_the_same_request_differently() {
    let (a, a_fields) = fingerprint_with(Some(SECRET_A)).await;
    let (b, b_fields) = fingerprint_with(Some(SECRET_B)).await;
    let (own, own_fields) = fingerprint_with(None).await;
    let (again, again_fields) = fingerprint_with(Some(SECRET_A)).await;
    assert_eq!(
        (&a, &a_fields),
        (&again, &again_fields),
        "same secret, same hashes"
    );
    assert_ne!(a, b);
    assert_ne!(a, own);
    for hash in &a_fields {
        assert!(
            !b_fields.contains(hash) && !own_fields.contains(hash),
            "{hash}"
        );
    }
}

/// A ledger served with another secret than the one it was first used with refuses to
/// start, whether the secret comes from `IDEMPROXY_SECRET` or from the secret file, and
/// names the fix; with the right secret back it starts and replays.
#[tokio::test]
async fn another_secret_refuses_to_start() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let mut proxy = start(&provider, "").await;
    let secret_file = proxy.dir().path().join("ledger.redb.secret");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_file)
            .expect("the secret file")
            .permissions();
        assert_eq!(mode.mode() & 0o777, 0o600, "created private");
    }
    let first = refund(&proxy, "wf-s1", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK);
    proxy.terminate().await;
    let original = std::fs::read_to_string(&secret_file).expect("the secret file");
    assert!(
        !std::fs::read(proxy.ledger_path())
            .expect("ledger file")
            .windows(64)
            .any(|w| w == original.trim().as_bytes()),
        "the secret is not in the ledger"
    );

    std::fs::write(&secret_file, format!("{SECRET_B}\n")).expect("another secret");
    let (status, log) = proxy.restart_expect_failure().await;
    assert!(!status.success());
    assert!(log.contains("ledger.redb.secret"), "names the file:\n{log}");
    assert!(
        log.contains("IDEMPROXY_SECRET"),
        "names the variable:\n{log}"
    );

    // The same ledger, copied beside a proxy whose secret comes from the environment.
    let other = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_SECRET", SECRET_A)
        .write();
    std::fs::copy(proxy.ledger_path(), other.ledger_path()).expect("copy the ledger");
    let (status, log) = other.start_expect_failure().await;
    assert!(!status.success());
    assert!(
        log.contains("IDEMPROXY_SECRET"),
        "names the variable:\n{log}"
    );
    assert!(!log.contains(SECRET_A), "never prints the secret:\n{log}");

    std::fs::write(&secret_file, original).expect("the secret restored");
    proxy.restart().await;
    let replay = refund(&proxy, "wf-s1", "amount=500").await;
    assert_op_headers(&replay, &op_id("wf-s1"), "succeeded", true);
    assert_eq!(provider.request_count(), 1);
}

/// Writes, as versions before keyed hashes did, a succeeded refund `id` of `amount=500`
/// (unkeyed fingerprint and field hashes, no principal) answered `body`.
async fn write_as_an_older_version(ledger: &Path, id: &str, body: &'static str) {
    let now = Timestamp::now();
    let response = StoredResponse {
        status: 200,
        headers: HeaderMap::new(),
        body: Bytes::from_static(body.as_bytes()),
    };
    let op = Operation {
        id: id.to_string(),
        provider: PROVIDER.into(),
        route: ROUTE.into(),
        effect: Effect::Irreversible,
        state: State::Succeeded,
        fingerprint: format!(
            "sha256:{}",
            unkeyed::fingerprint("POST", "/v1/refunds", &[("amount", "500")])
        ),
        fields: [
            ("amount".to_string(), unkeyed::field("500")),
            ("method".to_string(), unkeyed::short(b"POST")),
            ("path".to_string(), unkeyed::short(b"/v1/refunds")),
        ]
        .into(),
        idempotency_key: opaque_key(id),
        key_placement: None,
        attempts: 1,
        created_at: now,
        updated_at: now,
        first_dispatched_at: Some(now),
        last_dispatched_at: Some(now),
        maybe_effect_at: None,
        provider_request_id: None,
        response: Some(response.meta()),
        error: None,
        fence: 0,
        approval: Approval::NotRequired,
        principal: None,
        pruned_at: None,
    };
    let (opened, _) = Ledger::open(ledger, now, LedgerOptions::default())
        .await
        .expect("a new ledger");
    let write = Write {
        response: Some(response),
        ..Write::of(op, vec![])
    };
    opened
        .update(id, move |_| (Some(write), ()))
        .await
        .expect("written");
}

/// An operation an older version recorded (unkeyed hashes, no principal) is still the same
/// operation: other parameters are a 409 naming the field, the same ones its replay; that
/// request re-keys the record and binds it to its caller; nothing is sent.
#[tokio::test]
async fn an_operation_recorded_before_keyed_hashes_still_replays_and_is_rekeyed() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let dir = builder(&provider, "", &refund_route("")).write();
    let id = op_id("wf-old");
    write_as_an_older_version(&dir.ledger_path(), &id, "made-by-the-old-version").await;
    let mut proxy = dir.start().await;

    let other = refund(&proxy, "wf-old", "amount=900").await;
    let body = problem(&other, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    let replay = refund(&proxy, "wf-old", "amount=500").await;
    assert_op_headers(&replay, &id, "succeeded", true);
    assert_eq!(replay.text(), "made-by-the-old-version");
    let again = refund(&proxy, "wf-old", "amount=500").await;
    assert_op_headers(&again, &id, "succeeded", true);
    let other = refund(&proxy, "wf-old", "amount=900").await;
    let body = problem(&other, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    assert_eq!(provider.request_count(), 0, "nothing sent");

    let stored = ledger(&mut proxy, &id).await;
    assert!(!stored.op.fingerprint.starts_with("sha256:"), "re-keyed");
    assert!(stored.op.principal.is_some(), "bound to its caller");
    assert_ne!(stored.op.fields["amount"], unkeyed::field("500"));
}

/// A blank `IDEMPROXY_SECRET_FILE` counts as unset: the secret goes to `<ledger>.secret`
/// beside the ledger. Before 2026-12-03 only an empty value did, and `" "` made a secret file
/// named " " in the working directory.
#[tokio::test]
async fn a_blank_secret_file_variable_counts_as_unset() {
    let stray = Path::new(" ");
    let _ = std::fs::remove_file(stray);
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_SECRET_FILE", " ")
        .start()
        .await;
    let made = refund(&proxy, "wf-blank", "amount=500").await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.text());
    let stray_made = stray.exists();
    let _ = std::fs::remove_file(stray);
    assert!(
        !stray_made,
        "a secret file named \" \" was made in the working directory"
    );
    assert!(
        proxy.dir().path().join("ledger.redb.secret").exists(),
        "the secret is beside the ledger"
    );
}

/// The ledger file is created readable by its owner only, like the secret file: it holds
/// stored answers and kept requests. Before 2026-12-03 it took the umask's mode (0644:
/// readable by every local user).
#[cfg(unix)]
#[tokio::test]
async fn the_ledger_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let proxy = start(&provider, "").await;
    let made = refund(&proxy, "wf-private", "amount=500").await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.text());
    let path = proxy.dir().path().join("ledger.redb");
    let mode = std::fs::metadata(&path)
        .expect("ledger")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}
