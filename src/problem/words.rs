//! What each problem tells its reader: `detail`, for a person or an agent's model, and
//! `next`, for a program (docs/reference.md section 6.2).
//!
//! Both are decided from what the proxy will do with the next identical request, worded for
//! the case at hand. A `detail` never says "failed" for an outcome that is unknown, never
//! invites a new operation ID for an effect that may have happened, and never carries a
//! header value or body.

use super::{Advice, Context, Problem, Unknown};

/// The sentence every answer that may be retried unchanged ends with, where a new operation
/// ID would risk a second effect.
const SAME_ID: &str = "Do not retry it under a new operation ID.";

impl Problem {
    /// The `next` member: what a program does after this answer.
    pub fn next(&self) -> Advice {
        match self {
            Problem::OutcomeUnknown(Unknown::Held) | Problem::AwaitingApproval => Advice::Wait,
            Problem::OutcomeUnknown(_)
            | Problem::InFlight
            | Problem::UpstreamUnreachable(_)
            | Problem::LedgerUnavailable(_)
            | Problem::BodyTimeout { .. }
            | Problem::Overloaded => Advice::RetrySame,
            Problem::ParameterMismatch { .. } => Advice::NewOperation,
            Problem::NoMount
            | Problem::ConnectNotSupported
            | Problem::BodyTooLarge { .. }
            | Problem::InvalidBody(_)
            | Problem::MissingOperationId { .. }
            | Problem::InvalidOperationId { .. }
            | Problem::InvalidPath(_)
            | Problem::InvalidMethod(_)
            | Problem::AmbiguousHost(_)
            | Problem::Misdirected { .. } => Advice::FixRequest,
            Problem::NoHost(_)
            | Problem::RouteNotAllowed
            | Problem::ShadowedRoute { .. }
            | Problem::LoopDetected
            | Problem::OperationRejected { .. }
            | Problem::OperationExpired { .. }
            | Problem::PrincipalMismatch
            | Problem::UpstreamBroken(_) => Advice::Stop,
        }
    }

    /// Words for whoever reads the answer next: what happened, then what to do.
    pub(super) fn detail(&self, ctx: &Context) -> String {
        match self {
            Problem::OutcomeUnknown(case) => unknown(*case, ctx),
            Problem::InFlight => format!(
                "The same operation is still in progress. Retry the same request unchanged \
                 after Retry-After to get its result; it is not sent twice. {SAME_ID}"
            ),
            Problem::AwaitingApproval => format!(
                "This operation needs a person's approval before it is sent, and nothing was \
                 sent. It is held until an operator approves or rejects it; asking again with \
                 the same request after Retry-After only tells you whether it has been approved \
                 (once approved, that request sends it). {SAME_ID}"
            ),
            Problem::ParameterMismatch { fields } => format!(
                "This operation was first requested with other parameters (differing: {}). \
                 Nothing was sent. This operation ID is spent on its first parameters: to \
                 repeat that request, send it unchanged; for a new intent, use a new operation ID.",
                fields.join(", ")
            ),
            Problem::OperationRejected { reason } => {
                let why = reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                format!(
                    "An operator rejected this operation{why}. Nothing was sent, and it never \
                     will be: do not retry it, under this operation ID or a new one."
                )
            }
            Problem::OperationExpired { .. } => "This operation was completed and its record \
                pruned; only its tombstone remains, so it is never sent again. Nothing was sent. \
                Do not retry it; only a new intent gets a new operation ID."
                .into(),
            Problem::PrincipalMismatch => "This operation was first requested by another caller \
                (other credentials, or other values of the provider's `principal_headers`). \
                Nothing was replayed and nothing was sent. Do not retry it under another \
                operation ID; after a key rotation, an operator can run \
                `idemproxy ops rebind ID --reason ...`."
                .into(),
            Problem::UpstreamUnreachable(why) => format!(
                "The provider could not be reached ({why}). Nothing was sent, so it is safe to \
                 retry: send the same request unchanged."
            ),
            Problem::UpstreamBroken(why) => format!(
                "The exchange with the provider broke before a complete answer arrived ({why}). \
                 This route is not guarded, so the proxy cannot tell whether it took effect: \
                 check with the provider before sending it again."
            ),
            Problem::LedgerUnavailable(_) => "The proxy cannot record operations right now, so \
                nothing was sent. Retry the same request unchanged later."
                .into(),
            _ => self.refused(),
        }
    }

