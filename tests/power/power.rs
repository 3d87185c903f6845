//! Power cuts under load: the real proxy keeps its redb ledger on `lazyfs`, agents send
//! distinct operations and duplicates to a provider that deduplicates on the proxy's key
//! (`pay`) and to one that does not (`ship`), and at a random moment the power is cut: the
//! proxy is SIGKILLed, every write the ledger had not synced is dropped (a third of the cuts
//! tear the last unsynced write of each file instead: half of it, or half a page), the file
//! system is unmounted and mounted again, and the proxy restarted. After each cut, for every
//! operation the round touched (and for all of them at the end):
//!
//! - the ledger opens (the restart succeeds);
//! - an answer an agent received as `succeeded` replays unchanged (status and body), and so
//!   does every later answer given for it, during the load too;
//! - an operation the provider received is `succeeded` or `unknown`, never absent or
//!   `failed`, and the provider saw at most one effect of it (`pay`: one key; `ship`: one
//!   request);
//! - settling: an `unknown` operation at `pay` is replayed, re-sent with its key, and
//!   `succeeded` from then on.
//!
//! Over the run the cuts must have dropped bytes (else nothing was proven). Names are durable
//! at once and contents at a sync of their file (`lazyfs`, docs/decisions.md "Power loss").
//!
//! `IDEMPROXY_POWER_CUTS` (default 30) sets the number of cuts, `IDEMPROXY_POWER_SEED` the
//! seed of the random choices (printed; the load's interleaving is not reproducible): the long
//! form is `IDEMPROXY_POWER_CUTS=200 cargo test --test power -- --nocapture`.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::watch;

use crate::common::client::full;
use crate::common::{Behavior, FakeProvider, Proxy, client, route};
use crate::lazyfs::{Cut, Lost, Mounted};

const AGENTS: usize = 6;
const ROUTE: &str = "create_refund";
/// The most answers a round waits for before its cut (at least one).
const MAX_ROUND: u64 = 40;

/// A small xorshift generator: the test needs choices, not quality.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Op {
    provider: &'static str,
    rendered: String,
}

impl Op {
    fn id(&self) -> String {
        format!("{}/{ROUTE}/{}", self.provider, self.rendered)
    }

    /// The same parameters every time (a duplicate is never a conflict); `ref` lets the
    /// provider's side tell the operations apart.
    fn body(&self) -> String {
        format!("ref={}&amount={}", self.rendered, self.rendered.len() * 100)
    }
}

/// What the agents saw.
#[derive(Default)]
struct Book {
    ops: Vec<Op>,
    /// The first `succeeded` answer of each operation: status and body.
    answers: HashMap<String, (StatusCode, Bytes)>,
    /// Later answers that differed from the first.
    differed: Vec<String>,
}

struct Load {
    book: Mutex<Book>,
    answered: watch::Sender<u64>,
    stop: AtomicBool,
}

/// An answer, or `None` when the connection failed (the proxy was killed).
async fn post(url: &str, op: &Op) -> Option<(StatusCode, Option<String>, Bytes)> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("x-operation-id", &op.rendered)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(full(op.body()))
        .expect("valid request");
    let response = client().request(request).await.ok()?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    let state = parts
        .headers
        .get("idem-state")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Some((parts.status, state, body))
}

fn url(proxy: &Proxy, op: &Op) -> String {
    proxy.url(&format!("/{}/v1/refunds", op.provider))
}

impl Load {
    /// Notes an answer; a `succeeded` one must equal the first such answer of its operation.
    fn note(&self, op: &Op, status: StatusCode, state: Option<&str>, body: Bytes) {
        if state == Some("succeeded") {
            let mut book = self.book.lock().expect("book");
            match book.answers.get(&op.id()) {
                None => {
                    book.answers.insert(op.id(), (status, body));
                }
                Some(first) if *first == (status, body.clone()) => {}
                Some(first) => {
                    let why = format!("{}: first {first:?}, then {status} {body:?}", op.id());
                    book.differed.push(why);
                }
            }
        }
        self.answered.send_modify(|n| *n += 1);
    }

