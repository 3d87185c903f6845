//! Smoke tests of the test harness itself: the fake provider (plain, h2c, TLS, dedupe,
//! lost answers, hold gate, streaming) and the process launcher, run against a shell
//! script standing in for the proxy binary.

use std::time::Duration;

use http::{Method, StatusCode, Version};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::common::client::{Body, full};
use crate::common::pattern;
use crate::common::process::{gone_within, parse_ready, run_to_end, wait_exit_within};
use crate::common::tls::TestPki;
use crate::common::{
    self, Behavior, Database, FakeProvider, Proxy, Relay, send, send_h2c, send_with,
};

#[tokio::test]
async fn echo_records_the_request_and_counts_one_effect_each() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let url = format!("{}/v1/refunds?a=1", provider.url());
    let resp = send(Method::POST, &url, &[("x-test", "yes")], "amount=5")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK);
    let echo = resp.json();
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["path"], "/v1/refunds?a=1");
    assert_eq!(echo["body"], "amount=5");
    assert_eq!(echo["headers"]["x-test"], "yes");
    assert_eq!(echo["effect"], 1);
    send(Method::POST, &url, &[], "").await.expect("answer");

    let requests = provider.requests();
    assert_eq!(provider.request_count(), 2);
    assert_eq!(provider.effects(), 2);
    assert_eq!(requests[0].path_and_query, "/v1/refunds?a=1");
    assert_eq!(requests[0].header("x-test"), Some("yes"));
    assert_eq!(&requests[0].body[..], b"amount=5");
    assert_eq!(requests[0].version, Version::HTTP_11);
}

#[tokio::test]
async fn h2c_requests_are_served_and_recorded_as_http2() {
    let provider = FakeProvider::start(Behavior::fixed(201, "made")).await;
    let resp = send_h2c(Method::PUT, &provider.url(), &[], "x")
        .await
        .expect("answer");
    assert_eq!(
        (resp.status, resp.text()),
        (StatusCode::CREATED, "made".into())
    );
    assert_eq!(resp.header("x-fake-effect"), Some("1"));
    assert_eq!(provider.requests()[0].version, Version::HTTP_2);
}

fn tls_client(
    pki: &TestPki,
) -> Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Body>
{
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(pki.client_config())
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    Client::builder(TokioExecutor::new()).build(https)
}

#[tokio::test]
async fn tls_provider_is_trusted_through_its_ca_only() {
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    assert!(provider.url().starts_with("https://localhost:"));
    let ca = std::fs::read_to_string(provider.ca_file()).expect("CA file");
    assert!(ca.contains("BEGIN CERTIFICATE"));

    let url = format!("{}/v1/x", provider.url());
    let client = tls_client(provider.pki());
    let resp = send_with(&client, Method::GET, &url, &[], full(""))
        .await
        .expect("TLS answer");
    assert_eq!(resp.status, StatusCode::OK);
    // ALPN offered h2 first, so the client speaks HTTP/2.
    assert_eq!(provider.requests()[0].version, Version::HTTP_2);

    let stranger = tls_client(&TestPki::generate());
    let refused = send_with(&stranger, Method::GET, &url, &[], full("")).await;
    assert!(refused.is_err(), "a client trusting another CA must fail");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn dedupe_on_header_replays_the_first_answer_per_key() {
    let provider = FakeProvider::start(Behavior::echo().dedupe_on_header("Idempotency-Key")).await;
    let url = provider.url();
    let first = send(Method::POST, &url, &[("idempotency-key", "k1")], "a")
        .await
        .unwrap();
    let again = send(Method::POST, &url, &[("idempotency-key", "k1")], "b")
        .await
        .unwrap();
    let other = send(Method::POST, &url, &[("idempotency-key", "k2")], "a")
        .await
        .unwrap();
    let keyless = send(Method::POST, &url, &[], "a").await.unwrap();

    assert_eq!(first.body, again.body, "the same key gets the first answer");
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("x-fake-effect"), Some("1"));
    assert_eq!(other.header("x-fake-effect"), Some("2"));
    assert_eq!(keyless.header("x-fake-effect"), Some("3"));
    assert_eq!(provider.effects(), 3);
    assert_eq!(provider.request_count(), 4);
}

