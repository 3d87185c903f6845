//! What the fake provider does with a request: the answer, how slow it is, whether it waits
//! for the test's go-ahead, whether it deduplicates on a key, and whether it loses the answer;
//! and the pure pieces that make an answer (dedupe key, echo, response). The state (counts,
//! stored answers, the gate) lives in `provider`.
//!
//! A request named by one of the behaviour's `reads` is answered at once with that read's
//! answer (no effect). Order, for every other request that is not a streaming endpoint: hold gate -> effect committed
//! (or replayed, when deduplicating on a key already seen) -> delay -> answer or drop. So the
//! gate decides *whether* an effect happens (a crash test may never release it), and the
//! delay and drop model a provider that did the work but answered slowly or not at all.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::client::{Body, full};
use super::provider::Recorded;

/// The answer given for a new effect.
#[derive(Clone, Debug)]
pub enum Answer {
    /// This status and body (plus `Behavior::headers`).
    Fixed { status: u16, body: Bytes },
    /// `200` with a JSON description of the request received (see `provider::echo_body`).
    Echo,
}

/// Where a deduplicating provider reads its idempotency key.
#[derive(Clone, Debug)]
pub enum Dedupe {
    /// A request header (case-insensitive), like Stripe's `Idempotency-Key`.
    Header(String),
    /// A scalar at a JSON pointer in a JSON body, like Square's `/idempotency_key`.
    JsonField(String),
}

/// A composable description of the fake provider's behaviour; build it with the methods
/// below, set it at start or swap it at runtime with `FakeProvider::set_behavior`.
#[derive(Clone, Debug)]
pub struct Behavior {
    pub answer: Answer,
    /// Extra headers on every answer (stored with the effect, so replays carry them too).
    pub headers: Vec<(String, String)>,
    /// Pause between committing the effect and answering.
    pub delay: Duration,
    /// Hold every request before its effect until `FakeProvider::release` is called.
    pub hold: bool,
    /// Deduplicate on this key: one effect per key, the first answer replayed for the rest.
    pub dedupe: Option<Dedupe>,
    /// Commit the effect, then close the connection without answering, for this many
    /// requests (counted from the moment this behaviour was set).
    pub drop_first_response: usize,
    /// Requests answered as reads (no effect, no gate, no delay, never dropped): exact
    /// method and path with query, and their JSON answer.
    pub reads: Vec<Read>,
    /// A lookup answered from the effects committed (see `lookup_by_key`).
    pub lookup: Option<Lookup>,
}

/// `GET {prefix}{key}`, answered as a read from the effects committed under requests whose
/// `key_header` was `key`, like a provider's list of objects filtered by the key.
#[derive(Clone, Debug)]
pub struct Lookup {
    pub prefix: String,
    pub key_header: String,
}

/// A read the provider answers from what it holds, like `GET /payments/PM123`.
#[derive(Clone, Debug)]
pub struct Read {
    pub method: String,
    pub path_and_query: String,
    pub status: u16,
    pub body: serde_json::Value,
}

impl Default for Behavior {
    fn default() -> Self {
        Self::echo()
    }
}

impl Behavior {
    /// Answers `200` with a JSON echo of the request; every request is a new effect.
    pub fn echo() -> Self {
        Self {
            answer: Answer::Echo,
            headers: Vec::new(),
            delay: Duration::ZERO,
            hold: false,
            dedupe: None,
            drop_first_response: 0,
            reads: Vec::new(),
            lookup: None,
        }
    }

    /// Answers this status and body.
    pub fn fixed(status: u16, body: impl Into<Bytes>) -> Self {
        let answer = Answer::Fixed {
            status,
            body: body.into(),
        };
        Self {
            answer,
            ..Self::echo()
        }
    }

    /// Answers this status and JSON value, with `content-type: application/json`.
    pub fn json(status: u16, value: serde_json::Value) -> Self {
        Self::fixed(status, value.to_string()).header("content-type", "application/json")
    }

    /// Adds a header to every answer.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Waits this long after the effect before answering.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Holds each request, before its effect, until the test calls `release`.
    pub fn hold(mut self) -> Self {
        self.hold = true;
        self
    }

    /// Deduplicates on this request header.
    pub fn dedupe_on_header(mut self, name: &str) -> Self {
        self.dedupe = Some(Dedupe::Header(name.to_ascii_lowercase()));
        self
    }

    /// Deduplicates on the scalar at this JSON pointer of the body.
    pub fn dedupe_on_json(mut self, pointer: &str) -> Self {
        self.dedupe = Some(Dedupe::JsonField(pointer.to_string()));
        self
    }

    /// Answers `METHOD /path?query` (exactly) with this status and JSON, as a read.
    pub fn read(mut self, request: &str, status: u16, body: serde_json::Value) -> Self {
        let (method, path) = request.split_once(' ').expect("\"METHOD /path\"");
        self.reads.push(Read {
            method: method.to_string(),
            path_and_query: path.to_string(),
            status,
            body,
        });
        self
    }

