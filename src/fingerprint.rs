//! The parameter fingerprint: "same parameters = same intent" (docs/reference.md section 4), and the
//! principal: "same caller", a keyed hash of the provider's `principal_headers`.
//!
//! This module owns the canonical form of a request's parameters, its keyed hash, and the
//! short per-field keyed hashes that let a 409 name the fields that differ. It never keeps or
//! returns a parameter value, and of what it returns only HMAC-SHA256 tags under the
//! installation secret may be stored (a CVC has 1,000 values; an unkeyed hash of it is the CVC).
//!
//! While it walks the request it digests values with plain sha256 in memory (kept, in memory
//! only, as the [`Legacy`] fingerprint that recognises operations older versions recorded);
//! `compute` then keys everything in one place: the fingerprint is the mac of the canonical form (domain
//! [`FINGERPRINT_DOMAIN`]), a field's hash the first 16 hex of the mac of its path and its
//! digest (domain [`FIELD_DOMAIN`]), so the same value in two fields hashes differently.
//!
//! # Field paths
//!
//! A field path names one parameter, the same way in `fields`, in a 409's
//! `differing_fields` and in `fingerprint_ignore`:
//! - `method` and `path`: the request method and the route-relative path;
//! - `query:NAME`: a query parameter, all its values in order (`query:limit`);
//! - `header:name`: a header listed in `fingerprint_headers`, lowercase (`header:stripe-account`);
//! - JSON body fields in bracket notation: a top-level field is `amount`, a nested one
//!   `metadata[step]`, an array item `items[0][price]` (a top-level array's items are `[0]`);
//! - urlencoded body fields by their name as sent: Stripe's `metadata[step]` is literally
//!   that name, so a JSON and a form body name the same parameter the same way;
//! - `body`: the whole body when it is neither JSON nor a form, or a JSON scalar.
//!
//! `fields` holds a hash for every top-level field and every nested leaf (a scalar, or an
//! empty object or array). Past [`MAX_FIELDS`] entries only top-level fields are kept, and
//! past that again only `method`, `path`, the headers, `query` and `body`. Two parameters
//! whose paths coincide (a JSON key `path`, or a key `a[b]` beside a nested `a` → `b`) share
//! one entry whose hash covers both, so a difference is never silently lost.
//!
//! A `fingerprint_ignore` entry names a body field in bracket notation (or a query parameter
//! by its bare name) and leaves out that field and everything under it: `metadata` also
//! drops `metadata[trace_id]`. The key field (`key_json_field`) is left out the same way.

mod fields;
mod principal;
mod walk;

pub use fields::{QUERY_ONLY, ignores_body, ignores_query, is_under};
pub use principal::{Anonymous, PRINCIPAL_DOMAIN, principal};

use fields::Excluded;
use walk::{Section, body_section, query_section};

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, Method};
use sha2::{Digest, Sha256};

use crate::body::Body;
use crate::secret::Secret;

/// The mac domain of the fingerprint.
pub const FINGERPRINT_DOMAIN: &str = "fingerprint";
/// The mac domain of the per-field hashes.
pub const FIELD_DOMAIN: &str = "field";

/// The mark of a fingerprint recorded before hashes were keyed (unkeyed sha256): the ledger
/// reads such records with this prefix on their `fingerprint` (see [`Legacy`]).
pub const LEGACY: &str = "sha256:";

/// The most entries `Fingerprint::fields` holds at full detail.
pub const MAX_FIELDS: usize = 256;

/// A request's parameter fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Lowercase hex HMAC-SHA256 of the canonical form under the installation secret.
    pub hex: String,
    /// Field path -> first 16 hex characters of its keyed hash (see the module doc).
    pub fields: BTreeMap<String, String>,
    /// The same request as versions before keyed hashes fingerprinted it. In memory only.
    pub legacy: Legacy,
}

/// A fingerprint as versions before keyed hashes computed it: `hex` is [`LEGACY`] and the
/// sha256 of the canonical form, `fields` the first 16 hex of each digest. It exists only to
/// recognise an operation those versions recorded (which the claim then re-keys) and is
/// never stored: the ledger gets only keyed hashes from new requests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Legacy {
    pub hex: String,
    pub fields: BTreeMap<String, String>,
}

impl Legacy {
    fn of(canonical: &[u8], digests: &BTreeMap<String, String>) -> Legacy {
        let mut hex = String::with_capacity(LEGACY.len() + 64);
        hex.push_str(LEGACY);
        hex.push_str(&digest(canonical));
        Legacy {
            hex,
            // A digest is ASCII hex: its first 16 bytes are its first 16 characters.
            fields: digests
                .iter()
                .map(|(path, d)| (path.clone(), d.get(..16).unwrap_or(d).to_owned()))
                .collect(),
        }
    }
}

