//! fingerprint (stub: being written).
