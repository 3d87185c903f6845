//! The demo's operator: the person who checks with the provider and resolves an operation the
//! proxy holds as `unknown`.
//!
//! It owns the one resolution the demo makes: `succeeded`, with the refund the provider really
//! made as the stored answer. It never resolves an operation that is not `unknown`.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::app::App;
use crate::clock::Timestamp;
use crate::ledger::{Event, EventKind, ResponseMeta, State, StoredResponse, Write};

/// The answer future replays get: the provider's refund as a 200 JSON response.
pub fn refund_answer(refund: &Value) -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    StoredResponse {
        status: 200,
        headers,
        body: Bytes::from(refund.to_string()),
    }
}

/// Resolves the `unknown` operation `id` as succeeded with `answer`, recording an
/// `operator.resolved` event with `reason`. Err (a sentence) if it is not `unknown`.
///
/// TODO(admin): switch to the admin API (`POST /ops/{id}/resolve` with
/// `{"outcome":"succeeded","status":200,"headers":{},"body":"..."}`) once it is on main, so the
/// demo shows the call an operator makes; this writes the same resolution through the ledger.
pub async fn resolve_succeeded(
    app: &App,
    id: &str,
    answer: StoredResponse,
    reason: String,
) -> Result<(), String> {
    let now = Timestamp::now();
    let resolved = app.ledger.update(id, move |existing| match existing {
        Some(op) if op.state == State::Unknown => {
            let meta = ResponseMeta {
                status: answer.status,
                body_bytes: answer.body.len() as u64,
                body_sha256: hex::encode(Sha256::digest(&answer.body)),
            };
            let event = Event {
                at: now,
                kind: EventKind::OperatorResolved,
                attempt: op.attempts,
                detail: format!("resolved as succeeded: {reason}"),
            };
            let op = crate::ledger::Operation {
                state: State::Succeeded,
                updated_at: now,
                fence: 0,
                response: Some(meta),
                error: None,
                ..op
            };
            let write = Write {
                op,
                events: vec![event],
                response: Some(answer),
            };
            (Some(write), Ok(()))
        }
        Some(op) => (
            None,
            Err(format!("it is {}, not unknown", op.state.as_str())),
        ),
        None => (None, Err("the ledger has no such operation".to_string())),
    });
    resolved.await.map_err(|e| e.to_string())?
}