    /// One agent: new operations and duplicates of recent ones, until stopped or the proxy
    /// is gone.
    async fn agent(self: Arc<Self>, proxy: String, round: usize, agent: usize, seed: u64) {
        let mut rng = Rng(seed | 1);
        for n in 0.. {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let op = {
                let mut book = self.book.lock().expect("book");
                let len = book.ops.len() as u64;
                if len > 0 && rng.below(3) == 0 {
                    let recent = len.min(30);
                    book.ops[(len - 1 - rng.below(recent)) as usize].clone()
                } else {
                    let provider = if rng.below(2) == 0 { "pay" } else { "ship" };
                    let op = Op {
                        provider,
                        rendered: format!("r{round}-a{agent}-{n}"),
                    };
                    book.ops.push(op.clone());
                    op
                }
            };
            let url = format!("{proxy}/{}/v1/refunds", op.provider);
            match post(&url, &op).await {
                Some((status, state, body)) => self.note(&op, status, state.as_deref(), body),
                None => return,
            }
        }
    }
}

/// Effects per operation (`ref`) at a provider: distinct keys when it deduplicates on them,
/// requests when it does not.
fn effects(provider: &FakeProvider, dedupes: bool) -> HashMap<String, usize> {
    let mut keys: HashMap<String, HashSet<String>> = HashMap::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for request in provider.requests() {
        let body = String::from_utf8_lossy(&request.body).into_owned();
        let reference = form_urlencoded::parse(body.as_bytes())
            .find(|(k, _)| k == "ref")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        *counts.entry(reference.clone()).or_default() += 1;
        let key = request.header("idempotency-key").unwrap_or("").to_owned();
        keys.entry(reference).or_default().insert(key);
    }
    if dedupes {
        keys.into_iter().map(|(r, k)| (r, k.len())).collect()
    } else {
        counts
    }
}

struct World {
    pay: FakeProvider,
    ship: FakeProvider,
}

impl World {
    fn effects(&self) -> HashMap<(&'static str, String), usize> {
        let pay = effects(&self.pay, true)
            .into_iter()
            .map(|(r, n)| (("pay", r), n));
        let ship = effects(&self.ship, false)
            .into_iter()
            .map(|(r, n)| (("ship", r), n));
        pay.chain(ship).collect()
    }
}

/// The operation's state as `GET /ops/{id}` shows it, `None` when the ledger does not have it.
async fn state(proxy: &Proxy, id: &str) -> Option<String> {
    let url = proxy.admin_url(&format!("/ops/{}", id.replace('/', "%2F")));
    let resp = crate::common::send(Method::GET, &url, &[], "")
        .await
        .expect("admin answers");
    match resp.status {
        StatusCode::NOT_FOUND => None,
        StatusCode::OK => Some(resp.json()["state"].as_str().unwrap_or("").to_owned()),
        other => panic!("GET /ops/{id}: {other} {}", resp.text()),
    }
}

