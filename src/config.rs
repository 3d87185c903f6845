//! config (stub: being written).
