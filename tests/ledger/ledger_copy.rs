//! `idemproxy ledger copy` (docs/reference.md section 9.2) through the real binary: a ledger
//! with an operation in every state, a tombstone and replays, left by a proxy that was
//! killed, copied into a new file, serves every replay and every admin view exactly as its
//! source does; a ledger a running proxy holds, a destination that holds anything and a
//! proxy with another secret are refused, and a copy leaves its source's bytes as they were.
//! Copied into PostgreSQL (a database of its own on 127.0.0.1:5432) and back to a file, it
//! answers the same again, and no message ever shows the URL's password.

use std::path::Path;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::Value;

use crate::common::guarded::*;
use crate::common::{Behavior, ConfigDir, FakeProvider, Proxy, Resp, route, send};

const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const PROXY_TOML: &str = "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
                          ledger = \"ledger.redb\"\npolicies = \"policies\"\n";
/// Pruning within a second, for the tombstone (a key retention plus timeout inside it).
const PRUNING: &str = "[retention]\ncompleted = \"1s\"\n";
const QUICK_KEYS: &str = "dedupe = \"none\"\nkey_retention = \"200ms\"\ntimeout = \"500ms\"";
/// A timeout long enough for a held request to stay in flight until the proxy is killed.
const SLOW_KEYS: &str = "dedupe = \"none\"\ntimeout = \"60s\"";

/// The refund route and a payout route that needs an operator's approval.
fn pay_policy(provider: &FakeProvider, keys: &str) -> String {
    let payout = route(
        "create_payout",
        "POST /v1/payouts",
        &["{header:x-operation-id}"],
    );
    let routes = format!("{}\n{payout}approval = \"required\"\n", refund_route(""));
    provider.policy(PROVIDER, &format!("{keys}\n{routes}"))
}

fn write_config(dir: &ConfigDir, provider: &FakeProvider, extra: &str, keys: &str) {
    std::fs::write(dir.config_path(), format!("{PROXY_TOML}{extra}")).unwrap();
    let policy = dir.path().join("policies/pay.toml");
    std::fs::write(policy, pay_policy(provider, keys)).unwrap();
}

async fn admin(proxy: &Proxy, path: &str) -> Resp {
    send(Method::GET, &proxy.admin_url(path), &[], "")
        .await
        .expect("the admin API answers")
}

fn show_path(id: &str) -> String {
    format!("/ops/{}", id.replace('/', "%2F"))
}

async fn payout(proxy: &Proxy, rendered: &str) -> Resp {
    let headers = [(OP_HEADER, rendered), FORM];
    send(
        Method::POST,
        &proxy.url("/pay/v1/payouts"),
        &headers,
        "amount=9",
    )
    .await
    .expect("the proxy answers")
}

