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

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, Method};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::body::{Body, decode_pairs};
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

/// Whether `path` lies strictly under `ancestor` (`a[b][c]` under `a` and `a[b]`).
pub fn is_under(path: &str, ancestor: &str) -> bool {
    path.len() > ancestor.len()
        && path.starts_with(ancestor)
        && path[ancestor.len()..].starts_with('[')
}

/// How a `fingerprint_ignore` entry names a query parameter only, as `differing_fields` does.
pub const QUERY_ONLY: &str = "query:";

/// Whether `fingerprint_ignore` leaves out the body field at `path`: an entry naming it or a
/// field it lies under. A `query:` entry names the query only.
pub fn ignores_body(ignore: &[String], path: &str) -> bool {
    ignore
        .iter()
        .filter(|entry| !entry.starts_with(QUERY_ONLY))
        .any(|entry| path == entry || is_under(path, entry))
}

/// Whether `fingerprint_ignore` leaves out the query parameter `name`: an entry naming it
/// bare (bare entries name body fields and query parameters alike) or as `query:NAME`, or
/// naming a parameter it lies under.
pub fn ignores_query(ignore: &[String], name: &str) -> bool {
    ignore.iter().any(|entry| {
        let entry = entry.strip_prefix(QUERY_ONLY).unwrap_or(entry);
        name == entry || is_under(name, entry)
    })
}

/// The fields left out: `fingerprint_ignore` entries and the key field, as bracket paths.
struct Excluded<'a> {
    ignore: &'a [String],
    key: Option<String>,
}

impl<'a> Excluded<'a> {
    fn new(ignore: &'a [String], key_field: Option<&str>) -> Self {
        Excluded {
            ignore,
            key: key_field.and_then(pointer_to_path),
        }
    }

    fn body_field(&self, path: &str) -> bool {
        ignores_body(self.ignore, path)
            || (self.key.as_deref()).is_some_and(|key| path == key || is_under(path, key))
    }

    /// Whether nothing is left out, so no body field's path needs writing to check it.
    fn is_empty(&self) -> bool {
        self.ignore.is_empty() && self.key.is_none()
    }

    fn query_field(&self, name: &str) -> bool {
        ignores_query(self.ignore, name)
    }
}

/// `/items/0/price` -> `items[0][price]`; `None` for something that is not a pointer.
fn pointer_to_path(pointer: &str) -> Option<String> {
    let mut tokens = pointer
        .strip_prefix('/')?
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"));
    let first = tokens.next()?;
    Some(tokens.fold(first, |path, t| format!("{path}[{t}]")))
}

/// One part of the canonical form with its field hashes.
struct Section {
    canonical: Vec<u8>,
    /// Field path -> short hash, for top-level fields.
    top: Vec<(String, String)>,
    /// Nested leaves; empty when there were too many to keep.
    nested: Vec<(String, String)>,
}

fn query_section(query: Option<&str>, excluded: &Excluded, hashes: Hashes) -> Section {
    let raw = query.unwrap_or("");
    let Some(pairs) = decode_pairs(raw.as_bytes()) else {
        // Not UTF-8 once decoded: compare the raw text rather than guess at its characters.
        let mut canonical = b"raw".to_vec();
        frame(&mut canonical, raw.as_bytes());
        let top = hashed(hashes, "query", raw.as_bytes());
        return Section {
            canonical,
            top,
            nested: vec![],
        };
    };
    let groups = group(pairs, |name| !excluded.query_field(name));
    grouped_section(b"pairs", groups, "query:", hashes)
}

fn body_section(body: &Body, excluded: &Excluded, hashes: Hashes) -> Section {
    match body {
        Body::Empty => Section {
            canonical: b"empty".to_vec(),
            top: vec![],
            nested: vec![],
        },
        Body::Json(value) => json_section(value, excluded, hashes),
        Body::Form(pairs) => {
            let groups = group(pairs.iter().cloned(), |name| !excluded.body_field(name));
            grouped_section(b"form", groups, "", hashes)
        }
        Body::Bytes(bytes) | Body::Malformed { bytes, .. } => {
            let mut canonical = b"bytes".to_vec();
            frame(&mut canonical, bytes);
            let top = hashed(hashes, "body", bytes);
            Section {
                canonical,
                top,
                nested: vec![],
            }
        }
    }
}

/// Groups pairs by name (names sorted, value order kept), keeping the names `keep` accepts.
fn group(
    pairs: impl IntoIterator<Item = (String, String)>,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in pairs.into_iter().filter(|(n, _)| keep(n)) {
        groups.entry(name).or_default().push(value);
    }
    groups
}

