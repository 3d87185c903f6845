//! `[notify]` of proxy.toml: where notifications go (`webhook`), the environment variable
//! holding their signing secret (`secret_env`), how many may wait to be sent (`queue`) and
//! how often the summary of what still waits is sent (`summary`).
//!
//! It validates the values only: it never reads the secret's variable (that is `serve`'s,
//! and `check` only warns when it is unset) and never contacts the webhook.

use std::time::Duration;

use http::Uri;
use toml::Value;

use super::Scope;
use super::raw::RawNotify;

/// `[notify]` with a `webhook`: notifications are on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// An absolute `http://` or `https://` URL. It may carry a secret in its path (many
    /// chat webhooks do): only its scheme and host are ever logged.
    pub webhook: Uri,
    /// The name of the environment variable holding the HMAC-SHA256 signing secret; `None`:
    /// notifications are sent unsigned.
    pub secret_env: Option<String>,
    /// Notifications waiting to be sent at most; when full, the oldest is dropped.
    pub queue: usize,
    /// How often the summary of what still waits is sent (the first one this long after start).
    pub summary: Duration,
}

impl Notify {
    pub const DEFAULT_QUEUE: usize = 1000;
    pub const MAX_QUEUE: i64 = 100_000;
    pub const DEFAULT_SUMMARY: Duration = Duration::from_secs(24 * 3600);

    /// `scheme://host[:port]` of the webhook, the only part of it fit for a log line.
    pub fn webhook_host(&self) -> String {
        let scheme = self.webhook.scheme_str().unwrap_or("http");
        let host = self.webhook.authority().map_or("", |a| a.as_str());
        let host = host.rsplit('@').next().unwrap_or(host);
        format!("{scheme}://{host}")
    }
}

/// The `[notify]` keys under a scope nested at `notify.`; `Ok(None)` (off) without a webhook.
pub(super) fn settings(s: &mut Scope, raw: RawNotify) -> Result<Option<Notify>, ()> {
    let secret_env = raw
        .secret_env
        .map(|name| s.check("secret_env", env_name(name)).ok_or(()))
        .transpose();
    let queue = s.check("queue", queue(raw.queue.as_ref()));
    let summary = s.duration(
        "summary",
        raw.summary.as_ref(),
        Notify::DEFAULT_SUMMARY,
        Duration::from_secs(1),
    );
    let Some(webhook) = raw.webhook else {
        return Ok(None);
    };
    let webhook = s.check("webhook", url(&webhook));
    match (webhook, secret_env, queue, summary) {
        (Some(webhook), Ok(secret_env), Some(queue), Some(summary)) => Ok(Some(Notify {
            webhook,
            secret_env,
            queue,
            summary,
        })),
        _ => Err(()),
    }
}

/// An absolute http(s) URL with a host and no fragment.
fn url(text: &str) -> Result<Uri, String> {
    let fix =
        "write an absolute http:// or https:// URL, e.g. \"https://hooks.example.com/idemproxy\"";
    let parsed = url::Url::parse(text).map_err(|e| format!("not a URL ({e}); {fix}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme `{}` is not supported; {fix}",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("the URL names no host; {fix}"));
    }
    if parsed.fragment().is_some() {
        return Err(format!("a URL with a #fragment is not sent as such; {fix}"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(
            "user info in the URL is not supported (put a token in the path or sign with \
             secret_env)"
                .into(),
        );
    }
    parsed
        .as_str()
        .parse::<Uri>()
        .map_err(|e| format!("not a URL ({e}); {fix}"))
}

/// A portable environment variable name: letters, digits and `_`, not starting with a digit.
fn env_name(name: String) -> Result<String, String> {
    let portable = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.bytes().next().is_some_and(|b| !b.is_ascii_digit());
    if portable {
        Ok(name)
    } else {
        Err(format!(
            "\"{name}\" is not an environment variable name (letters, digits and _, not \
             starting with a digit, e.g. \"IDEMPROXY_NOTIFY_SECRET\")"
        ))
    }
}

fn queue(raw: Option<&Value>) -> Result<usize, String> {
    match raw {
        None => Ok(Notify::DEFAULT_QUEUE),
        Some(Value::Integer(n)) if (1..=Notify::MAX_QUEUE).contains(n) => {
            Ok(usize::try_from(*n).unwrap_or(Notify::DEFAULT_QUEUE))
        }
        Some(other) => Err(format!(
            "{other} is not a queue length (write a whole number from 1 to {}, e.g. 1000)",
            Notify::MAX_QUEUE
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigError;

    fn checked(text: &str) -> Result<Option<Notify>, Vec<ConfigError>> {
        let raw: RawNotify = toml::from_str(text).expect("raw notify");
        let mut errors = Vec::new();
        let path = std::path::Path::new("proxy.toml");
        let notify = settings(&mut Scope::new(path, &mut errors).nested("notify."), raw);
        match notify {
            Ok(notify) if errors.is_empty() => Ok(notify),
            _ => Err(errors),
        }
    }

    fn error(text: &str) -> String {
        let errors = checked(text).expect_err("an error");
        assert_eq!(errors.len(), 1, "{errors:?}");
        errors[0].to_string()
    }

    #[test]
    fn a_webhook_turns_it_on_with_defaults() {
        let on = checked("webhook = \"https://hooks.example.com/T1/secret-path\"")
            .unwrap()
            .unwrap();
        assert_eq!(on.secret_env, None);
        assert_eq!(on.queue, Notify::DEFAULT_QUEUE);
        assert_eq!(on.summary, Notify::DEFAULT_SUMMARY);
        assert_eq!(on.webhook_host(), "https://hooks.example.com");
        assert_eq!(
            checked("secret_env = \"S\"").unwrap(),
            None,
            "no webhook: off"
        );
        let all = "webhook = \"http://127.0.0.1:9/x\"\nsecret_env = \"MY_SECRET\"\nqueue = 4\nsummary = \"1h\"";
        let all = checked(all).unwrap().unwrap();
        assert_eq!(all.secret_env.as_deref(), Some("MY_SECRET"));
        assert_eq!((all.queue, all.summary), (4, Duration::from_secs(3600)));
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        let e = error("webhook = \"ftp://hooks.example.com/x\"");
        assert!(
            e.starts_with("proxy.toml: notify.webhook: the scheme `ftp`"),
            "{e}"
        );
        let e = error("webhook = \"hooks.example.com/x\"");
        assert!(e.contains("notify.webhook: not a URL"), "{e}");
        let e = error("webhook = \"https://u:p@hooks.example.com/x\"");
        assert!(e.contains("user info"), "{e}");
        let e = error("webhook = \"https://h/x\"\nsecret_env = \"1-BAD\"");
        assert!(e.contains("notify.secret_env: \"1-BAD\" is not"), "{e}");
        let e = error("webhook = \"https://h/x\"\nqueue = 0");
        assert!(e.contains("notify.queue: 0 is not a queue length"), "{e}");
        let e = error("webhook = \"https://h/x\"\nsummary = \"10ms\"");
        assert!(e.contains("notify.summary: must be at least 1s"), "{e}");
        assert!(toml::from_str::<RawNotify>("webhok = \"https://h/x\"").is_err());
    }
}
