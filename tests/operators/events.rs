//! The live event stream: `GET /events` as server-sent events, filtered by provider, route
//! and kind, under the admin API's token and browser rules; `idemproxy ops tail` printing the
//! events of a scripted run in order, as JSON lines or columns, and following a restart.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use crate::common::client::full;
use crate::common::shop::agent;
use crate::common::{self, Behavior, FakeProvider, Proxy, client, route, send};

const WAIT: Duration = Duration::from_secs(20);

/// `shop` with two guarded routes, `create` and `other`.
async fn start(provider: &FakeProvider, env: &[(&str, &str)]) -> Proxy {
    let routes = format!(
        "{}{}",
        route("create", "POST /v1/things", &["{header:x-operation-id}"]),
        route("other", "POST /v1/other", &["{header:x-operation-id}"]),
    );
    let mut builder = Proxy::builder().policy("shop", &provider.policy("shop", &routes));
    for (k, v) in env {
        builder = builder.env(k, v);
    }
    builder.start().await
}

/// A running `idemproxy ops tail ARGS`: its stdout lines and stderr lines as they come.
struct Tail {
    child: Child,
    out: mpsc::UnboundedReceiver<String>,
    err: mpsc::UnboundedReceiver<String>,
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

impl Tail {
    /// Spawns it and waits until it follows the stream.
    async fn start(admin: &str, args: &[&str]) -> Tail {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemproxy"))
            .arg("ops")
            .arg("tail")
            .args(args)
            .args(["--admin", admin])
            .env_remove("IDEMPROXY_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ops tail");
        let out = lines(child.stdout.take().expect("stdout"));
        let err = lines(child.stderr.take().expect("stderr"));
        let mut tail = Tail { child, out, err };
        tail.stderr_until("following events at").await;
        tail
    }

    async fn stderr_until(&mut self, text: &str) -> String {
        loop {
            let line = tokio::time::timeout(WAIT, self.err.recv()).await;
            match line {
                Ok(Some(line)) if line.contains(text) => return line,
                Ok(Some(_)) => continue,
                other => panic!("ops tail: no stderr line with {text:?} ({other:?})"),
            }
        }
    }

    async fn line(&mut self) -> String {
        match tokio::time::timeout(WAIT, self.out.recv()).await {
            Ok(Some(line)) => line,
            other => panic!("ops tail printed no line within {WAIT:?} ({other:?})"),
        }
    }

    async fn json(&mut self) -> serde_json::Value {
        let line = self.line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }
}

const ONE_ATTEMPT: [&str; 4] = [
    "operation.claimed",
    "provider.requested",
    "provider.responded",
    "result.persisted",
];

#[tokio::test]
async fn ops_tail_prints_the_events_of_a_run_in_order() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = start(&provider, &[]).await;
    let admin = proxy.admin_url("");
    let mut json = Tail::start(&admin, &["--json"]).await;
    let mut table = Tail::start(&admin, &["--kind", "result.persisted"]).await;

    assert_eq!(agent(&proxy, "op-a").await.status, StatusCode::OK);
    // Each event with the state it left the operation in: the request and the answer were on
    // their way while it was in flight, though recorded in the commit that made it succeeded.
    // Before 2026-12-04 all three of that commit showed `succeeded`.
    let left = ["in_flight", "in_flight", "in_flight", "succeeded"];
    for (kind, state) in ONE_ATTEMPT.into_iter().zip(left) {
        let e = json.json().await;
        assert_eq!(
            (e["kind"].as_str(), e["state"].as_str()),
            (Some(kind), Some(state)),
            "{e}"
        );
        assert_eq!(e["operation_id"], "shop/create/op-a", "{e}");
        assert_eq!(
            (&e["provider"], &e["route"]),
            (&"shop".into(), &"create".into())
        );
        assert_eq!(e["attempt"], 1, "{e}");
        assert!(e["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{e}");
        assert!(e["detail"].is_string(), "{e}");
    }
    // A replay adds one event, written with the coalesced replay counts.
    let replay = agent(&proxy, "op-a").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let e = json.json().await;
    assert_eq!(e["kind"], "operation.replayed", "{e}");

    let row = table.line().await;
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert!(columns[0].ends_with('Z'), "{row}");
    assert_eq!(
        &columns[1..5],
        ["result.persisted", "1", "succeeded", "shop/create/op-a"],
        "{row}"
    );

    // The proxy restarts on the same admin port: tail reconnects and follows the new one.
    let port = proxy.admin_addr().port();
    proxy.terminate().await;
    json.stderr_until("reconnecting").await;
    let toml = std::fs::read_to_string(proxy.dir().config_path()).expect("proxy.toml");
    let toml = toml.replace(
        "admin_listen = \"127.0.0.1:0\"",
        &format!("admin_listen = \"127.0.0.1:{port}\""),
    );
    std::fs::write(proxy.dir().config_path(), toml).expect("proxy.toml");
    proxy.restart().await;
    json.stderr_until("following events at").await;
    assert_eq!(agent(&proxy, "op-b").await.status, StatusCode::OK);
    for kind in ONE_ATTEMPT {
        let e = json.json().await;
        assert_eq!(
            (e["kind"].as_str(), e["operation_id"].as_str()),
            (Some(kind), Some("shop/create/op-b")),
            "{e}"
        );
    }
}

/// The `data:` lines of a `GET /events` stream, as they come.
async fn follow(url: &str, headers: &[(&str, &str)]) -> mpsc::UnboundedReceiver<serde_json::Value> {
    let mut request = Request::get(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let resp = client()
        .request(request.body(full(Bytes::new())).expect("request"))
        .await
        .expect("the admin API answers");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let mut body = resp.into_body();
    tokio::spawn(async move {
        let mut text = String::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            text.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                if let Some(json) = event.trim_end().strip_prefix("data: ") {
                    let _ = tx.send(serde_json::from_str(json).expect("JSON data"));
                }
            }
        }
    });
    rx
}

