//! Agents under faults, shared by the power-loss test (`tests/power/`) and the random kills
//! (`tests/chaos/`): providers of three kinds (`World`), agents that send new operations and
//! duplicates of recent ones through one or more proxies and note every `succeeded` answer
//! (`Load`), and the check that runs after each fault (`check`):
//!
//! - an answer an agent received as `succeeded` is what the ledger holds and what a replay
//!   gets now (status and body), and every later `succeeded` answer for it was the same;
//! - every operation took effect at most once at its provider (`Dedupe`: one idempotency key;
//!   `NoDedupe` and `Lookup`: one request);
//! - an operation the provider executed is `succeeded` or `unknown`, never absent or
//!   `failed`; one it never executed is never `succeeded`;
//! - settling: an `unknown` operation at a provider that deduplicates or can be looked up is
//!   replayed by its agent until it is settled, and ends `succeeded` (or `failed`, only when
//!   the provider never executed it); at one that can do neither it stays `unknown`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::watch;

use super::client::{client, full, send};
use super::files::route;
use super::{Behavior, FakeProvider, Proxy, ProxyBuilder};

pub const ROUTE: &str = "create_refund";
/// The lookup a `Lookup` provider answers from its effects, by key.
const LOOKUP: &str = "/v1/refunds/by_key/";
/// How long settling one operation may take (a dead replica's lease included).
const SETTLE: Duration = Duration::from_secs(60);

/// A small xorshift generator: the tests need choices, not quality.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The number in the environment variable `name`, or `default` when it is unset.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

/// The seed in `name`, or one from the clock; printed either way, so a failure can be re-run
/// with the same choices (the load's interleaving is not reproducible).
pub fn seed(name: &str) -> u64 {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let seed = env_number(name, clock);
    eprintln!("{name}={seed}");
    seed
}

/// What a provider can do about an operation whose outcome is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `dedupe = "key"`: it deduplicates on the proxy's idempotency key.
    Dedupe,
    /// `dedupe = "none"`, no lookup: nothing but an operator settles it.
    NoDedupe,
    /// `dedupe = "none"` with a `[route.reconcile]` lookup by the key.
    Lookup,
}

pub struct Provider {
    pub name: &'static str,
    pub kind: Kind,
    pub fake: FakeProvider,
}

/// The providers the agents act on.
pub struct World {
    pub providers: Vec<Provider>,
}

