//! The demo's fake refund provider: a loopback HTTP server that makes refunds.
//!
//! It owns its books (the refunds made, the keys seen) and one deliberate fault: the answer to
//! the first request is lost after the refund is made, as when a connection drops at the worst
//! moment. Told to deduplicate, it answers a known `Idempotency-Key` with the refund it already
//! made and `Idempotent-Replayed: true`, like Stripe. It must never be reachable from another
//! machine (it binds 127.0.0.1 only) and never outlives the demo.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The largest request body the fake provider reads; a refund form is far smaller.
const MAX_BODY: usize = 64 * 1024;

/// What the provider does with one request, decided under its lock.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The refund as JSON: a new one, or the one already made for this key.
    pub refund: Value,
    /// The refund was already made for this key (`Idempotent-Replayed: true`).
    pub replayed: bool,
    /// The answer is lost: the connection closes without a response.
    pub lost: bool,
}

/// The provider's books: every refund made, the keys seen, the requests received.
#[derive(Debug)]
pub struct Books {
    dedupe: bool,
    answers_to_lose: usize,
    refunds: Vec<Value>,
    by_key: HashMap<String, usize>,
    /// The `Idempotency-Key` of each request received, in order.
    keys: Vec<Option<String>>,
}

impl Books {
    /// Empty books. `dedupe`: honour `Idempotency-Key`; `answers_to_lose`: how many of the
    /// first requests have their answer lost after the refund is made.
    pub fn new(dedupe: bool, answers_to_lose: usize) -> Books {
        Books {
            dedupe,
            answers_to_lose,
            refunds: Vec::new(),
            by_key: HashMap::new(),
            keys: Vec::new(),
        }
    }

    /// Receives one refund request: with dedupe on and a key already seen, the stored refund
    /// (no new effect); otherwise a new refund. The effect happens before the answer is lost.
    pub fn receive(&mut self, key: Option<&str>, form: &[(String, String)]) -> Reply {
        self.keys.push(key.map(str::to_string));
        let lost = self.answers_to_lose > 0;
        self.answers_to_lose = self.answers_to_lose.saturating_sub(1);
        let known = key
            .filter(|_| self.dedupe)
            .and_then(|k| self.by_key.get(k))
            .and_then(|&i| self.refunds.get(i));
        if let Some(refund) = known {
            return Reply {
                refund: refund.clone(),
                replayed: true,
                lost,
            };
        }
        let refund = new_refund(self.refunds.len() + 1, form);
        if let Some(key) = key.filter(|_| self.dedupe) {
            self.by_key.insert(key.to_string(), self.refunds.len());
        }
        self.refunds.push(refund.clone());
        Reply {
            refund,
            replayed: false,
            lost,
        }
    }

    /// How many refunds were really made: the effects the demo counts.
    pub fn effects(&self) -> usize {
        self.refunds.len()
    }

    /// How many requests reached the provider.
    pub fn requests(&self) -> usize {
        self.keys.len()
    }

    /// The `Idempotency-Key` of each request received, in order.
    pub fn keys(&self) -> &[Option<String>] {
        &self.keys
    }

    /// The refunds made, in order: what an operator sees in the provider's dashboard.
    pub fn refunds(&self) -> &[Value] {
        &self.refunds
    }
}

/// Refund number `n` of the form's charge and amount, as the provider reports it.
fn new_refund(n: usize, form: &[(String, String)]) -> Value {
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let amount = field("amount")
        .parse::<u64>()
        .map_or_else(|_| json!(field("amount")), |n| json!(n));
    json!({
        "id": format!("re_{n}"),
        "object": "refund",
        "amount": amount,
        "currency": field("currency"),
        "charge": field("charge"),
        "status": "succeeded",
    })
}

