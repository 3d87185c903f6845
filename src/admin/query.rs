//! The read-only admin calls: `GET /ops`, `/ops/{id}`, `/ops/{id}/response`, `/stats`,
//! `/metrics`.
//!
//! Reads go through the ledger's domain API (indexes, never scans); nothing here writes. A
//! pruned operation's tombstone is its 410 `operation-expired` problem (docs/reference.md
//! section 5.8), never listed.
//! The kept first request of a `prepared` operation is opened only to show its route's
//! `approval_show` fields, and that of an `unknown` or `in_flight` one its `operator_show`
//! fields (`shown`), never anything else of it.

use http::{HeaderValue, Response, header};
use serde_json::{Value, json};

use super::error::AdminError;
use super::view;
use crate::app::App;
use crate::clock::Timestamp;
use crate::kept::KeptRequest;
use crate::ledger::Filter;
use crate::operation::{Operation, State};
use crate::problem::{Context, Problem};
use crate::wire::{ProxyBody, full};

/// `limit` when the caller gives none.
pub const DEFAULT_LIMIT: usize = 50;
/// The largest page.
pub const MAX_LIMIT: usize = 1000;

/// The parsed query of `GET /ops`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub state: Option<State>,
    pub provider: Option<String>,
    pub route: Option<String>,
    pub limit: usize,
    pub after: Option<String>,
}

/// The parameters of an admin query string that have a value, each once: an empty value means
/// "not given"; a parameter given twice is an error (which of the two would count?).
pub(super) fn given(query: Option<&str>) -> Result<Vec<(String, String)>, AdminError> {
    let mut given: Vec<(String, String)> = Vec::new();
    let mut seen = Vec::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if seen.contains(&key) {
            return Err(bad(format!("`{key}` is given more than once.")));
        }
        seen.push(key.clone());
        if !value.is_empty() {
            given.push((key.into_owned(), value.into_owned()));
        }
    }
    Ok(given)
}

/// Parses `state=&provider=&route=&limit=&after=`. An empty value means "not given"; an
/// unknown parameter, a repeated one, an unknown state or a limit outside 1..=1000 is an error
/// (a typo must not silently list everything).
pub fn parse_list_query(query: Option<&str>) -> Result<ListQuery, AdminError> {
    let mut q = ListQuery {
        limit: DEFAULT_LIMIT,
        ..ListQuery::default()
    };
    for (key, value) in given(query)? {
        match key.as_str() {
            "state" => q.state = Some(parse_state(&value)?),
            "provider" => q.provider = Some(value),
            "route" => q.route = Some(value),
            "limit" => q.limit = parse_limit(&value)?,
            "after" => q.after = Some(value),
            other => {
                return Err(bad(format!(
                    "unknown parameter `{other}` (expected state, provider, route, limit, after)."
                )));
            }
        }
    }
    Ok(q)
}

fn parse_state(value: &str) -> Result<State, AdminError> {
    State::parse(value).ok_or_else(|| {
        bad(format!(
            "unknown state `{value}` (expected prepared, in_flight, succeeded, failed, unknown)."
        ))
    })
}

fn parse_limit(value: &str) -> Result<usize, AdminError> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(bad(format!(
            "`limit` must be a whole number from 1 to {MAX_LIMIT}, not `{value}`."
        ))),
    }
}

fn bad(detail: String) -> AdminError {
    AdminError::BadRequest(detail)
}

/// `GET /ops`: `{"ops": [...], "next": cursor | null}`, newest first.
pub async fn list(app: &App, query: Option<&str>) -> Result<Response<ProxyBody>, AdminError> {
    let q = parse_list_query(query)?;
    let filter = Filter {
        state: q.state,
        provider: q.provider,
        route: q.route,
    };
    let page = app
        .ledger
        .list(&filter, q.limit, q.after.as_deref())
        .await?;
    let ops: Vec<_> = page.ops.iter().map(view::operation).collect();
    Ok(view::json_response(
        &json!({ "ops": ops, "next": page.next }),
    ))
}