/// What a fingerprint is computed from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub method: &'a Method,
    /// Route-relative path, mount stripped, no query.
    pub path: &'a str,
    /// Raw query string without `?`.
    pub query: Option<&'a str>,
    pub body: &'a Body,
    pub headers: &'a HeaderMap,
    pub fingerprint_headers: &'a [HeaderName],
    pub ignore: &'a [String],
    /// JSON pointer of `key_json_field`; that field never counts.
    pub key_field: Option<&'a str>,
    /// The installation secret every hash is keyed with.
    pub secret: &'a Secret,
    /// The usual methods' field hashes under `secret`, if taken (`Methods::of`).
    pub methods: Option<&'a Methods>,
}

/// The `method` field's hashes for the usual methods, taken once at start: they depend on the
/// secret alone, so a new operation's fingerprint need not hash them again. Any other method
/// is hashed as before; `keyed` takes a hash from here only for the same path and digest.
#[derive(Debug)]
pub struct Methods(Vec<MethodField>);

#[derive(Debug)]
struct MethodField {
    method: Method,
    /// `digest` of the method's name, in memory only.
    digest: String,
    /// Its keyed hash (`field_hash`).
    keyed: String,
}

impl Methods {
    /// Taken under `secret`: only for `Inputs` keyed with the same one.
    pub fn of(secret: &Secret) -> Methods {
        let usual = [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ];
        let field = |method: Method| {
            let digest = digest(method.as_str().as_bytes());
            let keyed = field_hash("method", &digest, secret);
            MethodField {
                method,
                digest,
                keyed,
            }
        };
        Methods(usual.into_iter().map(field).collect())
    }

    fn get(&self, method: &Method) -> Option<&MethodField> {
        self.0.iter().find(|field| field.method == *method)
    }
}

/// Computes the fingerprint: a mac under `inputs.secret` over length-prefixed sections for method,
/// path, query (grouped by name, names sorted, value order kept), body (JSON by value with
/// keys sorted, forms like the query, anything else as bytes) and the `fingerprint_headers`
/// in configured order, less ignored fields and the key field. Never panics.
pub fn compute(inputs: &Inputs) -> Fingerprint {
    let canonical = canonical(inputs, Hashes::Kept);
    let hex = inputs.secret.mac_hex(FINGERPRINT_DOMAIN, &canonical.bytes);
    with_fields(inputs, canonical, hex)
}

/// `compute(inputs)` for a request whose `hex_only(inputs)` is known: the canonical form is
/// written again for the field hashes, but its mac is not taken twice.
pub fn completed(inputs: &Inputs, hex: String) -> Fingerprint {
    with_fields(inputs, canonical(inputs, Hashes::Kept), hex)
}

/// The fingerprint `hex` of `canonical` (written with its hashes kept), with its fields.
fn with_fields(inputs: &Inputs, canonical: Canonical, hex: String) -> Fingerprint {
    let Canonical {
        bytes: canonical,
        query,
        body,
        headers,
    } = canonical;
    let method = inputs.methods.and_then(|m| m.get(inputs.method));
    let method_digest = match method {
        Some(field) => field.digest.clone(),
        None => digest(inputs.method.as_str().as_bytes()),
    };
    let mut base = vec![
        ("method".to_string(), method_digest),
        ("path".to_string(), digest(inputs.path.as_bytes())),
    ];
    base.extend(headers.iter().map(|(n, v)| (n.clone(), digest(v))));
    let digests = assemble(base, &query, &body);
    Fingerprint {
        hex,
        legacy: Legacy::of(&canonical, &digests),
        fields: keyed(digests, inputs.secret, method),
    }
}

/// `compute(inputs).hex` alone, without the per-field hashes (most of the cost): what a replay
/// needs, since a request that matches its stored operation never looks at the fields.
pub fn hex_only(inputs: &Inputs) -> String {
    let canonical = canonical(inputs, Hashes::Skipped);
    inputs.secret.mac_hex(FINGERPRINT_DOMAIN, &canonical.bytes)
}

/// Whether the sections hash their fields as they are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hashes {
    Kept,
    Skipped,
}

/// The canonical form and the sections it was written from.
struct Canonical {
    bytes: Vec<u8>,
    query: Section,
    body: Section,
    headers: Vec<(String, Vec<u8>)>,
}

fn canonical(inputs: &Inputs, hashes: Hashes) -> Canonical {
    let excluded = Excluded::new(inputs.ignore, inputs.key_field);
    let query = query_section(inputs.query, &excluded, hashes);
    let body = body_section(inputs.body, &excluded, hashes);
    let headers = header_fields(inputs.headers, inputs.fingerprint_headers);

    const VERSION: &[u8] = b"idemproxy-fingerprint/1";
    let method = inputs.method.as_str().as_bytes();
    // Sized up front: each part framed with its eight-byte length.
    let parts = [
        VERSION,
        method,
        inputs.path.as_bytes(),
        &query.canonical,
        &body.canonical,
    ];
    let len = parts.iter().map(|p| 8 + p.len()).sum::<usize>()
        + 16
        + headers
            .iter()
            .map(|(n, v)| 16 + n.len() + v.len())
            .sum::<usize>();
    let mut bytes = Vec::with_capacity(len);
    frame(&mut bytes, VERSION);
    frame(&mut bytes, method);
    frame(&mut bytes, inputs.path.as_bytes());
    frame(&mut bytes, &query.canonical);
    frame(&mut bytes, &body.canonical);
    frame(&mut bytes, &(headers.len() as u64).to_be_bytes());
    for (name, value) in &headers {
        frame(&mut bytes, name.as_bytes());
        frame(&mut bytes, value);
    }
    Canonical {
        bytes,
        query,
        body,
        headers,
    }
}