/// A section's one whole-value hash, unless hashes are skipped.
fn hashed(hashes: Hashes, name: &str, bytes: &[u8]) -> Vec<(String, String)> {
    match hashes {
        Hashes::Kept => vec![(name.to_string(), digest(bytes))],
        Hashes::Skipped => vec![],
    }
}

fn grouped_section(
    tag: &[u8],
    groups: BTreeMap<String, Vec<String>>,
    prefix: &str,
    hashes: Hashes,
) -> Section {
    let mut canonical = Vec::with_capacity(tag.len() + 16);
    canonical.extend_from_slice(tag);
    frame(&mut canonical, &(groups.len() as u64).to_be_bytes());
    let mut top = Vec::with_capacity(groups.len());
    for (name, values) in groups {
        // A JSON array of strings is an unambiguous encoding of a value list.
        let encoded = Value::from(values).to_string();
        frame(&mut canonical, name.as_bytes());
        frame(&mut canonical, encoded.as_bytes());
        if hashes == Hashes::Kept {
            top.push((format!("{prefix}{name}"), digest(encoded.as_bytes())));
        }
    }
    Section {
        canonical,
        top,
        nested: vec![],
    }
}

fn json_section(value: &Value, excluded: &Excluded, hashes: Hashes) -> Section {
    let mut walk = Walk {
        excluded,
        hashes,
        paths: hashes == Hashes::Kept || !excluded.is_empty(),
        text: Vec::with_capacity(64),
        top: vec![],
        nested: vec![],
        overflow: false,
    };
    walk.value(value, "", 0);
    if !(value.is_object() || value.is_array()) {
        walk.top = hashed(hashes, "body", &walk.text);
    }
    let mut canonical = Vec::with_capacity(12 + walk.text.len());
    canonical.extend_from_slice(b"json");
    frame(&mut canonical, &walk.text);
    let nested = if walk.overflow { vec![] } else { walk.nested };
    Section {
        canonical,
        top: walk.top,
        nested,
    }
}

/// Writes canonical JSON (keys sorted, no whitespace, excluded fields left out) and collects
/// the hashes of top-level fields and nested leaves on the way.
struct Walk<'a> {
    excluded: &'a Excluded<'a>,
    hashes: Hashes,
    /// Whether field paths are written: for their hashes, or to check them against
    /// `excluded` (a replay of a route that leaves nothing out needs neither).
    paths: bool,
    /// Canonical JSON, as serde_json writes each key and scalar.
    text: Vec<u8>,
    top: Vec<(String, String)>,
    nested: Vec<(String, String)>,
    overflow: bool,
}

impl Walk<'_> {
    fn value(&mut self, value: &Value, path: &str, depth: usize) {
        match value {
            Value::Object(map) => self.object(map, path, depth),
            Value::Array(items) => self.array(items, path, depth),
            scalar => write_json(&mut self.text, scalar),
        }
    }

    fn object(&mut self, map: &serde_json::Map<String, Value>, path: &str, depth: usize) {
        self.text.push(b'{');
        // Keys sorted, without a sorted copy when they came sorted (as many clients send them).
        if map.keys().is_sorted() {
            self.members(map.iter(), path, depth);
        } else {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            self.members(entries.into_iter(), path, depth);
        }
        self.text.push(b'}');
    }

    fn members<'v>(
        &mut self,
        entries: impl Iterator<Item = (&'v String, &'v Value)>,
        path: &str,
        depth: usize,
    ) {
        let mut first = true;
        for (key, child) in entries {
            let child_path = match (self.paths, depth) {
                (false, _) => String::new(),
                (true, 0) => key.clone(),
                (true, _) => format!("{path}[{key}]"),
            };
            if self.paths && self.excluded.body_field(&child_path) {
                continue;
            }
            if !std::mem::take(&mut first) {
                self.text.push(b',');
            }
            write_json(&mut self.text, key.as_str());
            self.text.push(b':');
            self.child(child, child_path, depth);
        }
    }

    fn array(&mut self, items: &[Value], path: &str, depth: usize) {
        self.text.push(b'[');
        for (i, child) in items.iter().enumerate() {
            if i > 0 {
                self.text.push(b',');
            }
            let child_path = match self.paths {
                true => format!("{path}[{i}]"),
                false => String::new(),
            };
            if self.paths && self.excluded.body_field(&child_path) {
                // A mark that is no JSON value keeps the later items' positions, so
                // `[a, ignored, c]` never reads like `[a, c]`.
                self.text.push(b'_');
                continue;
            }
            self.child(child, child_path, depth);
        }
        self.text.push(b']');
    }

    /// Writes one child of a container at `depth` and records its hash where one is kept.
    fn child(&mut self, child: &Value, path: String, depth: usize) {
        let start = self.text.len();
        self.value(child, &path, depth + 1);
        if self.hashes == Hashes::Skipped {
            return;
        }
        let is_leaf = match child {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => true,
        };
        let hash = digest(&self.text[start..]);
        if depth == 0 {
            self.top.push((path, hash));
        } else if is_leaf && !self.overflow {
            self.nested.push((path, hash));
            self.overflow = self.nested.len() > MAX_FIELDS;
        }
    }
}

