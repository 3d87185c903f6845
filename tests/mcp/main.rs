//! Behaviour tests of MCP providers (`protocol = "mcp"`): the official MCP Python SDK's server
//! and client (tests/mcp/server.py, tests/mcp/client.py) through the real binary, in both wire
//! forms and both answer modes, and raw JSON-RPC where the SDK would never send it.
//!
//! One test binary for the area, sharing the harness in `tests/common/`. `cargo test --test
//! mcp` runs the area. The Python environment (the pinned SDK) is target/python-env, which
//! `bash .ci/python-env` creates.

#[path = "../common/mod.rs"]
mod common;

mod mcp_raw;
mod mcp_tools;
mod sdk;
