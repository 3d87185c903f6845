//! PostgreSQL-only behaviour: several replicas (several `Ledger`s) on one database, leases,
//! fencing. Each test gets a fresh database, dropped at its end; a PostgreSQL that cannot be
//! reached fails the test with how to start one (nothing is skipped).

use std::sync::Arc;
use std::time::Duration;

use super::super::{Checked, Ledger, LedgerAt, LedgerError, LedgerOptions};
use crate::clock::Timestamp;
use crate::config::PgUrl;
use crate::operation::{Operation, State, Write};

/// Where the tests find a PostgreSQL that lets them create databases.
const ADMIN_ENV: &str = "IDEMPROXY_TEST_POSTGRES";
const ADMIN_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A database of its own for one test, dropped (connections and all) when this is dropped.
pub(in crate::ledger) struct TestDb {
    name: String,
    admin: String,
    pub(in crate::ledger) at: LedgerAt,
}

fn admin_url() -> String {
    std::env::var(ADMIN_ENV).unwrap_or_else(|_| ADMIN_DEFAULT.to_owned())
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let connected = tokio_postgres::connect(url, tokio_postgres::NoTls).await;
    let (client, connection) = connected.unwrap_or_else(|e| {
        panic!(
            "PostgreSQL is not reachable at {url} ({e}): these tests need one. Start it \
             (e.g. `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, \
             with trust auth for user postgres on 127.0.0.1:5432) or set {ADMIN_ENV} to the URL \
             of a user that may create databases (a test that needs it has `postgres` in its \
             name: `.ci/test` leaves those out when none answers)"
        )
    });
    tokio::spawn(connection);
    client
}

impl TestDb {
    pub(in crate::ledger) async fn new() -> TestDb {
        let admin_url = admin_url();
        let client = admin(&admin_url).await;
        let name = format!("idemproxy_test_{}", hex::encode(rand_bytes()));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        let mut url = url::Url::parse(&admin_url).expect("the admin URL parses");
        url.set_path(&name);
        let at = LedgerAt::Postgres(PgUrl::parse(url.as_str()).expect("a test URL"));
        TestDb {
            name,
            admin: admin_url,
            at,
        }
    }
}

impl TestDb {
    /// Runs `sql` on the admin database (test setup only).
    async fn execute_as_admin(&self, sql: &str) {
        let client = admin(&self.admin).await;
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Runs `sql` on this database as its owner (test setup only).
    pub(in crate::ledger) async fn execute(&self, sql: &str) {
        let LedgerAt::Postgres(url) = &self.at else {
            unreachable!("a TestDb is PostgreSQL")
        };
        let client = admin(url.secret_url()).await;
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

impl TestDb {
    /// The one `bigint` `sql` selects on this database.
    async fn query_one(&self, sql: &str) -> i64 {
        let LedgerAt::Postgres(url) = &self.at else {
            unreachable!("a TestDb is PostgreSQL")
        };
        let client = admin(url.secret_url()).await;
        let row = client.query_one(sql, &[]).await;
        row.unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
    }
}

fn rand_bytes() -> [u8; 6] {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 6];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("random bytes");
    bytes
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin.clone(), self.name.clone());
        // Its own thread and runtime: a drop may run inside (or after) the test's runtime.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let client = admin(&admin_url).await;
                let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                client.batch_execute(&sql).await
            })
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("cannot drop the test database {}: {e}", self.name);
        }
    }
}

const T0: i64 = 1_800_000_000_000;

pub(in crate::ledger) fn opts(lease: Duration, replica: &str) -> LedgerOptions {
    LedgerOptions {
        lease,
        replica: replica.to_owned(),
        ..LedgerOptions::default()
    }
}

async fn replica(db: &TestDb, lease: Duration, name: &str) -> (Ledger, Vec<Operation>) {
    Ledger::open(&db.at, Timestamp(T0), opts(lease, name))
        .await
        .unwrap_or_else(|e| panic!("open {name}: {e}"))
}

