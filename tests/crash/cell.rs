//! One cell of the crash matrix: a provider of one kind, a proxy on one ledger with one crash
//! point armed, the operation that makes it die there, the restart without it, the agent's
//! replays until the operation settles, and the invariants:
//! - the process died at the point (SIGABRT), and the ledger opens again, at the restart and
//!   once more through the crate's ledger API after a graceful stop, with the state the admin
//!   API showed;
//! - at most one effect at the provider;
//! - an operation the provider executed is `succeeded` or `unknown`, never absent or `failed`;
//!   one it did not execute is never `succeeded`;
//! - a `succeeded` answer the agent received replays unchanged (status and body);
//! - where the provider deduplicates or can be looked up, the operation ends `succeeded` with
//!   its one effect.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerAt, LedgerOptions, PgUrl};

use crate::common::database::random_secret;
use crate::common::guarded::{
    PROVIDER, builder, op_id, refund, refund_in_background, refund_route,
};
use crate::common::proxy::binary;
use crate::common::{Behavior, Database, FakeProvider, Proxy, Resp};

/// The provider kinds of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `dedupe = "key"`: it deduplicates on the idempotency key.
    Dedupe,
    /// `dedupe = "none"`, no lookup: nothing after an unknown outcome but an operator.
    NoDedupe,
    /// `dedupe = "none"` with a `[route.reconcile]` lookup by the key.
    Lookup,
}

/// The ledgers of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Redb,
    Postgres,
}

/// How a cell brings the proxy to its point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provoke {
    /// The agent sends the operation; the provider answers at once.
    Send,
    /// The provider makes the effect but loses its answer (the agent gets `outcome-unknown`);
    /// the agent replays, which looks the effect up.
    LostThenReplay,
    /// The provider holds the request past the route's timeout, doing nothing (the agent gets
    /// `outcome-unknown`); the settler then acts on its own.
    TimeoutThenSettler,
    /// The provider holds the request; a lease renewal comes meanwhile.
    HeldThenLease,
}

/// A cell: a point armed with `actions` (the `fail` crate's syntax), reached by `provoke`.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub point: &'static str,
    pub actions: &'static str,
    pub provoke: Provoke,
    /// What a provider that does not deduplicate ends with: its state and its effects (the
    /// point decides whether the request left before the crash, and whether its answer was
    /// recorded).
    pub no_dedupe: (&'static str, usize),
    pub kind: Kind,
    pub store: Store,
}

/// What a cell ended with.
#[derive(Debug)]
pub struct Settled {
    pub state: String,
    pub effects: usize,
}

const BODY: &str = "amount=500";
const RENDERED: &str = "wf-crash";
/// The lookup the `Lookup` provider answers from its effects, by key.
const LOOKUP: &str = "/v1/refunds/by_key/";
/// The PostgreSQL cells' lease: how long a dead replica's claims wait to be orphaned, and a
/// third of it between renewals (a short lease on a loaded machine lapses between two).
const LEASE: &str = "3s";
/// The lease of a cell that crashes at its first renewal: time enough, before it, for the
/// agent's request to reach the provider on a loaded machine.
const LEASE_HELD: &str = "9s";
/// How long the agent's replays may take to settle the operation after the restart.
const SETTLE: Duration = Duration::from_secs(30);

type Failed = String;

/// Runs the cell to its end; `Err` says which invariant broke.
pub async fn run(cell: Cell) -> Result<Settled, Failed> {
    let provider = FakeProvider::start(provoking(cell)).await;
    let database = (cell.store == Store::Postgres).then(Database::create);
    let mut proxy = armed(&provider, database.as_ref(), cell).await;
    let received = provoke(&provider, &mut proxy, cell).await?;
    let status = proxy.exited().await;
    if status.signal() != Some(6) {
        return Err(format!(
            "the proxy did not die at the point (SIGABRT) but {status:?}; log:\n{}",
            proxy.log_text()
        ));
    }
    // What was held stays held for good (never executed); new requests are answered at once.
    provider.set_behavior(behavior(cell.kind));
    proxy.set_env("FAILPOINTS", "");
    proxy.restart().await;
    let last = settle(&proxy, cell.kind).await?;
    let id = op_id(RENDERED);
    let state = proxy.op_state(&id).await;
    let effects = provider.effects();
    let checked = check(cell, &state, effects, &last);
    if let Err(why) = checked {
        let log = proxy.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "{why}\nthe operation: {}\nthe end of the log:\n{}",
            proxy.op_json(&id).await,
            tail.join("\n")
        ));
    }
    for answer in received.iter().chain([&last]) {
        replays_unchanged(&proxy, answer).await?;
    }
    let stored = reopened(&mut proxy, database.as_ref(), &id).await?;
    if stored != state {
        return Err(format!(
            "the admin API showed {state}, the reopened ledger holds {stored}"
        ));
    }
    Ok(Settled { state, effects })
}

