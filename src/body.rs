//! body (stub: being written).