/// `GET /ops/{id}`: the operation with its events and replays; for a tombstone, its 410 problem.
/// What a person must decide from comes with it: a `prepared` operation's `approval_request`
/// (its route's `approval_show` fields); an `unknown` or `in_flight` one's `operator_request`
/// (its `operator_show` fields) and `held_retries` (the agents' requests held since this
/// process started, `null` when none); an `unknown` one's `resolve_commands`, the `ops resolve`
/// commands that settle it; and for every operation `re_resolvable`, whether an operator's
/// resolution settled it last, so `POST /ops/{id}/re-resolve` may correct it.
pub async fn show(app: &App, id: &str) -> Result<Response<ProxyBody>, AdminError> {
    let Some(op) = app.ledger.get(id).await? else {
        return expired_or_not_found(app, id).await;
    };
    let events = app.ledger.events(id).await?;
    let replays = app.ledger.replays(id).await?;
    let mut value = view::operation_with_events(&op, &events, replays);
    if let Value::Object(map) = &mut value {
        let deciding = matches!(op.state, State::Unknown | State::InFlight);
        let shown = match op.state {
            State::Prepared => Some(("approval_request", true)),
            State::Unknown | State::InFlight => Some(("operator_request", false)),
            _ => None,
        };
        if let Some((key, approving)) = shown
            && let Some(request) = shown_request(app, &op, approving).await?
        {
            map.insert(key.into(), request);
        }
        if deciding {
            let held = app.held.get(&op.id).map(|(count, first, last)| {
                json!({"count": count, "first_at": first.to_rfc3339(), "last_at": last.to_rfc3339()})
            });
            map.insert("held_retries".into(), held.unwrap_or(Value::Null));
        }
        if op.state == State::Unknown {
            map.insert("resolve_commands".into(), json!(resolve_commands(&op.id)));
        }
        let correctable = crate::operation::resolved_by_operator(&events);
        map.insert("re_resolvable".into(), json!(correctable));
    }
    Ok(view::json_response(&value))
}

/// The `idemproxy ops resolve` commands that settle the unknown operation `id`, its ID one
/// shell word: as succeeded (FILE: the provider's object, which every replay answers) and as
/// failed.
pub fn resolve_commands(id: &str) -> [String; 2] {
    let id = crate::operation::command_word(id);
    [
        format!("idemproxy ops resolve {id} --succeeded --body-file FILE"),
        format!("idemproxy ops resolve {id} --failed --reason TEXT"),
    ]
}

/// The fields of `op`'s kept first request that its route lists in `approval_show`
/// (`approving`) or `operator_show` (see `shown`). `None` when the route lists none, or when
/// the request is no longer kept or does not open under this installation's secret.
async fn shown_request(
    app: &App,
    op: &Operation,
    approving: bool,
) -> Result<Option<Value>, AdminError> {
    let route = app
        .config
        .providers
        .iter()
        .find(|p| p.name == op.provider)
        .and_then(|p| p.routes.iter().find(|r| r.name == op.route));
    let Some(route) = route else {
        return Ok(None);
    };
    let fields = match approving {
        true => &route.approval_show,
        false => &route.operator_show,
    };
    if fields.is_empty() {
        return Ok(None);
    }
    let Some(sealed) = app.ledger.kept_request(&op.id).await? else {
        return Ok(None);
    };
    let Some(kept) = KeptRequest::open(&app.secret, &op.id, &sealed) else {
        return Ok(None);
    };
    Ok(Some(crate::shown::approval_request(
        fields,
        &route.ignored_in_request(),
        &kept,
    )))
}

/// `GET /stats`: operations by state and the ages of the oldest `unknown` and `in_flight`
/// ones (by creation), from the ledger's counters: what the console's summary shows.
pub async fn stats(app: &App) -> Result<Response<ProxyBody>, AdminError> {
    let stats = app.ledger.stats().await?;
    let now = Timestamp::now();
    let oldest = |at: Option<Timestamp>| {
        at.map(|t| json!({"created_at": t.to_rfc3339(), "age_seconds": now.since(t).as_secs_f64()}))
    };
    Ok(view::json_response(&json!({
        "by_state": stats.by_state,
        "oldest_unknown": oldest(stats.oldest_unknown),
        "oldest_in_flight": oldest(stats.oldest_in_flight),
        "at": now.to_rfc3339(),
    })))
}