    /// The words of the refusals before anything about the operation is known.
    fn refused(&self) -> String {
        match self {
            Problem::NoMount => "No provider is mounted at this path, and nothing was sent. \
                Point your client at http://<proxy>/<mount>/..., where <mount> is a \
                provider's `mount` (see `idemproxy check`)."
                .into(),
            Problem::NoHost(host) => format!(
                "No provider's upstream is {host}, and this proxy is not an open proxy. Nothing \
                 was sent; the request is refused until an operator adds a policy for it."
            ),
            Problem::RouteNotAllowed => "This request matches none of the provider's routes, \
                and its policy says `unmatched = \"reject\"`. Nothing was sent; the request is \
                refused until an operator adds a route for it to the policy."
                .into(),
            Problem::ConnectNotSupported => {
                "HTTPS interception (CONNECT) is not configured on this proxy: its \
                configuration has no [intercept] table. Nothing was sent. Send the request in \
                plain HTTP to the provider's mount instead, for example \
                http://127.0.0.1:8080/stripe/v1/refunds (the proxy speaks HTTPS to the \
                provider), or ask an operator to configure [intercept]."
                    .into()
            }
            Problem::BodyTooLarge { limit } => format!(
                "The request body is larger than {limit} bytes, the proxy's `max_request_body` \
                 for guarded routes. Nothing was sent. Send a smaller body."
            ),
            Problem::InvalidBody(detail) => format!(
                "The request cannot be taken as its policy reads it: {detail}. Nothing was \
                 sent. Correct the request before sending it again."
            ),
            Problem::MissingOperationId { .. } => "None of the route's operation_id templates \
                could be filled from this request, so the operation cannot be identified and \
                nothing was sent. Send the parts listed in `missing` (for example an \
                X-Operation-Id header)."
                .into(),
            Problem::InvalidOperationId { len } => format!(
                "The operation ID is {len} bytes long; at most 512 are allowed. Nothing was \
                 sent. Use a shorter identifier."
            ),
            _ => self.refused_spelling(),
        }
    }

    /// The words of the refusals of a request's spelling or of the proxy's own limits.
    fn refused_spelling(&self) -> String {
        match self {
            Problem::InvalidPath(why) => format!(
                "The request path {why}. Servers read such a path in different ways, so under a \
                 provider with guarded routes it could reach a guarded route unguarded. Nothing \
                 was sent. Send the plain spelling of the path (as the route's `match` writes \
                 it)."
            ),
            Problem::ShadowedRoute { taken, guarded } => format!(
                "The request matches the route `{taken}`, which is not guarded, and also the \
                 guarded route `{guarded}` listed after it. Routes are tried in the order of \
                 the policy file, so its guard would not run, and the proxy refuses rather than \
                 send it unguarded. Nothing was sent; the request is refused until an operator \
                 lists `{guarded}` before `{taken}` in the policy."
            ),
            Problem::InvalidMethod(why) => format!(
                "The request method {why}. Under a provider with guarded routes the method must \
                 be the one the provider acts on, in upper case. Nothing was sent. Send it as \
                 the request's own method."
            ),
            Problem::LoopDetected => "This request already carries this proxy's `Via` entry: \
                it came back to the proxy, so a provider's `upstream` leads back to it. Nothing \
                was sent; the request is refused until an operator points the upstream at the \
                provider itself."
                .into(),
            Problem::AmbiguousHost(host) => format!(
                "More than one provider's upstream is {host} on different ports, and the \
                 request names no port. Nothing was sent. Name the port in the request's URL."
            ),
            Problem::Misdirected { tunnel, named } => format!(
                "This connection is a tunnel to {tunnel}, and this request is for {named}. \
                 Nothing was sent. Send it through a tunnel to its own host (a CONNECT to it), \
                 which an HTTPS_PROXY client opens for each host by itself."
            ),
            Problem::BodyTimeout { after } => format!(
                "The request body did not arrive in full within {}, the proxy's `body_timeout` \
                 for guarded routes. Nothing was sent; send the same request again.",
                humantime::format_duration(*after)
            ),
            Problem::Overloaded => "The proxy is holding as many request bodies as its \
                `max_buffered` allows. Nothing was sent; send the same request again after \
                the Retry-After delay."
                .into(),
            other => other.to_string(),
        }
    }
}

/// The `outcome-unknown` words for what the agent's next identical request will meet.
fn unknown(case: Unknown, ctx: &Context) -> String {
    let what = ctx.route.as_deref().unwrap_or("operation");
    let head = format!("We cannot yet confirm whether this {what} was made.");
    let then = match case {
        Unknown::Deduplicated => "Retry the same request unchanged: it is re-sent with the \
            same idempotency key and takes effect at most once."
            .to_owned(),
        Unknown::Idempotent => "Retry the same request unchanged: it is re-sent, and this \
            route's effect is idempotent, so repeating it changes nothing more."
            .to_owned(),
        Unknown::LookedUp => format!(
            "Retry the same request unchanged after Retry-After: the proxy asks the provider \
             whether it was made, and sends it again only once the provider shows it was not. \
             {SAME_ID}"
        ),
        Unknown::Held => "It is held until it is resolved (an operator decides what \
            happened); do not retry it under a new operation ID."
            .to_owned(),
    };
    format!("{head} {then}")
}
