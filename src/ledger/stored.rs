//! The byte encodings of stored values (`codec`), reachable from outside the crate for the fuzz
//! targets in `fuzz/` alone: not the ledger's API, and hidden from its documentation. A fault
//! is its message here, since `Fault` never leaves `ledger`.

use super::codec;
use crate::operation::{Event, Operation, StoredResponse};

pub fn encode_op(op: &Operation) -> Result<Vec<u8>, String> {
    codec::encode_op(op).map_err(|f| f.to_string())
}

pub fn decode_op(bytes: &[u8]) -> Result<Operation, String> {
    codec::decode_op(bytes).map_err(|f| f.to_string())
}

pub fn decode_op_for_replay(bytes: &[u8]) -> Result<Operation, String> {
    codec::decode_op_for_replay(bytes).map_err(|f| f.to_string())
}

pub fn encode_event(event: &Event) -> Result<Vec<u8>, String> {
    codec::encode_event(event).map_err(|f| f.to_string())
}

pub fn decode_event(bytes: &[u8]) -> Result<Event, String> {
    codec::decode_event(bytes).map_err(|f| f.to_string())
}

pub fn encode_response(response: &StoredResponse) -> Vec<u8> {
    codec::encode_response(response)
}

pub fn decode_response(bytes: &[u8]) -> Result<StoredResponse, String> {
    codec::decode_response(bytes).map_err(|f| f.to_string())
}

pub fn encode_cursor(created_at: i64, id: &str) -> String {
    codec::encode_cursor(created_at, id)
}

pub fn decode_cursor(cursor: &str) -> Option<(i64, String)> {
    codec::decode_cursor(cursor)
}
