//! `GET /events?provider=&route=&kind=`: the ledger's feed of committed events as
//! server-sent events, filtered.
//!
//! Each event the ledger commits from the moment of the call is one `data:` line of JSON
//! (`operation_id`, `provider`, `route`, `state`, `at`, `kind`, `attempt`, `detail`); a
//! comment line opens the stream and one keeps it alive every `KEEP_ALIVE`. A subscriber
//! too slow for the feed gets an `event: lagged` line saying how many events it missed. The
//! stream ends when the proxy shuts down. It never replays history (that is `GET /ops/{id}`)
//! and never shows more of an event than `GET /ops/{id}` does.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{HeaderValue, Response, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::json;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{Instant, Interval, interval_at};
use tokio_util::sync::CancellationToken;

use super::error::AdminError;
use crate::app::App;
use crate::ledger::Published;
use crate::operation::EventKind;
use crate::wire::{BoxError, ProxyBody};

/// How often an idle stream gets a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The first line of every stream, so a client knows it is following.
pub const OPENING: &str = ": idemproxy events\n\n";

/// The filters of `GET /events`; `None` matches all.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EventFilter {
    pub provider: Option<String>,
    pub route: Option<String>,
    pub kind: Option<EventKind>,
}

impl EventFilter {
    pub fn admits(&self, p: &Published) -> bool {
        self.provider.as_ref().is_none_or(|v| *v == p.op.provider)
            && self.route.as_ref().is_none_or(|v| *v == p.op.route)
            && self.kind.is_none_or(|k| k == p.event.kind)
    }
}

/// Parses `provider=&route=&kind=` as `GET /ops` parses its query: an empty value means "not
/// given"; an unknown or repeated parameter or an unknown kind is an error.
pub fn parse_filter(query: Option<&str>) -> Result<EventFilter, AdminError> {
    let mut filter = EventFilter::default();
    for (key, value) in super::query::given(query)? {
        match key.as_str() {
            "provider" => filter.provider = Some(value),
            "route" => filter.route = Some(value),
            "kind" => filter.kind = Some(kind(&value)?),
            other => {
                return Err(bad(format!(
                    "unknown parameter `{other}` (expected provider, route, kind)."
                )));
            }
        }
    }
    Ok(filter)
}

fn kind(value: &str) -> Result<EventKind, AdminError> {
    EventKind::parse(value).ok_or_else(|| {
        let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        bad(format!(
            "unknown event kind `{value}` (expected one of {}).",
            known.join(", ")
        ))
    })
}

fn bad(detail: String) -> AdminError {
    AdminError::BadRequest(detail)
}

/// One event as a `data:` line: the event as `GET /ops/{id}` shows it, with its operation's
/// ID, provider, route and the state this event left it in (`EventKind::leaves`: one commit
/// may append an attempt's request, answer and verdict together, and only the verdict left it
/// in the state the commit did).
pub fn data_line(p: &Published) -> String {
    let value = json!({
        "operation_id": p.op.id,
        "provider": p.op.provider,
        "route": p.op.route,
        "state": p.event.kind.leaves(p.op.state).as_str(),
        "at": p.event.at.to_rfc3339(),
        "kind": p.event.kind.as_str(),
        "attempt": p.event.attempt,
        "detail": p.event.detail,
    });
    format!("data: {value}\n\n")
}

/// `GET /events`: subscribes at once (so nothing committed after the answer's head is
/// missed) and streams until the proxy shuts down or the client goes away.
pub fn events(app: &App, query: Option<&str>) -> Result<Response<ProxyBody>, AdminError> {
    let filter = parse_filter(query)?;
    let follow = Follow {
        feed: app.ledger.subscribe(),
        filter,
        closing: app.closing.clone(),
        keep_alive: interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        opened: false,
    };
    let frames = stream::unfold(follow, |mut follow| async move {
        let text = follow.next().await?;
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), follow))
    });
    let body = StreamBody::new(frames)
        .map_err(|never| -> BoxError { match never {} })
        .boxed();
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    let event_stream = HeaderValue::from_static("text/event-stream");
    headers.insert(header::CONTENT_TYPE, event_stream);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// One follower's state.
struct Follow {
    feed: Receiver<Published>,
    filter: EventFilter,
    closing: CancellationToken,
    keep_alive: Interval,
    opened: bool,
}

impl Follow {
    /// The next text to send; `None` ends the stream.
    async fn next(&mut self) -> Option<String> {
        if !self.opened {
            self.opened = true;
            return Some(OPENING.to_owned());
        }
        loop {
            tokio::select! {
                biased;
                () = self.closing.cancelled() => return None,
                got = self.feed.recv() => match got {
                    Ok(p) if self.filter.admits(&p) => return Some(data_line(&p)),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(missed)) => {
                        let missed = json!({ "missed": missed });
                        return Some(format!("event: lagged\ndata: {missed}\n\n"));
                    }
                    Err(RecvError::Closed) => return None,
                },
                _ = self.keep_alive.tick() => return Some(": keep-alive\n\n".to_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::Timestamp;
    use crate::operation::{Event, Operation, State};

    fn published(id: &str, kind: EventKind) -> Published {
        Published {
            op: Arc::new(Operation::example(id, State::Unknown, Timestamp(0))),
            event: Event {
                at: Timestamp(0),
                kind,
                attempt: 2,
                detail: "line one\nline two".into(),
            },
        }
    }

    #[test]
    fn the_filter_takes_provider_route_and_kind() {
        let f = parse_filter(Some("provider=shop&route=&kind=operation.unknown")).unwrap();
        assert_eq!(f.provider.as_deref(), Some("shop"));
        assert_eq!(f.route, None, "empty means not given");
        assert!(f.admits(&published("shop/create/x", EventKind::Unknown)));
        assert!(!f.admits(&published("shop/create/x", EventKind::Claimed)));
        assert!(!f.admits(&published("pay/create/x", EventKind::Unknown)));
        let r = parse_filter(Some("route=refund")).unwrap();
        assert!(r.admits(&published("pay/refund/x", EventKind::Claimed)));
        assert!(!r.admits(&published("pay/create/x", EventKind::Claimed)));
    }

    #[test]
    fn a_bad_filter_is_refused() {
        for query in ["kind=operation.nope", "state=unknown", "route=a&route=b"] {
            let refused = parse_filter(Some(query));
            assert!(matches!(refused, Err(AdminError::BadRequest(_))), "{query}");
        }
    }

    #[test]
    fn an_event_is_one_data_line_of_json() {
        let line = data_line(&published("shop/create/x", EventKind::Unknown));
        let json = line.strip_prefix("data: ").unwrap().strip_suffix("\n\n");
        let value: serde_json::Value = serde_json::from_str(json.unwrap()).unwrap();
        assert_eq!(value["operation_id"], "shop/create/x");
        assert_eq!(value["kind"], "operation.unknown");
        assert_eq!(value["attempt"], 2);
        assert_eq!(value["state"], "unknown");
        assert_eq!(value["detail"], "line one\nline two");
        assert_eq!(line.matches('\n').count(), 2, "newlines escaped: {line}");
    }
}
