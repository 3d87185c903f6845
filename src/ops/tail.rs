//! `idemproxy ops tail`: follows `GET /events` and prints one line per event, as readable
//! columns or (`--json`) the event's JSON as it came; reconnects when the stream ends or the
//! proxy cannot be reached (a restart), until it is interrupted.
//!
//! It owns the server-sent events parser and the line format. Events committed while it is
//! not connected are not shown (the stream does not replay history: `ops show` does); it
//! says so on stderr when it reconnects, and when the proxy says it fell behind. A refusal
//! (a bad filter, a wrong token) ends it with exit code 1. It prints no token.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::problem_detail;
use super::table::{cell, clean};

/// The first wait before reconnecting; it doubles up to `LONGEST_WAIT`.
const FIRST_WAIT: Duration = Duration::from_millis(250);
const LONGEST_WAIT: Duration = Duration::from_secs(5);
/// A stream silent for this long (the proxy sends a keep-alive every 15 s) is given up.
const IDLE: Duration = Duration::from_secs(45);
/// How long connecting and the answer's head may take.
const CONNECT: Duration = Duration::from_secs(30);

/// One server-sent event: its `event:` type (none for plain data) and its data lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// A server-sent events parser fed with chunks as they arrive (lines may split anywhere).
#[derive(Debug, Default)]
pub struct Sse {
    pending: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl Sse {
    /// The events completed by `chunk`.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(chunk);
        let mut done = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if self.has_data {
                    done.push(std::mem::take(&mut self.current));
                }
                self.current = SseEvent::default();
                self.has_data = false;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.current.event = Some(value.to_owned()),
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                    self.has_data = true;
                }
                // A comment (keep-alive) or a field this client does not use.
                _ => {}
            }
        }
        done
    }
}

/// One event as a line: time, kind, attempt, state, operation ID, detail.
pub fn render_event(e: &Value) -> String {
    format!(
        "{:24}  {:19}  {:>3}  {:9}  {}  {}\n",
        cell(&e["at"]),
        cell(&e["kind"]),
        cell(&e["attempt"]),
        cell(&e["state"]),
        cell(&e["operation_id"]),
        cell(&e["detail"]),
    )
}

/// What to follow and how to print it.
pub struct Tail {
    pub base: String,
    /// `/events` with its query.
    pub path: String,
    pub token: Option<String>,
    pub json: bool,
}

/// Follows until interrupted; returns only on a refusal (exit 1).
pub fn run(tail: &Tail) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let why = runtime.block_on(follow(tail));
    eprintln!("error: {why}");
    ExitCode::FAILURE
}

/// How one connection ended.
enum Ended {
    /// The stream ended or broke, or could not be opened: try again.
    Lost(String),
    /// The API said no: give up.
    Refused(String),
}

async fn follow(tail: &Tail) -> String {
    let mut wait = FIRST_WAIT;
    let mut followed = false;
    loop {
        match once(tail, &mut followed).await {
            Ended::Refused(why) => return why,
            Ended::Lost(why) => {
                eprintln!("note: {why}; reconnecting (events meanwhile are not shown)");
            }
        }
        if followed {
            wait = FIRST_WAIT;
            followed = false;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(LONGEST_WAIT);
    }
}

/// One connection: opens the stream and prints its events until it ends.
async fn once(tail: &Tail, followed: &mut bool) -> Ended {
    if !tail.base.starts_with("http://") {
        return Ended::Refused(format!(
            "--admin must be an http:// URL, not {:?}",
            tail.base
        ));
    }
    let url = format!("{}{}", tail.base, tail.path);
    let mut request = Request::get(&url).header(header::ACCEPT, "text/event-stream");
    if let Some(token) = &tail.token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = match request.body(Empty::<Bytes>::new()) {
        Ok(request) => request,
        Err(e) => return Ended::Refused(format!("cannot make a request to {url}: {e}")),
    };
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let resp = match tokio::time::timeout(CONNECT, client.request(request)).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            return Ended::Lost(format!("cannot reach the admin API at {} ({e})", tail.base));
        }
        Err(_) => return Ended::Lost(format!("the admin API at {} did not answer", tail.base)),
    };
    let status = resp.status();
    if !status.is_success() {
        let body = resp.into_body().collect().await.map(|b| b.to_bytes());
        let why = problem_detail(status, &body.unwrap_or_default());
        return match status.is_server_error() {
            true => Ended::Lost(why),
            false => Ended::Refused(why),
        };
    }
    eprintln!("following events at {url}");
    *followed = true;
    print_stream(resp.into_body(), tail.json).await
}

async fn print_stream(mut body: hyper::body::Incoming, json: bool) -> Ended {
    let mut sse = Sse::default();
    loop {
        let frame = match tokio::time::timeout(IDLE, body.frame()).await {
            Err(_) => return Ended::Lost(format!("the stream was silent for {IDLE:?}")),
            Ok(None) => return Ended::Lost("the event stream ended (did the proxy stop?)".into()),
            Ok(Some(Err(e))) => return Ended::Lost(format!("the event stream broke ({e})")),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        let mut out = std::io::stdout().lock();
        for event in sse.feed(&chunk) {
            let _ = out.write_all(line(&event, json).as_bytes());
        }
        let _ = out.flush();
    }
}

/// What to print for one event; the loss notice goes to stderr instead.
fn line(event: &SseEvent, json: bool) -> String {
    if event.event.as_deref() == Some("lagged") {
        let missed = serde_json::from_str::<Value>(&event.data)
            .ok()
            .and_then(|v| v["missed"].as_u64())
            .unwrap_or(0);
        eprintln!("warning: this client fell behind; {missed} events were not shown");
        return String::new();
    }
    if json {
        // As the API sent it (JSON escapes control characters itself).
        return format!("{}\n", event.data);
    }
    match serde_json::from_str::<Value>(&event.data) {
        Ok(value) => render_event(&value),
        Err(_) => format!("{}\n", clean(&event.data)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_parsed_across_chunks_and_comments_are_skipped() {
        let mut sse = Sse::default();
        assert_eq!(sse.feed(b": idemproxy events\n\ndata: {\"a\""), vec![]);
        let got = sse.feed(b":1}\n\n: keep-alive\n\nevent: lagged\r\ndata: {\"missed\":3}\n\n");
        assert_eq!(
            got,
            vec![
                SseEvent {
                    event: None,
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: Some("lagged".into()),
                    data: "{\"missed\":3}".into()
                },
            ]
        );
    }

    #[test]
    fn an_event_prints_as_one_escaped_line() {
        let e = serde_json::json!({
            "at": "2026-12-01T08:37:39.729Z", "kind": "operation.claimed", "attempt": 1,
            "state": "in_flight", "operation_id": "shop/create/a\u{1b}b", "detail": "new",
        });
        let line = render_event(&e);
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.starts_with("2026-12-01T08:37:39.729Z  operation.claimed      1  in_flight  shop/create/a\\u{1b}b  new"), "{line}");
    }
}
