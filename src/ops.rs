//! `idemproxy ops`: the operator's command line, a client of the admin API (docs/reference.md section 9).
//!
//! It owns the verbs (`list`, `show`, `resolve`, `re-resolve`, `approve`, `reject`, `rebind`), turning each into one
//! admin call, and the human-readable tables; `--json` prints the API's JSON as it came;
//! `tail` follows the live event stream instead (see `tail`); `reload` is `idemproxy reload`
//! (`POST /admin/reload`). It
//! never opens the ledger: everything goes through the running proxy's admin API, so its
//! checks (states, token) apply. It prints no token.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::identity::path_segment;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::admin::TOKEN_VAR;
use table::clean;

/// The admin API when neither `--admin` nor a loadable proxy.toml says otherwise.
pub const DEFAULT_ADMIN: &str = "http://127.0.0.1:9901";
/// The longest an admin call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `idemproxy ops ...`
#[derive(Debug, clap::Args)]
pub struct OpsArgs {
    /// proxy.toml, read for `admin_listen` when --admin is not given.
    #[arg(short, long, default_value = "proxy.toml", global = true)]
    pub config: PathBuf,
    /// The admin API's base URL [default: http://<admin_listen> from the config, else
    /// http://127.0.0.1:9901]. The token comes from IDEMPROXY_ADMIN_TOKEN.
    #[arg(long, global = true, value_name = "URL")]
    pub admin: Option<String>,
    /// Print the admin API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub verb: Verb,
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Verb {
    /// List operations, newest first.
    List {
        /// prepared, in_flight, succeeded, failed or unknown.
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        route: Option<String>,
        /// At most this many (1 to 1000; default 50).
        #[arg(long)]
        limit: Option<usize>,
        /// The cursor printed at the end of an earlier page.
        #[arg(long)]
        after: Option<String>,
    },
    /// Show one operation and its events.
    Show {
        /// The operation ID as `ops list` shows it (not percent-encoded).
        id: String,
    },
    /// Settle an unknown operation: it happened (--succeeded) or it did not (--failed).
    Resolve {
        /// The operation ID as `ops list` shows it (not percent-encoded).
        id: String,
        #[command(flatten)]
        outcome: Outcome,
    },
    /// Correct a resolution an operator made (never the provider's answer): the outcome given
    /// now replaces it, recorded as operator.re_resolved.
    ReResolve {
        /// The operation ID as `ops list` shows it (not percent-encoded).
        id: String,
        #[command(flatten)]
        outcome: Outcome,
    },
    /// Approve a prepared operation; the agent's next request sends it.
    Approve {
        /// The operation ID as `ops list` shows it (not percent-encoded).
        id: String,
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Reject a prepared operation for good.
    Reject {
        /// The operation ID as `ops list` shows it (not percent-encoded).
        id: String,
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Unbind an operation from its caller (after a key rotation); the next caller adopts it.
    Rebind {
        /// The operation ID as `ops list` shows it (not percent-encoded).
        id: String,
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Follow events live, one line each (--json: the event's JSON); reconnects until interrupted.
    Tail {
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        route: Option<String>,
        /// An event kind, e.g. operation.unknown.
        #[arg(long)]
        kind: Option<String>,
    },
}

/// What `ops resolve` and `ops re-resolve` say happened.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Outcome {
    /// The effect happened; every later replay answers the given response, so it needs
    /// --body-file with the provider's object (an empty body would break the SDK that
    /// parses it).
    #[arg(
        long,
        conflicts_with = "failed",
        required_unless_present = "failed",
        requires = "body_file"
    )]
    pub succeeded: bool,
    /// The effect did not happen; the agent's next request sends it again.
    #[arg(long, requires = "reason")]
    pub failed: bool,
    /// Status of the stored response (default 200).
    #[arg(long, requires = "succeeded")]
    pub status: Option<u16>,
    /// Required with --succeeded: the file holding the stored response's body, the
    /// provider's object as its API returns it (UTF-8; `-` reads stdin).
    #[arg(long, requires = "succeeded", value_name = "F")]
    pub body_file: Option<PathBuf>,
    /// A header of the stored response, `NAME: VALUE` (repeatable).
    #[arg(long = "header", requires = "succeeded", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Why; required with --failed.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// The provider really answered a 2xx other than 204 with no body: store the empty
    /// --body-file anyway (refused without this, since an SDK fails to parse it).
    #[arg(long, requires = "succeeded")]
    pub empty_body: bool,
}

/// One admin call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub method: Method,
    /// Path and query, IDs percent-encoded.
    pub path: String,
    pub body: Option<Value>,
}

/// Runs `idemproxy ops`: 0 on a 2xx answer, 1 otherwise (the problem's detail on stderr).
/// `tail` runs until interrupted, or exits 1 when the admin API refuses it.
pub fn run(args: OpsArgs) -> ExitCode {
    if args.admin.as_deref().is_some_and(holds_user_info) {
        // Never echoed: the URL holds a password.
        eprintln!(
            "error: --admin: the URL may not hold a user or password (the admin API takes a \
             bearer token: set IDEMPROXY_ADMIN_TOKEN)"
        );
        return ExitCode::from(2);
    }
    if let Verb::Tail { .. } = &args.verb {
        return match plan(&args.verb, &read_body_file) {
            Ok(call) => tail::run(&tail::Tail {
                base: base_url(&args),
                path: call.path,
                token: token(),
                json: args.json,
            }),
            Err(why) => {
                eprintln!("error: {why}");
                ExitCode::FAILURE
            }
        };
    }
    match execute(&args) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("error: {why}");
            ExitCode::FAILURE
        }
    }
}