/// Checks (and settles) the operations `ops` after a restart; see the header.
async fn check(proxy: &Proxy, world: &World, load: &Load, ops: &[Op], cut: usize) {
    let effects = world.effects();
    for op in ops {
        let id = op.id();
        let found = state(proxy, &id).await;
        let executed = effects
            .get(&(op.provider, op.rendered.clone()))
            .copied()
            .unwrap_or(0);
        assert!(
            executed <= 1,
            "cut {cut}: {id} took effect {executed} times"
        );
        let answer = load.book.lock().expect("book").answers.get(&id).cloned();
        if let Some((status, body)) = answer {
            assert_eq!(
                found.as_deref(),
                Some("succeeded"),
                "cut {cut}: {id} was answered succeeded ({status}), the ledger now says {found:?}"
            );
            let replay = post(&url(proxy, op), op).await.expect("the proxy answers");
            assert_eq!(
                (replay.0, &replay.2),
                (status, &body),
                "cut {cut}: {id}'s replay differs from the answer given"
            );
            continue;
        }
        if executed > 0 {
            assert!(
                matches!(found.as_deref(), Some("succeeded" | "unknown")),
                "cut {cut}: {id} reached the provider, the ledger says {found:?}"
            );
        }
        if op.provider == "pay" && found.as_deref() == Some("unknown") {
            let (status, state, body) = post(&url(proxy, op), op).await.expect("answers");
            assert_eq!(
                state.as_deref(),
                Some("succeeded"),
                "cut {cut}: settling {id}: {status} {body:?}"
            );
            load.note(op, status, state.as_deref(), body);
        }
    }
    let differed = load.book.lock().expect("book").differed.clone();
    assert!(
        differed.is_empty(),
        "cut {cut}: answers changed: {differed:#?}"
    );
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_cuts_under_load_lose_no_answer_and_never_repeat_an_effect() {
    let cuts = env_number("IDEMPROXY_POWER_CUTS", 30) as usize;
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let seed = env_number("IDEMPROXY_POWER_SEED", clock);
    eprintln!("power: {cuts} cuts, IDEMPROXY_POWER_SEED={seed}");
    let mut rng = Rng(seed | 1);

    let backing = tempfile::tempdir().expect("backing dir");
    let mountpoint = tempfile::tempdir().expect("mount point");
    let mut mounted = Mounted::mount(backing.path(), mountpoint.path());
    let slow = Duration::from_millis(2);
    let pay = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .delay(slow);
    let world = World {
        pay: FakeProvider::start(pay).await,
        ship: FakeProvider::start(Behavior::echo().delay(slow)).await,
    };
    let routes = route(ROUTE, "POST /v1/refunds", &["{header:x-operation-id}"]);
    let ledger: PathBuf = mountpoint.path().join("data/ledger.redb");
    let mut proxy = Proxy::builder()
        .ledger_file(&ledger)
        .policy(
            "pay",
            &world
                .pay
                .policy("pay", &format!("dedupe = \"key\"\n{routes}")),
        )
        .policy(
            "ship",
            &world
                .ship
                .policy("ship", &format!("dedupe = \"none\"\n{routes}")),
        )
        .start()
        .await;

    let load = Arc::new(Load {
        book: Mutex::default(),
        answered: watch::Sender::new(0),
        stop: AtomicBool::new(false),
    });
    let (mut total, mut torn_cuts) = (Lost::default(), 0);
    for cut in 0..cuts {
        let first_op = load.book.lock().expect("book").ops.len();
        let target = *load.answered.borrow() + 1 + rng.below(MAX_ROUND);
        load.stop.store(false, Ordering::SeqCst);
        let agents: Vec<_> = (0..AGENTS)
            .map(|a| {
                let base = format!("http://{}", proxy.proxy_addr());
                tokio::spawn(load.clone().agent(base, cut, a, rng.below(u64::MAX)))
            })
            .collect();
        let mut answered = load.answered.subscribe();
        let reached =
            tokio::time::timeout(Duration::from_secs(60), answered.wait_for(|n| *n >= target))
                .await
                // (The value read holds the channel's lock: dropped here, or the agents stall.)
                .is_ok_and(|read| read.is_ok());
        assert!(
            reached,
            "cut {cut}: no progress; log:\n{}",
            proxy.log_text()
        );
        // A moment inside the next requests, not only between two.
        tokio::time::sleep(Duration::from_micros(rng.below(3000))).await;
        proxy.kill().await;
        load.stop.store(true, Ordering::SeqCst);
        for agent in agents {
            agent.await.expect("agent task");
        }

        let how = match rng.below(3) {
            0 => Cut::Drop,
            1 => Cut::TornHalf,
            _ => Cut::TornHalfPage,
        };
        torn_cuts += usize::from(how != Cut::Drop);
        let lost = mounted.cut(how);
        total.bytes += lost.bytes;
        total.lengths += lost.lengths;
        total.torn_kept += lost.torn_kept;
        mounted = Mounted::mount(backing.path(), mountpoint.path());
        proxy.restart().await;

        let ops = load.book.lock().expect("book").ops[first_op..].to_vec();
        check(&proxy, &world, &load, &ops, cut).await;
    }

    let ops = load.book.lock().expect("book").ops.clone();
    check(&proxy, &world, &load, &ops, cuts).await;
    let book = load.book.lock().expect("book");
    eprintln!(
        "power: {cuts} cuts ({torn_cuts} torn), {} operations, {} answered succeeded, \
         {} answers, {} effects at pay, {} at ship; dropped {} unsynced bytes and {} length \
         changes, kept {} torn bytes",
        ops.len(),
        book.answers.len(),
        *load.answered.borrow(),
        world.pay.effects(),
        world.ship.effects(),
        total.bytes,
        total.lengths,
        total.torn_kept,
    );
    if cuts > 0 {
        assert!(
            total.bytes > 0,
            "no cut dropped anything: the test proved nothing about power loss"
        );
    }
}
