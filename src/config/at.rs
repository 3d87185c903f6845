//! Where the ledger lives: a redb file, or a PostgreSQL database named by a libpq URL.
//!
//! This file owns parsing and showing a ledger location. A `PgUrl` keeps the URL as given
//! (its password included, for connecting) but shows only a redacted form: its `Display` and
//! `Debug` never print the password, so every message naming the ledger can use them. It
//! never connects anywhere.

use std::fmt;
use std::path::{Path, PathBuf};

/// The location of the ledger (`ledger` in proxy.toml).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerAt {
    /// The embedded redb file, resolved against proxy.toml's folder.
    File(PathBuf),
    /// A PostgreSQL database shared by every replica configured with the same URL.
    Postgres(PgUrl),
}

impl LedgerAt {
    /// `postgres://` or `postgresql://` (a PostgreSQL URL), else a file path.
    pub fn is_postgres_url(text: &str) -> bool {
        text.starts_with("postgres://") || text.starts_with("postgresql://")
    }

    /// The file, for a redb ledger.
    pub fn file(&self) -> Option<&Path> {
        match self {
            LedgerAt::File(path) => Some(path),
            LedgerAt::Postgres(_) => None,
        }
    }

    /// Where it is, as the installation secret sees it.
    pub fn place(&self) -> crate::secret::Place {
        match self {
            LedgerAt::File(path) => crate::secret::Place::File(path.clone()),
            LedgerAt::Postgres(url) => crate::secret::Place::Shared(url.to_string()),
        }
    }
}

impl fmt::Display for LedgerAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerAt::File(path) => write!(f, "{}", path.display()),
            LedgerAt::Postgres(url) => write!(f, "{url}"),
        }
    }
}

impl From<&Path> for LedgerAt {
    fn from(path: &Path) -> LedgerAt {
        LedgerAt::File(path.to_path_buf())
    }
}

impl From<&PathBuf> for LedgerAt {
    fn from(path: &PathBuf) -> LedgerAt {
        LedgerAt::File(path.clone())
    }
}

impl From<PathBuf> for LedgerAt {
    fn from(path: PathBuf) -> LedgerAt {
        LedgerAt::File(path)
    }
}

impl From<&LedgerAt> for LedgerAt {
    fn from(at: &LedgerAt) -> LedgerAt {
        at.clone()
    }
}

/// How the connection to PostgreSQL is encrypted (`sslmode` of the URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP (`disable`, and `prefer`, the default: see docs/reference.md).
    Plain,
    /// TLS with rustls and the bundled web roots, the server's name checked (`require`,
    /// `verify-full`).
    Verified,
}

/// A PostgreSQL URL whose `Display` and `Debug` never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    /// As given, without `sslmode` (tokio-postgres does not know `verify-full`).
    full: String,
    /// As shown: the password replaced by `***`.
    shown: String,
    ssl: SslMode,
    /// Whether the host is this machine (for the warning about an unencrypted connection).
    local: bool,
}

