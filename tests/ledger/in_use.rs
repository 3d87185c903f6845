//! A second `serve` on a ledger file another process holds is refused at start, in words an
//! operator understands, naming the file (not the storage engine's "Database already open").

use crate::common::{self, Proxy};

#[tokio::test]
async fn a_second_serve_on_a_held_ledger_says_another_idemproxy_is_using_it() {
    let policy = common::policy("idle", "https://api.example.com", "");
    let proxy = Proxy::builder().policy("idle", &policy).start().await;
    let ledger = proxy.ledger_path();

    let (status, log) = proxy.dir().start_expect_failure().await;
    assert_eq!(status.code(), Some(2), "{log}");
    let said = format!(
        "another idemproxy is using this ledger ({})",
        ledger.display()
    );
    assert!(log.contains(&said), "{log}");
    assert!(!log.contains("Database already open"), "{log}");
}
