//! The principal: "same caller", a keyed hash of a provider's `principal_headers`, and the one
//! each provider gives a request that carries none of them.

use http::{HeaderMap, HeaderName};

use super::{frame, header_fields};
use crate::secret::Secret;

/// The mac domain of principals.
pub const PRINCIPAL_DOMAIN: &str = "principal";

/// The caller's principal (docs/reference.md section 4): a mac under `secret` over the values of `names` in
/// order (the provider's `principal_headers`, `authorization` first), each header framed
/// with its count of values, so a missing header is a principal too ("no credentials").
pub fn principal(headers: &HeaderMap, names: &[HeaderName], secret: &Secret) -> String {
    let mut data = Vec::new();
    for (name, values) in header_fields(headers, names) {
        frame(&mut data, name.as_bytes());
        frame(&mut data, &values);
    }
    secret.mac_hex(PRINCIPAL_DOMAIN, &data)
}

/// The principal of a request that carries none of a provider's `principal_headers`, for
/// each provider: the same for every such request, so its mac is taken once, at start.
pub struct Anonymous(Vec<(String, String)>);

impl Anonymous {
    pub fn of(providers: &[crate::policy::Provider], secret: &Secret) -> Anonymous {
        let none = HeaderMap::new();
        let of = |p: &crate::policy::Provider| principal(&none, &p.principal_headers, secret);
        Anonymous(providers.iter().map(|p| (p.name.clone(), of(p))).collect())
    }

    /// `principal(headers, &provider.principal_headers, secret)`, from the one taken at start
    /// when `headers` carries none of them.
    pub fn principal(
        &self,
        provider: &crate::policy::Provider,
        headers: &HeaderMap,
        secret: &Secret,
    ) -> String {
        let names = &provider.principal_headers;
        // A list, not a map: there are few providers, and no hash of the name is taken.
        let nobody = self.0.iter().find(|(name, _)| *name == provider.name);
        match nobody {
            Some((_, nobody)) if !names.iter().any(|n| headers.contains_key(n)) => nobody.clone(),
            _ => principal(headers, names, secret),
        }
    }
}
