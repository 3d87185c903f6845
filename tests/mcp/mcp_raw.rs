//! Raw JSON-RPC requests the SDK would never send.
