//! Forward-proxy mode (`HTTP_PROXY`): an absolute-form request reaches the provider whose
//! upstream host (and port, when named) matches and whose base path is the longest one that
//! holds the request's path; any other URL is refused, so the proxy is never an open proxy;
//! `check` refuses two providers on one host, port and base path; `CONNECT` is refused with
//! a problem instead of being tunnelled.
//!
//! Requests are written by hand on a TCP stream: that is the only way to be sure of the
//! exact request line (absolute-form, CONNECT's authority-form) the proxy receives.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::files::policy;
use crate::common::{self, Behavior, FakeProvider, Proxy};

/// A raw answer: status code, lowercased header lines, body.
struct RawResp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl RawResp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Writes `head` (with `Connection: close` added) and `body`, reads the answer to the close.
async fn raw(addr: SocketAddr, head: &str, body: &str) -> RawResp {
    let mut stream = TcpStream::connect(addr).await.expect("connect to proxy");
    let request = format!("{head}Connection: close\r\n\r\n{body}");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.expect("read answer");
    parse(&String::from_utf8_lossy(&bytes))
}

fn parse(text: &str) -> RawResp {
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect::<Vec<_>>();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    RawResp {
        status,
        headers,
        body,
    }
}

/// Joins the chunks of a chunked body (enough for the small answers here).
fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    body
}

/// A plain provider whose policy names it as `http://localhost:PORT`, as an SDK would.
async fn start() -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "forwarded").header("x-p", "1")).await;
    let upstream = format!("http://localhost:{}", provider.addr().port());
    let proxy = Proxy::builder()
        .policy("local", &policy("local", &upstream, ""))
        .start()
        .await;
    (provider, proxy)
}

#[tokio::test]
async fn absolute_form_request_reaches_the_provider_of_that_host() {
    let (provider, proxy) = start().await;
    let port = provider.addr().port();
    let head = format!(
        "POST http://localhost:{port}/v1/x?y=1 HTTP/1.1\r\nHost: localhost:{port}\r\n\
         Content-Length: 4\r\nProxy-Connection: keep-alive\r\nX-Agent: a\r\n"
    );
    let resp = raw(proxy.proxy_addr(), &head, "body").await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.body, "forwarded");
    assert_eq!(resp.header("x-p"), Some("1"));

    let got = &provider.requests()[0];
    assert_eq!(got.method, http::Method::POST);
    assert_eq!(got.path_and_query, "/v1/x?y=1");
    assert_eq!(&got.body[..], b"body");
    assert_eq!(got.header("x-agent"), Some("a"));
    assert_eq!(got.header("proxy-connection"), None);
    assert_eq!(
        got.header("host"),
        Some(format!("localhost:{port}").as_str())
    );
}

#[tokio::test]
async fn an_unknown_host_or_port_is_403_no_route_never_an_open_proxy() {
    let (provider, proxy) = start().await;
    let other_port = proxy.admin_addr().port();
    let hosts = ["example.com".to_string(), format!("localhost:{other_port}")];
    for host in hosts {
        let head = format!("GET http://{host}/v1/x HTTP/1.1\r\nHost: {host}\r\n");
        let resp = raw(proxy.proxy_addr(), &head, "").await;
        assert_eq!(resp.status, 403, "{host}: {}", resp.body);
        assert_eq!(
            resp.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(resp.json()["type"], "urn:idemproxy:no-route", "{host}");
    }
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn connect_is_refused_with_a_problem_pointing_at_the_mount() {
    let (provider, proxy) = start().await;
    let port = provider.addr().port();
    let head = format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n");
    let resp = raw(proxy.proxy_addr(), &head, "").await;
    assert_eq!(resp.status, 501, "{}", resp.body);
    assert_eq!(
        resp.header("content-type"),
        Some("application/problem+json")
    );
    let problem = resp.json();
    assert_eq!(problem["type"], "urn:idemproxy:connect-not-supported");
    assert_eq!(problem["status"], 501);
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("HTTPS interception"), "{detail}");
    assert!(detail.contains("mount"), "{detail}");
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn absolute_form_goes_over_the_upstreams_own_scheme_and_base_path() {
    let provider = FakeProvider::start_tls(Behavior::fixed(200, "over tls")).await;
    let port = provider.addr().port();
    let upstream = format!("{}/base", provider.url());
    let policy = common::files::policy_with_ca("tls", &upstream, Some(&provider.ca_file()), "");
    let proxy = Proxy::builder().policy("tls", &policy).start().await;
    // The agent believes the provider speaks plain HTTP; the proxy speaks HTTPS to it.
    let head =
        format!("GET http://localhost:{port}/base/v1/x HTTP/1.1\r\nHost: localhost:{port}\r\n");
    let resp = raw(proxy.proxy_addr(), &head, "").await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.body, "over tls");
    let got = &provider.requests()[0];
    assert_eq!(got.path_and_query, "/base/v1/x");
    assert_eq!(got.version, http::Version::HTTP_2);
}

/// `alpha` at `http://localhost:P` (no routes) and `beta` at `http://localhost:P/base` (a
/// guarded refund route): two providers on one upstream host and port. `alpha` sorts first,
/// so a choice by host alone picks it. `alpha` rejects what its routes do not match: passing
/// it through would carry `beta`'s effects unguarded through `/alpha/base/...`, which
/// `check` refuses.
async fn start_two_on_one_host() -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "forwarded")).await;
    let root = format!("http://localhost:{}", provider.addr().port());
    let refund = common::route(
        "create_refund",
        "POST /v1/refunds",
        &["{header:x-operation-id}"],
    );
    let proxy = Proxy::builder()
        .policy("alpha", &policy("alpha", &root, "unmatched = \"reject\"\n"))
        .policy("beta", &policy("beta", &format!("{root}/base"), &refund))
        .start()
        .await;
    (provider, proxy)
}

