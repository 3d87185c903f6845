//! `idemproxy check` and `serve` with a PostgreSQL ledger, against the real binary: the
//! installation secret is required, an unreachable database is named without its password,
//! and a database first used with another secret is refused. Needs the PostgreSQL of the
//! ledger's unit tests (`IDEMPROXY_TEST_POSTGRES`, default
//! `postgres://postgres@127.0.0.1:5432/test`); without one the tests fail saying so.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use idemproxy::clock::Timestamp;
use idemproxy::config::{LedgerAt, PgUrl};
use idemproxy::ledger::{Ledger, LedgerOptions};
use idemproxy::secret::Secret;
use tempfile::TempDir;

const SECRET_A: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
const SECRET_B: &str = "bb00000000000000000000000000000000000000000000000000000000000000";

fn admin_url() -> String {
    std::env::var("IDEMPROXY_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A proxy.toml with `ledger` and the minimal fixture's policies.
fn config(dir: &TempDir, ledger: &str) -> PathBuf {
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/config/minimal/policies");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{ledger}\"\n\
         policies = \"{}\"\n",
        policies.display()
    );
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, text).expect("write proxy.toml");
    path
}

/// Runs the binary with `args`, the secret variables replaced by `secret` (none: unset), to
/// its end (killed, and the test failed, after a minute); its output and all it printed.
async fn run(args: &[&str], secret: Option<&str>) -> (Output, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_idemproxy"));
    command
        .args(args)
        .env_remove("IDEMPROXY_SECRET")
        .env_remove("IDEMPROXY_SECRET_FILE")
        .env_remove("PGPASSWORD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(secret) = secret {
        command.env("IDEMPROXY_SECRET", secret);
    }
    let mut child = command.spawn().expect("run idemproxy");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait for idemproxy").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("idemproxy {args:?} did not end within a minute");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let output = child.wait_with_output().expect("its output");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, all)
}

/// A database of its own, dropped at the end.
struct Db {
    name: String,
    url: String,
}

impl Db {
    async fn new() -> Db {
        let admin = admin_url();
        let client = connect(&admin).await;
        let name = format!("idemproxy_test_check_{}", std::process::id());
        let _ = client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the test database");
        let mut url = url::Url::parse(&admin).expect("admin URL");
        url.set_path(&name);
        Db {
            name,
            url: url.to_string(),
        }
    }

    async fn drop_it(self) {
        let client = connect(&admin_url()).await;
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        client
            .batch_execute(&sql)
            .await
            .expect("drop the test database");
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is not reachable at {url} ({e}): start it (e.g. `pg_ctlcluster \
                 --skip-systemctl-redirect $(ls /etc/postgresql) main start`) or set \
                 IDEMPROXY_TEST_POSTGRES"
            )
        });
    tokio::spawn(connection);
    client
}

#[tokio::test]
async fn the_secret_is_required_with_a_postgres_ledger() {
    let dir = TempDir::new().unwrap();
    let path = config(&dir, "postgres://idem@127.0.0.1:1/idem");
    let path = path.to_str().unwrap();
    for command in ["check", "serve"] {
        let (output, all) = run(&[command, "-c", path], None).await;
        assert_eq!(output.status.code(), Some(2), "{command}: {all}");
        assert!(
            all.contains("IDEMPROXY_SECRET") && all.contains("the same on every replica"),
            "{command}: {all}"
        );
    }
    assert!(!dir.path().join("idem.secret").exists());
}

#[tokio::test]
async fn an_unreachable_database_is_named_without_its_password() {
    let dir = TempDir::new().unwrap();
    let path = config(&dir, "postgres://idem:hunter2@127.0.0.1:1/idem");
    let path = path.to_str().unwrap();
    let (output, all) = run(&["check", "-c", path], Some(SECRET_A)).await;
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(
        all.contains("postgres://idem:***@127.0.0.1:1/idem") && all.contains("cannot be reached"),
        "{all}"
    );
    assert!(!all.contains("hunter2"), "{all}");
    let (output, all) = run(&["serve", "-c", path], Some(SECRET_A)).await;
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(!all.contains("hunter2"), "{all}");
    // The cause is named, not only that connecting failed: nothing listens on port 1.
    assert!(
        all.to_lowercase().contains("connection refused"),
        "serve names why it cannot connect: {all}"
    );
}

#[tokio::test]
async fn check_passes_a_fresh_database_and_refuses_one_kept_with_another_secret() {
    let db = Db::new().await;
    let dir = TempDir::new().unwrap();
    let path = config(&dir, &db.url);
    let path = path.to_str().unwrap();
    let (output, all) = run(&["check", "-c", path], Some(SECRET_A)).await;
    assert!(output.status.success(), "{all}");
    assert!(all.contains("holds no ledger yet"), "{all}");

    // The first start keeps secret A's check value.
    let at = LedgerAt::Postgres(PgUrl::parse(&db.url).unwrap());
    let secret = Secret::from_bytes(hex_bytes(SECRET_A));
    let opts = LedgerOptions {
        secret_check: Some(secret.check_value()),
        ..LedgerOptions::default()
    };
    let (ledger, _) = Ledger::open(&at, Timestamp::now(), opts).await.unwrap();
    drop(ledger);

    let (output, all) = run(&["check", "-c", path], Some(SECRET_A)).await;
    assert!(output.status.success(), "{all}");
    let (output, all) = run(&["check", "-c", path], Some(SECRET_B)).await;
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(all.contains("another installation secret"), "{all}");
    let (output, all) = run(&["serve", "-c", path], Some(SECRET_B)).await;
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(all.contains("another installation secret"), "{all}");
    db.drop_it().await;
}

fn hex_bytes(hex: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}
