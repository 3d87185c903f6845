//! Sending one notification to the webhook: a signed JSON POST, retried with backoff.
//!
//! The signature is `Idem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` over the bytes
//! `<t>.<body>`, keyed with the secret from `secret_env`; each attempt is signed afresh with
//! its own `t`. A 2xx answer is delivered; a connection error, a timeout, a 5xx, 408 or 429 is
//! tried again (`ATTEMPTS` in all, waiting `FIRST_WAIT`, then twice as long each time); any
//! other answer gives up at once. It never logs the webhook's path (it may hold a token) or
//! the secret.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use ring::hmac;

use super::message::Notice;
use crate::upstream::HttpClient;
use crate::wire::full;

/// Attempts per notification.
pub const ATTEMPTS: u32 = 5;
/// The wait after the first failed attempt; it doubles after each.
pub const FIRST_WAIT: Duration = Duration::from_millis(500);
/// How long one attempt may take, connecting included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The signature header.
pub const SIGNATURE: &str = "idem-signature";

/// The signing key; its `Debug` never shows it.
pub struct Signer(hmac::Key);

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(<redacted>)")
    }
}

impl Signer {
    pub fn new(secret: &[u8]) -> Signer {
        Signer(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The `Idem-Signature` value for `body` sent at unix time `t`.
    pub fn signature(&self, t: u64, body: &[u8]) -> String {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(t.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        format!("t={t},v1={}", hex::encode(ctx.sign().as_ref()))
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    Delivered,
    Retry(String),
    GiveUp(String),
}

/// The webhook and how to reach it.
pub struct Webhook {
    pub uri: Uri,
    /// `scheme://host`, for logs.
    pub host: String,
    pub signer: Option<Signer>,
    pub client: HttpClient,
}

impl Webhook {
    /// Delivers `notice`, retrying as the module doc says; `Err` says why it gave up.
    pub async fn deliver(&self, notice: &Notice) -> Result<(), String> {
        let body = Bytes::from(notice.body());
        let mut wait = FIRST_WAIT;
        for attempt in 1..=ATTEMPTS {
            let why = match self.attempt(&body).await {
                Attempt::Delivered => return Ok(()),
                Attempt::GiveUp(why) => return Err(why),
                Attempt::Retry(why) => why,
            };
            if attempt == ATTEMPTS {
                return Err(format!("{why} (after {ATTEMPTS} attempts)"));
            }
            tracing::debug!(webhook = %self.host, attempt, reason = %why, "notification not delivered yet; trying again");
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        Err("no attempt was made".into())
    }

    async fn attempt(&self, body: &Bytes) -> Attempt {
        let request = match self.request(body) {
            Ok(request) => request,
            Err(why) => return Attempt::GiveUp(why),
        };
        match tokio::time::timeout(ATTEMPT_TIMEOUT, self.client.request(request)).await {
            Err(_) => Attempt::Retry(format!("no answer within {ATTEMPT_TIMEOUT:?}")),
            Ok(Err(e)) => Attempt::Retry(format!("the webhook could not be reached: {e}")),
            Ok(Ok(resp)) => verdict(resp.status()),
        }
    }

    fn request(&self, body: &Bytes) -> Result<Request<crate::wire::ProxyBody>, String> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                header::USER_AGENT,
                concat!("idemproxy/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(signer) = &self.signer {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let value = HeaderValue::from_str(&signer.signature(t, body))
                .map_err(|e| format!("cannot sign: {e}"))?;
            request = request.header(SIGNATURE, value);
        }
        request
            .body(full(body.clone()))
            .map_err(|e| format!("cannot build the request: {e}"))
    }
}

/// What an answer's status means for the notification.
fn verdict(status: StatusCode) -> Attempt {
    let why = || format!("the webhook answered {status}");
    if status.is_success() {
        Attempt::Delivered
    } else if status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
    {
        Attempt::Retry(why())
    } else {
        Attempt::GiveUp(why())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_an_hmac_of_the_time_a_dot_and_the_body() {
        let signer = Signer::new(b"whsec");
        let sig = signer.signature(1_700_000_000, b"{\"a\":1}");
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"whsec");
        let want = hmac::sign(&key, b"1700000000.{\"a\":1}");
        assert_eq!(
            sig,
            format!("t=1700000000,v1={}", hex::encode(want.as_ref()))
        );
        assert_eq!(format!("{signer:?}"), "Signer(<redacted>)");
    }

    #[test]
    fn server_errors_are_retried_and_client_errors_are_not() {
        assert_eq!(verdict(StatusCode::NO_CONTENT), Attempt::Delivered);
        for retried in [500, 503, 408, 429] {
            let status = StatusCode::from_u16(retried).unwrap();
            assert!(matches!(verdict(status), Attempt::Retry(_)), "{retried}");
        }
        for refused in [400, 401, 404, 410] {
            let status = StatusCode::from_u16(refused).unwrap();
            assert!(matches!(verdict(status), Attempt::GiveUp(_)), "{refused}");
        }
    }
}
