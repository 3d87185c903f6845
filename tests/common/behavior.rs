//! What the fake provider does with a request: the answer, how slow it is, whether it waits
//! for the test's go-ahead, whether it deduplicates on a key, and whether it loses the answer.
//!
//! Order, for every request that is not a streaming endpoint: hold gate -> effect committed
//! (or replayed, when deduplicating on a key already seen) -> delay -> answer or drop. So the
//! gate decides *whether* an effect happens (a crash test may never release it), and the
//! delay and drop model a provider that did the work but answered slowly or not at all.

use std::time::Duration;

use bytes::Bytes;

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

    /// Loses the answer of the first `n` requests after committing their effect.
    pub fn drop_first_response(mut self, n: usize) -> Self {
        self.drop_first_response = n;
        self
    }
}