/// The provider of `kind` as it behaves once the crash is over.
fn behavior(kind: Kind) -> Behavior {
    match kind {
        Kind::Dedupe => Behavior::echo().dedupe_on_header("idempotency-key"),
        Kind::NoDedupe => Behavior::echo(),
        Kind::Lookup => Behavior::echo().lookup_by_key(LOOKUP, "idempotency-key"),
    }
}

/// The provider of `kind` as it behaves until the crash.
fn provoking(cell: Cell) -> Behavior {
    let behavior = behavior(cell.kind);
    match cell.provoke {
        Provoke::Send => behavior,
        Provoke::LostThenReplay => behavior.drop_first_response(1),
        Provoke::TimeoutThenSettler | Provoke::HeldThenLease => behavior.hold(),
    }
}

/// The proxy in front of `provider` with the cell's point armed; on its own database when
/// there is one. The binary runs under `sh` only to forbid a core file (`ulimit -c 0`): the
/// abort would otherwise leave one wherever the machine's core pattern says.
async fn armed(provider: &FakeProvider, database: Option<&Database>, cell: Cell) -> Proxy {
    let dedupe = match cell.kind {
        Kind::Dedupe => "dedupe = \"key\"",
        Kind::NoDedupe | Kind::Lookup => "dedupe = \"none\"",
    };
    let lookup = match cell.kind {
        Kind::Lookup => format!(
            "\n[route.reconcile]\nlookup = \"GET {LOOKUP}{{key}}\"\nfound = \"/data/0\"\n\
             not_found_final_after = \"1ms\"\n"
        ),
        Kind::Dedupe | Kind::NoDedupe => String::new(),
    };
    // While held, the lease renewal comes first: after a third of the lease.
    let (timeout, lease) = match cell.provoke {
        Provoke::HeldThenLease => ("10s", LEASE_HELD),
        _ => ("1s", LEASE),
    };
    let keys = format!("{dedupe}\ntimeout = \"{timeout}\"");
    let binary = binary().to_string_lossy().into_owned();
    let mut proxy = builder(provider, &keys, &refund_route(&lookup))
        .config(&format!(
            "[limits]\nin_flight_wait = \"200ms\"\n\n[replicas]\nlease = \"{lease}\"\n"
        ))
        .bin("sh", &["-c", "ulimit -c 0; exec \"$0\" \"$@\"", &binary])
        .env("FAILPOINTS", &format!("{}={}", cell.point, cell.actions));
    if let Some(database) = database {
        proxy = proxy
            .ledger_url(&database.url())
            .env("IDEMPROXY_SECRET", &random_secret());
    }
    proxy.start().await
}

/// Brings the proxy to its point; the answers the agent received on the way.
async fn provoke(
    provider: &FakeProvider,
    proxy: &mut Proxy,
    cell: Cell,
) -> Result<Vec<Resp>, Failed> {
    let mut received = Vec::new();
    match cell.provoke {
        Provoke::Send => {
            // The answer, if any, comes after the point: the agent's connection dies with it.
            drop(refund_in_background(proxy, RENDERED, BODY));
        }
        Provoke::LostThenReplay | Provoke::TimeoutThenSettler => {
            let first = refund(proxy, RENDERED, BODY).await;
            if first.header("idem-state") != Some("unknown") {
                return Err(format!("the first answer should be unknown: {first:?}"));
            }
            received.push(first);
            if cell.provoke == Provoke::LostThenReplay {
                drop(refund_in_background(proxy, RENDERED, BODY));
            }
        }
        Provoke::HeldThenLease => {
            drop(refund_in_background(proxy, RENDERED, BODY));
            provider.wait_for_requests(1).await;
        }
    }
    Ok(received)
}