/// Polls until `GET /ops/{id}` answers 410 (the retention sweep left its tombstone).
async fn until_pruned(proxy: &Proxy, id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while admin(proxy, &show_path(id)).await.status != StatusCode::GONE {
        assert!(tokio::time::Instant::now() < deadline, "{id} never pruned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until `GET /ops/{id}` shows `count` replays.
async fn until_replays(proxy: &Proxy, id: &str, count: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let op = admin(proxy, &show_path(id)).await.json();
        if op["replays"]["count"].as_u64() == Some(count) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "replays: {op}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The source: a tombstone (first run, pruning on), then a succeeded operation replayed
/// three times, a failed, an unknown and a prepared one (second run, stopped gracefully so
/// the replay count is written), then one in flight when the proxy is killed (third run).
async fn source(provider: &FakeProvider) -> Proxy {
    let builder = builder(provider, QUICK_KEYS, &refund_route(""));
    let mut proxy = builder
        .env("IDEMPROXY_SECRET", SECRET)
        .config(PRUNING)
        .start()
        .await;
    assert_eq!(
        refund(&proxy, "wf-gone", "amount=1").await.status,
        StatusCode::OK
    );
    until_pruned(&proxy, &op_id("wf-gone")).await;
    proxy.terminate().await;

    write_config(proxy.dir(), provider, "", SLOW_KEYS);
    proxy.restart().await;
    assert_eq!(
        refund(&proxy, "wf-ok", "amount=2").await.status,
        StatusCode::OK
    );
    for _ in 0..3 {
        let replay = refund(&proxy, "wf-ok", "amount=2").await;
        assert_op_headers(&replay, &op_id("wf-ok"), "succeeded", true);
    }
    until_replays(&proxy, &op_id("wf-ok"), 3).await;
    provider.set_behavior(Behavior::fixed(402, "card declined"));
    refund(&proxy, "wf-declined", "amount=3").await;
    provider.set_behavior(Behavior::fixed(500, "provider broke"));
    refund(&proxy, "wf-broke", "amount=4").await;
    assert_eq!(payout(&proxy, "wf-wait").await.status, StatusCode::ACCEPTED);
    proxy.terminate().await;

    proxy.restart().await;
    provider.set_behavior(Behavior::fixed(200, "late").hold());
    let sent = provider.request_count();
    let _pending = refund_in_background(&proxy, "wf-hang", "amount=5");
    provider.wait_for_requests(sent + 1).await;
    assert_eq!(proxy.op_state(&op_id("wf-hang")).await, "in_flight");
    proxy.kill().await;
    proxy
}

/// Removes what differs only because each proxy orphaned the claim in flight at its own
/// start: the orphaned operation's `updated_at` and its `operation.orphaned` event's time
/// (and, on PostgreSQL, where the claim's owner is a lapsed lease, the reason's wording).
fn without_orphaning_times(mut value: Value) -> Value {
    let mut ops: Vec<&mut Value> = match value.get_mut("ops") {
        Some(Value::Array(ops)) => ops.iter_mut().collect(),
        _ => vec![&mut value],
    };
    for op in ops.iter_mut() {
        if op["operation_id"] == op_id("wf-hang") {
            op["updated_at"] = Value::Null;
            op["error"] = Value::Null;
        }
        if let Some(Value::Array(events)) = op.get_mut("events") {
            for event in events {
                if event["kind"] == "operation.orphaned" {
                    event["at"] = Value::Null;
                    event["detail"] = Value::Null;
                }
            }
        }
    }
    value
}

/// Everything the admin API shows of `ids`: the list, each operation with its events and
/// replays (a tombstone's 410 problem), and the stats' counts.
async fn admin_view(proxy: &Proxy, ids: &[String]) -> Vec<Value> {
    let mut views = vec![without_orphaning_times(
        admin(proxy, "/ops?limit=100").await.json(),
    )];
    for id in ids {
        let resp = admin(proxy, &show_path(id)).await;
        views.push(Value::from(resp.status.as_u16()));
        views.push(without_orphaning_times(resp.json()));
    }
    views.push(admin(proxy, "/stats").await.json()["by_state"].clone());
    views
}

/// What an agent sees for each operation: status, the `Idem-*` headers and the body.
async fn answers(proxy: &Proxy) -> Vec<(StatusCode, Vec<Option<String>>, String)> {
    let mut out = Vec::new();
    for (rendered, body) in [("wf-ok", "amount=2"), ("wf-broke", "amount=4")]
        .into_iter()
        .chain([("wf-hang", "amount=5"), ("wf-gone", "amount=1")])
    {
        out.push(answer(refund(proxy, rendered, body).await));
    }
    out.push(answer(payout(proxy, "wf-wait").await));
    out
}

fn answer(resp: Resp) -> (StatusCode, Vec<Option<String>>, String) {
    let headers = ["idem-operation-id", "idem-state", "idempotent-replayed"]
        .iter()
        .map(|name| resp.header(name).map(str::to_owned))
        .collect();
    (resp.status, headers, resp.text())
}

async fn copy(dir: &ConfigDir, from: &Path, to: &Path) -> (bool, String, String) {
    let (from, to) = (from.to_str().unwrap(), to.to_str().unwrap());
    copy_between(dir, from, to).await
}

async fn copy_between(dir: &ConfigDir, from: &str, to: &str) -> (bool, String, String) {
    let (status, stdout, stderr) = dir
        .run_cli(&["ledger", "copy", "--from", from, "--to", to])
        .await;
    (status.success(), stdout, stderr)
}

fn sha(path: &Path) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

#[tokio::test]
async fn a_copied_ledger_answers_every_replay_and_shows_every_operation_as_its_source() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut source = source(&provider).await;
    let target = builder(&provider, SLOW_KEYS, "")
        .env("IDEMPROXY_SECRET", SECRET)
        .write();
    write_config(&target, &provider, "", SLOW_KEYS);

    let (ok, stdout, stderr) =
        copy(source.dir(), &source.ledger_path(), &target.ledger_path()).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.starts_with("copied 5 operations, ") && stdout.contains(" events, 1 tombstones"),
        "{stdout}"
    );
    assert!(stdout.contains("1 replay counts"), "{stdout}");
    assert!(
        stderr.contains("1 operations were copied in flight"),
        "{stderr}"
    );
    assert!(!stderr.contains(SECRET), "never the secret");

    provider.set_behavior(Behavior::fixed(200, "must not be sent"));
    let sent = provider.request_count();
    source.restart().await;
    let target = target.start().await;
    let ids: Vec<String> = ["wf-ok", "wf-declined", "wf-broke", "wf-hang", "wf-gone"]
        .iter()
        .map(|r| op_id(r))
        .chain([format!("{PROVIDER}/create_payout/wf-wait")])
        .collect();
    let want = admin_view(&source, &ids).await;
    assert_eq!(admin_view(&target, &ids).await, want);
    assert_eq!(
        want[0]["ops"].as_array().map(Vec::len),
        Some(5),
        "{}",
        want[0]
    );
    let statuses: Vec<_> = want.iter().skip(1).step_by(2).take(ids.len()).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 410, 200],
        "the tombstone's 410"
    );
    assert_eq!(want[2]["replays"]["count"], 3, "{}", want[2]);
    assert_eq!(
        target.op_state(&op_id("wf-hang")).await,
        "unknown",
        "orphaned at its start"
    );

    let want = answers(&source).await;
    assert_eq!(answers(&target).await, want);
    assert_eq!(want[0].0, StatusCode::OK, "{want:?}");
    assert_eq!(want[0].1[2].as_deref(), Some("true"), "a replay");
    assert_eq!(
        provider.request_count(),
        sent,
        "every answer came from a ledger"
    );
}

