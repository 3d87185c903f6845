//! identity (stub: being written).