async fn next(rx: &mut mpsc::UnboundedReceiver<serde_json::Value>) -> serde_json::Value {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
}

#[tokio::test]
async fn events_are_filtered_by_provider_route_and_kind() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, &[]).await;
    let mut all = follow(&proxy.admin_url("/events"), &[]).await;
    let mut persisted = follow(
        &proxy.admin_url("/events?provider=shop&route=create&kind=result.persisted"),
        &[],
    )
    .await;
    let mut nobody = follow(&proxy.admin_url("/events?provider=pay"), &[]).await;

    let other = send(
        Method::POST,
        &proxy.url("/shop/v1/other"),
        &[("x-operation-id", "o-1")],
        "a=1",
    )
    .await
    .expect("answer");
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(agent(&proxy, "c-1").await.status, StatusCode::OK);

    // Everything, in order: the `other` attempt, then the `create` one.
    let ids: Vec<String> = collect_ids(&mut all, 8).await;
    let want: Vec<String> = ONE_ATTEMPT
        .iter()
        .map(|k| format!("shop/other/o-1 {k}"))
        .chain(ONE_ATTEMPT.iter().map(|k| format!("shop/create/c-1 {k}")))
        .collect();
    assert_eq!(ids, want);
    let e = next(&mut persisted).await;
    assert_eq!(
        (e["operation_id"].as_str(), e["kind"].as_str()),
        (Some("shop/create/c-1"), Some("result.persisted"))
    );
    assert_eq!(e["state"], "succeeded");
    assert!(nobody.try_recv().is_err(), "no event of provider pay");
}

async fn collect_ids(rx: &mut mpsc::UnboundedReceiver<serde_json::Value>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let e = next(rx).await;
        out.push(format!(
            "{} {}",
            e["operation_id"].as_str().unwrap_or(""),
            e["kind"].as_str().unwrap_or("")
        ));
    }
    out
}

#[tokio::test]
async fn events_keep_the_admin_rules() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, &[("IDEMPROXY_ADMIN_TOKEN", "t0ken")]).await;
    let url = proxy.admin_url("/events");
    let bare = send(Method::GET, &url, &[], "").await.expect("answer");
    assert_eq!(bare.status, StatusCode::UNAUTHORIZED);
    let auth = ("authorization", "Bearer t0ken");
    let page = [auth, ("origin", "http://evil.example")];
    let foreign = send(Method::GET, &url, &page, "").await.expect("answer");
    assert_eq!(foreign.status, StatusCode::FORBIDDEN);
    let bad = send(Method::GET, &format!("{url}?kind=nope"), &[auth], "")
        .await
        .expect("answer");
    common::problem(&bad, StatusCode::BAD_REQUEST, "bad-request");
    let post = send(
        Method::POST,
        &url,
        &[auth, ("content-type", "application/json")],
        "{}",
    )
    .await
    .expect("answer");
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    let mut events = follow(&url, &[auth]).await;
    assert_eq!(agent(&proxy, "t-1").await.status, StatusCode::OK);
    assert_eq!(next(&mut events).await["kind"], "operation.claimed");

    // A refusal ends `ops tail` with exit code 1 and the problem's detail.
    let (status, _, err) = proxy
        .run_cli(&[
            "ops",
            "tail",
            "--kind",
            "nope",
            "--admin",
            &proxy.admin_url(""),
        ])
        .await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("unknown event kind") && err.contains("(400)"),
        "{err}"
    );
}