#[tokio::test]
async fn dedupe_on_json_field_reads_the_body() {
    let provider = FakeProvider::start(Behavior::echo().dedupe_on_json("/idempotency_key")).await;
    let url = provider.url();
    for body in [
        r#"{"idempotency_key":"k","n":1}"#,
        r#"{"n":2,"idempotency_key":"k"}"#,
    ] {
        let resp = send(Method::POST, &url, &[], body).await.unwrap();
        assert_eq!(resp.header("x-fake-effect"), Some("1"));
    }
    let numeric = send(Method::POST, &url, &[], r#"{"idempotency_key":7}"#)
        .await
        .unwrap();
    assert_eq!(numeric.header("x-fake-effect"), Some("2"));
    assert_eq!(provider.effects(), 2);
}

#[tokio::test]
async fn drop_first_response_commits_the_effect_then_closes() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let key = [("idempotency-key", "k")];
    let lost = send(Method::POST, &provider.url(), &key, "x").await;
    assert!(lost.is_err(), "the first answer must be lost, got {lost:?}");
    assert_eq!(provider.effects(), 1, "the effect happened all the same");

    let retry = send(Method::POST, &provider.url(), &key, "x")
        .await
        .unwrap();
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(provider.effects(), 1);
}

#[tokio::test]
async fn hold_gate_keeps_the_effect_back_until_released() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let url = provider.url();
    let pending = tokio::spawn(async move { send(Method::POST, &url, &[], "x").await });
    provider.wait_for_requests(1).await;
    assert_eq!(provider.effects(), 0, "held before the effect");
    assert!(!pending.is_finished());

    provider.release();
    let resp = pending.await.unwrap().unwrap();
    assert_eq!(resp.text(), "done");
    assert_eq!(provider.effects(), 1);
}

#[tokio::test]
async fn delay_comes_after_the_effect() {
    let provider = FakeProvider::start(Behavior::echo().delay(Duration::from_secs(30))).await;
    let url = provider.url();
    let pending = tokio::spawn(async move { send(Method::POST, &url, &[], "x").await });
    provider.wait_for_effects(1).await;
    assert!(!pending.is_finished(), "the answer is still delayed");
    pending.abort();
}

#[tokio::test]
async fn behavior_changes_at_runtime() {
    let provider =
        FakeProvider::start(Behavior::json(201, serde_json::json!({"id": "re_1"}))).await;
    let first = send(Method::POST, &provider.url(), &[], "").await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(first.json()["id"], "re_1");

    provider.set_behavior(Behavior::fixed(503, "busy").header("retry-after", "1"));
    let second = send(Method::POST, &provider.url(), &[], "").await.unwrap();
    assert_eq!(second.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.header("retry-after"), Some("1"));

    provider.update(|b| b.drop_first_response = 1);
    assert!(send(Method::POST, &provider.url(), &[], "").await.is_err());
    assert_eq!(provider.effects(), 3);
}

#[tokio::test]
async fn streaming_download_and_upload_cross_chunk_boundaries() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let len = 3 * pattern::CHUNK as u64 + 17;
    let url = format!("{}/files/download/{len}", provider.url());
    assert_eq!(common::download(&url).await, (StatusCode::OK, len, true));

    let url = format!("{}/files/upload", provider.url());
    let resp = common::upload(&url, len).await;
    assert_eq!(
        resp.json(),
        serde_json::json!({"bytes": len, "pattern_ok": true})
    );
    assert_eq!(provider.uploaded_bytes(), len);
    assert_eq!(provider.effects(), 0, "streaming endpoints are not effects");
    assert_eq!(provider.request_count(), 2);
}

#[test]
fn pattern_check_catches_a_wrong_byte_or_offset() {
    let mut chunk = vec![0u8; 600];
    for (i, byte) in chunk.iter_mut().enumerate() {
        *byte = ((i + 1000) % 251) as u8;
    }
    assert!(pattern::matches(1000, &chunk));
    assert!(!pattern::matches(1001, &chunk));
    chunk[599] ^= 1;
    assert!(!pattern::matches(1000, &chunk));
}