/// The agent replays the operation after the restart until its answer says it is settled:
/// `succeeded` or `failed`, or `unknown` where only an operator can settle it. Returns that
/// answer. Meanwhile a dead replica's lease may still run (202 `in-flight`) and a not-found
/// lookup may not be final yet.
async fn settle(proxy: &Proxy, kind: Kind) -> Result<Resp, Failed> {
    let until = Instant::now() + SETTLE;
    loop {
        let answer = refund(proxy, RENDERED, BODY).await;
        let state = answer.header("idem-state").unwrap_or_default().to_owned();
        let held = state == "unknown" && kind == Kind::NoDedupe;
        if held || state == "succeeded" || state == "failed" {
            return Ok(answer);
        }
        if Instant::now() >= until {
            return Err(format!(
                "not settled within {SETTLE:?}: the last answer was {answer:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The invariants on the settled state and the provider's effects.
fn check(cell: Cell, state: &str, effects: usize, last: &Resp) -> Result<(), Failed> {
    let header = last.header("idem-state").unwrap_or_default();
    if header != state {
        return Err(format!(
            "the last answer said {header}, the admin API {state}"
        ));
    }
    if effects > 1 {
        return Err(format!(
            "{effects} effects at the provider for one operation"
        ));
    }
    if effects == 1 && state != "succeeded" && state != "unknown" {
        return Err(format!("the provider executed it, but it is {state}"));
    }
    if effects == 0 && state == "succeeded" {
        return Err("succeeded, but the provider never executed it".into());
    }
    let (want, why) = match cell.kind {
        Kind::Dedupe => (
            ("succeeded", 1),
            "a provider that deduplicates lets it succeed",
        ),
        Kind::Lookup => (("succeeded", 1), "a lookup lets it succeed"),
        Kind::NoDedupe => (cell.no_dedupe, "where this point leaves it"),
    };
    if (state, effects) != want {
        return Err(format!(
            "{state} with {effects} effect(s), not {} with {} ({why})",
            want.0, want.1
        ));
    }
    Ok(())
}

/// A `succeeded` answer the agent received is what a replay gets now: same status, same body.
async fn replays_unchanged(proxy: &Proxy, answer: &Resp) -> Result<(), Failed> {
    if answer.header("idem-state") != Some("succeeded") {
        return Ok(());
    }
    let replay = refund(proxy, RENDERED, BODY).await;
    if (replay.status, &replay.body) != (answer.status, &answer.body) {
        return Err(format!(
            "a replay changed the answer the agent received: {answer:?} then {replay:?}"
        ));
    }
    if replay.header("idempotent-replayed") != Some("true") {
        return Err(format!("the replay was not from the ledger: {replay:?}"));
    }
    Ok(())
}

/// Stops the proxy gracefully and opens its ledger with the crate's ledger API: the state of
/// operation `id` there.
async fn reopened(
    proxy: &mut Proxy,
    database: Option<&Database>,
    id: &str,
) -> Result<String, Failed> {
    let stopped = proxy.terminate().await;
    if !stopped.success() {
        return Err(format!("the graceful stop failed: {stopped:?}"));
    }
    let at = match database {
        Some(database) => {
            LedgerAt::Postgres(PgUrl::parse(&database.url()).map_err(|e| e.to_string())?)
        }
        None => LedgerAt::from(proxy.ledger_path()),
    };
    let (ledger, _) = Ledger::open(at, Timestamp::now(), LedgerOptions::default())
        .await
        .map_err(|e| format!("the ledger does not open: {e}"))?;
    let op = ledger
        .get(id)
        .await
        .map_err(|e| format!("the ledger cannot be read: {e}"))?;
    let op = op.ok_or_else(|| format!("no operation {id} in the reopened ledger"))?;
    Ok(op.state.as_str().to_owned())
}

/// The cell's name in a failure: point, actions, provider kind and ledger.
pub fn name(cell: &Cell) -> String {
    format!(
        "{}={} x {:?} x {:?} (provider {PROVIDER})",
        cell.point, cell.actions, cell.kind, cell.store
    )
}
