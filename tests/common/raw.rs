//! A client at the socket level, for the inbound-limit tests: connections that stay silent,
//! heads and bodies sent in pieces and left hanging, answers read off the wire by hand; and
//! waiting for a line in the proxy's log.
//!
//! Like the rest of `common`, it only sees the proxy's wire and files. Test modules reach it as
//! `crate::common::raw` and use only part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::Proxy;

/// How long a test waits for something the proxy must do before failing.
pub const WAIT: Duration = Duration::from_secs(20);

pub async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr)
        .await
        .expect("connect to the proxy")
}

/// Writes `bytes` and flushes.
pub async fn write(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).await.expect("write to the proxy");
    stream.flush().await.expect("flush");
}

/// Waits (up to [`WAIT`]) until the proxy closes the connection, reading whatever it
/// sends first; returns what it sent. Fails the test if the connection stays open.
pub async fn closed_by_server(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let drained = tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "the proxy kept the connection open for {WAIT:?}"
    );
    received
}

/// One answer read off the wire: the status and the head as text, and the body.
#[derive(Debug)]
pub struct RawResp {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl RawResp {
    /// A header's value (first one, name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Reads one HTTP/1.1 answer with a `Content-Length` (every answer the proxy makes itself),
/// within [`WAIT`].
pub async fn read_answer(stream: &mut TcpStream) -> RawResp {
    tokio::time::timeout(WAIT, read_answer_now(stream))
        .await
        .expect("an answer from the proxy")
}

async fn read_answer_now(stream: &mut TcpStream) -> RawResp {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).await.expect("read an answer");
        assert!(n > 0, "closed before a full answer head: {data:?}");
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let mut resp = RawResp {
        status,
        head,
        body: data[head_end..].to_vec(),
    };
    let len: usize = resp
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while resp.body.len() < len {
        let n = stream.read(&mut buf).await.expect("read the answer body");
        assert!(n > 0, "closed before the whole body");
        resp.body.extend_from_slice(&buf[..n]);
    }
    resp
}

/// A guarded refund's head (`POST /pay/v1/refunds`, form body of `len` bytes declared).
pub fn refund_head(rendered: &str, len: usize) -> String {
    format!(
        "POST /pay/v1/refunds HTTP/1.1\r\nhost: proxy\r\nx-operation-id: {rendered}\r\n\
         content-type: application/x-www-form-urlencoded\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// The same refund with a chunked body; send chunks with [`chunk`].
pub fn chunked_refund_head(rendered: &str) -> String {
    format!(
        "POST /pay/v1/refunds HTTP/1.1\r\nhost: proxy\r\nx-operation-id: {rendered}\r\n\
         content-type: application/x-www-form-urlencoded\r\ntransfer-encoding: chunked\r\n\r\n"
    )
}

/// One chunk of a chunked body (`b""` is the last one).
pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// Waits (up to [`WAIT`]) until the proxy's log contains `needle`; returns the log.
pub async fn log_line(proxy: &Proxy, needle: &str) -> String {
    let found = tokio::time::timeout(WAIT, async {
        loop {
            let log = proxy.log_text();
            if log.contains(needle) {
                return log;
            }
            // A file has no change signal; look again shortly.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no log line with {needle:?}:\n{}", proxy.log_text()))
}

/// Asserts that the ledger holds no operation `id`; stops the proxy (SIGTERM) to read it.
pub async fn unclaimed(proxy: &mut Proxy, ids: &[&str]) {
    if proxy.pid().is_some() {
        proxy.terminate().await;
    }
    let now = idemproxy::clock::Timestamp::now();
    let (ledger, _) = idemproxy::ledger::Ledger::open(proxy.ledger_at(), now, Default::default())
        .await
        .expect("open the ledger file");
    for id in ids {
        let op = ledger.get(id).await.expect("read the ledger");
        assert!(op.is_none(), "nothing is claimed for {id}: {op:?}");
    }
}
