//! The human-readable output of `idemproxy ops`: the list table and an operation's fields
//! and events. Pure: it formats the admin API's JSON and escapes control characters, so an
//! operation ID or detail can never drive the operator's terminal.

use serde_json::Value;

/// Text safe for a terminal: control characters are escaped.
pub(super) fn clean(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// A JSON value as table text: strings bare, null as `-`.
pub(super) fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => clean(s),
        other => clean(&other.to_string()),
    }
}

/// `ops list`: an ID, STATE, ATTEMPTS, UPDATED table, then, if there is a next page, the
/// command that lists it: `again` (the command as given, its filters and limit included, so
/// the next page is of the same listing) with `--after` and the cursor.
pub fn render_list(page: &Value, again: &str) -> String {
    let empty = Vec::new();
    let ops = page["ops"].as_array().unwrap_or(&empty);
    if ops.is_empty() {
        return "no operations\n".into();
    }
    let mut rows = vec![["ID", "STATE", "ATTEMPTS", "UPDATED"].map(String::from)];
    for op in ops {
        rows.push(["operation_id", "state", "attempts", "updated_at"].map(|k| cell(&op[k])));
    }
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2)];
    let mut out = String::new();
    for row in &rows {
        out.push_str(&format!(
            "{:w0$}  {:w1$}  {:w2$}  {}\n",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
        ));
    }
    if let Some(next) = page["next"].as_str() {
        let cursor = crate::operation::command_word(next);
        out.push_str(&format!("more: {again} --after {cursor}\n"));
    }
    out
}

/// The fields `ops show` prints, in order.
const FIELDS: [&str; 15] = [
    "operation_id",
    "provider",
    "route",
    "effect",
    "state",
    "approval",
    "attempts",
    "created_at",
    "updated_at",
    "first_dispatched_at",
    "provider_request_id",
    "idempotency_key",
    "fingerprint",
    "response",
    "error",
];

/// `ops show` (and the answer of `resolve`, `approve`, `reject`): fields, then events.
pub fn render_op(op: &Value) -> String {
    let mut out = String::new();
    for key in FIELDS {
        let value = match (key, &op[key]) {
            ("response", r @ Value::Object(_)) => format!(
                "status {}, {} bytes, sha256 {}",
                cell(&r["status"]),
                cell(&r["body_bytes"]),
                cell(&r["body_sha256"])
            ),
            (_, v) => cell(v),
        };
        out.push_str(&format!("{key:<20} {value}\n"));
    }
    // Only `GET /ops/{id}` shows them (not the answer of an action).
    if let r @ Value::Object(_) = &op["replays"] {
        let value = match r["count"].as_u64() {
            Some(n) if n > 0 => format!(
                "{n}, first {}, last {}",
                cell(&r["first_at"]),
                cell(&r["last_at"])
            ),
            _ => "0".to_owned(),
        };
        out.push_str(&format!("{:<20} {value}\n", "replays"));
    }
    if let held @ Value::Object(_) = &op["held_retries"] {
        let value = format!(
            "{}, first {}, last {}",
            cell(&held["count"]),
            cell(&held["first_at"]),
            cell(&held["last_at"])
        );
        out.push_str(&format!("{:<20} {value}\n", "held retries"));
    } else if op["held_retries"].is_null() && op.get("held_retries").is_some() {
        out.push_str(&format!("{:<20} 0\n", "held retries"));
    }
    out.push_str(&shown("to approve:", &op["approval_request"]));
    out.push_str(&shown("the request:", &op["operator_request"]));
    if let Some(commands) = op["resolve_commands"].as_array() {
        out.push_str("to resolve, once the provider says what happened:\n");
        for command in commands {
            out.push_str(&format!("  {}\n", cell(command)));
        }
    }
    if let Some(events) = op["events"].as_array() {
        out.push_str("events:\n");
        for e in events {
            out.push_str(&format!(
                "  {}  {:<20} attempt {}  {}\n",
                cell(&e["at"]),
                cell(&e["kind"]),
                cell(&e["attempt"]),
                cell(&e["detail"])
            ));
        }
    }
    out
}

/// A waiting operation's `approval_request` (or an unknown or in-flight one's
/// `operator_request`) under `title`: each shown field, then the missing ones; empty text
/// when there is none.
fn shown(title: &str, request: &Value) -> String {
    let Some(fields) = request["fields"].as_object() else {
        return String::new();
    };
    let mut out = format!("{title}\n");
    for (name, value) in fields {
        out.push_str(&format!("  {:<18} {}\n", clean(name), cell(value)));
    }
    for name in request["missing"].as_array().into_iter().flatten() {
        out.push_str(&format!("  {:<18} (not in the request)\n", cell(name)));
    }
    out
}