/// Each field's in-memory digest replaced by its `field_hash`, what the ledger keeps; the
/// method's taken from `method` when it is the same digest (a body field named `method`
/// shares the path and changes the digest).
fn keyed(
    digests: BTreeMap<String, String>,
    secret: &Secret,
    method: Option<&MethodField>,
) -> BTreeMap<String, String> {
    digests
        .into_iter()
        .map(|(path, digest)| {
            let hash = match method {
                Some(field) if path == "method" && digest == field.digest => field.keyed.clone(),
                _ => field_hash(&path, &digest, secret),
            };
            (path, hash)
        })
        .collect()
}

/// The first 16 hex of the mac of a field's path and its digest.
fn field_hash(path: &str, digest: &str, secret: &Secret) -> String {
    let mut data = Vec::with_capacity(8 + path.len() + digest.len());
    frame(&mut data, path.as_bytes());
    data.extend_from_slice(digest.as_bytes());
    // The first 16 hex characters: only the first 8 bytes are written out.
    let mac = secret.mac(FIELD_DOMAIN, &data);
    crate::secret::lower_hex(&mac[..8])
}

/// Field paths whose hashes differ, or that exist on one side only; sorted; never values.
///
/// Only the most specific paths are named: when `metadata[step]` differs, `metadata` is not
/// named too. A path on one side only is not named when its top-level field is on both sides
/// with the same hash (the other side just kept less detail).
pub fn differing_fields(
    stored: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> Vec<String> {
    let same_on_both =
        |path: &str| matches!((stored.get(path), new.get(path)), (Some(a), Some(b)) if a == b);
    let differs: Vec<&String> = stored
        .keys()
        .chain(new.keys().filter(|k| !stored.contains_key(*k)))
        .filter(|path| !same_on_both(path))
        .filter(|path| {
            let one_sided = !(stored.contains_key(*path) && new.contains_key(*path));
            !(one_sided && same_on_both(top_level(path)))
        })
        .collect();
    let mut out: Vec<String> = differs
        .iter()
        .filter(|path| !differs.iter().any(|other| is_under(other, path)))
        .map(|path| path.to_string())
        .collect();
    out.sort();
    out
}

/// The top-level field of a bracket path: `metadata[step]` -> `metadata`.
fn top_level(path: &str) -> &str {
    let end = if path.starts_with('[') {
        path.find(']').map(|i| i + 1)
    } else {
        path.find('[')
    };
    &path[..end.unwrap_or(path.len())]
}

/// `header:name` -> framed values, for the configured headers in configured order.
fn header_fields(headers: &HeaderMap, names: &[HeaderName]) -> Vec<(String, Vec<u8>)> {
    names
        .iter()
        .map(|name| {
            let values: Vec<_> = headers.get_all(name).iter().collect();
            let mut encoded = (values.len() as u64).to_be_bytes().to_vec();
            for v in values {
                frame(&mut encoded, v.as_bytes());
            }
            (format!("header:{name}"), encoded)
        })
        .collect()
}

/// Builds `fields` at the finest level that fits in [`MAX_FIELDS`].
fn assemble(
    base: Vec<(String, String)>,
    query: &Section,
    body: &Section,
) -> BTreeMap<String, String> {
    let top = || base.iter().chain(&query.top).chain(&body.top);
    let full = collect(top().chain(&body.nested));
    if full.len() <= MAX_FIELDS {
        return full;
    }
    let top_only = collect(top());
    if top_only.len() <= MAX_FIELDS {
        return top_only;
    }
    let mut coarse = base.clone();
    if !query.top.is_empty() {
        coarse.push(("query".to_string(), digest(&query.canonical)));
    }
    if !body.top.is_empty() {
        coarse.push(("body".to_string(), digest(&body.canonical)));
    }
    collect(coarse.iter())
}

/// Collects entries; a path seen twice keeps one digest covering both values.
fn collect<'a>(entries: impl Iterator<Item = &'a (String, String)>) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for (path, hash) in entries {
        fields
            .entry(path.clone())
            .and_modify(|old: &mut String| *old = digest(format!("{old}{hash}").as_bytes()))
            .or_insert_with(|| hash.clone());
    }
    fields
}

/// Appends `bytes` with a length prefix, so no two sequences of items encode alike.
fn frame(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The lowercase hex sha256 of `bytes`; in memory only (`keyed` keys it before it leaves).
fn digest(bytes: &[u8]) -> String {
    crate::secret::lower_hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests;
