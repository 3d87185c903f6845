//! The forward-proxy check across policy files: an absolute-form request is routed by the
//! upstream's host, port and longest base path (`App::provider_for_host`), so two providers
//! on one host, port and base path could never be told apart. It only reads validated
//! providers and reports; it never changes one.

use super::{ConfigError, Scope};
use crate::policy::{Provider, Unmatched};

/// Each provider whose upstream host, port and base path an earlier one (in file order)
/// already has is an error of its `provider.upstream`.
pub(super) fn check_forward(providers: &[Provider], errors: &mut Vec<ConfigError>) {
    let mut files: Vec<&Provider> = providers.iter().collect();
    files.sort_by(|a, b| a.file.cmp(&b.file));
    for (i, later) in files.iter().enumerate() {
        let same = |p: &&&Provider| {
            let (a, b) = (&p.upstream, &later.upstream);
            a.host.eq_ignore_ascii_case(&b.host) && a.port == b.port && a.base_path == b.base_path
        };
        if let Some(earlier) = files[..i].iter().find(same) {
            let up = &later.upstream;
            let message = format!(
                "host {}, port {} and base path \"{}\" are also the upstream of {}, so a \
                 forward-proxy request could not tell the two providers apart (give one of \
                 them another base path, or merge their routes into one policy)",
                up.host,
                up.port,
                up.base_path,
                earlier.file.display()
            );
            Scope::new(&later.file, errors).push("provider.upstream", message);
        }
    }
}

/// Each provider that passes unmatched requests through to an upstream holding another
/// provider's guarded routes (the same scheme, host and port, the other's base path under its
/// own) is an error of its `provider.upstream`: a request through its mount would reach the
/// other's effects without their guard. Base paths compare ignoring letter case, as a
/// case-insensitive server would.
pub(super) fn check_nested(providers: &[Provider], errors: &mut Vec<ConfigError>) {
    for outer in providers.iter().filter(|p| p.unmatched == Unmatched::Pass) {
        let (up, base) = (
            &outer.upstream,
            outer.upstream.base_path.to_ascii_lowercase(),
        );
        let holds = |inner: &&Provider| {
            let theirs = &inner.upstream;
            let path = theirs.base_path.to_ascii_lowercase();
            !std::ptr::eq(*inner, outer)
                && inner.guards_routes()
                && theirs.scheme == up.scheme
                && theirs.host.eq_ignore_ascii_case(&up.host)
                && theirs.port == up.port
                && path.len() > base.len()
                && path.starts_with(&base)
                && path[base.len()..].starts_with('/')
        };
        if let Some(inner) = providers.iter().find(holds) {
            let message = format!(
                "{} (the upstream of {}, whose routes are guarded) lies under this upstream, so \
                 a request through mount {} would reach its effects unguarded (set unmatched = \
                 \"reject\" here, or give the two different hosts)",
                inner.upstream.base_path,
                inner.file.display(),
                outer.mount
            );
            Scope::new(&outer.file, errors).push("provider.upstream", message);
        }
    }
}