/// `GET /ops/{id}/response`: the stored response exactly as a replay answers it, with the
/// `Idem-*` headers for the operation's current state; 404 when the operation names none
/// (`response` null); for a tombstone (no response is kept), its 410 problem.
pub async fn response(app: &App, id: &str) -> Result<Response<ProxyBody>, AdminError> {
    let Some(op) = app.ledger.get(id).await? else {
        return expired_or_not_found(app, id).await;
    };
    // An operation that names no response has none to replay, even if an earlier one is
    // still stored (a later attempt never connected, or an operator voided it).
    if op.response.is_none() {
        return Err(AdminError::NoResponse(id.to_string()));
    }
    let stored = app
        .ledger
        .response(id)
        .await?
        .ok_or_else(|| AdminError::NoResponse(id.to_string()))?;
    let ctx = Context {
        operation_id: Some(op.id),
        provider: Some(op.provider),
        route: Some(op.route),
        state: Some(op.state),
    };
    Ok(crate::answer::replay(stored, &ctx))
}

/// The 410 `operation-expired` of a tombstoned `id`, with `state`, `pruned_at` and the
/// `Idem-*` headers of its final state; the 404 of an ID the ledger does not know.
async fn expired_or_not_found(app: &App, id: &str) -> Result<Response<ProxyBody>, AdminError> {
    match app.ledger.tombstone(id).await? {
        Some(tomb) => Ok(expired_problem(tomb)),
        None => Err(AdminError::NotFound(id.to_string())),
    }
}

/// The 410 of `id` when it is a tombstone: an operator action on a pruned operation is
/// refused the same way as `GET /ops/{id}`.
pub(super) async fn expired(
    app: &App,
    id: &str,
) -> Result<Option<Response<ProxyBody>>, AdminError> {
    Ok(app.ledger.tombstone(id).await?.map(expired_problem))
}

fn expired_problem(tomb: Operation) -> Response<ProxyBody> {
    let pruned_at = tomb.pruned_at.unwrap_or_default();
    let ctx = Context {
        operation_id: Some(tomb.id),
        provider: Some(tomb.provider),
        route: Some(tomb.route),
        state: Some(tomb.state),
    };
    crate::answer::refusal(Problem::OperationExpired { pruned_at }, &ctx)
}

/// `GET /metrics`: the operation gauges are set from the ledger's counters first. A ledger
/// that cannot answer leaves them as they were; the rest of the metrics still render.
pub async fn metrics(app: &App) -> Response<ProxyBody> {
    match app.ledger.stats().await {
        Ok(stats) => {
            let now = Timestamp::now();
            app.metrics.set_operations(
                stats.by_state.iter().map(|(state, n)| (*state, *n)),
                stats.oldest_unknown.map(|t| now.since(t)),
                stats.oldest_in_flight.map(|t| now.since(t)),
            );
        }
        Err(e) => tracing::warn!(error = %e, "metrics: the ledger's counters cannot be read"),
    }
    let mut resp = Response::new(full(app.metrics.render()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_values_and_no_query_mean_defaults() {
        let defaults = ListQuery {
            limit: DEFAULT_LIMIT,
            ..ListQuery::default()
        };
        assert_eq!(parse_list_query(None), Ok(defaults));
        let q = parse_list_query(Some("state=&provider=&route=&limit=&after="));
        assert_eq!(q.map(|q| q.limit), Ok(DEFAULT_LIMIT));
    }

    #[test]
    fn filters_and_cursor_are_read_and_decoded() {
        let q = parse_list_query(Some(
            "state=unknown&provider=stripe&route=a%20b&limit=1000&after=00ff",
        ))
        .expect("valid query");
        assert_eq!(q.state, Some(State::Unknown));
        assert_eq!(q.provider.as_deref(), Some("stripe"));
        assert_eq!(q.route.as_deref(), Some("a b"));
        assert_eq!(q.limit, 1000);
        assert_eq!(q.after.as_deref(), Some("00ff"));
    }

    #[test]
    fn bad_states_limits_unknown_and_repeated_keys_are_400() {
        for query in [
            "state=done",
            "limit=0",
            "limit=1001",
            "limit=-1",
            "limit=ten",
            "stat=unknown",
            "state=unknown&state=failed",
        ] {
            let err = parse_list_query(Some(query)).expect_err(query);
            assert_eq!(err.status(), http::StatusCode::BAD_REQUEST, "{query}");
        }
    }
}
