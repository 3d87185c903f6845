//! The admin API's bearer token (`IDEMPROXY_ADMIN_TOKEN`) and the start-up refusal of an
//! admin API reachable beyond loopback without one. Built once at start and read by the
//! admin API; it never sees a request's other headers.

use http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Config;

/// The environment variable holding the admin bearer token.
pub const TOKEN_VAR: &str = "IDEMPROXY_ADMIN_TOKEN";

/// The admin bearer token; its `Debug` never shows it.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// A token; `None` when blank (a blank token would let `Bearer ` in).
    pub fn new(value: &str) -> Option<Token> {
        let value = value.trim();
        (!value.is_empty()).then(|| Token(value.to_string()))
    }

    /// `IDEMPROXY_ADMIN_TOKEN`, if set and not blank.
    pub fn from_env() -> Option<Token> {
        std::env::var(TOKEN_VAR).ok().and_then(|v| Token::new(&v))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `headers` carry `Authorization: Bearer <this token>`, once: with two, one
    /// reader would take the first and another the last, so neither is admitted. Both sides
    /// are hashed first, so the constant-time comparison does not leak the token's length
    /// either.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let Some(given) = values
            .next()
            .filter(|_| values.next().is_none())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
        else {
            return false;
        };
        let given = Sha256::digest(given.as_bytes());
        let expected = Sha256::digest(self.0.as_bytes());
        given.ct_eq(&expected).into()
    }
}

/// Refuses an `admin_listen` other than loopback without a token: anyone who can reach the
/// admin API can resolve, approve and reject operations.
pub fn check_exposure(config: &Config, token: Option<&Token>) -> Result<(), String> {
    let addr = config.admin_listen;
    if addr.ip().is_loopback() || token.is_some() {
        return Ok(());
    }
    Err(format!(
        "{}: admin_listen = \"{addr}\" is reachable beyond this machine, but {TOKEN_VAR} is not \
         set; anyone who can reach it could resolve, approve or reject operations. Set \
         {TOKEN_VAR}, or use a loopback address such as \"127.0.0.1:{}\".",
        config.file.display(),
        addr.port()
    ))
}
