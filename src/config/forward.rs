//! The forward-proxy check across policy files: an absolute-form request is routed by the
//! upstream's host, port and longest base path (`App::provider_for_host`), so two providers
//! on one host, port and base path could never be told apart. It only reads validated
//! providers and reports; it never changes one.

use super::{ConfigError, Scope};
use crate::policy::Provider;

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