#[tokio::test]
async fn copies_are_refused_while_a_proxy_holds_the_ledger_or_the_destination_holds_anything() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_SECRET", SECRET)
        .start()
        .await;
    assert_eq!(
        refund(&proxy, "wf-1", "amount=1").await.status,
        StatusCode::OK
    );
    let (src, dst) = (
        proxy.ledger_path(),
        proxy.dir().path().join("copy/ledger.redb"),
    );

    let (ok, _, stderr) = copy(proxy.dir(), &src, &dst).await;
    assert!(!ok);
    assert!(
        stderr.contains("is in use by a running proxy; stop it first"),
        "{stderr}"
    );
    assert!(!dst.exists(), "nothing was created");

    proxy.terminate().await;
    let before = sha(&src);
    let (ok, stdout, stderr) = copy(proxy.dir(), &src, &dst).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.starts_with("copied 1 operations, "), "{stdout}");
    assert!(
        stderr.contains("opens only with the installation secret"),
        "{stderr}"
    );
    assert_eq!(sha(&src), before, "the source is left exactly as it was");

    let (ok, _, stderr) = copy(proxy.dir(), &src, &dst).await;
    assert!(!ok);
    assert!(
        stderr.contains("already holds operations or tombstones"),
        "{stderr}"
    );

    let (status, _, stderr) = proxy
        .dir()
        .run_cli(&["ledger", "copy", "--from", "", "--to", "x"])
        .await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --from: an empty ledger path"),
        "{stderr}"
    );
    let bad_url = "postgres://app:hunter2@db.internal/ledger?sslmode=allow";
    let (status, _, stderr) = proxy
        .dir()
        .run_cli(&[
            "ledger",
            "copy",
            "--from",
            src.to_str().unwrap(),
            "--to",
            bad_url,
        ])
        .await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--to: ") && stderr.contains("sslmode"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");

    // The copy keeps the source's secret check: a proxy with another secret refuses it.
    let other = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_SECRET", &"ab".repeat(32))
        .write();
    let copied = std::fs::read(&dst).unwrap();
    std::fs::write(other.ledger_path(), copied).unwrap();
    let (status, log) = other.start_expect_failure().await;
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("another installation secret"), "{log}");
}

/// A PostgreSQL database of its own on 127.0.0.1:5432 (user `postgres`, trust auth), dropped
/// with this. Its URL carries a password the server never asks for, so that a test can see
/// it is never printed.
struct Db {
    name: String,
    url: String,
}

const PASSWORD: &str = "hunter2-never-shown";

