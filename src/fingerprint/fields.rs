//! Field paths and what `fingerprint_ignore` leaves out: whether one path lies under another,
//! whether an ignore entry drops a body field or a query parameter, and a JSON pointer as a
//! field path.

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
pub(super) struct Excluded<'a> {
    pub(super) ignore: &'a [String],
    pub(super) key: Option<String>,
}

impl<'a> Excluded<'a> {
    pub(super) fn new(ignore: &'a [String], key_field: Option<&str>) -> Self {
        Excluded {
            ignore,
            key: key_field.and_then(pointer_to_path),
        }
    }

    pub(super) fn body_field(&self, path: &str) -> bool {
        ignores_body(self.ignore, path)
            || (self.key.as_deref()).is_some_and(|key| path == key || is_under(path, key))
    }

    /// Whether nothing is left out, so no body field's path needs writing to check it.
    pub(super) fn is_empty(&self) -> bool {
        self.ignore.is_empty() && self.key.is_none()
    }

    pub(super) fn query_field(&self, name: &str) -> bool {
        ignores_query(self.ignore, name)
    }
}

/// `/items/0/price` -> `items[0][price]`; `None` for something that is not a pointer.
pub(super) fn pointer_to_path(pointer: &str) -> Option<String> {
    let mut tokens = pointer
        .strip_prefix('/')?
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"));
    let first = tokens.next()?;
    Some(tokens.fold(first, |path, t| format!("{path}[{t}]")))
}