/// The call, its answer, and what to print.
fn execute(args: &OpsArgs) -> Result<String, String> {
    let base = base_url(args);
    let call = plan(&args.verb, &read_body_file)?;
    let token = token();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let (status, body) = runtime.block_on(send(&base, &call, token.as_deref()))?;
    if !status.is_success() {
        return Err(problem_detail(status, &body));
    }
    if args.json {
        return Ok(format!("{}\n", String::from_utf8_lossy(&body)));
    }
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("the admin API answered something that is not JSON: {e}"))?;
    Ok(match args.verb {
        Verb::List { .. } => render_list(&value, &list_again(&args.verb, args.admin.as_deref())),
        _ => render_op(&value),
    })
}

/// Whether a URL names a user (and maybe a password) before its host: `http://u:pw@host`.
fn holds_user_info(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.contains('@')
}

/// `--admin`, else the admin API from the config.
fn base_url(args: &OpsArgs) -> String {
    match &args.admin {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => admin_from_config(&args.config),
    }
}

/// `IDEMPROXY_ADMIN_TOKEN` without the whitespace around it (as `serve` reads it), unless
/// blank.
fn token() -> Option<String> {
    let token = std::env::var(TOKEN_VAR).ok()?;
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// `http://<admin_listen>` from the config when it loads (an unspecified address such as
/// 0.0.0.0 becomes loopback), else [`DEFAULT_ADMIN`].
pub fn admin_from_config(path: &Path) -> String {
    if !path.exists() {
        return DEFAULT_ADMIN.to_string();
    }
    match crate::config::load(path) {
        Ok(config) => {
            let mut addr = config.admin_listen;
            if addr.ip().is_unspecified() {
                let loopback: std::net::IpAddr = match addr {
                    std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                };
                addr.set_ip(loopback);
            }
            format!("http://{addr}")
        }
        Err(_) => {
            eprintln!(
                "note: {} does not load (see `idemproxy check`); using {DEFAULT_ADMIN}",
                path.display()
            );
            DEFAULT_ADMIN.to_string()
        }
    }
}

/// The admin call a verb makes; `read` loads a `--body-file`.
pub fn plan(verb: &Verb, read: &dyn Fn(&Path) -> Result<String, String>) -> Result<Call, String> {
    let op = |id: &str, action: &str| format!("/ops/{}{action}", path_segment(id));
    let post = |path, body| Call {
        method: Method::POST,
        path,
        body: Some(body),
    };
    Ok(match verb {
        Verb::List {
            state,
            provider,
            route,
            limit,
            after,
        } => {
            let limit = limit.map(|n| n.to_string());
            list_call([
                ("state", state.as_deref()),
                ("provider", provider.as_deref()),
                ("route", route.as_deref()),
                ("limit", limit.as_deref()),
                ("after", after.as_deref()),
            ])
        }
        Verb::Show { id } => Call {
            method: Method::GET,
            path: op(id, ""),
            body: None,
        },
        Verb::Resolve { id, outcome } => post(op(id, "/resolve"), resolve_body(outcome, read)?),
        Verb::ReResolve { id, outcome } => {
            post(op(id, "/re-resolve"), resolve_body(outcome, read)?)
        }
        Verb::Approve { id, reason } => {
            let body = reason
                .as_ref()
                .map_or_else(|| json!({}), |r| json!({ "reason": r }));
            post(op(id, "/approve"), body)
        }
        Verb::Reject { id, reason } => post(op(id, "/reject"), json!({ "reason": reason })),
        Verb::Rebind { id, reason } => post(op(id, "/rebind"), json!({ "reason": reason })),
        Verb::Tail {
            provider,
            route,
            kind,
        } => Call {
            method: Method::GET,
            path: with_query(
                "/events",
                &[
                    ("provider", provider.as_deref()),
                    ("route", route.as_deref()),
                    ("kind", kind.as_deref()),
                ],
            ),
            body: None,
        },
    })
}

/// `idemproxy ops list` with the filters, limit and `--admin` of `verb` as given (each value one
/// shell word), for the hint that lists the next page.
pub fn list_again(verb: &Verb, admin: Option<&str>) -> String {
    let mut command = String::from("idemproxy ops list");
    if let Verb::List {
        state,
        provider,
        route,
        limit,
        ..
    } = verb
    {
        let limit = limit.map(|n| n.to_string());
        let given = [
            ("--state", state.as_deref()),
            ("--provider", provider.as_deref()),
            ("--route", route.as_deref()),
            ("--limit", limit.as_deref()),
            ("--admin", admin),
        ];
        for (flag, value) in given {
            if let Some(value) = value {
                let word = crate::operation::command_word(value);
                command.push_str(&format!(" {flag} {word}"));
            }
        }
    }
    command
}

/// `GET /ops` with the given filters only.
fn list_call(pairs: [(&str, Option<&str>); 5]) -> Call {
    Call {
        method: Method::GET,
        path: with_query("/ops", &pairs),
        body: None,
    }
}

/// `path` with the given parameters only.
fn with_query(path: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        if let Some(value) = value {
            query.append_pair(key, value);
        }
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    }
}