async fn admin_client() -> tokio_postgres::Client {
    client_of("test").await
}

/// A connection to the local database `name` (trust authentication: no password).
async fn client_of(name: &str) -> tokio_postgres::Client {
    let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("these tests need PostgreSQL at {url}: {e}"));
    tokio::spawn(connection);
    client
}

impl Db {
    async fn new() -> Db {
        let name = format!("idemproxy_test_copy_{}", std::process::id());
        let name = format!("{name}_{}", rand_suffix());
        let sql = format!("CREATE DATABASE {name}");
        admin_client().await.batch_execute(&sql).await.unwrap();
        let url = format!("postgres://postgres:{PASSWORD}@127.0.0.1:5432/{name}");
        Db { name, url }
    }

    /// The URL as every message shows it.
    fn shown(&self) -> String {
        format!("postgres://postgres:***@127.0.0.1:5432/{}", self.name)
    }
}

fn rand_suffix() -> String {
    use std::hash::{BuildHasher, RandomState};
    format!(
        "{:x}",
        RandomState::new().hash_one(std::time::SystemTime::now())
    )
}

impl Drop for Db {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async { admin_client().await.batch_execute(&sql).await })
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("cannot drop {}: {e}", self.name);
        }
    }
}

/// A proxy configuration on `ledger` (a file name in its dir, or a URL), with a short lease.
fn proxy_on(provider: &FakeProvider, ledger: &str) -> ConfigDir {
    let dir = builder(provider, SLOW_KEYS, "")
        .env("IDEMPROXY_SECRET", SECRET)
        .write();
    write_config(&dir, provider, "", SLOW_KEYS);
    let toml = PROXY_TOML.replace("ledger.redb", ledger);
    std::fs::write(
        dir.config_path(),
        format!("{toml}[replicas]\nlease = \"1s\"\n"),
    )
    .unwrap();
    dir
}

/// Copies once the stopped replica's lease has lapsed: until then the copy is refused.
async fn copy_after_lease(dir: &ConfigDir, from: &str, to: &str) -> (String, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, stdout, stderr) = copy_between(dir, from, to).await;
        if ok {
            return (stdout, stderr);
        }
        assert!(
            stderr.contains("by a replica whose lease is live"),
            "{stderr}"
        );
        assert!(tokio::time::Instant::now() < deadline, "{stderr}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_ledger_copied_to_postgresql_and_back_answers_as_its_source() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut source = source(&provider).await;
    let db = Db::new().await;
    let src = source.ledger_path();
    let (ok, stdout, stderr) = copy_between(source.dir(), src.to_str().unwrap(), &db.url).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.starts_with("copied 5 operations, "), "{stdout}");
    assert!(stdout.contains(&db.shown()), "the URL, redacted: {stdout}");
    assert!(
        !format!("{stdout}{stderr}").contains(PASSWORD),
        "never the password"
    );

    provider.set_behavior(Behavior::fixed(200, "must not be sent"));
    let sent = provider.request_count();
    source.restart().await;
    let mut served = proxy_on(&provider, &db.url).start().await;
    let ids: Vec<String> = ["wf-ok", "wf-declined", "wf-broke", "wf-hang", "wf-gone"]
        .iter()
        .map(|r| op_id(r))
        .chain([format!("{PROVIDER}/create_payout/wf-wait")])
        .collect();
    let want = admin_view(&source, &ids).await;
    assert_eq!(
        admin_view(&served, &ids).await,
        want,
        "served from PostgreSQL"
    );
    served.terminate().await;

    let back = proxy_on(&provider, "back.redb");
    let back_file = back.path().join("back.redb");
    let (stdout, stderr) = copy_after_lease(&back, &db.url, back_file.to_str().unwrap()).await;
    assert!(stdout.starts_with("copied 5 operations, "), "{stdout}");
    assert!(
        !format!("{stdout}{stderr}").contains(PASSWORD),
        "never the password"
    );
    let back = back.start().await;
    assert_eq!(admin_view(&back, &ids).await, want, "copied back to a file");

    let want = answers(&source).await;
    assert_eq!(answers(&back).await, want);
    served.restart().await;
    assert_eq!(answers(&served).await, want);
    assert_eq!(want[0].1[2].as_deref(), Some("true"), "a replay");
    assert_eq!(
        provider.request_count(),
        sent,
        "every answer came from a ledger"
    );
}

