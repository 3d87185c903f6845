//! `[intercept]` and reload (docs/reference.md section 2): a reload that changes only
//! `[intercept]` applies it whole to new CONNECTs (here a `tunnel` entry added, then the
//! table removed), and says so.

use http::{Method, StatusCode};

use crate::common::tunnel::{Ca, connect, intercepting};
use crate::common::{Behavior, FakeProvider, Proxy, send};

async fn reload(proxy: &Proxy) -> serde_json::Value {
    let url = proxy.admin_url("/admin/reload");
    let resp = send(
        Method::POST,
        &url,
        &[("content-type", "application/json")],
        "{}",
    )
    .await
    .expect("admin answers");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    resp.json()
}

#[tokio::test]
async fn a_reload_of_intercept_alone_applies_to_new_connects() {
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let target = echo.local_addr().expect("addr").to_string();
    let ca = Ca::new();
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let builder = Proxy::builder().policy("pay", &provider.policy("pay", ""));
    let proxy = intercepting(builder, &ca, &[]).start().await;
    let (status, _, _) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 403, "not a tunnel entry yet");

    let config = proxy.dir().config_path();
    let text = std::fs::read_to_string(&config).expect("proxy.toml");
    let with_tunnel = text.replace("tunnel = []", &format!("tunnel = [{target:?}]"));
    assert_ne!(text, with_tunnel);
    std::fs::write(&config, &with_tunnel).expect("edit proxy.toml");
    let applied = reload(&proxy).await;
    assert_eq!(applied["outcome"], "applied", "{applied}");
    assert!(applied.to_string().contains("intercept"), "{applied}");
    let (status, head, _) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 200, "the new tunnel entry: {head}");

    let without = with_tunnel[..with_tunnel.find("[intercept]").expect("table")].to_string();
    std::fs::write(&config, without).expect("edit proxy.toml");
    reload(&proxy).await;
    let (status, _, _) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 501, "[intercept] removed: CONNECT is not served");
}
