//! `idemproxy ca init [--dir DIR]` (docs/reference.md section 9): a new CA in DIR (default
//! `ca` beside proxy.toml), its key created with mode 0600, the lines that configure the proxy
//! and trust the CA printed; a second run refuses, naming the file, and changes nothing; the
//! pair it wrote is one `[intercept]` loads.

use std::os::unix::fs::PermissionsExt;

use crate::common::Proxy;

#[tokio::test]
async fn ca_init_writes_a_private_key_and_prints_the_trust_lines() {
    let dir = Proxy::builder()
        .raw_config("listen = \"127.0.0.1:18080\"\n")
        .write();
    let config = dir.config_path();
    let (status, out, err) = dir
        .run_cli(&["ca", "init", "-c", &config.to_string_lossy()])
        .await;
    assert!(status.success(), "{out}\n{err}");
    let key = dir.path().join("ca/ca.key");
    let mode = std::fs::metadata(&key)
        .expect("ca.key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the key is its owner's alone");
    let pem = std::fs::read_to_string(dir.path().join("ca/ca.pem")).expect("ca.pem");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let absolute = std::fs::canonicalize(dir.path().join("ca/ca.pem")).expect("path");
    for line in [
        "HTTPS_PROXY=http://127.0.0.1:18080".to_string(),
        format!("SSL_CERT_FILE={}", absolute.display()),
        format!("REQUESTS_CA_BUNDLE={}", absolute.display()),
        format!("NODE_EXTRA_CA_CERTS={}", absolute.display()),
        "ca_cert = \"ca/ca.pem\"".to_string(),
        "ca_key  = \"ca/ca.key\"".to_string(),
    ] {
        assert!(out.contains(&line), "{line:?} not printed:\n{out}");
    }
    let key_pem = std::fs::read_to_string(&key).expect("key");
    let body: String = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert!(
        !out.contains(&body[..40]) && !err.contains(&body[..40]),
        "the key is never printed"
    );
}

#[tokio::test]
async fn ca_init_twice_refuses_and_changes_nothing() {
    let dir = Proxy::builder().write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let mine = dir.path().join("mine");
    let args = [
        "ca",
        "init",
        "-c",
        &config,
        "--dir",
        &mine.to_string_lossy(),
    ];
    let (status, out, err) = dir.run_cli(&args).await;
    assert!(status.success(), "{out}\n{err}");
    let before = std::fs::read(mine.join("ca.key")).expect("key");
    let (status, _, err) = dir.run_cli(&args).await;
    assert!(!status.success(), "a second run refuses");
    assert!(
        err.contains("ca.pem") && err.contains("refusing to overwrite"),
        "{err}"
    );
    assert_eq!(std::fs::read(mine.join("ca.key")).expect("key"), before);

    // Only the key left (the certificate lost): still refused, naming the key.
    std::fs::remove_file(mine.join("ca.pem")).expect("remove");
    let (status, _, err) = dir.run_cli(&args).await;
    assert!(!status.success());
    assert!(
        err.contains("ca.key") && err.contains("refusing to overwrite"),
        "{err}"
    );
    assert_eq!(std::fs::read(mine.join("ca.key")).expect("key"), before);
}

#[tokio::test]
async fn the_pair_ca_init_writes_is_one_intercept_loads() {
    let policy = crate::common::policy("pay", "https://api.pay.example", "");
    let dir = Proxy::builder()
        .policy("pay", &policy)
        .config("[intercept]\nca_cert = \"ca/ca.pem\"\nca_key = \"ca/ca.key\"\n")
        .write();
    let config = dir.config_path();
    let (status, out, err) = dir
        .run_cli(&["ca", "init", "-c", &config.to_string_lossy()])
        .await;
    assert!(status.success(), "{out}\n{err}");
    let (status, out, err) = dir
        .run_cli(&["check", "-c", &config.to_string_lossy()])
        .await;
    assert!(status.success(), "check loads the new CA:\n{out}\n{err}");
}
