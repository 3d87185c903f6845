//! `[intercept]` in proxy.toml (docs/reference.md section 2): refused at start and by `check`
//! when its CA cannot serve (a file that cannot be read, a key of another CA, a certificate
//! that is no CA, a missing key, a `tunnel` entry that a provider's upstream names), each
//! error naming the file and the key; and the CA key never written to the log, whatever the
//! log level.

use http::{Method, StatusCode};

use crate::common::tunnel::{Ca, Through, intercepting};
use crate::common::{Behavior, FakeProvider, Proxy, ProxyBuilder};

fn policy() -> String {
    crate::common::policy("pay", "https://api.pay.example", "")
}

/// Starts (expecting a refusal) and runs `check`; both exit non-zero with every `needle` in
/// their stderr, which never holds `secret`.
async fn refused(builder: ProxyBuilder, needles: &[&str], secret: &str) {
    let dir = builder.write();
    let (status, log) = dir.start_expect_failure().await;
    assert!(!status.success());
    let config = dir.config_path();
    let (checked, _, check_err) = dir
        .run_cli(&["check", "-c", &config.to_string_lossy()])
        .await;
    assert!(!checked.success(), "check refuses too: {check_err}");
    for text in [&log, &check_err] {
        for needle in needles {
            assert!(text.contains(needle), "{needle:?} not in:\n{text}");
        }
        assert!(!text.contains(secret), "the key reached stderr:\n{text}");
    }
}

#[tokio::test]
async fn a_key_of_another_ca_is_refused_naming_ca_key() {
    let (ca, other) = (Ca::new(), Ca::new());
    let builder = Proxy::builder()
        .policy("pay", &policy())
        .file("ca/ca.pem", &ca.cert_pem)
        .file("ca/ca.key", &other.key_pem)
        .config("[intercept]\nca_cert = \"ca/ca.pem\"\nca_key = \"ca/ca.key\"\n");
    refused(
        builder,
        &["intercept.ca_key", "ca.key", "not the key of ca_cert"],
        &other.key_body()[..40],
    )
    .await;
}

#[tokio::test]
async fn missing_and_unusable_ca_files_are_refused_naming_each() {
    let ca = Ca::new();
    let builder = Proxy::builder()
        .policy("pay", &policy())
        .file("ca/ca.key", &ca.key_pem)
        .config("[intercept]\nca_cert = \"ca/missing.pem\"\nca_key = \"ca/ca.key\"\n");
    refused(
        builder,
        &["intercept.ca_cert", "missing.pem", "ca init"],
        &ca.key_body()[..40],
    )
    .await;

    let builder = Proxy::builder()
        .policy("pay", &policy())
        .file("ca/ca.pem", &ca.cert_pem)
        .config("[intercept]\nca_cert = \"ca/ca.pem\"\n");
    refused(
        builder,
        &["intercept.ca_key", "required"],
        &ca.key_body()[..40],
    )
    .await;

    // A leaf (not a CA) with its own key.
    let leaf = rcgen::generate_simple_self_signed(vec!["x.example".into()]).expect("leaf");
    let key = leaf.signing_key.serialize_pem();
    let builder = Proxy::builder()
        .policy("pay", &policy())
        .file("ca/ca.pem", &leaf.cert.pem())
        .file("ca/ca.key", &key)
        .config("[intercept]\nca_cert = \"ca/ca.pem\"\nca_key = \"ca/ca.key\"\n");
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    refused(builder, &["intercept.ca_cert", "not a CA"], &body[..40]).await;
}

#[tokio::test]
async fn a_tunnel_entry_a_provider_names_or_without_a_port_is_refused() {
    let ca = Ca::new();
    for (entry, needles) in [
        ("api.pay.example:443", ["intercept.tunnel[0]", "unguarded"]),
        ("nohost", ["intercept.tunnel[0]", "no port"]),
    ] {
        let builder = intercepting(
            Proxy::builder().policy("pay", &policy()),
            &ca,
            &[entry.to_string()],
        );
        refused(builder, &needles, &ca.key_body()[..40]).await;
    }
}

#[tokio::test]
async fn the_ca_key_never_reaches_the_log() {
    let ca = Ca::new();
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let builder = Proxy::builder()
        .policy("pay", &provider.policy("pay", ""))
        .env("IDEMPROXY_LOG", "trace");
    let proxy = intercepting(builder, &ca, &[]).start().await;
    let client = Through {
        proxy: proxy.proxy_addr(),
        ca: &ca,
        host: "localhost",
        port: provider.addr().port(),
        h2: false,
    };
    let resp = client.send(Method::GET, "/v1/refunds", &[], "").await;
    assert_eq!(resp.status, StatusCode::OK);
    let log = proxy.log_text();
    assert!(
        log.contains("CONNECT intercepted"),
        "the trace log ran:\n{log}"
    );
    let body = ca.key_body();
    for line in body.as_bytes().chunks(32) {
        let piece = std::str::from_utf8(line).expect("base64");
        assert!(!log.contains(piece), "a piece of the CA key is in the log");
    }
}