/// Appends `value` as serde_json writes it (`Value::to_string`, without the `String`).
fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing a key or a scalar `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(out, value);
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
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderValue;
    use serde_json::json;

    /// One request's fingerprint inputs, owned.
    struct Req {
        method: Method,
        path: String,
        query: Option<String>,
        body: Body,
        headers: HeaderMap,
        fingerprint_headers: Vec<HeaderName>,
        ignore: Vec<String>,
        key_field: Option<String>,
    }

    impl Req {
        fn new(body: Body) -> Req {
            Req {
                method: Method::POST,
                path: "/v1/refunds".into(),
                query: None,
                body,
                headers: HeaderMap::new(),
                fingerprint_headers: vec![],
                ignore: vec![],
                key_field: None,
            }
        }

        fn json(value: Value) -> Req {
            Req::new(Body::Json(value))
        }

        fn form(pairs: &[(&str, &str)]) -> Req {
            let pairs = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            Req::new(Body::Form(pairs.collect()))
        }

        fn ignoring(mut self, fields: &[&str]) -> Req {
            self.ignore = fields.iter().map(|f| f.to_string()).collect();
            self
        }

        fn fp(&self) -> Fingerprint {
            self.fp_with(&Secret::from_bytes([7; 32]))
        }

        /// The full fingerprint; every test that computes one also checks that `hex_only`
        /// (what a replay computes) agrees with it, and `completed` (what a new operation
        /// computes after it) with both.
        fn fp_with(&self, secret: &Secret) -> Fingerprint {
            let inputs = Inputs {
                method: &self.method,
                path: &self.path,
                query: self.query.as_deref(),
                body: &self.body,
                headers: &self.headers,
                fingerprint_headers: &self.fingerprint_headers,
                ignore: &self.ignore,
                key_field: self.key_field.as_deref(),
                secret,
                methods: None,
            };
            let fp = compute(&inputs);
            let methods = Methods::of(secret);
            let taken = Inputs {
                methods: Some(&methods),
                ..inputs
            };
            assert_eq!(
                compute(&taken),
                fp,
                "the methods' hashes taken at start differ"
            );
            assert_eq!(hex_only(&inputs), fp.hex, "hex_only disagrees with compute");
            assert_eq!(
                completed(&inputs, hex_only(&inputs)),
                fp,
                "completed disagrees"
            );
            fp
        }
    }

    #[test]
    fn the_methods_hashed_at_start_are_the_ones_hashed_each_time() {
        // `fp` compares them field by field; a body field named `method` shares the path and
        // changes its digest, so the hash taken at start must not be used for it.
        let clashing = Req::json(json!({"method": "card", "amount": 5}));
        let plain = Req::json(json!({"amount": 5}));
        assert_ne!(clashing.fp().fields["method"], plain.fp().fields["method"]);
        let mut unusual = Req::json(json!({"amount": 5}));
        unusual.method = Method::OPTIONS;
        assert_ne!(unusual.fp().fields["method"], plain.fp().fields["method"]);
    }

    #[test]
    fn hex_only_is_the_fingerprint_of_every_kind_of_request() {
        let mut with_query = Req::json(json!({"amount": 100, "meta": {"a": [1, {"b": null}]}}));
        with_query.query = Some("expand[]=x&limit=3&expand[]=y".into());
        let mut with_header = Req::form(&[("charge", "ch_1"), ("metadata[step]", "2")]);
        with_header.fingerprint_headers = vec![HeaderName::from_static("stripe-account")];
        with_header
            .headers
            .insert("stripe-account", HeaderValue::from_static("acct_1"));
        let mut raw_query = Req::new(Body::Empty);
        raw_query.query = Some("q=%FF%FE".into());
        let mut keyed = Req::json(json!({"idempotency_key": "k", "amount": 5}));
        keyed.key_field = Some("/idempotency_key".into());
        let requests = [
            with_query,
            with_header,
            raw_query,
            keyed,
            Req::json(json!("a scalar")),
            Req::json(json!([1, 2, 3])),
            Req::new(Body::Bytes(Bytes::from_static(b"\x00\x01 raw"))),
            Req::json(json!({"metadata": {"trace_id": "t", "step": 1}}))
                .ignoring(&["metadata[trace_id]"]),
        ];
        let hexes: Vec<String> = requests.iter().map(|r| r.fp().hex).collect();
        let distinct: std::collections::BTreeSet<&String> = hexes.iter().collect();
        assert_eq!(
            distinct.len(),
            hexes.len(),
            "distinct requests, distinct fingerprints"
        );
    }

    fn diff(a: &Req, b: &Req) -> Vec<String> {
        differing_fields(&a.fp().fields, &b.fp().fields)
    }

    fn keys(fp: &Fingerprint) -> Vec<&str> {
        fp.fields.keys().map(String::as_str).collect()
    }

    #[test]
    fn every_hash_depends_on_the_secret_and_no_field_hash_on_its_value_alone() {
        let req = Req::form(&[("card[cvc]", "123"), ("other_cvc", "123")]);
        let (a, b) = (req.fp(), req.fp_with(&Secret::from_bytes([8; 32])));
        assert_ne!(a.hex, b.hex);
        for (path, hash) in &a.fields {
            assert_ne!(Some(hash), b.fields.get(path), "{path}");
        }
        assert_eq!(a, req.fp(), "the same secret gives the same hashes");
        assert_ne!(
            a.fields["card[cvc]"], a.fields["other_cvc"],
            "the path is keyed in"
        );
        let unkeyed = hex::encode(&Sha256::digest(br#"["123"]"#)[..8]);
        assert!(!a.fields.values().any(|h| *h == unkeyed));
    }

    #[test]
    fn json_fields_use_bracket_paths_for_top_level_and_leaves() {
        let req = Req::json(json!({
            "amount": 500, "metadata": {"step": "2", "tags": {}},
            "items": [{"price": 1}]
        }));
        let fp = req.fp();
        assert_eq!(fp.hex.len(), 64);
        assert!(
            fp.hex
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(
            keys(&fp),
            [
                "amount",
                "items",
                "items[0][price]",
                "metadata",
                "metadata[step]",
                "metadata[tags]",
                "method",
                "path"
            ]
        );
        assert!(fp.fields.values().all(|h| h.len() == 16));
    }

    #[test]
    fn a_changed_nested_value_names_only_the_leaf() {
        let a = Req::json(json!({"amount": 500, "metadata": {"step": "2", "x": 1}}));
        let b = Req::json(json!({"amount": 500, "metadata": {"step": "3", "x": 1}}));
        assert_ne!(a.fp().hex, b.fp().hex);
        assert_eq!(diff(&a, &b), ["metadata[step]"]);
        let c = Req::json(json!({"amount": 500, "metadata": {"step": "2", "x": 1, "y": 0}}));
        assert_eq!(diff(&a, &c), ["metadata[y]"]);
        let d = Req::json(json!({"amount": 500, "metadata": "flat"}));
        assert_eq!(diff(&a, &d), ["metadata[step]", "metadata[x]"]);
    }

    #[test]
    fn form_fields_are_named_as_sent_and_compare_as_sets_of_lists() {
        let a = Req::form(&[
            ("amount", "5"),
            ("metadata[step]", "2"),
            ("t", "1"),
            ("t", "2"),
        ]);
        let b = Req::form(&[
            ("t", "1"),
            ("metadata[step]", "2"),
            ("t", "2"),
            ("amount", "5"),
        ]);
        assert_eq!(a.fp().hex, b.fp().hex);
        assert_eq!(
            keys(&a.fp()),
            ["amount", "metadata[step]", "method", "path", "t"]
        );
        let swapped = Req::form(&[
            ("amount", "5"),
            ("metadata[step]", "2"),
            ("t", "2"),
            ("t", "1"),
        ]);
        assert_ne!(a.fp().hex, swapped.fp().hex);
        assert_eq!(diff(&a, &swapped), ["t"]);
        let json = Req::json(json!({"amount": "5", "metadata": {"step": "2"}}));
        assert!(json.fp().fields.contains_key("metadata[step]"));
    }

    #[test]
    fn query_pairs_are_sorted_and_named_with_a_prefix() {
        let mut a = Req::new(Body::Empty);
        a.query = Some("b=1&a=2&b=3".into());
        let mut b = Req::new(Body::Empty);
        b.query = Some("a=2&b=1&b=3".into());
        assert_eq!(a.fp().hex, b.fp().hex);
        b.query = Some("a=2&b=3&b=1".into());
        assert_eq!(diff(&a, &b), ["query:b"]);
        b.query = None;
        assert_eq!(diff(&a, &b), ["query:a", "query:b"]);
        let mut c = Req::new(Body::Empty);
        c.query = Some(String::new());
        assert_eq!(b.fp(), c.fp());
    }

    #[test]
    fn method_path_and_body_kinds_all_count() {
        let a = Req::json(json!({"amount": 5}));
        let mut b = Req::json(json!({"amount": 5}));
        b.path = "/v1/refunds/re_2".into();
        assert_eq!(diff(&a, &b), ["path"]);
        b.method = Method::PUT;
        assert_eq!(diff(&a, &b), ["method", "path"]);
        let form = Req::form(&[("amount", "5")]);
        assert_ne!(a.fp().hex, form.fp().hex);
        assert_eq!(diff(&a, &form), ["amount"]);
        let raw = Req::new(Body::Bytes(Bytes::from_static(b"<x/>")));
        let other = Req::new(Body::Bytes(Bytes::from_static(b"<y/>")));
        assert_eq!(diff(&raw, &other), ["body"]);
        let empty = Req::new(Body::Empty);
        assert_ne!(empty.fp().hex, Req::json(json!({})).fp().hex);
        assert_ne!(empty.fp().hex, raw.fp().hex);
    }

    #[test]
    fn ignoring_a_field_drops_everything_under_it() {
        let a = Req::json(json!({"amount": 5, "metadata": {"trace_id": "t1", "step": 1}}));
        let b = Req::json(json!({"amount": 5, "metadata": {"trace_id": "t2", "step": 1}}));
        let ig = |r: Req, f: &[&str]| r.ignoring(f);
        let (a1, b1) = (
            ig(a, &["metadata[trace_id]"]),
            ig(b, &["metadata[trace_id]"]),
        );
        assert_eq!(a1.fp(), b1.fp());
        assert!(!a1.fp().fields.contains_key("metadata[trace_id]"));
        let c = Req::json(json!({"amount": 5, "metadata": {"x": [1, 2]}})).ignoring(&["metadata"]);
        let d = Req::json(json!({"amount": 5})).ignoring(&["metadata"]);
        assert_eq!(c.fp(), d.fp());
        let e = Req::form(&[("amount", "5"), ("metadata[trace_id]", "t1")]).ignoring(&["metadata"]);
        let f = Req::form(&[("amount", "5")]).ignoring(&["metadata"]);
        assert_eq!(e.fp().hex, f.fp().hex);
        // A prefix that is not a whole field name ignores nothing.
        let g = Req::form(&[("amount", "5"), ("metadatax", "1")]).ignoring(&["metadata"]);
        assert_ne!(g.fp().hex, f.fp().hex);
    }

    #[test]
    fn ignoring_a_query_field_by_its_bare_name() {
        let mut a = Req::new(Body::Empty).ignoring(&["trace"]);
        a.query = Some("limit=1&trace=abc".into());
        let mut b = Req::new(Body::Empty).ignoring(&["trace"]);
        b.query = Some("limit=1&trace=def".into());
        assert_eq!(a.fp(), b.fp());
        b.query = Some("limit=2&trace=def".into());
        assert_eq!(diff(&a, &b), ["query:limit"]);
    }

    #[test]
    fn ignored_array_items_keep_the_other_items_in_place() {
        let a = Req::json(json!({"l": [1, 2, 3]})).ignoring(&["l[1]"]);
        let b = Req::json(json!({"l": [1, 9, 3]})).ignoring(&["l[1]"]);
        let c = Req::json(json!({"l": [1, 3]})).ignoring(&["l[1]"]);
        assert_eq!(a.fp(), b.fp());
        assert_ne!(a.fp().hex, c.fp().hex);
    }

    #[test]
    fn the_key_field_never_counts() {
        let mut a = Req::json(json!({"amount": 5, "meta": {"idem": "client-1"}}));
        a.key_field = Some("/meta/idem".into());
        let mut b = Req::json(json!({"amount": 5, "meta": {"idem": "client-2"}}));
        b.key_field = Some("/meta/idem".into());
        assert_eq!(a.fp(), b.fp());
        b.key_field = None;
        assert_ne!(a.fp().hex, b.fp().hex);
    }

    #[test]
    fn only_configured_headers_count_and_absent_differs_from_empty() {
        let mut a = Req::new(Body::Empty);
        a.fingerprint_headers = vec![HeaderName::from_static("stripe-account")];
        a.headers.insert("x-other", HeaderValue::from_static("1"));
        let mut b = Req::new(Body::Empty);
        b.fingerprint_headers = a.fingerprint_headers.clone();
        assert_eq!(a.fp(), b.fp());
        b.headers
            .insert("stripe-account", HeaderValue::from_static(""));
        assert_eq!(diff(&a, &b), ["header:stripe-account"]);
        a.headers
            .insert("stripe-account", HeaderValue::from_static("acct_1"));
        assert_eq!(diff(&a, &b), ["header:stripe-account"]);
    }

    #[test]
    fn colliding_paths_share_an_entry_and_still_differ() {
        let a = Req::json(json!({"path": "x"}));
        let b = Req::json(json!({"path": "y"}));
        assert_ne!(a.fp().hex, b.fp().hex);
        assert_eq!(diff(&a, &b), ["path"]);
    }

    #[test]
    fn many_leaves_fall_back_to_top_level_then_coarse() {
        let leaves: serde_json::Map<String, Value> =
            (0..300).map(|i| (format!("k{i}"), json!(i))).collect();
        let nested = Req::json(json!({"a": Value::Object(leaves.clone()), "b": 1}));
        assert_eq!(keys(&nested.fp()), ["a", "b", "method", "path"]);
        let mut wide = Req::json(Value::Object(leaves.clone()));
        wide.query = Some("q=1".into());
        assert_eq!(keys(&wide.fp()), ["body", "method", "path", "query"]);
        let mut changed = leaves;
        changed.insert("k7".into(), json!("x"));
        let mut other = Req::json(Value::Object(changed));
        other.query = Some("q=1".into());
        assert_eq!(diff(&wide, &other), ["body"]);
    }

    #[test]
    fn differing_fields_handles_one_sided_paths() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let stored = map(&[("a", "1"), ("a[x]", "2"), ("b", "3"), ("gone", "4")]);
        let new = map(&[("a", "1"), ("b", "5"), ("new", "6")]);
        // `a[x]` is only on one side, but `a` is unchanged: the new side kept less detail.
        assert_eq!(differing_fields(&stored, &new), ["b", "gone", "new"]);
        assert!(differing_fields(&stored, &stored).is_empty());
        let arr_a = map(&[("[0]", "1"), ("[0][p]", "2")]);
        let arr_b = map(&[("[0]", "9"), ("[0][p]", "8")]);
        assert_eq!(differing_fields(&arr_a, &arr_b), ["[0][p]"]);
    }

    #[test]
    fn numbers_compare_as_written_after_parsing() {
        let parsed = |text: &str| {
            let ct = HeaderValue::from_static("application/json");
            Req::new(crate::body::parse(Some(&ct), Bytes::from(text.to_string())))
        };
        let big = parsed(r#"{"amount": 12345678901234567890123}"#);
        let next = parsed(r#"{"amount": 12345678901234567890124}"#);
        assert_ne!(big.fp().hex, next.fp().hex, "no rounding through f64");
        assert_eq!(diff(&big, &next), ["amount"]);
        assert_ne!(parsed(r#"{"n":1}"#).fp(), parsed(r#"{"n":1.0}"#).fp());
        assert_ne!(parsed(r#"{"n":1e2}"#).fp(), parsed(r#"{"n":100}"#).fp());
        assert_eq!(parsed(r#"{"n":1e2}"#).fp(), parsed(r#"{"n": 1E+2}"#).fp());
    }

    #[test]
    fn non_utf8_queries_compare_as_raw_text() {
        let mut a = Req::new(Body::Empty);
        a.query = Some("a=%FF".into());
        let mut b = Req::new(Body::Empty);
        b.query = Some("a=%FE".into());
        assert_eq!(diff(&a, &b), ["query"]);
    }

    #[test]
    fn the_anonymous_principal_is_the_principal_of_a_request_without_its_headers() {
        let secret = Secret::from_bytes([7; 32]);
        let mut provider = crate::policy::Provider::example("stripe", "/stripe", "");
        provider.principal_headers = vec![
            http::header::AUTHORIZATION,
            HeaderName::from_static("stripe-account"),
        ];
        let names = &provider.principal_headers;
        let anonymous = Anonymous::of(std::slice::from_ref(&provider), &secret);
        let mut headers = HeaderMap::new();
        headers.insert("x-other", HeaderValue::from_static("1"));
        let of = |headers: &HeaderMap| anonymous.principal(&provider, headers, &secret);
        assert_eq!(of(&headers), principal(&headers, names, &secret));
        headers.insert("stripe-account", HeaderValue::from_static("acct_1"));
        assert_eq!(of(&headers), principal(&headers, names, &secret));
        assert_ne!(
            of(&headers),
            of(&HeaderMap::new()),
            "a header carried counts"
        );
        let mut other = provider.clone();
        other.name = "other".into();
        let unknown = anonymous.principal(&other, &headers, &secret);
        assert_eq!(unknown, principal(&headers, names, &secret));
    }

    /// Fingerprints recorded by earlier versions must keep matching: the hex and the field
    /// hashes (as one digest) of requests as the version before the one-pass body had them.
    #[test]
    fn fingerprints_stay_what_they_were() {
        let body = json!({
            "amount": 100, "currency": "usd", "z": [1.50, -0, 1e2, "12345678901234567890123"],
            "meta": {"é": "a\"b\\c\n\u{1}", "😀": [true, null, {}, []], "b": {"y": 2, "x": 1}},
        });
        let text = body
            .to_string()
            .replace("\"12345678901234567890123\"", "12345678901234567890123");
        let parsed: Value = serde_json::from_str(&text).expect("test JSON");
        let plain = Req::json(parsed.clone());
        let mut ignoring = Req::json(parsed).ignoring(&["meta[b][x]", "z[1]"]);
        ignoring.key_field = Some("/currency".into());
        ignoring.query = Some("expand[]=x&limit=3".into());
        let form = Req::form(&[("charge", "ch_1"), ("metadata[step]", "2")]);
        let pinned = [
            (
                plain,
                "b47c3e8e0540160a43264304c2023142cfa10be69fbd7173245a9000d0f7b814",
                "452ac498f48012759b9f0c4bc37038b449369a7ae031110326744fbf963e4b2f",
            ),
            (
                ignoring,
                "e88d9a8f2d43be95f60e001d2baf09376270b44c7164f7d0ea62e6cbd22cb3e4",
                "65d5e2609fe285b780b8f067dd59a97c7299f2274d1d5883532cf2ae645027f5",
            ),
            (
                form,
                "7bbb972acb25409c9c8c82a06b842a9b2ea0fd081367158f9cc7d845c4029e30",
                "af7d31cb40675d74daa66d87653b5392da5cae02644c0c28fa8e2c73f59b7315",
            ),
        ];
        for (req, hex, fields) in pinned {
            let fp = req.fp();
            assert_eq!(fp.hex, hex);
            assert_eq!(digest(format!("{:?}", fp.fields).as_bytes()), fields);
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                (-1.0e6f64..1.0e6).prop_map(Value::from),
                "[a-z é\"\\\\]{0,6}".prop_map(Value::from),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn arb_object() -> impl Strategy<Value = Value> {
            prop::collection::btree_map("[a-z]{1,6}", arb_json(), 1..6)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        }

        /// The same value with every object's keys in a seed-dependent order.
        fn reorder(value: &Value, seed: u64) -> Value {
            match value {
                Value::Object(map) => {
                    let mut entries: Vec<_> = map.iter().collect();
                    entries.sort_by_key(|(k, _)| {
                        let mut h = DefaultHasher::new();
                        (seed, k).hash(&mut h);
                        h.finish()
                    });
                    Value::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| (k.clone(), reorder(v, seed)))
                            .collect(),
                    )
                }
                Value::Array(items) => {
                    Value::Array(items.iter().map(|v| reorder(v, seed)).collect())
                }
                other => other.clone(),
            }
        }

        fn parsed(text: String, content_type: &'static str) -> Req {
            let ct = HeaderValue::from_static(content_type);
            Req::new(crate::body::parse(Some(&ct), Bytes::from(text)))
        }

        /// (bracket path, JSON pointer) of every scalar in `value`.
        fn scalars(value: &Value, path: &str, pointer: &str, out: &mut Vec<(String, String)>) {
            let children: Vec<(String, &Value)> = match value {
                Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
                Value::Array(a) => a
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i.to_string(), v))
                    .collect(),
                _ => return out.push((path.to_string(), pointer.to_string())),
            };
            for (token, child) in children {
                let child_path = if path.is_empty() {
                    token.clone()
                } else {
                    format!("{path}[{token}]")
                };
                scalars(child, &child_path, &format!("{pointer}/{token}"), out);
            }
        }

        fn changed(value: &Value) -> Value {
            match value {
                Value::Null => Value::Bool(false),
                Value::Bool(b) => Value::Bool(!b),
                Value::String(s) => Value::from(format!("{s}x")),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => Value::from(i.wrapping_add(1)),
                    None => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
                },
                other => other.clone(),
            }
        }

        proptest! {
            #[test]
            fn key_order_and_whitespace_never_matter(value in arb_object(), seed in any::<u64>()) {
                let compact = parsed(value.to_string(), "application/json");
                let shuffled = reorder(&value, seed);
                let pretty = serde_json::to_string_pretty(&shuffled).unwrap_or_default();
                let pretty = parsed(pretty, "application/json");
                prop_assert!(matches!(pretty.body, Body::Json(_)));
                prop_assert_eq!(compact.fp(), pretty.fp());
            }

            #[test]
            fn form_field_order_across_names_never_matters(
                fields in prop::collection::btree_map("[a-z\\[\\]]{1,5}", prop::collection::vec("[a-z0-9 &=+%é]{0,4}", 1..4), 1..5),
                picks in prop::collection::vec(any::<prop::sample::Index>(), 16),
            ) {
                let in_order: Vec<(&String, &String)> = fields.iter().flat_map(|(k, vs)| vs.iter().map(move |v| (k, v))).collect();
                // Interleave the fields in a random order, keeping each field's own values in order.
                let mut queues: Vec<Vec<&String>> = fields.values().map(|vs| vs.iter().rev().collect()).collect();
                let names: Vec<&String> = fields.keys().collect();
                let mut mixed = Vec::new();
                for pick in picks.iter().cycle() {
                    let live: Vec<usize> = (0..queues.len()).filter(|&i| !queues[i].is_empty()).collect();
                    if live.is_empty() { break; }
                    let i = live[pick.index(live.len())];
                    if let Some(v) = queues[i].pop() { mixed.push((names[i], v)); }
                }
                let encode = |pairs: &[(&String, &String)]| {
                    form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs.iter().copied()).finish()
                };
                let a = parsed(encode(&in_order), "application/x-www-form-urlencoded");
                let b = parsed(encode(&mixed), "application/x-www-form-urlencoded");
                prop_assert_eq!(a.fp(), b.fp());
            }

            #[test]
            fn a_changed_scalar_changes_the_hex_and_is_named_exactly(value in arb_object(), pick in any::<prop::sample::Index>()) {
                let mut leaves = Vec::new();
                scalars(&value, "", "", &mut leaves);
                prop_assume!(!leaves.is_empty());
                let (path, pointer) = leaves[pick.index(leaves.len())].clone();
                let mut other = value.clone();
                if let Some(slot) = other.pointer_mut(&pointer) { *slot = changed(slot); }
                let (a, b) = (Req::json(value), Req::json(other));
                prop_assert_ne!(a.fp().hex, b.fp().hex);
                prop_assert_eq!(diff(&a, &b), vec![path]);
            }

            /// The canonical JSON is serde_json's spelling of every key and scalar, keys
            /// sorted, whether or not field paths are written on the way.
            #[test]
            fn the_canonical_json_is_serde_jsons_spelling_with_keys_sorted(value in arb_json()) {
                fn spelled(value: &Value) -> String {
                    match value {
                        Value::Object(map) => {
                            let mut entries: Vec<_> = map.iter().collect();
                            entries.sort_by(|a, b| a.0.cmp(b.0));
                            let members: Vec<String> = entries
                                .into_iter()
                                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), spelled(v)))
                                .collect();
                            format!("{{{}}}", members.join(","))
                        }
                        Value::Array(items) => {
                            let items: Vec<String> = items.iter().map(spelled).collect();
                            format!("[{}]", items.join(","))
                        }
                        scalar => scalar.to_string(),
                    }
                }
                let mut want = b"json".to_vec();
                frame(&mut want, spelled(&value).as_bytes());
                let nothing = Excluded::new(&[], None);
                for hashes in [Hashes::Kept, Hashes::Skipped] {
                    prop_assert_eq!(&json_section(&value, &nothing, hashes).canonical, &want);
                }
            }

            #[test]
            fn ignored_fields_and_the_key_field_never_matter(
                value in arb_object(), pick in any::<prop::sample::Index>(),
                replacement in arb_json(), key in proptest::option::of("[a-z0-9]{0,12}"),
            ) {
                let Value::Object(map) = &value else { unreachable!("arb_object makes objects") };
                let ignored = map.keys().nth(pick.index(map.len())).cloned().unwrap_or_default();
                let mut other = value.clone();
                if let Value::Object(m) = &mut other {
                    m.insert(ignored.clone(), replacement);
                    match key { Some(k) => { m.insert("idem".into(), Value::from(k)); } None => { m.remove("idem"); } }
                }
                let mut a = Req::json(value).ignoring(&[&ignored]);
                let mut b = Req::json(other).ignoring(&[&ignored]);
                a.key_field = Some("/idem".into());
                b.key_field = Some("/idem".into());
                prop_assert_eq!(a.fp(), b.fp());
            }
        }
    }
}
