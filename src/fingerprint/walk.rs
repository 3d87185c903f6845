//! The canonical walk: each part of a request (its query, its body as JSON, form or bytes)
//! into canonical bytes and the digests of its fields, in a stable order whatever order the
//! request had them in.

use std::collections::BTreeMap;

use serde_json::Value;

use super::fields::Excluded;
use super::{Hashes, MAX_FIELDS, digest, frame};
use crate::body::{Body, decode_pairs};

/// One part of the canonical form with its field hashes.
pub(super) struct Section {
    pub(super) canonical: Vec<u8>,
    /// Field path -> short hash, for top-level fields.
    pub(super) top: Vec<(String, String)>,
    /// Nested leaves; empty when there were too many to keep.
    pub(super) nested: Vec<(String, String)>,
}

pub(super) fn query_section(query: Option<&str>, excluded: &Excluded, hashes: Hashes) -> Section {
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

pub(super) fn body_section(body: &Body, excluded: &Excluded, hashes: Hashes) -> Section {
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
pub(super) fn group(
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
pub(super) fn hashed(hashes: Hashes, name: &str, bytes: &[u8]) -> Vec<(String, String)> {
    match hashes {
        Hashes::Kept => vec![(name.to_string(), digest(bytes))],
        Hashes::Skipped => vec![],
    }
}

pub(super) fn grouped_section(
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

pub(super) fn json_section(value: &Value, excluded: &Excluded, hashes: Hashes) -> Section {
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
pub(super) struct Walk<'a> {
    pub(super) excluded: &'a Excluded<'a>,
    pub(super) hashes: Hashes,
    /// Whether field paths are written: for their hashes, or to check them against
    /// `excluded` (a replay of a route that leaves nothing out needs neither).
    pub(super) paths: bool,
    /// Canonical JSON, as serde_json writes each key and scalar.
    pub(super) text: Vec<u8>,
    pub(super) top: Vec<(String, String)>,
    pub(super) nested: Vec<(String, String)>,
    pub(super) overflow: bool,
}

impl Walk<'_> {
    pub(super) fn value(&mut self, value: &Value, path: &str, depth: usize) {
        match value {
            Value::Object(map) => self.object(map, path, depth),
            Value::Array(items) => self.array(items, path, depth),
            scalar => write_json(&mut self.text, scalar),
        }
    }

    pub(super) fn object(
        &mut self,
        map: &serde_json::Map<String, Value>,
        path: &str,
        depth: usize,
    ) {
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

    pub(super) fn members<'v>(
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

    pub(super) fn array(&mut self, items: &[Value], path: &str, depth: usize) {
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
    pub(super) fn child(&mut self, child: &Value, path: String, depth: usize) {
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
pub(super) fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing a key or a scalar `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(out, value);
}
