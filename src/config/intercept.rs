//! `[intercept]` of proxy.toml: the local CA the proxy signs its leaf certificates with
//! (`ca_cert`, `ca_key`, paths relative to proxy.toml's folder) and the `tunnel` entries passed
//! through untouched.
//!
//! Both CA files are read and checked here, at start, by `check` and by a reload alike: a file
//! that cannot be read, a key that is not the certificate's, a certificate that is no CA or is
//! out of date is refused with the key named. A message never quotes the key file's content.
//! A `tunnel` entry that a provider's upstream names too is refused: it would let that
//! provider's requests pass the guard unseen.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::authority::{Authority, Part};
use crate::clock::Timestamp;
use crate::policy::{Provider, Scheme};

use super::Scope;
use super::raw::RawIntercept;

/// `[intercept]`, validated: CONNECT is served.
#[derive(Debug, Clone)]
pub struct Intercept {
    /// `ca_cert` resolved against proxy.toml's folder.
    pub ca_cert: PathBuf,
    /// `ca_key` resolved against proxy.toml's folder (never read again after loading).
    pub ca_key: PathBuf,
    /// The CA, loaded and checked, with its cache of leaves.
    pub authority: Arc<Authority>,
    /// Where `CONNECT` opens an opaque tunnel.
    pub tunnel: Vec<HostPort>,
}

/// A `host:port` of `tunnel` (the host in lower case, without IPv6 brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl Intercept {
    /// Whether `tunnel` lists `host:port` (the host compared without regard to case).
    pub fn tunnels(&self, host: &str, port: u16) -> bool {
        self.tunnel
            .iter()
            .any(|t| t.port == port && t.host.eq_ignore_ascii_case(host))
    }

    /// Whether a provider's `upstream` is `https://host[:port]`: its requests may be
    /// intercepted.
    pub fn intercepts(providers: &[Provider], host: &str, port: u16) -> bool {
        providers.iter().any(|p| {
            let up = &p.upstream;
            up.scheme == Scheme::Https && up.port == port && up.host.eq_ignore_ascii_case(host)
        })
    }
}

/// The `[intercept]` keys under a scope nested at `intercept.`.
pub(super) fn settings(s: &mut Scope, base: &Path, raw: RawIntercept) -> Option<Intercept> {
    let tunnel: Vec<Option<HostPort>> = (raw.tunnel.unwrap_or_default().iter().enumerate())
        .map(|(i, entry)| s.check(&format!("tunnel[{i}]"), host_port(entry)))
        .collect();
    let ca_cert = s.check("ca_cert", required(raw.ca_cert.as_deref(), "ca/ca.pem"));
    let ca_key = s.check("ca_key", required(raw.ca_key.as_deref(), "ca/ca.key"));
    let (ca_cert, ca_key) = (base.join(ca_cert?), base.join(ca_key?));
    let cert_pem = s.check("ca_cert", read(&ca_cert, "certificate"));
    let key_pem = s.check("ca_key", read(&ca_key, "key"));
    let now = Timestamp::now().to_datetime();
    let authority = match Authority::load(&cert_pem?, &key_pem?, now) {
        Ok(authority) => authority,
        Err((part, message)) => {
            let (key, path) = match part {
                Part::Cert => ("ca_cert", &ca_cert),
                Part::Key => ("ca_key", &ca_key),
            };
            s.push(key, format!("{}: {message}", path.display()));
            return None;
        }
    };
    Some(Intercept {
        ca_cert,
        ca_key,
        authority: Arc::new(authority),
        tunnel: tunnel.into_iter().collect::<Option<_>>()?,
    })
}

/// `tunnel` entries a provider's upstream names too, one error each.
pub(super) fn check(
    path: &Path,
    intercept: &Intercept,
    providers: &[Provider],
    errors: &mut Vec<super::ConfigError>,
) {
    let mut s = Scope::new(path, errors);
    for (i, t) in intercept.tunnel.iter().enumerate() {
        if Intercept::intercepts(providers, &t.host, t.port) {
            s.push(
                &format!("intercept.tunnel[{i}]"),
                format!(
                    "{}:{} is a provider's upstream: a tunnel would pass its requests unguarded \
                     (remove the entry; CONNECT to it is intercepted)",
                    t.host, t.port
                ),
            );
        }
    }
}

fn required(raw: Option<&str>, example: &str) -> Result<String, String> {
    match raw {
        None => Err(format!(
            "required when [intercept] is present (e.g. \"{example}\", which `idemproxy ca init` \
             writes)"
        )),
        Some("") => Err(format!("empty path (e.g. \"{example}\")")),
        Some(path) => Ok(path.to_string()),
    }
}

/// A file's text; the error names the file and the fix, never its content.
fn read(path: &Path, what: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the CA {what} {} ({e}); create the pair with `idemproxy ca init`",
            path.display()
        )
    })
}

/// `host:port`, the port required; an IPv6 host in brackets.
fn host_port(entry: &str) -> Result<HostPort, String> {
    let fix = "write \"host:port\", e.g. \"api.openai.com:443\"";
    let (host, port) = entry
        .rsplit_once(':')
        .ok_or_else(|| format!("`{entry}` has no port; {fix}"))?;
    let port: u16 = match port.parse() {
        Ok(0) | Err(_) => return Err(format!("`{port}` is not a port (1-65535); {fix}")),
        Ok(port) => port,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let valid = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
    if !valid {
        return Err(format!(
            "`{entry}` is not a host name or address and a port; {fix}"
        ));
    }
    Ok(HostPort {
        host: host.to_ascii_lowercase(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunnel_entries_are_host_and_port() {
        assert_eq!(
            host_port("API.openai.com:443"),
            Ok(HostPort {
                host: "api.openai.com".into(),
                port: 443
            })
        );
        assert_eq!(host_port("[::1]:8443").unwrap().host, "::1");
        for bad in [
            "api.openai.com",
            "x:0",
            "x:http",
            ":443",
            "https://x:443",
            "a b:1",
        ] {
            assert!(host_port(bad).is_err(), "{bad}");
        }
    }
}