#[test]
fn ready_line_parsing() {
    let line = "idemproxy ready proxy=127.0.0.1:8080 admin=127.0.0.1:9901\n";
    let (proxy, admin) = parse_ready(line).expect("parsed");
    assert_eq!((proxy.port(), admin.port()), (8080, 9901));
    assert_eq!(parse_ready("idemproxy ready proxy=127.0.0.1:1"), None);
    assert_eq!(
        parse_ready("idemproxy starting proxy=127.0.0.1:1 admin=127.0.0.1:2"),
        None
    );
    assert_eq!(
        parse_ready("idemproxy ready proxy=nowhere admin=127.0.0.1:2"),
        None
    );
}

/// A stand-in for the binary: logs, then for `serve` with a sane config prints the ready
/// line and waits to be signalled; anything else prints one line and exits 3.
const FAKE_SERVE: &str = r#"
echo "args: $* log: $IDEMPROXY_LOG token: ${IDEMPROXY_ADMIN_TOKEN:-none}" >&2
if [ "$1" = serve ] && ! grep -q nonsense "$3"; then
  echo "idemproxy ready proxy=127.0.0.1:1111 admin=127.0.0.1:2222"
  exec sleep 60
fi
echo "ran $1"
exit 3
"#;

fn fake_bin() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fake.sh");
    std::fs::write(&script, FAKE_SERVE).unwrap();
    let script = script.to_string_lossy().into_owned();
    (dir, script)
}

#[tokio::test]
async fn launcher_reads_the_ready_line_and_stops_the_process() {
    let (_bin_dir, script) = fake_bin();
    let mut proxy = Proxy::builder()
        .bin("sh", &[&script])
        .policy("p", &common::policy("p", "http://127.0.0.1:9", ""))
        .start()
        .await;
    assert_eq!(proxy.url("/p/x"), "http://127.0.0.1:1111/p/x");
    assert_eq!(proxy.admin_url("/healthz"), "http://127.0.0.1:2222/healthz");
    assert!(proxy.dir().path().join("policies/p.toml").is_file());
    let log = proxy.log_text();
    assert!(log.contains("args: serve -c "), "{log}");
    assert!(log.contains("log: debug token: none"), "{log}");

    let status = proxy.terminate().await;
    assert!(!status.success(), "sleep ends by SIGTERM");
    proxy.restart().await;
    assert_eq!(proxy.log_text().matches("args: serve").count(), 2);
    assert!(!proxy.kill().await.success());
}

#[tokio::test]
async fn launcher_reports_a_refused_start_and_runs_the_cli() {
    let (_bin_dir, script) = fake_bin();
    let dir = Proxy::builder()
        .bin("sh", &[&script])
        .env("IDEMPROXY_ADMIN_TOKEN", "t0k")
        .write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert_eq!(status.code(), Some(3));
    assert_eq!(stdout, "ran check\n");
    assert!(stderr.contains("token: t0k"), "{stderr}");

    let (status, stderr) = Proxy::builder()
        .bin("sh", &[&script])
        .raw_config("nonsense")
        .start_expect_failure()
        .await;
    assert_eq!(status.code(), Some(3));
    assert!(stderr.contains("args: serve -c "), "{stderr}");
}

/// A wrapper that hangs with a process under it (as a proxy run under strace can): the
/// wrapper writes that process's pid to `pid_file`, then waits for it.
fn hanging_wrapper(pid_file: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg(r#"sleep 300 & echo $! > "$1"; wait"#)
        .arg("sh")
        .arg(pid_file);
    command
}

/// Runs `waiting` (which must time out and panic), then checks that the process under the
/// wrapper went with it: killing the wrapper alone would leave it running, orphaned.
async fn timed_out_wait_leaves_nothing_under_it(
    pid_file: &std::path::Path,
    waiting: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let waited = tokio::spawn(waiting).await;
    assert!(waited.is_err_and(|e| e.is_panic()), "the wait timed out");
    let under: u32 = std::fs::read_to_string(pid_file)
        .expect("the wrapper wrote its child's pid")
        .trim()
        .parse()
        .unwrap();
    if !gone_within(under, Duration::from_secs(10)).await {
        common::process::signal(under, "KILL");
        panic!("process {under} outlived the wrapper the harness killed");
    }
}

#[tokio::test]
async fn a_cli_run_that_times_out_is_killed_with_every_process_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let command = hanging_wrapper(&pid_file);
    timed_out_wait_leaves_nothing_under_it(&pid_file, async move {
        run_to_end(command, Duration::from_secs(2), "the hanging wrapper").await;
    })
    .await;
}