#[tokio::test]
async fn the_provider_with_the_longest_matching_base_path_wins() {
    let (provider, proxy) = start_two_on_one_host().await;
    let port = provider.addr().port();
    let head = format!(
        "POST http://localhost:{port}/base/v1/refunds HTTP/1.1\r\nHost: localhost:{port}\r\n\
         X-Operation-Id: op-1\r\nContent-Length: 3\r\n"
    );
    let resp = raw(proxy.proxy_addr(), &head, "a=1").await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(
        resp.header("idem-state"),
        Some("succeeded"),
        "went unguarded"
    );
    assert_eq!(
        resp.header("idem-operation-id"),
        Some("beta/create_refund/op-1")
    );
    // A path under no longer base path is the root provider's (which refuses it).
    let head = format!(
        "POST http://localhost:{port}/basement/v1/refunds HTTP/1.1\r\nHost: localhost:{port}\r\n\
         Content-Length: 3\r\n"
    );
    let resp = raw(proxy.proxy_addr(), &head, "a=1").await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert!(
        resp.body.contains("\"provider\":\"alpha\""),
        "{}",
        resp.body
    );
    assert_eq!(resp.header("idem-state"), None);
    let paths: Vec<String> = provider
        .requests()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(paths, ["/base/v1/refunds"]);
}

#[tokio::test]
async fn a_path_under_no_providers_base_path_is_403_no_route() {
    let provider = FakeProvider::start(Behavior::fixed(200, "forwarded")).await;
    let port = provider.addr().port();
    let upstream = format!("http://localhost:{port}/base");
    let proxy = Proxy::builder()
        .policy("based", &policy("based", &upstream, ""))
        .start()
        .await;
    for path in ["/v1/x", "/basement", "/base/../v1/x"] {
        let head =
            format!("GET http://localhost:{port}{path} HTTP/1.1\r\nHost: localhost:{port}\r\n");
        let resp = raw(proxy.proxy_addr(), &head, "").await;
        assert_eq!(resp.status, 403, "{path}: {}", resp.body);
        assert_eq!(resp.json()["type"], "urn:idemproxy:no-route", "{path}");
    }
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn check_refuses_two_providers_on_the_same_host_port_and_base_path() {
    let upstream = "http://api.example.com:8080/v1";
    let dir = Proxy::builder()
        .policy("one", &policy("one", upstream, ""))
        .policy("two", &policy("two", "http://API.example.com:8080/v1/", ""))
        .write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(!status.success(), "{status:?}\n{stdout}");
    let line = stderr
        .lines()
        .find(|l| l.contains("policies/two.toml") && l.contains("provider.upstream"))
        .unwrap_or_else(|| panic!("no error for two.toml's upstream:\n{stderr}"));
    assert!(line.contains("one.toml"), "{line}");
    assert!(line.contains("base path"), "names the fix: {line}");
}

#[tokio::test]
async fn a_request_naming_no_port_where_providers_differ_only_by_port_is_refused() {
    let one = FakeProvider::start(Behavior::fixed(200, "one")).await;
    let two = FakeProvider::start(Behavior::fixed(200, "two")).await;
    let upstream = |p: &FakeProvider| format!("http://localhost:{}", p.addr().port());
    let proxy = Proxy::builder()
        .policy("one", &policy("one", &upstream(&one), ""))
        .policy("two", &policy("two", &upstream(&two), ""))
        .start()
        .await;
    let resp = raw(
        proxy.proxy_addr(),
        "GET http://localhost/v1/x HTTP/1.1\r\nHost: localhost\r\n",
        "",
    )
    .await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    let problem = resp.json();
    assert_eq!(problem["type"], "urn:idemproxy:no-route");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("port"), "{detail}");
    // Naming the port settles it.
    let port = two.addr().port();
    let head = format!("GET http://localhost:{port}/v1/x HTTP/1.1\r\nHost: localhost:{port}\r\n");
    let resp = raw(proxy.proxy_addr(), &head, "").await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "two"));
    assert_eq!(one.request_count(), 0);
}