/// Marks `ledger` (a file) as a copy that never finished, as a copy killed between its first
/// and its last page leaves it (the mark is the copy's first write and its last removes it).
fn mark_unfinished(ledger: &Path) {
    const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let db = redb::Database::open(ledger).expect("open the copied ledger");
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .insert("copy_unfinished", 1)
        .unwrap();
    txn.commit().unwrap();
}

/// `idemproxy VERB -c proxy.toml` for `dir`: its exit status and what it printed on stderr.
async fn run_verb(dir: &ConfigDir, verb: &str) -> (std::process::ExitStatus, String) {
    let config = dir.config_path();
    let (status, _, stderr) = dir.run_cli(&[verb, "-c", config.to_str().unwrap()]).await;
    (status, stderr)
}

/// `check` exits 2 naming `ledger` as an unfinished copy, and `serve` refuses to start on it.
async fn refused_as_unfinished(dir: &ConfigDir, ledger: &str) {
    let (status, stderr) = run_verb(dir, "check").await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(ledger) && stderr.contains("did not finish"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    let (served, stderr) = run_verb(dir, "serve").await;
    assert!(
        !served.success() && stderr.contains("did not finish"),
        "{stderr}"
    );
}

/// `check` says what `serve` would refuse: a ledger a copy left half filled, file or
/// PostgreSQL (named without its password), and passes the same ledgers whole.
#[tokio::test]
async fn check_refuses_a_file_or_postgres_ledger_a_copy_left_unfinished_as_serve_does() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = builder(&provider, QUICK_KEYS, &refund_route(""))
        .env("IDEMPROXY_SECRET", SECRET)
        .start()
        .await;
    assert_eq!(
        refund(&proxy, "wf-ok", "amount=2").await.status,
        StatusCode::OK
    );
    proxy.terminate().await;
    let dir = proxy.dir();
    let (status, stderr) = run_verb(dir, "check").await;
    assert!(status.success(), "{stderr}");

    let db = Db::new().await;
    let file = dir.path().join("ledger.redb");
    let (copied, _, stderr) = copy_between(dir, file.to_str().unwrap(), &db.url).await;
    assert!(copied, "{stderr}");
    let on_pg = proxy_on(&provider, &db.url);
    let (status, stderr) = run_verb(&on_pg, "check").await;
    assert!(status.success(), "{stderr}");
    client_of(&db.name)
        .await
        .batch_execute("INSERT INTO meta (key, value) VALUES ('copy_unfinished', '1')")
        .await
        .unwrap();
    refused_as_unfinished(&on_pg, &db.shown()).await;

    mark_unfinished(&file);
    refused_as_unfinished(dir, "ledger.redb").await;
}

/// A replica stopped gracefully ends its lease on the way out, so a copy may run at once; one
/// that was killed still holds the ledger until its lease lapses (10 s here), and the copy is
/// refused meanwhile.
#[tokio::test]
async fn a_postgres_replica_stopped_gracefully_lets_a_copy_run_at_once() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let db = Db::new().await;
    let dir = proxy_on(&provider, &db.url);
    let toml = std::fs::read_to_string(dir.config_path()).unwrap();
    std::fs::write(
        dir.config_path(),
        toml.replace("lease = \"1s\"", "lease = \"10s\""),
    )
    .unwrap();
    let mut proxy = dir.start().await;
    assert_eq!(
        refund(&proxy, "wf-ok", "amount=2").await.status,
        StatusCode::OK
    );
    proxy.terminate().await;
    let at_once = proxy.dir().path().join("at-once.redb");
    let (ok, stdout, stderr) = copy_between(proxy.dir(), &db.url, at_once.to_str().unwrap()).await;
    assert!(ok, "refused after a graceful stop: {stderr}");
    assert!(stdout.starts_with("copied 1 operations"), "{stdout}");

    proxy.restart().await;
    assert_eq!(
        refund(&proxy, "wf-ok", "amount=2").await.status,
        StatusCode::OK,
        "a replay"
    );
    proxy.kill().await;
    let killed = proxy.dir().path().join("after-kill.redb");
    let (ok, _, stderr) = copy_between(proxy.dir(), &db.url, killed.to_str().unwrap()).await;
    assert!(!ok, "a killed replica's lease is still live");
    assert!(
        stderr.contains("by a replica whose lease is live"),
        "{stderr}"
    );
}