    /// Answers `GET {prefix}{key}` as a read from what was committed: `200 {"data": [A]}`,
    /// A the first answer's body (as JSON, or as a string when it is not JSON) of the first
    /// effect committed under a request whose `key_header` was `key`; `200 {"data": []}` when
    /// there was none. Effects count under their key whether or not the provider deduplicates.
    pub fn lookup_by_key(mut self, prefix: &str, key_header: &str) -> Self {
        self.lookup = Some(Lookup {
            prefix: prefix.to_string(),
            key_header: key_header.to_ascii_lowercase(),
        });
        self
    }

    /// The key a request asks the lookup about, if it is the lookup.
    pub fn looked_up<'a>(&self, request: &'a Recorded) -> Option<&'a str> {
        let lookup = self.lookup.as_ref()?;
        if request.method != http::Method::GET {
            return None;
        }
        request.path_and_query.strip_prefix(&lookup.prefix)
    }

    /// The key this request's effect counts under for the lookup, if any.
    pub fn lookup_key(&self, request: &Recorded) -> Option<String> {
        let lookup = self.lookup.as_ref()?;
        request.header(&lookup.key_header).map(str::to_string)
    }

    /// The read answering this request, if any.
    pub fn read_for(&self, request: &Recorded) -> Option<Response<Body>> {
        let read = self.reads.iter().find(|r| {
            r.method == request.method.as_str() && r.path_and_query == request.path_and_query
        })?;
        let status = StatusCode::from_u16(read.status).expect("test gave a valid status");
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(full(read.body.to_string()))
            .expect("valid read answer");
        Some(response)
    }

    /// Loses the answer of the first `n` requests after committing their effect.
    pub fn drop_first_response(mut self, n: usize) -> Self {
        self.drop_first_response = n;
        self
    }
}

/// The lookup's answer: the first effect committed under the key, if any (`lookup_by_key`).
pub fn lookup_answer(found: Option<&Stored>) -> Response<Body> {
    let data: Vec<serde_json::Value> = found
        .map(|stored| {
            serde_json::from_slice(&stored.body).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(&stored.body).into_owned())
            })
        })
        .into_iter()
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(full(serde_json::json!({ "data": data }).to_string()))
        .expect("valid lookup answer")
}

/// An answer as first given, kept per dedupe key to be given again.
#[derive(Clone, Debug)]
pub struct Stored {
    status: u16,
    headers: Vec<(String, String)>,
    body: Bytes,
}

pub fn dedupe_key(dedupe: &Dedupe, request: &Recorded) -> Option<String> {
    match dedupe {
        Dedupe::Header(name) => request.header(name).map(str::to_string),
        Dedupe::JsonField(pointer) => {
            let body: serde_json::Value = serde_json::from_slice(&request.body).ok()?;
            match body.pointer(pointer)? {
                serde_json::Value::String(s) => Some(s.clone()),
                v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
                    Some(v.to_string())
                }
                _ => None,
            }
        }
    }
}

/// The answer for effect number `effect`; it carries `x-fake-effect: N` so a test can tell
/// which effect any answer (first or replayed) belongs to.
pub fn new_answer(behavior: &Behavior, request: &Recorded, effect: usize) -> Stored {
    let mut headers = behavior.headers.clone();
    headers.push(("x-fake-effect".into(), effect.to_string()));
    let (status, body) = match &behavior.answer {
        Answer::Fixed { status, body } => (*status, body.clone()),
        Answer::Echo => {
            headers.push(("content-type".into(), "application/json".into()));
            (200, echo_body(request, effect))
        }
    };
    Stored {
        status,
        headers,
        body,
    }
}

/// `{"effect", "method", "path", "version", "headers": {name: value}, "body"}`; repeated
/// headers are joined with ", ", the body is text (lossy UTF-8).
pub fn echo_body(request: &Recorded, effect: usize) -> Bytes {
    let mut headers = serde_json::Map::new();
    for name in request.headers.keys() {
        let values: Vec<_> = request
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        headers.insert(name.to_string(), values.join(", ").into());
    }
    let echo = serde_json::json!({
        "effect": effect,
        "method": request.method.as_str(),
        "path": request.path_and_query,
        "version": format!("{:?}", request.version),
        "headers": headers,
        "body": String::from_utf8_lossy(&request.body),
    });
    Bytes::from(echo.to_string())
}

pub fn respond(stored: &Stored, replayed: bool) -> Response<Body> {
    let status = StatusCode::from_u16(stored.status).expect("test gave a valid status");
    let mut response = Response::builder().status(status);
    for (name, value) in &stored.headers {
        response = response.header(name, value);
    }
    if replayed {
        response = response.header("idempotent-replayed", "true");
    }
    response
        .body(full(stored.body.clone()))
        .expect("test gave valid headers")
}
