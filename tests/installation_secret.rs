//! The installation secret (SPEC 3, 8, 10): fingerprints and field hashes are keyed with a
//! per-installation secret kept outside the ledger (`IDEMPROXY_SECRET`, or a 0600 file
//! `<ledger>.secret` created at first start); a ledger first used with one secret refuses
//! to be served with another, naming where the secret came from and what to do.

mod common;
mod guarded;

use common::{Behavior, FakeProvider};
use guarded::*;
use http::{Method, StatusCode};

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