impl World {
    /// One fake provider per `(name, kind)`, each taking `delay` before it acts.
    pub async fn start(providers: &[(&'static str, Kind)], delay: Duration) -> World {
        let mut started = Vec::new();
        for &(name, kind) in providers {
            let behavior = Behavior::echo().delay(delay);
            let behavior = match kind {
                Kind::Dedupe => behavior.dedupe_on_header("idempotency-key"),
                Kind::NoDedupe => behavior,
                Kind::Lookup => behavior.lookup_by_key(LOOKUP, "idempotency-key"),
            };
            let fake = FakeProvider::start(behavior).await;
            started.push(Provider { name, kind, fake });
        }
        World { providers: started }
    }

    /// `builder` with a policy per provider: the guarded route `POST /v1/refunds`, its ID the
    /// `x-operation-id` header.
    pub fn policies(&self, mut builder: ProxyBuilder) -> ProxyBuilder {
        let routes = route(ROUTE, "POST /v1/refunds", &["{header:x-operation-id}"]);
        // Answers take milliseconds; a short `timeout` bounds how long a PostgreSQL replica
        // that orphans a killed one's claim must treat it as still reaching the provider
        // (its dispatch plus the longest `timeout` plus a second), so a lookup's not-found
        // turns final within seconds, not the default's half minute.
        let timeout = "timeout = \"3s\"";
        for provider in &self.providers {
            let keys = match provider.kind {
                Kind::Dedupe => format!("{timeout}\ndedupe = \"key\"\n{routes}"),
                Kind::NoDedupe => format!("{timeout}\ndedupe = \"none\"\n{routes}"),
                // Not found is final a second after the claim: far longer than the provider
                // takes to act on a request it received.
                Kind::Lookup => format!(
                    "{timeout}\ndedupe = \"none\"\n{routes}\n[route.reconcile]\nlookup = \
                     \"GET {LOOKUP}{{key}}\"\nfound = \"/data/0\"\nnot_found_final_after = \"1s\"\n"
                ),
            };
            builder = builder.policy(provider.name, &provider.fake.policy(provider.name, &keys));
        }
        builder
    }

    fn kind(&self, name: &str) -> Kind {
        self.providers
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.kind)
            .expect("a provider of the world")
    }

    /// Effects per operation (`ref`) at every provider: distinct keys at one that
    /// deduplicates on them, requests at the others.
    pub fn effects(&self) -> HashMap<(&'static str, String), usize> {
        let mut effects = HashMap::new();
        for provider in &self.providers {
            let mut keys: HashMap<String, HashSet<String>> = HashMap::new();
            let mut counts: HashMap<String, usize> = HashMap::new();
            for request in provider.fake.requests() {
                if request.method != Method::POST {
                    continue; // a lookup
                }
                let body = String::from_utf8_lossy(&request.body).into_owned();
                let reference = form_urlencoded::parse(body.as_bytes())
                    .find(|(k, _)| k == "ref")
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default();
                *counts.entry(reference.clone()).or_default() += 1;
                let key = request.header("idempotency-key").unwrap_or("").to_owned();
                keys.entry(reference).or_default().insert(key);
            }
            let per_op: HashMap<String, usize> = match provider.kind {
                Kind::Dedupe => keys.into_iter().map(|(r, k)| (r, k.len())).collect(),
                Kind::NoDedupe | Kind::Lookup => counts,
            };
            effects.extend(per_op.into_iter().map(|(r, n)| ((provider.name, r), n)));
        }
        effects
    }

    /// Every provider's effects, summed (for the run's summary).
    pub fn total_effects(&self) -> Vec<(&'static str, usize)> {
        self.providers
            .iter()
            .map(|p| (p.name, p.fake.effects()))
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Op {
    pub provider: &'static str,
    pub rendered: String,
}

impl Op {
    pub fn id(&self) -> String {
        format!("{}/{ROUTE}/{}", self.provider, self.rendered)
    }

    /// The same parameters every time (a duplicate is never a conflict); `ref` lets the
    /// provider's side tell the operations apart.
    fn body(&self) -> String {
        format!("ref={}&amount={}", self.rendered, self.rendered.len() * 100)
    }

    fn url(&self, proxy_base: &str) -> String {
        format!("{proxy_base}/{}/v1/refunds", self.provider)
    }
}

/// An answer: status, `Idem-State` and body.
type Answer = (StatusCode, Option<String>, Bytes);

/// An answer, or `None` when the connection failed (the proxy was killed).
async fn post(proxy_base: &str, op: &Op) -> Option<Answer> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(op.url(proxy_base))
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

fn base(proxy: &Proxy) -> String {
    format!("http://{}", proxy.proxy_addr())
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

/// The agents' shared notes; one per run, the agents of each round started by `round`.
pub struct Load {
    book: Mutex<Book>,
    answered: watch::Sender<u64>,
    stop: AtomicBool,
    providers: Vec<&'static str>,
}

/// A round's agents, running until `Running::stop`.
pub struct Running {
    load: Arc<Load>,
    agents: Vec<tokio::task::JoinHandle<()>>,
    first_op: usize,
}

impl Load {
    pub fn new(world: &World) -> Arc<Load> {
        Arc::new(Load {
            book: Mutex::default(),
            answered: watch::Sender::new(0),
            stop: AtomicBool::new(false),
            providers: world.providers.iter().map(|p| p.name).collect(),
        })
    }

    /// Answers received so far.
    pub fn answered(&self) -> u64 {
        *self.answered.borrow()
    }

    pub fn ops(&self) -> Vec<Op> {
        self.book.lock().expect("book").ops.clone()
    }

    /// Operations answered `succeeded` at least once.
    pub fn succeeded(&self) -> usize {
        self.book.lock().expect("book").answers.len()
    }

    /// Starts `agents` agents of round `round`, each sending to one of `proxies` at random.
    pub fn round(
        self: &Arc<Self>,
        proxies: &[&Proxy],
        round: usize,
        agents: usize,
        rng: &mut Rng,
    ) -> Running {
        let first_op = self.book.lock().expect("book").ops.len();
        self.stop.store(false, Ordering::SeqCst);
        let bases: Vec<String> = proxies.iter().map(|p| base(p)).collect();
        let agents = (0..agents)
            .map(|a| {
                let seed = rng.below(u64::MAX);
                tokio::spawn(Arc::clone(self).agent(bases.clone(), round, a, seed))
            })
            .collect();
        Running {
            load: Arc::clone(self),
            agents,
            first_op,
        }
    }

    /// Waits until `n` more answers than now came in; `false` after 60 s without them.
    pub async fn until_answered(&self, n: u64) -> bool {
        let target = self.answered() + n;
        let mut answered = self.answered.subscribe();
        tokio::time::timeout(Duration::from_secs(60), answered.wait_for(|a| *a >= target))
            .await
            // (The value read holds the channel's lock: dropped here, or the agents stall.)
            .is_ok_and(|read| read.is_ok())
    }

    /// Notes an answer; a `succeeded` one must equal the first such answer of its operation.
    fn note(&self, op: &Op, answer: &Answer) {
        let (status, state, body) = answer;
        if state.as_deref() == Some("succeeded") {
            let mut book = self.book.lock().expect("book");
            match book.answers.get(&op.id()) {
                None => {
                    book.answers.insert(op.id(), (*status, body.clone()));
                }
                Some(first) if *first == (*status, body.clone()) => {}
                Some(first) => {
                    let why = format!("{}: first {first:?}, then {status} {body:?}", op.id());
                    book.differed.push(why);
                }
            }
        }
        self.answered.send_modify(|n| *n += 1);
    }

    /// One agent: new operations and duplicates of recent ones, until stopped or its proxy
    /// is gone.
    async fn agent(self: Arc<Self>, bases: Vec<String>, round: usize, agent: usize, seed: u64) {
        let mut rng = Rng::new(seed);
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
                    let provider = self.providers[rng.below(self.providers.len() as u64) as usize];
                    let op = Op {
                        provider,
                        rendered: format!("r{round}-a{agent}-{n}"),
                    };
                    book.ops.push(op.clone());
                    op
                }
            };
            let base = &bases[rng.below(bases.len() as u64) as usize];
            match post(base, &op).await {
                Some(answer) => self.note(&op, &answer),
                None => return,
            }
        }
    }
}

impl Running {
    /// Stops the agents (call once the proxies they send to are killed or the round is
    /// over); the operations the round created.
    pub async fn stop(self) -> Vec<Op> {
        self.load.stop.store(true, Ordering::SeqCst);
        for agent in self.agents {
            agent.await.expect("agent task");
        }
        self.load.book.lock().expect("book").ops[self.first_op..].to_vec()
    }
}

/// The operation's state as `GET /ops/{id}` shows it, `None` when the ledger does not have it
/// (or the admin API does not answer: `Err`).
async fn state(proxy: &Proxy, id: &str) -> Result<Option<String>, String> {
    let url = proxy.admin_url(&format!("/ops/{}", id.replace('/', "%2F")));
    let resp = send(Method::GET, &url, &[], "")
        .await
        .map_err(|e| format!("GET /ops/{id}: {e}"))?;
    match resp.status {
        StatusCode::NOT_FOUND => Ok(None),
        StatusCode::OK => Ok(Some(resp.json()["state"].as_str().unwrap_or("").to_owned())),
        other => Err(format!("GET /ops/{id}: {other} {}", resp.text())),
    }
}

/// Checks (and settles) operations `ops` after a fault, through `proxies` in turn; see the
/// header. `fault` names the fault in a failure; `final_check` waits out operations still
/// `in_flight` (a killed replica's, until its lease lapses), which a check after a round
/// leaves to the final one. Panics on a broken invariant.
pub async fn check(
    proxies: &[&Proxy],
    world: &World,
    load: &Load,
    ops: &[Op],
    fault: &str,
    final_check: bool,
) {
    for (i, op) in ops.iter().enumerate() {
        let proxy = proxies[i % proxies.len()];
        if let Err(why) = check_one(proxy, world, load, op, final_check).await {
            panic!("{fault}: {}: {why}", op.id());
        }
    }
    let differed = load.book.lock().expect("book").differed.clone();
    assert!(
        differed.is_empty(),
        "{fault}: answers changed: {differed:#?}"
    );
}

fn executed(world: &World, op: &Op) -> usize {
    world
        .effects()
        .get(&(op.provider, op.rendered.clone()))
        .copied()
        .unwrap_or(0)
}

async fn check_one(
    proxy: &Proxy,
    world: &World,
    load: &Load,
    op: &Op,
    final_check: bool,
) -> Result<(), String> {
    let id = op.id();
    let kind = world.kind(op.provider);
    let until = Instant::now() + SETTLE;
    // Waits out what is not settled yet: an operation a dead replica claimed (`in_flight`
    // until its lease lapses), a database restarting (`503`), a lookup's not-found not yet
    // final.
    let found = loop {
        let found = match state(proxy, &id).await {
            Ok(found) => found,
            // The admin API answers again once the ledger is back.
            Err(_) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(why) => return Err(why),
        };
        let settled = match found.as_deref() {
            // Claimed by a killed replica: checked when its lease has lapsed, at the end.
            Some("in_flight") if !final_check => return Ok(()),
            Some("in_flight") => false,
            Some("unknown") => kind == Kind::NoDedupe,
            _ => true,
        };
        if settled {
            break found;
        }
        if Instant::now() >= until {
            return Err(format!("not settled within {SETTLE:?}: {found:?}"));
        }
        if found.as_deref() == Some("unknown") {
            // Its agent comes back: a replay re-sends it with its key, or looks it up.
            if let Some(answer) = post(&base(proxy), op).await {
                load.note(op, &answer);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let executed = executed(world, op);
    if executed > 1 {
        return Err(format!("took effect {executed} times"));
    }
    if executed == 1 && !matches!(found.as_deref(), Some("succeeded" | "unknown")) {
        return Err(format!(
            "the provider executed it, the ledger says {found:?}"
        ));
    }
    if executed == 0 && found.as_deref() == Some("succeeded") {
        return Err("succeeded, but the provider never executed it".into());
    }
    let answer = load.book.lock().expect("book").answers.get(&id).cloned();
    if let Some((status, body)) = answer {
        if found.as_deref() != Some("succeeded") {
            return Err(format!(
                "answered succeeded ({status}), the ledger now says {found:?}"
            ));
        }
        let replay = loop {
            match post(&base(proxy), op).await {
                Some(replay) if replay.0 != StatusCode::SERVICE_UNAVAILABLE => break replay,
                other if Instant::now() >= until => {
                    return Err(format!("no replay within {SETTLE:?}: {other:?}"));
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        if (replay.0, &replay.2) != (status, &body) {
            return Err(format!(
                "the replay differs from the answer given: {status} {body:?}, then {} {:?}",
                replay.0, replay.2
            ));
        }
    }
    Ok(())
}