/// A claim of `id` under a fresh token of `ledger`, as the claim transaction writes it.
async fn claim(ledger: &Ledger, id: &str) -> Result<Option<u64>, LedgerError> {
    let fences = ledger.fences();
    let id_owned = id.to_owned();
    ledger
        .update(id, move |existing| {
            if existing.is_some() {
                return (None, None);
            }
            let fence = fences.next();
            let op = Operation {
                fence,
                ..Operation::example(&id_owned, State::InFlight, Timestamp(T0))
            };
            (Some(Write::of(op, Vec::new())), Some(fence))
        })
        .await
}

/// Polls `probe` every 50 ms until it yields something; fails after 20 s.
async fn until<T, Fut>(mut probe: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the condition never held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_one_id_make_one_claim() {
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_secs(10), "a").await;
    let (b, _) = replica(&db, Duration::from_secs(10), "b").await;
    for round in 0..20 {
        let id = format!("p/r/race-{round}");
        let (ra, rb) = tokio::join!(claim(&a, &id), claim(&b, &id));
        let claims: Vec<u64> = [ra.unwrap(), rb.unwrap()].into_iter().flatten().collect();
        assert_eq!(claims.len(), 1, "round {round}: {claims:?}");
        let stored = a.get(&id).await.unwrap().expect("claimed");
        assert_eq!(stored.fence, claims[0]);
    }
    assert_ne!(
        a.fence() >> 32,
        b.fence() >> 32,
        "each replica its own epoch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_replica_is_orphaned_by_another_and_its_late_result_refused() {
    let db = TestDb::new().await;
    let lease = Duration::from_secs(1);
    let (a, _) = replica(&db, lease, "a").await;
    let fence = claim(&a, "p/r/x").await.unwrap().expect("claimed");
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = Arc::clone(&told);
    let with_hook = LedgerOptions {
        on_orphaned: Some(Arc::new(move |op: &Operation| {
            hook.lock().unwrap().push(op.id.clone())
        })),
        ..opts(lease, "b")
    };
    let (b, orphaned_at_open) = Ledger::open(&db.at, Timestamp(T0), with_hook)
        .await
        .unwrap();
    assert!(
        orphaned_at_open.is_empty(),
        "a live replica's operations are left alone at open"
    );
    let mut feed = b.subscribe();
    // A paused replica: its lease lapses while its claim is in flight.
    drop(a);
    let orphaned = until(|| async {
        b.get("p/r/x")
            .await
            .unwrap()
            .filter(|op| op.state == State::Unknown)
    })
    .await;
    assert_eq!(orphaned.fence, 0);
    assert_eq!(
        orphaned.error.as_deref(),
        Some(super::super::change::lapsed_reason())
    );
    let published = feed.recv().await.unwrap();
    assert_eq!(
        published.op.id, "p/r/x",
        "the sweep is on the sweeper's feed"
    );
    let told =
        until(|| async { Some(told.lock().unwrap().clone()).filter(|t| !t.is_empty()) }).await;
    assert_eq!(
        told,
        ["p/r/x"],
        "on_orphaned hears of it once (to escalate it)"
    );
    // The late result of the old claim finds another fence and writes nothing.
    let late = b
        .update("p/r/x", move |existing| {
            let current = existing.expect("stored");
            if current.fence != fence {
                return (None, false);
            }
            let done = Operation {
                state: State::Succeeded,
                ..current
            };
            (Some(Write::of(done, Vec::new())), true)
        })
        .await
        .unwrap();
    assert!(!late);
    let kinds: Vec<_> = b.events("p/r/x").await.unwrap();
    assert_eq!(kinds.len(), 1, "one orphaned event: {kinds:?}");
}

/// Every batch of `ledger` busy: `BATCHES` claims, each waiting on a lock row this returns
/// a transaction holding (`release` lets them go), so what is queued meanwhile waits and then
/// runs as one batch.
async fn busy_batches(
    db: &TestDb,
    ledger: &Ledger,
) -> (tokio_postgres::Client, Vec<tokio::task::JoinHandle<()>>) {
    let LedgerAt::Postgres(url) = &db.at else {
        unreachable!("a TestDb is PostgreSQL")
    };
    let holder = admin(url.secret_url()).await;
    let ids: Vec<String> = (0..super::group::BATCHES)
        .map(|i| format!("held/{i}"))
        .collect();
    holder.batch_execute("BEGIN").await.unwrap();
    for id in &ids {
        holder
            .execute("INSERT INTO op_locks (id) VALUES ($1)", &[id])
            .await
            .unwrap();
    }
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND datname = current_database()";
    let mut blockers = Vec::new();
    // One at a time, each in a batch of its own: each waits before the next is queued.
    for (n, id) in ids.into_iter().enumerate() {
        let ledger = ledger.clone();
        blockers.push(tokio::spawn(async move {
            let _ = claim(&ledger, &id).await;
        }));
        until(|| async { (db.query_one(waiting).await > n as i64).then_some(()) }).await;
    }
    (holder, blockers)
}

/// Spawns `claim(ledger, id)`.
fn spawn_claim(
    ledger: &Ledger,
    id: &str,
) -> tokio::task::JoinHandle<Result<Option<u64>, LedgerError>> {
    let (ledger, id) = (ledger.clone(), id.to_owned());
    tokio::spawn(async move { claim(&ledger, &id).await })
}

/// Group commit: one job of a batch whose ID the database refuses (a NUL byte, which no
/// PostgreSQL text holds) fails alone; the fifteen queued with it are claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_member_the_database_refuses_fails_alone() {
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_secs(30), "a").await;
    let (holder, blockers) = busy_batches(&db, &a).await;
    let mut good = Vec::new();
    for i in 0..15 {
        good.push(spawn_claim(&a, &format!("good/{i}")));
    }
    let bad = spawn_claim(&a, "bad/\0/id");
    // All sixteen queued behind the busy batches: the next batch takes them together.
    until(|| async { (a.postgres().waiting() == 16).then_some(()) }).await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    for blocker in blockers {
        blocker.await.unwrap();
    }
    match bad.await.unwrap() {
        Err(LedgerError::Unavailable(_)) => {}
        other => panic!("an ID PostgreSQL cannot hold was stored: {other:?}"),
    }
    for (i, claimed) in good.into_iter().enumerate() {
        let claimed = claimed.await.unwrap();
        assert!(matches!(claimed, Ok(Some(_))), "good/{i}: {claimed:?}");
        let stored = a.get(&format!("good/{i}")).await.unwrap();
        assert_eq!(stored.map(|op| op.state), Some(State::InFlight), "good/{i}");
    }
}

