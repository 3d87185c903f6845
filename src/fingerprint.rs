//! fingerprint (stub: being written).

use std::collections::BTreeMap;

/// Stub until the real module lands.
pub fn differing_fields(
    _a: &BTreeMap<String, String>,
    _b: &BTreeMap<String, String>,
) -> Vec<String> {
    Vec::new()
}