/// A running fake provider; dropping it stops accepting connections.
pub struct FakeProvider {
    addr: SocketAddr,
    books: Arc<Mutex<Books>>,
    accept: JoinHandle<()>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeProvider {
    /// Starts on 127.0.0.1 with a free port; the first answer will be lost.
    pub async fn start(dedupe: bool) -> std::io::Result<FakeProvider> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let books = Arc::new(Mutex::new(Books::new(dedupe, 1)));
        let accept = tokio::spawn(accept_loop(listener, books.clone()));
        Ok(FakeProvider {
            addr,
            books,
            accept,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn effects(&self) -> usize {
        lock(&self.books).effects()
    }

    pub fn requests(&self) -> usize {
        lock(&self.books).requests()
    }

    /// The `Idempotency-Key` of each request received, in order.
    pub fn keys(&self) -> Vec<Option<String>> {
        lock(&self.books).keys().to_vec()
    }

    /// The `n`th refund made (1-based), if any.
    pub fn refund(&self, n: usize) -> Option<Value> {
        lock(&self.books).refunds().get(n.checked_sub(1)?).cloned()
    }
}

/// The books stay usable even if a holder panicked: they are counters and a list.
fn lock(books: &Mutex<Books>) -> MutexGuard<'_, Books> {
    books
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn accept_loop(listener: TcpListener, books: Arc<Mutex<Books>>) {
    while let Ok((tcp, _)) = listener.accept().await {
        let books = books.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(books.clone(), req));
            // A lost answer ends its connection with an error: that is the point.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

/// Returned from the service so that hyper closes the connection without an answer.
#[derive(Debug, thiserror::Error)]
#[error("the fake provider lost this answer on purpose")]
struct Lost;

async fn handle(
    books: Arc<Mutex<Books>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Lost> {
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Ok(body) = Limited::new(req.into_body(), MAX_BODY).collect().await else {
        return Ok(answer(
            StatusCode::BAD_REQUEST,
            &json!({"error": "bad body"}),
            0,
        ));
    };
    let form: Vec<(String, String)> = form_urlencoded::parse(&body.to_bytes())
        .into_owned()
        .collect();
    let (reply, request_no) = {
        let mut books = lock(&books);
        let reply = books.receive(key.as_deref(), &form);
        (reply, books.requests())
    };
    if reply.lost {
        return Err(Lost);
    }
    let mut resp = answer(StatusCode::OK, &reply.refund, request_no);
    if reply.replayed {
        let replayed = HeaderValue::from_static("true");
        resp.headers_mut().insert("idempotent-replayed", replayed);
    }
    Ok(resp)
}

fn answer(status: StatusCode, body: &Value, request_no: usize) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("request-id", HeaderValue::from(request_no));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(amount: &str) -> Vec<(String, String)> {
        [("charge", "ch_1"), ("amount", amount), ("currency", "usd")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_first_answer_is_lost_after_the_refund_is_made() {
        let mut books = Books::new(true, 1);
        let first = books.receive(Some("k"), &form("500"));
        assert!(first.lost);
        assert!(!first.replayed);
        assert_eq!(books.effects(), 1);
        let second = books.receive(Some("other"), &form("500"));
        assert!(!second.lost);
        assert_eq!(books.effects(), 2);
    }

    #[test]
    fn with_dedupe_a_known_key_gets_the_refund_already_made() {
        let mut books = Books::new(true, 0);
        let first = books.receive(Some("k"), &form("500"));
        let again = books.receive(Some("k"), &form("500"));
        assert!(again.replayed);
        assert_eq!(again.refund, first.refund);
        assert_eq!(first.refund["id"], "re_1");
        assert_eq!(books.effects(), 1);
        assert_eq!(books.requests(), 2);
        assert_eq!(books.keys(), [Some("k".to_string()), Some("k".to_string())]);
    }

    #[test]
    fn without_dedupe_every_request_is_a_new_refund() {
        let mut books = Books::new(false, 0);
        books.receive(Some("k"), &form("500"));
        let again = books.receive(Some("k"), &form("500"));
        assert!(!again.replayed);
        assert_eq!(again.refund["id"], "re_2");
        assert_eq!(books.effects(), 2);
    }

    #[test]
    fn without_a_key_even_a_deduplicating_provider_refunds_again() {
        let mut books = Books::new(true, 0);
        books.receive(None, &form("500"));
        let again = books.receive(None, &form("500"));
        assert!(!again.replayed);
        assert_eq!(books.effects(), 2);
    }

    #[test]
    fn the_refund_reports_the_form_and_survives_odd_amounts() {
        let mut books = Books::new(false, 0);
        let reply = books.receive(None, &form("500"));
        assert_eq!(reply.refund["amount"], 500);
        assert_eq!(reply.refund["charge"], "ch_1");
        let odd = books.receive(None, &form("five"));
        assert_eq!(odd.refund["amount"], "five");
        assert_eq!(books.refunds().len(), 2);
    }
}