#[tokio::test]
async fn a_process_that_does_not_exit_is_killed_with_every_process_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let child = hanging_wrapper(&pid_file).spawn().expect("start sh");
    timed_out_wait_leaves_nothing_under_it(&pid_file, async move {
        wait_exit_within(child, Duration::from_secs(2)).await;
    })
    .await;
}

/// The PostgreSQL side of the harness: a database of its own, reached through a relay that
/// a test can cut (connections dropped, new ones closed) and restore; dropped at the end.
#[tokio::test]
async fn a_postgres_database_reached_through_a_relay_that_can_be_cut_and_restored() {
    let database = Database::create();
    let name = database.name().to_string();
    assert!(Database::exists(&name));
    assert_eq!(database.sql("SELECT 40 + 2"), "42");
    let relay = Relay::start(std::net::SocketAddr::from(([127, 0, 0, 1], 5432)));
    assert_eq!(
        database.sql_at(relay.addr(), "SELECT 1").as_deref(),
        Ok("1")
    );

    relay.cut();
    let refused = database.sql_at(relay.addr(), "SELECT 1");
    assert!(refused.is_err(), "{refused:?}");
    relay.restore();
    assert_eq!(
        database.sql_at(relay.addr(), "SELECT 2").as_deref(),
        Ok("2")
    );

    // A held transaction keeps its locks until it ends.
    database.sql("CREATE TABLE t (id int primary key); INSERT INTO t VALUES (1)");
    let held = database.hold("SELECT id FROM t FOR UPDATE");
    let locked = database.sql("SELECT id FROM t FOR UPDATE SKIP LOCKED");
    assert_eq!(locked, "", "the row is locked by the held session");
    held.end();
    assert_eq!(database.sql("SELECT id FROM t FOR UPDATE SKIP LOCKED"), "1");

    drop(database);
    assert!(!Database::exists(&name), "dropped with its guard");
}

/// Run only by `a_killed_tests_private_server_is_stopped_by_the_next_start`, in a child
/// process: starts a private server, prints its folder and port, and waits to be killed.
#[test]
#[ignore = "a helper: run by another test in a process it kills"]
fn hold_a_private_server_until_killed() {
    // Only for the test that kills it (not for a run of every ignored test).
    if std::env::var_os("IDEMPROXY_HOLD_CLUSTER").is_none() {
        return;
    }
    let cluster = crate::common::cluster::Cluster::start();
    println!(
        "cluster {} {}",
        cluster.dir().display(),
        cluster.addr().port()
    );
    std::thread::sleep(std::time::Duration::from_secs(600));
}

/// A test killed outright (SIGKILL) never drops its private PostgreSQL server: the next
/// `Cluster::start` stops it and removes its folder (before the fix it ran on until the
/// machine stopped).
#[test]
fn a_killed_tests_private_server_is_stopped_by_the_next_start() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .args([
            "--ignored",
            "--exact",
            "harness::hold_a_private_server_until_killed",
        ])
        .args(["--nocapture", "--test-threads", "1"])
        .env("IDEMPROXY_HOLD_CLUSTER", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run the helper");
    let stdout = child.stdout.take().expect("piped stdout");
    // After libtest's own "test NAME ... " on the same line.
    let line = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| Some(l.split_once("cluster ")?.1.to_owned()))
        .expect("the helper prints its cluster");
    let mut words = line.split_whitespace();
    let dir = std::path::PathBuf::from(words.next().expect("a folder"));
    let port: u16 = words.next().and_then(|p| p.parse().ok()).expect("a port");
    let reachable = || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    assert!(reachable(), "the helper's server runs");
    child.kill().expect("SIGKILL the helper");
    child.wait().expect("reap the helper");
    assert!(reachable(), "nothing stopped the killed test's server");

    let removed = crate::common::cluster::sweep_orphans();
    assert!(
        removed.contains(&dir),
        "{removed:?} misses {}",
        dir.display()
    );
    assert!(!dir.exists());
    assert!(!reachable(), "the killed test's server still runs");
}