/// The body of `POST /ops/{id}/resolve` (and `/re-resolve`) for `outcome`.
fn resolve_body(
    outcome: &Outcome,
    read: &dyn Fn(&Path) -> Result<String, String>,
) -> Result<Value, String> {
    let Outcome {
        succeeded,
        status,
        body_file,
        headers,
        reason,
        empty_body,
        ..
    } = outcome;
    if !succeeded {
        return Ok(json!({ "outcome": "failed", "reason": reason }));
    }
    let mut body = serde_json::Map::new();
    body.insert("outcome".into(), json!("succeeded"));
    body.insert("status".into(), json!(status.unwrap_or(200)));
    let mut map = serde_json::Map::new();
    for line in headers {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("--header {line:?} is not `NAME: VALUE`"))?;
        map.insert(name.trim().to_string(), json!(value.trim()));
    }
    body.insert("headers".into(), Value::Object(map));
    let Some(path) = body_file else {
        return Err(
            "--succeeded needs --body-file: the stored response every later replay \
                    answers, the provider's object as its API returns it"
                .into(),
        );
    };
    let text = read(path)?;
    body.insert("body".into(), json!(text));
    if let Some(reason) = reason {
        body.insert("reason".into(), json!(reason));
    }
    if *empty_body {
        body.insert("empty_body".into(), json!(true));
    }
    Ok(Value::Object(body))
}

/// A `--body-file` (or stdin for `-`), which must be UTF-8: the API takes the body as a string.
fn read_body_file(path: &Path) -> Result<String, String> {
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::read(path).map(|b| bytes = b)
    };
    read.map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

/// Sends the call; the answer's status and body.
async fn send(base: &str, call: &Call, token: Option<&str>) -> Result<(StatusCode, Bytes), String> {
    let url = format!("{base}{}", call.path);
    if !base.starts_with("http://") {
        return Err(format!("--admin must be an http:// URL, not {base:?}"));
    }
    let mut request = Request::builder()
        .method(call.method.clone())
        .uri(&url)
        .header(header::ACCEPT, "application/json");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let body = match &call.body {
        Some(value) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Bytes::from(value.to_string())
        }
        None => Bytes::new(),
    };
    let request = request
        .body(Full::new(body))
        .map_err(|e| format!("cannot make a request to {url}: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let exchange = async {
        let resp = client.request(request).await.map_err(|e| {
            format!(
                "cannot reach the admin API at {base} ({e}); is the proxy running? (--admin URL)"
            )
        })?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("the admin API's answer broke off: {e}"))?;
        Ok((status, body.to_bytes()))
    };
    tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("the admin API at {base} did not answer within {CALL_TIMEOUT:?}"))?
}

/// The problem's `detail` (or the status and body when the answer is not problem+json).
pub fn problem_detail(status: StatusCode, body: &[u8]) -> String {
    let detail = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("detail").and_then(Value::as_str).map(str::to_string));
    match detail {
        Some(detail) => format!("{} ({})", clean(&detail), status.as_u16()),
        None => format!(
            "the admin API answered {status}: {}",
            clean(&String::from_utf8_lossy(body))
        ),
    }
}

mod reload;
mod table;
mod tail;
#[cfg(test)]
mod tests;

pub use reload::{ReloadArgs, run as reload};
pub use table::{render_list, render_op};
pub use tail::{Sse, SseEvent, render_event};
