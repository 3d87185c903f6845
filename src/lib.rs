//! idemproxy: an HTTP proxy that stops AI agents from doing the same real-world thing twice.
//!
//! # Layout
//! From the top down; a module imports only from its own layer's lower neighbours and the
//! layers below it (`.ci/imports` prints the graph and its circles).
//!
//! Commands and services started by the server:
//! - `demo`: `idemproxy demo`, a lost-response refund told end to end, offline.
//! - `ops`: the `idemproxy ops` command line, a client of the admin API.
//! - `server`: listeners, connections, the stop; `inbound`: connection limits (the wait for
//!   each request head, the connection cap, accept backoff); `drain`: graceful shutdown of the
//!   served connections; `intercept`: CONNECT from HTTPS_PROXY clients (TLS terminated with a
//!   leaf of the local CA and served by the request path, or an opaque tunnel).
//! - `admin`: the admin API, with the live event stream (`GET /events`); its token is
//!   `admin::token`.
//! - `notify`: notifications to the `[notify]` webhook when an operation needs a person (the
//!   notifier itself: `notify::notifier`).
//! - `retention`: the background task that prunes finished operations past `[retention]`.
//! - `reload`: SIGHUP and `POST /admin/reload`: proxy.toml and the policies read again and put
//!   in place for new requests (`app::Live`), or refused with the running ones kept.
//!
//! The request path:
//! - `proxy`: routing and unguarded streaming; `shape`: the proxy's own problem answers shaped
//!   for a provider's SDK (`pending_status`, `[[provider.answer]]`).
//! - `mcp`: an MCP provider's endpoint (`protocol = "mcp"`), each `POST` routed by its JSON-RPC
//!   body: a guarded tool's call to `guard`, the rest passed through; problems as tool errors.
//! - `guard`: the ledger protocol for guarded routes, step by step; `settle`: the background
//!   settler of unknown operations (re-send or look up).
//! - `claim`: the one ledger transaction that decides a guarded request and records it;
//!   `dispatch`: one claimed attempt (send, classify, record, answer), which outlives the
//!   agent; `reconcile`: asking the provider whether an unknown effect happened; `answer`:
//!   replays, refusals and the `Idem-*` headers of every guarded answer.
//! - `app`: the shared immutable state of a running proxy (config, ledger, upstreams and the
//!   handles the request path reads); it imports none of the services above it: the server
//!   builds the admin token and the notifier (`server::Services`) and hands them over.
//! - `tally`: replay counts kept in memory and written coalesced to the ledger.
//!
//! Storage and the network:
//! - `ledger`: storage only: the durable ledger as one type (`Ledger`) with a small domain API,
//!   dispatching through one trait (`ledger::backend`) to its backend, each in its own folder
//!   (redb, `ledger::redb` and `ledger/redb/`, or PostgreSQL shared by replicas,
//!   `ledger::postgres` and `ledger/postgres/`); no module above it names one, and neither
//!   backend imports the other; the types both share live above them in `ledger` and its other
//!   files; `ledger::copy` is `idemproxy ledger copy`.
//! - `upstream`: pooled connections to providers (TLS by rustls), the last check before a
//!   guarded request's first byte (`upstream::gate`), and header hygiene.
//! - `metrics`: Prometheus counters, histograms and gauges.
//!
//! The model:
//! - `config`: reads `proxy.toml` and the policy files, validates them into domain types.
//! - `policy`: the validated provider and route types, route matching, outcome classes, what
//!   an answer means (`policy::rule`), answer shapes (`policy::answer`) and `approval_show`
//!   entries (`policy::field`).
//! - `decide`: the pure state machine of a guarded request (docs/reference.md section 5.3).
//! - `operation`: the operation model (operation, state, approval, event, stored response, the
//!   `Write` a decision asks for) that decisions, the admin API and the ledger share.
//! - `problem`: every refusal, and the one place it becomes problem+json.
//! - `identity`: operation IDs, idempotency keys and their injection into a request.
//! - `kept`: the request as sent (`Outgoing`), the sealed first request that makes every
//!   re-send byte-identical, and the last caller's headers kept in memory for the settler.
//! - `shown`: the fields of a kept request shown to the person who approves it, masked.
//! - `fingerprint`: the canonical parameter hash and the per-field hashes behind a 409 (its
//!   walk, its field paths, the principal).
//! - `template`: the `{source:argument}` template language (docs/reference.md section 4).
//! - `path`: the one normalized spelling of a request path, and the ambiguous ones refused.
//! - `jsonrpc`: MCP's JSON-RPC messages: what a body is, routing headers, the response out of
//!   an event stream, answers under another request's `id`, tool errors.
//!
//! The ground floor:
//! - `authority`: the local CA of `[intercept]` (`ca init`, its checks) and the leaves it signs.
//! - `body`: a buffered request body, parsed once by content type (JSON, form, bytes).
//! - `secret`: the installation secret behind keyed hashes and the kept request's encryption.
//! - `durable`: a new file's name made durable (its folder synced), for the ledger and the secret.
//! - `clock`: timestamps, read in one place so pure code takes time as an argument.
//! - `crash`: named crash points (`crash_point!`), compiled only with the `failpoints` feature,
//!   where the crash matrix makes the process die on purpose.
//! - `env`: the list of the environment variables the binary reads, for the help texts.
//! - `wire`: the shared body type, the one bounded body reader, the hop-by-hop header names.
//! - `budget`: the buffered request bytes, and reading a guarded body under them.
//! - `shard`: one single-threaded runtime per core serving the agents' connections; `handoff`:
//!   each shard's inbox, where answers from other threads (the ledger's) wait for one wake-up
//!   of the shard per bunch.

pub mod admin;
pub mod answer;
pub mod app;
pub mod authority;
pub mod body;
pub mod budget;
pub mod claim;
pub mod clock;
pub mod config;
pub mod crash;
pub mod decide;
pub mod demo;
pub mod dispatch;
pub mod drain;
pub mod durable;
pub mod env;
pub mod fingerprint;
pub mod guard;
pub mod handoff;
pub mod identity;
pub mod inbound;
pub mod intercept;
pub mod jsonrpc;
pub mod kept;
pub mod ledger;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod operation;
pub mod ops;
pub mod path;
pub mod policy;
pub mod problem;
pub mod proxy;
pub mod reconcile;
pub mod reload;
pub mod retention;
pub mod secret;
pub mod server;
pub mod settle;
pub mod shape;
pub mod shard;
pub mod shown;
pub mod tally;
pub mod template;
pub mod upstream;
pub mod wire;
