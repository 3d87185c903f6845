//! Settings that parse fine but would quietly weaken a guard, refused by `check` and `serve`:
//! credentials in an operation ID or a fingerprint, a key injected into a framing or
//! credential header, a lookup template reading a header it never has, and an approval that
//! `on_missing_id = "pass"` would skip.
//!
//! It only judges values the other config modules already parsed; each refusal is a message
//! for a person ending with the fix, and it never decides anything about a request.

use http::HeaderName;

use super::Scope;
use crate::policy::{ApprovalMode, OnMissingId};
use crate::template::{Part, Template};

/// Request headers that carry the caller's credentials. They are never part of an operation
/// ID (stored and shown in clear) nor of a fingerprint (a rotated key would turn every replay
/// into a 409); a provider's `redact_headers` count too.
pub const CREDENTIAL_HEADERS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
];

/// Headers that frame, route or describe the message: a key injected there would corrupt the
/// request (or smuggle another one), so `key_header` may not name them.
pub const FRAMING_HEADERS: [&str; 12] = [
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "content-type",
    "content-encoding",
];

/// Why `name` must stay out of identities and fingerprints, if it must.
fn secret(name: &HeaderName, redact: &[HeaderName]) -> Option<&'static str> {
    if CREDENTIAL_HEADERS.contains(&name.as_str()) {
        Some("a credential")
    } else if redact.contains(name) {
        Some("a header named in redact_headers")
    } else {
        None
    }
}

/// `key_header`: any header but a framing or a credential one.
pub(super) fn key_header(name: HeaderName) -> Result<HeaderName, String> {
    let fix = "give the key a header of its own, e.g. \"Idempotency-Key\"";
    if FRAMING_HEADERS.contains(&name.as_str()) {
        return Err(format!(
            "\"{name}\" frames or describes the request, so a key there would corrupt it ({fix})"
        ));
    }
    if CREDENTIAL_HEADERS.contains(&name.as_str()) {
        return Err(format!(
            "\"{name}\" carries the caller's credential, which the key would overwrite ({fix})"
        ));
    }
    Ok(name)
}

/// An `operation_id` template may not render a credential: the operation ID is the ledger
/// key, the `Idem-Operation-Id` header and what the admin API lists.
pub(super) fn identity(template: Template, redact: &[HeaderName]) -> Result<Template, String> {
    for part in template.parts() {
        if let Part::Header(name) = part
            && let Some(what) = secret(name, redact)
        {
            return Err(format!(
                "{{header:{name}}} would put {what} into the operation ID, which the ledger \
                 stores and the admin API shows in clear (name the intent instead, e.g. \
                 {{header:x-workflow-id}}:{{json:/order_id}})"
            ));
        }
    }
    Ok(template)
}

/// `fingerprint_headers` may not name a credential: the same intent sent with a rotated key
/// would become a 409 `parameter-mismatch`, and the ledger would keep a hash of it.
pub(super) fn fingerprint_headers(s: &mut Scope, names: &[HeaderName], redact: &[HeaderName]) {
    for (i, name) in names.iter().enumerate() {
        if let Some(what) = secret(name, redact) {
            s.push(
                &format!("fingerprint_headers[{i}]"),
                format!(
                    "\"{name}\" is {what}, not a parameter of the request: a replay with a \
                     rotated credential would be refused as a parameter mismatch (remove it)"
                ),
            );
        }
    }
}

/// A `reconcile.lookup` is rendered later, without the agent's headers: its parts may be the
/// route's captures, `{key}`, `{operation_id}`, `{fingerprint}`, `{provider}`, `{route}`,
/// `{answer:...}`, and the kept first request's body and query (`json`, `form`, `query`);
/// never a header, since headers (credentials among them) are never kept.
pub(super) fn lookup_part(part: &Part) -> Result<(), String> {
    match part {
        Part::Header(_) => Err(format!(
            "{{{}}} is never present in a lookup: headers of the agent's request are never \
             kept, so a lookup can read the first request's body and query but no header \
             (use {{json:/pointer}}, {{form:NAME}}, {{query:NAME}}, {{key}}, {{operation_id}}, \
             {{path:NAME}}, {{fingerprint}}, {{provider}} or {{route}})",
            part.label().unwrap_or_default()
        )),
        _ => Ok(()),
    }
}

/// `approval = "required"` with `on_missing_id = "pass"` would forward every request without
/// an operation ID unguarded, so nobody would be asked.
pub(super) fn approval_skipped(
    s: &mut Scope,
    approval: Option<ApprovalMode>,
    on_missing_id: Option<OnMissingId>,
) {
    if approval == Some(ApprovalMode::Required) && on_missing_id == Some(OnMissingId::Pass) {
        s.push(
            "on_missing_id",
            "\"pass\" forwards a request without an operation ID unguarded, so it would skip \
             the approval this route requires (use on_missing_id = \"reject\", or remove \
             approval = \"required\")",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &'static str) -> HeaderName {
        HeaderName::from_static(name)
    }

    #[test]
    fn key_header_refuses_framing_and_credentials_only() {
        for bad in [
            "content-length",
            "host",
            "transfer-encoding",
            "cookie",
            "x-api-key",
        ] {
            assert!(key_header(h(bad)).is_err(), "{bad}");
        }
        for good in ["idempotency-key", "x-request-key", "x-idempotency-key"] {
            assert_eq!(key_header(h(good)), Ok(h(good)));
        }
    }

    #[test]
    fn identities_refuse_credentials_and_redacted_headers() {
        let redact = [h("x-secret")];
        let parse = |t: &str| Template::parse(t).expect("template");
        for bad in [
            "{header:authorization}",
            "a-{header:x-secret}",
            "{header:cookie}",
        ] {
            assert!(identity(parse(bad), &redact).is_err(), "{bad}");
        }
        assert!(identity(parse("{header:x-workflow-id}:{json:/id}"), &redact).is_ok());
    }

    #[test]
    fn lookups_refuse_headers_only() {
        let parse = |t: &str| Template::parse(t).expect("template");
        let template = parse("{header:x}");
        let part = template.parts().iter().next().expect("a part");
        let err = lookup_part(part).expect_err("a header in a lookup");
        assert!(err.contains("never kept"), "{err}");
        let template = parse(
            "/x/{key}/{operation_id}/{fingerprint}/{provider}/{route}?a={json:/a}&b={form:b}&c={query:c}",
        );
        assert!(template.parts().iter().all(|p| lookup_part(p).is_ok()));
    }
}