/// Group commit: a batch holding a new claim and another operation's result when this
/// replica's lease has lapsed: the claim is refused, the result is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_refuses_the_claims_of_a_batch_and_writes_its_results() {
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_secs(30), "a").await;
    let fence = claim(&a, "p/r/running").await.unwrap().expect("claimed");
    let (holder, blockers) = busy_batches(&db, &a).await;
    db.execute("UPDATE replicas SET expires_at = now() - interval '1 hour'")
        .await;
    let new = spawn_claim(&a, "p/r/new");
    let result = {
        let a = a.clone();
        tokio::spawn(async move {
            let op = Operation {
                fence,
                ..Operation::example("p/r/running", State::Succeeded, Timestamp(T0))
            };
            a.update("p/r/running", move |_| {
                (Some(Write::of(op, Vec::new())), ())
            })
            .await
        })
    };
    // Both queued behind the busy batches: the next batch takes them together.
    until(|| async { (a.postgres().waiting() == 2).then_some(()) }).await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    for blocker in blockers {
        blocker.await.unwrap();
    }
    match new.await.unwrap() {
        Err(LedgerError::Unavailable(why)) => assert!(why.contains("lease lapsed"), "{why}"),
        other => panic!("claimed with a lapsed lease: {other:?}"),
    }
    assert_eq!(a.get("p/r/new").await.unwrap(), None, "nothing written");
    result.await.unwrap().expect("the result is written");
    let stored = a.get("p/r/running").await.unwrap().expect("stored");
    assert_eq!(stored.state, State::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_lease_lapsed_refuses_new_claims_until_renewed() {
    let db = TestDb::new().await;
    let lease = Duration::from_millis(1500);
    let (a, _) = replica(&db, lease, "a").await;
    assert!(a.writable());
    // Its heartbeat stops (a replica cut off from the database, or paused).
    let core = Arc::clone(a.postgres().core());
    core.stop.cancel();
    until(|| async { (!a.writable()).then_some(()) }).await;
    until(|| async {
        let lapsed = db
            .query_one("SELECT count(*) FROM replicas WHERE expires_at <= now()")
            .await;
        (lapsed == 1).then_some(())
    })
    .await;
    let refused = claim(&a, "p/r/x").await;
    match refused {
        Err(LedgerError::Unavailable(why)) => assert!(why.contains("lease lapsed"), "{why}"),
        other => panic!("claimed with a lapsed lease: {other:?}"),
    }
    assert_eq!(a.get("p/r/x").await.unwrap(), None, "nothing written");
    // Writes that claim nothing still go through; a renewed lease claims again.
    let op = Operation::example("p/r/done", State::Succeeded, Timestamp(T0));
    let write = Write::of(op, Vec::new());
    a.update("p/r/done", move |_| (Some(write), ()))
        .await
        .unwrap();
    super::lease::renew(&core).await.unwrap();
    assert!(a.writable());
    assert!(claim(&a, "p/r/x").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_secret_and_the_schema_version_are_kept_and_checked() {
    let db = TestDb::new().await;
    let with = |check: Option<&str>| LedgerOptions {
        secret_check: check.map(str::to_owned),
        ..opts(Duration::from_secs(10), "s")
    };
    assert_eq!(
        Ledger::check(&db.at, "check-a").await.unwrap(),
        Checked::Empty
    );
    let (a, _) = Ledger::open(&db.at, Timestamp(T0), with(Some("check-a")))
        .await
        .unwrap();
    let other = Ledger::open(&db.at, Timestamp(T0), with(Some("check-b"))).await;
    match other {
        Err(LedgerError::OtherSecret { path }) => assert!(path.starts_with("postgres://")),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened with another secret"),
    }
    let registered = db.query_one("SELECT count(*) FROM replicas").await;
    assert_eq!(registered, 1, "the refused replica registered nothing");
    let again = Ledger::open(&db.at, Timestamp(T0), with(Some("check-a"))).await;
    assert!(
        again.is_ok(),
        "the same secret opens it again, beside a live replica"
    );
    assert_eq!(
        Ledger::check(&db.at, "check-a").await.unwrap(),
        Checked::Ready { schema: 1 }
    );
    assert!(matches!(
        Ledger::check(&db.at, "check-b").await,
        Err(LedgerError::OtherSecret { .. })
    ));
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        .await;
    let newer = Ledger::open(&db.at, Timestamp(T0), with(Some("check-a"))).await;
    assert!(
        matches!(
            newer,
            Err(LedgerError::NewerSchema {
                found: 2,
                known: 1,
                ..
            })
        ),
        "{:?}",
        newer.err()
    );
    assert!(matches!(
        Ledger::check(&db.at, "check-a").await,
        Err(LedgerError::NewerSchema { .. })
    ));
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_create_the_schema_once() {
    let db = TestDb::new().await;
    let opens = (0..4).map(|n| {
        let at = db.at.clone();
        tokio::spawn(async move {
            let name = format!("r{n}");
            Ledger::open(&at, Timestamp(T0), opts(Duration::from_secs(10), &name)).await
        })
    });
    let mut epochs = Vec::new();
    for open in opens.collect::<Vec<_>>() {
        let (ledger, _) = open.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
        epochs.push(ledger.fence() >> 32);
    }
    epochs.sort();
    epochs.dedup();
    assert_eq!(epochs.len(), 4, "one epoch per replica: {epochs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_an_open_error_without_the_password() {
    let url = PgUrl::parse("postgres://nobody:hunter2@127.0.0.1:1/none").unwrap();
    let at = LedgerAt::Postgres(url);
    let answer = Ledger::open(&at, Timestamp(T0), opts(Duration::from_secs(1), "x")).await;
    match answer {
        Err(e @ LedgerError::Open { .. }) => {
            let shown = e.to_string();
            assert!(shown.contains("nobody:***@127.0.0.1:1/none"), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a database nobody runs"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_arriving_for_a_lapsed_claim_orphans_it_first_in_its_own_transaction() {
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_secs(1), "a").await;
    // B's sweep runs every 30 s: only the arrival can orphan within this test.
    let (b, _) = replica(&db, Duration::from_secs(60), "b").await;
    claim(&a, "p/r/x").await.unwrap().expect("claimed");
    a.postgres().core().stop.cancel();
    until(|| async {
        let lapsed = db
            .query_one("SELECT count(*) FROM replicas WHERE expires_at <= now()")
            .await;
        (lapsed == 1).then_some(())
    })
    .await;
    let mut feed = b.subscribe();
    let seen = b
        .update("p/r/x", |existing| (None, existing))
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        seen.state,
        State::Unknown,
        "the closure decides on the orphan"
    );
    assert_eq!(seen.fence, 0);
    assert_eq!(b.get("p/r/x").await.unwrap(), Some(seen));
    let published = feed.recv().await.unwrap();
    assert_eq!(published.event.kind, crate::operation::EventKind::Orphaned);
    assert_eq!(b.events("p/r/x").await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_claim_becomes_unknown_only_under_its_own_fence() {
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_secs(10), "a").await;
    let fence = claim(&a, "p/r/x").await.unwrap().expect("claimed");
    let other = claim(&a, "p/r/y").await.unwrap().expect("claimed");
    a.abandon("p/r/y", other + 1);
    a.abandon("p/r/x", fence);
    let orphaned = until(|| async {
        a.get("p/r/x")
            .await
            .unwrap()
            .filter(|op| op.state == State::Unknown)
    })
    .await;
    assert_eq!(
        orphaned.error.as_deref(),
        Some(super::super::change::unrecorded_reason())
    );
    let y = a.get("p/r/y").await.unwrap().expect("stored");
    assert_eq!(
        (y.state, y.fence),
        (State::InFlight, other),
        "another fence: untouched"
    );
}

/// A claim whose COMMIT was sent but not acknowledged was never sent by its caller (it was
/// refused): when the operation was new, it fails, so a retry is sent; over an `unknown`
/// operation it stays `unknown`. The same rule as redb's sweep (`change::abandoned`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_never_left_fails_when_nothing_before_it_can_have_taken_effect() {
    use super::super::change::{Left, unrecorded_reason, unsent_reason};
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_secs(10), "a").await;
    let core = Arc::clone(a.postgres().core());
    let new = claim(&a, "p/r/new").await.unwrap().expect("claimed");
    let resent = claim(&a, "p/r/resent").await.unwrap().expect("claimed");
    super::lease::abandon(
        Arc::clone(&core),
        "p/r/new".into(),
        (new, Left::never(None)),
    )
    .await;
    let before = Operation::example("p/r/resent", State::Unknown, Timestamp(T0));
    let left = Left::never(Some(&before));
    super::lease::abandon(core, "p/r/resent".into(), (resent, left)).await;

    let failed = a.get("p/r/new").await.unwrap().expect("stored");
    assert_eq!((failed.state, failed.fence), (State::Failed, 0));
    assert_eq!(failed.error.as_deref(), Some(unsent_reason()));
    let unknown = a.get("p/r/resent").await.unwrap().expect("stored");
    assert_eq!((unknown.state, unknown.fence), (State::Unknown, 0));
    assert_eq!(unknown.error.as_deref(), Some(unrecorded_reason()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_pruning_at_once_delete_each_operation_once() {
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_secs(10), "a").await;
    let (b, _) = replica(&db, Duration::from_secs(10), "b").await;
    const N: usize = 60;
    for n in 0..N {
        let id = format!("p/r/{n:02}");
        let op = Operation::example(&id, State::Succeeded, Timestamp(T0));
        let write = Write::of(op, Vec::new());
        a.update(&id, move |_| (Some(write), ())).await.unwrap();
    }
    let (cut, now) = (Timestamp(T0 + 1), Timestamp(T0 + 2));
    let (pa, pb) = tokio::join!(a.prune(cut, now, 7), b.prune(cut, now, 7));
    assert_eq!(pa.unwrap() + pb.unwrap(), N, "each deleted once");
    assert_eq!(db.query_one("SELECT count(*) FROM ops").await, 0);
    assert_eq!(
        db.query_one("SELECT count(*) FROM tombstones").await,
        N as i64
    );
    let (ta, tb) = tokio::join!(
        a.prune_tombstones(Timestamp(T0 + 3), 5),
        b.prune_tombstones(Timestamp(T0 + 3), 5)
    );
    assert_eq!(ta.unwrap() + tb.unwrap(), N);
    assert_eq!(
        db.query_one("SELECT count(*) FROM op_locks").await,
        0,
        "no lock row left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_unwritable_and_refuses_writes_until_it_is_back() {
    let db = TestDb::new().await;
    let (a, _) = replica(&db, Duration::from_millis(900), "a").await;
    assert!(a.writable());
    // Nobody may connect, and the replica's connections are cut.
    db.execute_as_admin(&format!(
        "ALTER DATABASE {0} ALLOW_CONNECTIONS false; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{0}'",
        db.name
    ))
    .await;
    until(|| async { (!a.writable()).then_some(()) }).await;
    let refused = claim(&a, "p/r/x").await;
    assert!(
        matches!(refused, Err(LedgerError::Unavailable(_))),
        "{refused:?}"
    );
    assert!(a.get("p/r/x").await.is_err(), "reads fail too");
    db.execute_as_admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS true",
        db.name
    ))
    .await;
    until(|| async { a.writable().then_some(()) }).await;
    assert!(claim(&a, "p/r/x").await.unwrap().is_some());
}

/// A rough benchmark, not a test: `cargo test --lib ledger::postgres -- --ignored --nocapture`.
/// Claims then completes `N` operations, from 1 and from 16 concurrent callers, on a file
/// ledger and on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn claim_and_complete_throughput() {
    const N: usize = 2_000;
    for kind in ["redb", "postgres"] {
        let dir = tempfile::TempDir::new().unwrap();
        let db = TestDb::new().await;
        let at = match kind {
            "redb" => LedgerAt::File(dir.path().join("ledger.redb")),
            _ => db.at.clone(),
        };
        let (ledger, _) = Ledger::open(&at, Timestamp(T0), opts(Duration::from_secs(10), "b"))
            .await
            .unwrap();
        for callers in [1, 16] {
            let started = std::time::Instant::now();
            let tasks: Vec<_> = (0..callers)
                .map(|c| {
                    let ledger = ledger.clone();
                    tokio::spawn(async move {
                        for n in (c..N).step_by(callers) {
                            let id = format!("p/r/{callers}-{n}");
                            let fence = claim(&ledger, &id).await.unwrap().unwrap();
                            ledger
                                .update(&id, move |existing| {
                                    let op = existing.unwrap();
                                    assert_eq!(op.fence, fence);
                                    let done = Operation {
                                        state: State::Succeeded,
                                        ..op
                                    };
                                    (Some(Write::of(done, Vec::new())), ())
                                })
                                .await
                                .unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            let took = started.elapsed();
            let per_sec = N as f64 / took.as_secs_f64();
            println!(
                "{kind}: {N} claim+complete with {callers} callers in {took:?}: {per_sec:.0} ops/s"
            );
        }
    }
}
