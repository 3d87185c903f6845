//! `[retention]` of proxy.toml: how long finished operations (`completed`) and the
//! tombstones they leave (`tombstones`) are kept, and the check of `completed` against every
//! provider.
//!
//! It owns only these two keys and their errors; what pruning does is `retention`'s and the
//! ledger's.

use std::time::Duration;

use super::raw::RawRetention;
use super::table::short_duration;
use super::{ConfigError, MIN_WAIT, Scope};
use crate::policy::Provider;

/// `[retention]` of proxy.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Succeeded and failed operations older than this are pruned (at least 1ms).
    pub completed: Duration,
    /// How long the tombstone of a pruned succeeded or rejected operation is kept, from when
    /// it was pruned (at least 1ms); meanwhile its ID is refused (410).
    pub tombstones: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            completed: Duration::from_secs(30 * 24 * 3600),
            tombstones: Duration::from_secs(400 * 24 * 3600),
        }
    }
}

/// The `[retention]` keys, under a scope nested at `retention.`.
pub(super) fn settings(s: &mut Scope, raw: RawRetention) -> Option<Retention> {
    let d = Retention::default();
    let completed = s.duration("completed", raw.completed.as_ref(), d.completed, MIN_WAIT);
    let tombstones = s.duration(
        "tombstones",
        raw.tombstones.as_ref(),
        d.tombstones,
        MIN_WAIT,
    );
    Some(Retention {
        completed: completed?,
        tombstones: tombstones?,
    })
}

/// Refuses a `completed` shorter than a provider's `key_retention` plus its `timeout`: the
/// ledger must remember a finished operation at least as long as the provider may still
/// recognise (or be acting on) its key. One error of proxy.toml's `retention.completed`
/// per provider that needs more.
pub(super) fn check(
    proxy: &std::path::Path,
    retention: &Retention,
    providers: &[Provider],
    errors: &mut Vec<ConfigError>,
) {
    let mut scope = Scope::new(proxy, errors);
    for p in providers {
        let needed = p.key_retention.saturating_add(p.timeout);
        if retention.completed >= needed {
            continue;
        }
        let message = too_short(retention.completed, p, needed);
        scope.push("retention.completed", message);
    }
}

fn too_short(completed: Duration, p: &Provider, needed: Duration) -> String {
    format!(
        "\"{}\" is shorter than the key_retention ({}) plus timeout ({}) of provider \"{}\" \
         in {}, so a finished operation could be forgotten while the provider may still act \
         on its key; raise completed to at least \"{}\", or lower that provider's \
         key_retention or timeout",
        short_duration(completed),
        short_duration(p.key_retention),
        short_duration(p.timeout),
        p.name,
        p.file.display(),
        short_duration(needed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_provider_its_file_and_the_fix() {
        let provider = Provider {
            name: "pay".into(),
            file: "policies/pay.toml".into(),
            key_retention: Duration::from_secs(86_400),
            timeout: Duration::from_secs(30),
            ..Provider::example("pay", "/pay", "")
        };
        let needed = Duration::from_secs(86_430);
        let text = too_short(Duration::from_secs(1), &provider, needed);
        for part in [
            "\"1s\"",
            "24h",
            "30s",
            "\"pay\"",
            "policies/pay.toml",
            "\"86430s\"",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }
}