impl PgUrl {
    /// Parses a libpq URL (`postgres://user[:password]@host[:port]/dbname[?sslmode=...]`).
    /// The error says what is wrong and how to fix it, and never holds the password.
    pub fn parse(text: &str) -> Result<PgUrl, String> {
        let mut url = url::Url::parse(text).map_err(|e| {
            format!(
                "not a PostgreSQL URL: {e} (e.g. \"postgres://idemproxy@db.internal:5432/idemproxy?sslmode=require\")"
            )
        })?;
        if url.path().trim_start_matches('/').is_empty() {
            return Err(format!(
                "{} names no database (add it after the host, e.g. \"/idemproxy\")",
                redact(&url)
            ));
        }
        let mut ssl = SslMode::Plain;
        let mut kept = Vec::new();
        for (key, value) in url.query_pairs() {
            if key == "sslmode" {
                ssl = match value.as_ref() {
                    "disable" | "prefer" => SslMode::Plain,
                    "require" | "verify-full" => SslMode::Verified,
                    other => {
                        return Err(format!(
                            "{}: sslmode \"{other}\" is not supported (use disable, prefer, \
                             require or verify-full)",
                            redact(&url)
                        ));
                    }
                };
            } else {
                kept.push((key.into_owned(), value.into_owned()));
            }
        }
        url.set_query(None);
        if !kept.is_empty() {
            url.query_pairs_mut().extend_pairs(kept);
        }
        let full = url.to_string();
        let shown = redact(&url);
        if let Err(e) = full.parse::<tokio_postgres::Config>() {
            // tokio-postgres' message names the bad part, never the password's value.
            return Err(format!("{shown}: {e} (check the URL's parameters)"));
        }
        let local = match url.host() {
            None => true,
            // A `postgres:` URL's host is opaque to `url`: an address stays a string.
            Some(url::Host::Domain(name)) => {
                let bare = name.trim_start_matches('[').trim_end_matches(']');
                name == "localhost"
                    || name.starts_with('%')
                    || bare
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        };
        Ok(PgUrl {
            full,
            shown,
            ssl,
            local,
        })
    }

    /// The URL to connect with, password included: never show it.
    pub(crate) fn secret_url(&self) -> &str {
        &self.full
    }

    pub fn ssl(&self) -> SslMode {
        self.ssl
    }

    /// Whether the connection would cross a network unencrypted.
    pub fn plain_over_network(&self) -> bool {
        self.ssl == SslMode::Plain && !self.local
    }
}

/// `url` with its password (in the user part or a `password` parameter) shown as `***`.
fn redact(url: &url::Url) -> String {
    let mut shown = url.clone();
    if shown.password().is_some() {
        let _ = shown.set_password(Some("***"));
    }
    if shown.query_pairs().any(|(k, _)| k == "password") {
        let pairs: Vec<(String, String)> = shown
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "password" { "***".into() } else { v };
                (k.into_owned(), v.into_owned())
            })
            .collect();
        shown.set_query(None);
        shown.query_pairs_mut().extend_pairs(pairs);
    }
    shown.to_string()
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgUrl({})", self.shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_shown() {
        let url =
            PgUrl::parse("postgres://app:hunter2@db.internal:5433/ledger?sslmode=require").unwrap();
        assert_eq!(
            url.to_string(),
            "postgres://app:***@db.internal:5433/ledger"
        );
        assert_eq!(
            format!("{url:?}"),
            "PgUrl(postgres://app:***@db.internal:5433/ledger)"
        );
        assert!(url.secret_url().contains("hunter2"));
        assert_eq!(url.ssl(), SslMode::Verified);
        let param =
            PgUrl::parse("postgresql://app@h/db?password=hunter2&application_name=x").unwrap();
        assert!(!param.to_string().contains("hunter2"), "{param}");
        assert!(param.to_string().contains("application_name=x"));
        let bad = PgUrl::parse("postgres://app:hunter2@h/db?sslmode=allow").unwrap_err();
        assert!(
            bad.contains("sslmode \"allow\"") && !bad.contains("hunter2"),
            "{bad}"
        );
        let bad = PgUrl::parse("postgres://app:hunter2@h/db?bogus=1").unwrap_err();
        assert!(!bad.contains("hunter2"), "{bad}");
    }

    #[test]
    fn a_url_needs_a_database_and_says_where_it_goes() {
        let e = PgUrl::parse("postgres://app:pw@db.internal").unwrap_err();
        assert!(e.contains("names no database") && !e.contains("pw@"), "{e}");
        let local = PgUrl::parse("postgres://root@127.0.0.1/test").unwrap();
        assert!(!local.plain_over_network());
        let remote = PgUrl::parse("postgres://root@db.internal/test?sslmode=prefer").unwrap();
        assert!(remote.plain_over_network());
    }
}
