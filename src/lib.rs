//! idemproxy: an HTTP proxy that stops AI agents from doing the same real-world thing twice.
//!
//! # Layout
//! - `clock`: timestamps, read in one place so pure code takes time as an argument.
//! - `config`: reads `proxy.toml` and the policy files, validates them into domain types.
//! - `policy`: the validated provider and route types, route matching, outcome classes, and
//!   what an answer means (`policy::rule`).
//! - `path`: the one normalized spelling of a request path, and the ambiguous ones refused.
//! - `template`: the `{source:argument}` template language (docs/reference.md section 4).
//! - `body`: a buffered request body, parsed once by content type (JSON, form, bytes).
//! - `fingerprint`: the canonical parameter hash and the per-field hashes behind a 409.
//! - `identity`: operation IDs, idempotency keys and their injection into a request.
//! - `kept`: the sealed first request that makes every re-send byte-identical.
//! - `shown`: the fields of a kept request shown to the person who approves it, masked.
//! - `operation`: the operation model (operation, state, approval, event, stored response, the
//!   `Write` a decision asks for) that decisions, the admin API and the ledger share.
//! - `ledger`: storage only: the durable ledger as one type (`Ledger`) with a small domain API,
//!   dispatching to its backend (redb, `ledger::redb`, or PostgreSQL shared by replicas,
//!   `ledger::postgres`); no module above it names one;
//!   `ledger::copy` is `idemproxy ledger copy`.
//! - `secret`: the installation secret behind keyed hashes and the kept request's encryption.
//! - `durable`: a new file's name made durable (its folder synced), for the ledger and the secret.
//! - `decide`: the pure state machine of a guarded request (docs/reference.md section 5.3).
//! - `answer`: replays, refusals and the `Idem-*` headers of every guarded answer.
//! - `app`: the shared immutable state of a running proxy.
//! - `server`: listeners, connections, the stop.
//! - `drain`: graceful shutdown of the served connections.
//! - `shard`: one single-threaded runtime per core serving the agents' connections.
//! - `handoff`: each shard's inbox, where answers from other threads (the ledger's) wait for
//!   one wake-up of the shard per bunch.
//! - `inbound`: connection limits: the wait for each request head, the connection cap, accept backoff.
//! - `budget`: the budget of buffered request bytes, and reading a guarded body under it.
//! - `proxy`: the request path: routing and unguarded streaming.
//! - `guard`: the ledger protocol for guarded routes, step by step.
//! - `claim`: the one ledger transaction that decides a guarded request and records it.
//! - `dispatch`: one claimed attempt: send, classify, record, answer; outlives the agent.
//! - `reconcile`: asking the provider whether an unknown effect happened.
//! - `retention`: the background task that prunes finished operations past `[retention]`.
//! - `replays`: replay counts kept in memory and written coalesced, off the request path.
//! - `settle`: the background settler of unknown operations (re-send or look up).
//! - `upstream`: pooled connections to providers (TLS by rustls) and header hygiene.
//! - `wire`: the shared body type and the one bounded body reader (the lowest floor).
//! - `problem`: every refusal, and the one place it becomes problem+json.
//! - `shape`: the proxy's own problem answers shaped for a provider's SDK (`pending_status`,
//!   `[[provider.answer]]`).
//! - `admin`: the admin API, with the live event stream (`GET /events`).
//! - `notify`: notifications to the `[notify]` webhook when an operation needs a person.
//! - `metrics`: Prometheus counters, histograms and gauges.
//! - `ops`: the `idemproxy ops` command line, a client of the admin API.
//! - `demo`: `idemproxy demo`, a lost-response refund told end to end, offline.

pub mod admin;
pub mod answer;
pub mod app;
pub mod body;
pub mod budget;
pub mod claim;
pub mod clock;
pub mod config;
pub mod decide;
pub mod demo;
pub mod dispatch;
pub mod drain;
pub mod durable;
pub mod fingerprint;
pub mod guard;
pub mod handoff;
pub mod identity;
pub mod inbound;
pub mod kept;
pub mod ledger;
pub mod metrics;
pub mod notify;
pub mod operation;
pub mod ops;
pub mod path;
pub mod policy;
pub mod problem;
pub mod proxy;
pub mod reconcile;
pub mod replays;
pub mod retention;
pub mod secret;
pub mod server;
pub mod settle;
pub mod shape;
pub mod shard;
pub mod shown;
pub mod template;
pub mod upstream;
pub mod wire;
