//! Behaviour of the ledger against a real redb file in a temporary directory.

use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tempfile::TempDir;

use std::sync::atomic::Ordering;

use super::redb::store::Tables;
use super::*;
use crate::operation::{EventKind, ResponseMeta};

const T0: i64 = 1_800_000_000_000;

fn op(id: &str, state: State, created: i64) -> Operation {
    Operation {
        fingerprint: "ab".repeat(32),
        fields: BTreeMap::from([("/amount".to_owned(), "1f2e".to_owned())]),
        idempotency_key: format!("key-{id}"),
        last_dispatched_at: None,
        fence: 7,
        ..Operation::example(id, state, Timestamp(created))
    }
}

fn event(kind: EventKind, at: i64) -> Event {
    Event {
        at: Timestamp(at),
        kind,
        attempt: 1,
        detail: format!("{} happened", kind.as_str()),
    }
}

fn response(body: &'static [u8]) -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.append("content-type", HeaderValue::from_static("application/json"));
    headers.append("x-bin", HeaderValue::from_bytes(b"\xff\xfeok").unwrap());
    StoredResponse {
        status: 200,
        headers,
        body: Bytes::from_static(body),
    }
}

async fn open(dir: &TempDir) -> Ledger {
    open_with(dir, Timestamp(T0), LedgerOptions::default())
        .await
        .0
}

async fn open_with(dir: &TempDir, now: Timestamp, opts: LedgerOptions) -> (Ledger, Vec<Operation>) {
    Ledger::open(&dir.path().join("data/ledger.redb"), now, opts)
        .await
        .unwrap()
}

/// Unconditionally writes `op` with `events` (and a response when given).
async fn put(ledger: &Ledger, op: Operation, events: Vec<Event>, resp: Option<StoredResponse>) {
    let id = op.id.clone();
    let write = Write {
        op,
        events,
        response: resp,
        request: Default::default(),
    };
    ledger
        .update(&id, move |_| (Some(write), ()))
        .await
        .unwrap();
}

/// Which backend a semantic test runs on.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Redb,
    Postgres,
}

/// What keeps a fresh ledger's storage alive: its folder, or its database.
#[allow(dead_code)]
pub(super) enum Kept {
    Dir(TempDir),
    Db(postgres::tests::TestDb),
}

/// A fresh, empty ledger of `kind`, with what keeps its storage (drop it after the ledger).
///
/// A PostgreSQL ledger also gets a live replica 0 (expiring in a day), the owner of the
/// hand-made claims these tests write (`op`'s fence 7): its `in_flight` operations are a
/// live replica's, as a file ledger's are its own process's, and no sweep touches them.
pub(super) async fn fresh(kind: Kind, opts: LedgerOptions) -> (Kept, Ledger) {
    match kind {
        Kind::Redb => {
            let dir = TempDir::new().unwrap();
            let (ledger, _) = open_with(&dir, Timestamp(T0), opts).await;
            (Kept::Dir(dir), ledger)
        }
        Kind::Postgres => {
            let db = postgres::tests::TestDb::new().await;
            let (ledger, _) = Ledger::open(&db.at, Timestamp(T0), opts).await.unwrap();
            db.execute(
                "INSERT INTO replicas (id, name, started_at, expires_at) \
                 VALUES (0, 'the tests', now(), now() + interval '1 day')",
            )
            .await;
            (Kept::Db(db), ledger)
        }
    }
}

on_both_backends!(
    update_creates_and_reads_back,
    state_change_moves_indexes_and_counters,
    list_is_newest_first_and_filters,
    list_pages_with_cursor_until_the_end,
    list_rejects_a_bad_cursor,
    prune_removes_only_old_completed_operations,
    fail_writes_answers_unavailable_and_writes_nothing,
    a_write_for_another_id_is_refused,
    concurrent_updates_are_serialized,
    a_panicking_closure_is_an_error_and_the_ledger_lives_on,
);

fn ids(page: &Page) -> Vec<&str> {
    page.ops.iter().map(|o| o.id.as_str()).collect()
}

async fn update_creates_and_reads_back(kind: Kind) {
    let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    let id = "stripe/create_refund/wf-81:ch_1";
    let mut created = op(id, State::Succeeded, T0);
    created.response = Some(ResponseMeta {
        status: 200,
        body_bytes: 2,
        body_sha256: "cd".repeat(32),
    });
    let events = vec![
        event(EventKind::Claimed, T0),
        event(EventKind::ProviderResponded, T0 + 1),
    ];
    let seen = ledger
        .update(id, {
            let write = Write {
                op: created.clone(),
                events: events.clone(),
                response: Some(response(b"{}")),
                request: Default::default(),
            };
            move |existing| (Some(write), existing.is_none())
        })
        .await
        .unwrap();
    assert!(seen, "the closure saw no operation before the first write");
    assert_eq!(ledger.get(id).await.unwrap(), Some(created));
    assert_eq!(ledger.events(id).await.unwrap(), events);
    assert_eq!(ledger.response(id).await.unwrap(), Some(response(b"{}")));

    // A second write appends events after the first ones and replaces the response.
    let later = op(id, State::Succeeded, T0);
    let replayed = event(EventKind::Replayed, T0 + 5);
    put(
        &ledger,
        later.clone(),
        vec![replayed.clone()],
        Some(response(b"[]")),
    )
    .await;
    let history = ledger.events(id).await.unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[2], replayed);
    assert_eq!(ledger.response(id).await.unwrap(), Some(response(b"[]")));
    assert_eq!(
        ledger.get("stripe/create_refund/other").await.unwrap(),
        None
    );
}

#[tokio::test]
async fn closure_returning_none_writes_nothing() {
    let dir = TempDir::new().unwrap();
    let commits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&commits);
    let opts = LedgerOptions {
        on_commit: Some(Arc::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })),
        ..LedgerOptions::default()
    };
    let (ledger, _) = open_with(&dir, Timestamp(T0), opts).await;
    let answer = ledger.update("p/r/x", |_| (None, 42)).await.unwrap();
    assert_eq!(answer, 42);
    assert_eq!(ledger.get("p/r/x").await.unwrap(), None);
    assert_eq!(commits.load(Ordering::SeqCst), 0);

    put(&ledger, op("p/r/x", State::InFlight, T0), vec![], None).await;
    assert_eq!(commits.load(Ordering::SeqCst), 1);
    let before = ledger.get("p/r/x").await.unwrap();
    let saw = ledger
        .update("p/r/x", |existing| (None, existing.map(|o| o.state)))
        .await
        .unwrap();
    assert_eq!(saw, Some(State::InFlight));
    assert_eq!(ledger.get("p/r/x").await.unwrap(), before);
    assert_eq!(commits.load(Ordering::SeqCst), 1);
}

async fn state_change_moves_indexes_and_counters(kind: Kind) {
    let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    put(&ledger, op("p/r/a", State::InFlight, T0), vec![], None).await;
    put(&ledger, op("p/r/b", State::InFlight, T0 + 1), vec![], None).await;
    let stats = ledger.stats().await.unwrap();
    assert_eq!(stats.by_state["in_flight"], 2);
    assert_eq!(stats.by_state["succeeded"], 0);
    assert_eq!(stats.oldest_in_flight, Some(Timestamp(T0)));

    let mut done = op("p/r/a", State::Succeeded, T0);
    done.updated_at = Timestamp(T0 + 10);
    put(&ledger, done, vec![], None).await;
    let stats = ledger.stats().await.unwrap();
    assert_eq!(stats.by_state["in_flight"], 1);
    assert_eq!(stats.by_state["succeeded"], 1);
    assert_eq!(stats.oldest_in_flight, Some(Timestamp(T0 + 1)));
    assert_eq!(stats.oldest_unknown, None);

    let by_state = |state| Filter {
        state: Some(state),
        ..Filter::default()
    };
    let flying = ledger.list(&by_state(State::InFlight), 10, None).await;
    assert_eq!(ids(&flying.unwrap()), ["p/r/b"]);
    let done = ledger.list(&by_state(State::Succeeded), 10, None).await;
    assert_eq!(ids(&done.unwrap()), ["p/r/a"]);
    let all = ledger.list(&Filter::default(), 10, None).await.unwrap();
    assert_eq!(
        ids(&all),
        ["p/r/b", "p/r/a"],
        "an update must not duplicate entries"
    );
}

#[tokio::test]
async fn reopen_orphans_in_flight_only() {
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    let states = [
        ("p/r/fly1", State::InFlight),
        ("p/r/fly2", State::InFlight),
        ("p/r/prep", State::Prepared),
        ("p/r/done", State::Succeeded),
        ("p/r/lost", State::Unknown),
    ];
    for (i, (id, state)) in states.into_iter().enumerate() {
        let created = T0 + i64::try_from(i).unwrap();
        put(
            &ledger,
            op(id, state, created),
            vec![event(EventKind::Claimed, created)],
            None,
        )
        .await;
    }
    let untouched = [
        ledger.get("p/r/prep").await.unwrap(),
        ledger.get("p/r/done").await.unwrap(),
        ledger.get("p/r/lost").await.unwrap(),
    ];
    drop(ledger);

    let now = Timestamp(T0 + 60_000);
    let (ledger, orphaned) = open_with(&dir, now, LedgerOptions::default()).await;
    let mut orphaned_ids: Vec<_> = orphaned.iter().map(|o| o.id.as_str()).collect();
    orphaned_ids.sort();
    assert_eq!(orphaned_ids, ["p/r/fly1", "p/r/fly2"]);
    assert!(orphaned.iter().all(|o| o.state == State::Unknown));
    for id in ["p/r/fly1", "p/r/fly2"] {
        let op = ledger.get(id).await.unwrap().unwrap();
        assert_eq!(op.state, State::Unknown);
        assert_eq!(op.fence, 0);
        assert_eq!(op.updated_at, now);
        assert_eq!(op.error.as_deref(), Some(change::orphan_reason()));
        let events = ledger.events(id).await.unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::Claimed, EventKind::Orphaned]);
        assert_eq!(events[1].at, now);
    }
    let after = [
        ledger.get("p/r/prep").await.unwrap(),
        ledger.get("p/r/done").await.unwrap(),
        ledger.get("p/r/lost").await.unwrap(),
    ];
    assert_eq!(after, untouched);
    let stats = ledger.stats().await.unwrap();
    assert_eq!(stats.by_state["in_flight"], 0);
    assert_eq!(stats.by_state["unknown"], 3);
    assert_eq!(stats.oldest_unknown, Some(Timestamp(T0)));
    drop(ledger);

    let (_, again) = open_with(&dir, now, LedgerOptions::default()).await;
    assert!(again.is_empty());
}

#[tokio::test]
async fn fences_are_unique_across_reopen() {
    let dir = TempDir::new().unwrap();
    let mut seen = HashSet::new();
    for _ in 0..3 {
        let ledger = open(&dir).await;
        for _ in 0..100 {
            let fence = ledger.fence();
            assert_ne!(fence, 0);
            assert!(seen.insert(fence), "fence {fence:#x} handed out twice");
        }
    }
    assert_eq!(seen.len(), 300);
}

/// Ops over two providers, three routes and several states; two share a `created_at`.
async fn seeded(kind: Kind) -> (Kept, Ledger) {
    let (kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    let rows = [
        ("stripe/refund/1", State::Succeeded, T0),
        ("stripe/refund/2", State::Unknown, T0 + 1),
        ("stripe/charge/3", State::Succeeded, T0 + 2),
        ("square/refund/4", State::Failed, T0 + 3),
        ("square/pay/5", State::Succeeded, T0 + 3),
        ("stripe/refund/6", State::InFlight, T0 + 5),
    ];
    for (id, state, created) in rows {
        put(&ledger, op(id, state, created), vec![], None).await;
    }
    (kept, ledger)
}

async fn list_is_newest_first_and_filters(kind: Kind) {
    let (_kept, ledger) = seeded(kind).await;
    let all = ledger.list(&Filter::default(), 50, None).await.unwrap();
    let newest_first = [
        "stripe/refund/6",
        "square/refund/4",
        "square/pay/5",
        "stripe/charge/3",
        "stripe/refund/2",
        "stripe/refund/1",
    ];
    assert_eq!(ids(&all), newest_first);
    assert_eq!(all.next, None);

    let cases: [(Filter, &[&str]); 5] = [
        (
            Filter {
                state: Some(State::Succeeded),
                ..Filter::default()
            },
            &["square/pay/5", "stripe/charge/3", "stripe/refund/1"],
        ),
        (
            Filter {
                provider: Some("square".to_owned()),
                ..Filter::default()
            },
            &["square/refund/4", "square/pay/5"],
        ),
        (
            Filter {
                route: Some("refund".to_owned()),
                ..Filter::default()
            },
            &[
                "stripe/refund/6",
                "square/refund/4",
                "stripe/refund/2",
                "stripe/refund/1",
            ],
        ),
        (
            Filter {
                state: Some(State::Succeeded),
                provider: Some("stripe".to_owned()),
                route: Some("refund".to_owned()),
            },
            &["stripe/refund/1"],
        ),
        (
            Filter {
                provider: Some("nobody".to_owned()),
                ..Filter::default()
            },
            &[],
        ),
    ];
    for (filter, expected) in cases {
        let page = ledger.list(&filter, 50, None).await.unwrap();
        assert_eq!(ids(&page), expected, "filter {filter:?}");
    }
}

async fn list_pages_with_cursor_until_the_end(kind: Kind) {
    let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    for i in 0..25_i64 {
        let state = if i % 2 == 0 {
            State::Succeeded
        } else {
            State::Failed
        };
        // Pairs share a created_at, so paging must break ties by ID.
        put(
            &ledger,
            op(&format!("p/r/{i:02}"), state, T0 + i / 2),
            vec![],
            None,
        )
        .await;
    }
    let full = ledger.list(&Filter::default(), 100, None).await.unwrap();
    for (filter, expected_len) in [
        (Filter::default(), 25),
        (
            Filter {
                state: Some(State::Succeeded),
                ..Filter::default()
            },
            13,
        ),
    ] {
        let mut collected = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = ledger.list(&filter, 4, cursor.as_deref()).await.unwrap();
            assert!(page.ops.len() <= 4);
            assert!(!page.ops.is_empty(), "no empty page before the end");
            collected.extend(page.ops);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(collected.len(), expected_len);
        let expected: Vec<_> = full
            .ops
            .iter()
            .filter(|o| filter.state.is_none_or(|s| s == o.state))
            .cloned()
            .collect();
        assert_eq!(collected, expected);
    }
}

async fn list_rejects_a_bad_cursor(kind: Kind) {
    let (_kept, ledger) = seeded(kind).await;
    for cursor in [
        "not a cursor",
        "abcd",
        "zz",
        &hex::encode([0_u8, 1, 2, 3, 4, 5, 6, 7, 0xff]),
    ] {
        let answer = ledger.list(&Filter::default(), 10, Some(cursor)).await;
        assert!(matches!(answer, Err(LedgerError::BadCursor)), "{cursor}");
    }
}

async fn prune_removes_only_old_completed_operations(kind: Kind) {
    let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    let cutoff = Timestamp(T0 + 1_000);
    let old = |id, state| op(id, state, T0);
    let mut touched = old("p/r/old-but-touched", State::Succeeded);
    touched.updated_at = Timestamp(T0 + 2_000);
    let doomed = [
        old("p/r/old-ok", State::Succeeded),
        old("p/r/old-failed", State::Failed),
        old("p/r/old-ok-2", State::Succeeded),
    ];
    let kept = [
        touched,
        old("p/r/old-unknown", State::Unknown),
        old("p/r/old-flying", State::InFlight),
        old("p/r/old-prepared", State::Prepared),
        op("p/r/new-ok", State::Succeeded, T0 + 1_500),
    ];
    for o in doomed.iter().chain(&kept) {
        let events = vec![event(EventKind::Claimed, T0)];
        put(&ledger, o.clone(), events, Some(response(b"ok"))).await;
    }

    // max = 1: several transactions, each resuming past what the previous one kept.
    assert_eq!(
        ledger
            .prune(cutoff, Timestamp(T0 + 5_000), 1)
            .await
            .unwrap(),
        3
    );
    for o in &doomed {
        assert_eq!(ledger.get(&o.id).await.unwrap(), None);
        assert!(ledger.events(&o.id).await.unwrap().is_empty());
        assert_eq!(ledger.response(&o.id).await.unwrap(), None);
    }
    for o in &kept {
        assert_eq!(ledger.get(&o.id).await.unwrap().as_ref(), Some(o));
        assert_eq!(ledger.events(&o.id).await.unwrap().len(), 1);
        assert!(ledger.response(&o.id).await.unwrap().is_some());
    }
    let listed = ledger.list(&Filter::default(), 50, None).await.unwrap();
    assert_eq!(listed.ops.len(), kept.len());
    let stats = ledger.stats().await.unwrap();
    assert_eq!(stats.by_state["succeeded"], 2);
    assert_eq!(stats.by_state["failed"], 0);
    assert_eq!(
        ledger
            .prune(cutoff, Timestamp(T0 + 5_000), 10)
            .await
            .unwrap(),
        0
    );
}

async fn fail_writes_answers_unavailable_and_writes_nothing(kind: Kind) {
    let opts = LedgerOptions {
        fail_writes: true,
        ..LedgerOptions::default()
    };
    let (_kept, ledger) = fresh(kind, opts).await;
    let write = Write {
        op: op("p/r/x", State::InFlight, T0),
        events: vec![event(EventKind::Claimed, T0)],
        response: None,
        request: Default::default(),
    };
    let answer = ledger.update("p/r/x", move |_| (Some(write), ())).await;
    assert!(matches!(answer, Err(LedgerError::Unavailable(_))));
    assert_eq!(ledger.get("p/r/x").await.unwrap(), None);
    assert!(ledger.events("p/r/x").await.unwrap().is_empty());
    assert_eq!(ledger.stats().await.unwrap().by_state["in_flight"], 0);
    // Reading through update still works: only commits fail.
    assert_eq!(ledger.update("p/r/x", |_| (None, 1)).await.unwrap(), 1);
    assert!(matches!(
        ledger.prune(Timestamp(T0), Timestamp(T0), 10).await,
        Err(LedgerError::Unavailable(_))
    ));
}

async fn a_write_for_another_id_is_refused(kind: Kind) {
    let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    let write = Write {
        op: op("p/r/other", State::InFlight, T0),
        events: vec![],
        response: None,
        request: Default::default(),
    };
    let answer = ledger.update("p/r/x", move |_| (Some(write), ())).await;
    assert!(matches!(answer, Err(LedgerError::Unavailable(_))));
    assert_eq!(ledger.get("p/r/x").await.unwrap(), None);
    assert_eq!(ledger.get("p/r/other").await.unwrap(), None);
}

async fn concurrent_updates_are_serialized(kind: Kind) {
    let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    let id = "p/r/counter";
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let ledger = ledger.clone();
            tokio::spawn(async move {
                ledger
                    .update(id, |existing| {
                        let mut next = existing.unwrap_or_else(|| {
                            let mut fresh = op(id, State::InFlight, T0);
                            fresh.attempts = 0;
                            fresh
                        });
                        next.attempts += 1;
                        let write = Write {
                            op: next,
                            events: vec![],
                            response: None,
                            request: Default::default(),
                        };
                        (Some(write), ())
                    })
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let op = ledger.get(id).await.unwrap().unwrap();
    assert_eq!(op.attempts, 50);
    assert_eq!(ledger.stats().await.unwrap().by_state["in_flight"], 1);
}

async fn a_panicking_closure_is_an_error_and_the_ledger_lives_on(kind: Kind) {
    let (_kept, ledger) = fresh(kind, LedgerOptions::default()).await;
    let answer: Result<(), _> = ledger
        .update("p/r/x", |_| panic!("closure bug (expected by this test)"))
        .await;
    assert!(matches!(answer, Err(LedgerError::Unavailable(_))));
    assert_eq!(ledger.get("p/r/x").await.unwrap(), None);
    put(&ledger, op("p/r/x", State::InFlight, T0), vec![], None).await;
    assert_eq!(
        ledger.get("p/r/x").await.unwrap().map(|o| o.state),
        Some(State::InFlight)
    );
}

#[tokio::test]
async fn open_fails_cleanly_on_an_unusable_path() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let path = file.join("ledger.redb");
    let answer = Ledger::open(&path, Timestamp(T0), LedgerOptions::default()).await;
    assert!(matches!(answer, Err(LedgerError::Open { .. })));
}

#[tokio::test]
async fn a_ledger_in_use_cannot_be_opened_twice() {
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    let path = dir.path().join("data/ledger.redb");
    let second = Ledger::open(&path, Timestamp(T0), LedgerOptions::default()).await;
    assert!(matches!(second, Err(LedgerError::InUse { .. })));
    drop(ledger);
    // Dropping the last handle releases the file.
    let third = Ledger::open(&path, Timestamp(T0), LedgerOptions::default()).await;
    assert!(third.is_ok());
}

/// A rough benchmark, not a test: `cargo test --lib ledger -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn list_stays_fast_with_many_operations() {
    const N: i64 = 200_000;
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    let started = std::time::Instant::now();
    // Bulk load straight through the store in big transactions: one commit per op would
    // measure fsync, not the index.
    for chunk in (0..N).collect::<Vec<_>>().chunks(10_000) {
        let txn = ledger.redb().shared().db().unwrap().begin_write().unwrap();
        {
            let mut tables = Tables::open(&txn).unwrap();
            for &i in chunk {
                let state = if i % 1000 == 0 {
                    State::Unknown
                } else {
                    State::Succeeded
                };
                let o = op(&format!("p{}/r/{i}", i % 7), state, T0 + i);
                let write = Write {
                    op: o,
                    events: vec![],
                    response: None,
                    request: Default::default(),
                };
                tables.apply(&write.op.id.clone(), None, &write).unwrap();
            }
            tables.close().unwrap();
        }
        txn.commit().unwrap();
    }
    println!("inserted {N} operations in {:?}", started.elapsed());
    let filter = Filter {
        state: Some(State::Unknown),
        ..Filter::default()
    };
    let started = std::time::Instant::now();
    let page = ledger.list(&filter, 50, None).await.unwrap();
    println!("listed page 1 (state=unknown) in {:?}", started.elapsed());
    assert_eq!(page.ops.len(), 50);
    let started = std::time::Instant::now();
    let page = ledger.list(&Filter::default(), 50, None).await.unwrap();
    println!("listed page 1 (no filter) in {:?}", started.elapsed());
    assert_eq!(page.ops.len(), 50);
    let started = std::time::Instant::now();
    let stats = ledger.stats().await.unwrap();
    println!("stats in {:?}: {:?}", started.elapsed(), stats.by_state);
}

#[tokio::test]
async fn history_only_writes_are_kept_and_made_durable_by_the_next_commit() {
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    let id = "p/r/history";
    let original = op(id, State::Succeeded, T0);
    put(
        &ledger,
        original.clone(),
        vec![event(EventKind::Claimed, T0)],
        None,
    )
    .await;
    // The same record with one more event: a replay noted (history only).
    let unchanged = original.clone();
    ledger
        .update(id, move |_| {
            let write = Write {
                op: unchanged,
                events: vec![event(EventKind::Replayed, T0 + 1)],
                response: None,
                request: Default::default(),
            };
            (Some(write), ())
        })
        .await
        .unwrap();
    assert_eq!(ledger.events(id).await.unwrap().len(), 2);
    // A state change elsewhere commits durably, and with it the history before it.
    put(&ledger, op("p/r/other", State::Unknown, T0), vec![], None).await;
    drop(ledger);
    let reopened = open(&dir).await;
    let kinds: Vec<_> = reopened
        .events(id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, vec![EventKind::Claimed, EventKind::Replayed]);
    assert_eq!(reopened.get(id).await.unwrap(), Some(original));
}

#[test]
fn a_response_summary_names_its_status_size_and_body_hash() {
    let meta = response(b"{}").meta();
    assert_eq!((meta.status, meta.body_bytes), (200, 2));
    // printf '{}' | sha256sum
    assert_eq!(
        meta.body_sha256,
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    );
}

#[tokio::test]
async fn an_abandoned_claim_becomes_unknown_only_under_its_own_fence() {
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    for id in ["p/r/dead", "p/r/live"] {
        put(
            &ledger,
            op(id, State::InFlight, T0),
            vec![event(EventKind::Claimed, T0)],
            None,
        )
        .await;
    }
    let live = ledger.get("p/r/live").await.unwrap();
    ledger.abandon("p/r/dead", 7);
    ledger.abandon("p/r/live", 8);
    // The writer runs jobs in order: once this no-op is answered, the sweep has run.
    ledger.update("p/r/dead", |_| (None, ())).await.unwrap();

    let dead = ledger.get("p/r/dead").await.unwrap().unwrap();
    assert_eq!((dead.state, dead.fence), (State::Unknown, 0));
    let error = dead.error.unwrap_or_default();
    assert!(error.contains("could not be recorded"), "{error}");
    let events = ledger.events("p/r/dead").await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Claimed, EventKind::Orphaned]);
    assert!(events[1].detail.contains("could not be recorded"));
    let untouched = ledger.get("p/r/live").await.unwrap();
    assert_eq!(untouched, live, "another fence owns it");
    assert!(ledger.writable());
    let left = ledger.redb().shared().dead_claims();
    assert!(left.is_empty(), "swept claims are forgotten: {left:?}");
}

#[tokio::test]
async fn the_first_secret_check_is_kept_and_another_refused_without_a_write() {
    let dir = TempDir::new().unwrap();
    let with = |check: Option<&str>| LedgerOptions {
        secret_check: check.map(str::to_owned),
        ..LedgerOptions::default()
    };
    let (ledger, _) = open_with(&dir, Timestamp(T0), with(Some("check-a"))).await;
    let write = Write::of(op("p/r/x", State::InFlight, T0), vec![]);
    ledger
        .update("p/r/x", move |_| (Some(write), ()))
        .await
        .unwrap();
    drop(ledger);
    let path = dir.path().join("data/ledger.redb");
    let refused = Ledger::open(&path, Timestamp(T0 + 1), with(Some("check-b"))).await;
    assert!(matches!(refused, Err(LedgerError::OtherSecret { .. })));
    // Nothing was orphaned by the refused open; no check (a test reading the file) passes.
    let (ledger, orphaned) = open_with(&dir, Timestamp(T0 + 2), with(None)).await;
    assert_eq!(orphaned.len(), 1);
    drop(ledger);
    let (_, orphaned) = open_with(&dir, Timestamp(T0 + 3), with(Some("check-a"))).await;
    assert!(orphaned.is_empty());
}

/// A ledger that records the size of each commit's batch.
async fn open_counting(dir: &TempDir) -> (Ledger, Arc<std::sync::Mutex<Vec<usize>>>) {
    let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&sizes);
    let opts = LedgerOptions {
        on_commit: Some(Arc::new(move |done: Commit| {
            seen.lock().unwrap().push(done.jobs);
        })),
        ..LedgerOptions::default()
    };
    (open_with(dir, Timestamp(T0), opts).await.0, sizes)
}

/// Holds the writer inside a first update (on `p/r/gate`) until the returned sender is used
/// or dropped, so the updates submitted meanwhile queue up and form one batch.
async fn hold_writer(
    ledger: &Ledger,
) -> (tokio::task::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
    let (running, started) = tokio::sync::oneshot::channel();
    let (gate, wait) = std::sync::mpsc::channel::<()>();
    let held = ledger.clone();
    let task = tokio::spawn(async move {
        let write = Write::of(op("p/r/gate", State::InFlight, T0), vec![]);
        let closure = move |_| {
            let _ = running.send(());
            let _ = wait.recv();
            (Some(write), ())
        };
        held.update("p/r/gate", closure).await.unwrap();
    });
    started.await.expect("the writer runs the first update");
    (task, gate)
}

/// Polls `update` once, which queues its job with the writer, and returns it to be awaited.
fn queued<F: std::future::Future>(update: F) -> std::pin::Pin<Box<F>> {
    let mut update = Box::pin(update);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(
        update.as_mut().poll(&mut cx).is_pending(),
        "the writer is held"
    );
    update
}

#[tokio::test]
async fn a_job_that_fails_to_stage_does_not_doom_its_batch() {
    let dir = TempDir::new().unwrap();
    let (ledger, sizes) = open_counting(&dir).await;
    let (gate_task, gate) = hold_writer(&ledger).await;
    let write = |id: &str| {
        Write::of(
            op(id, State::InFlight, T0),
            vec![event(EventKind::Claimed, T0)],
        )
    };
    let (a, wrong, b) = (write("p/r/a"), write("p/r/other"), write("p/r/b"));
    let first = queued(ledger.update("p/r/a", move |_| (Some(a), 1)));
    let panics = queued(ledger.update("p/r/x", |_| -> (Option<Write>, u32) { panic!("boom") }));
    let misfit = queued(ledger.update("p/r/y", move |_| (Some(wrong), 2)));
    let last = queued(ledger.update("p/r/b", move |_| (Some(b), 3)));
    drop(gate);
    gate_task.await.unwrap();

    assert_eq!(first.await.unwrap(), 1);
    assert!(matches!(panics.await, Err(LedgerError::Unavailable(_))));
    assert!(matches!(misfit.await, Err(LedgerError::Unavailable(_))));
    assert_eq!(last.await.unwrap(), 3);
    assert_eq!(
        *sizes.lock().unwrap(),
        [1, 2],
        "the gate, then a and b in one commit"
    );
    for id in ["p/r/a", "p/r/b"] {
        assert_eq!(
            ledger.get(id).await.unwrap().unwrap().state,
            State::InFlight
        );
        assert_eq!(
            ledger.events(id).await.unwrap().len(),
            1,
            "{id} staged once"
        );
    }
    for id in ["p/r/x", "p/r/y", "p/r/other"] {
        assert_eq!(ledger.get(id).await.unwrap(), None, "{id} left nothing");
    }
    assert_eq!(ledger.stats().await.unwrap().by_state["in_flight"], 3);
}

#[tokio::test]
async fn jobs_on_one_operation_in_one_batch_see_each_others_writes() {
    let dir = TempDir::new().unwrap();
    let (ledger, sizes) = open_counting(&dir).await;
    let (gate_task, gate) = hold_writer(&ledger).await;
    let id = "p/r/same";
    let claim = Write::of(
        op(id, State::InFlight, T0),
        vec![event(EventKind::Claimed, T0)],
    );
    let claimed = queued(ledger.update(id, move |existing| {
        let saw = existing.map(|o| o.state);
        (Some(claim), saw)
    }));
    let result = queued(ledger.update(id, move |existing| {
        let saw = existing.as_ref().map(|o| o.state);
        let done = existing.map(|o| {
            let event = event(EventKind::ResultPersisted, T0 + 1);
            Write::of(
                Operation {
                    state: State::Succeeded,
                    ..o
                },
                vec![event],
            )
        });
        (done, saw)
    }));
    let reader = queued(ledger.update(id, |existing| (None, existing.map(|o| o.state))));
    drop(gate);
    gate_task.await.unwrap();

    assert_eq!(
        claimed.await.unwrap(),
        None,
        "the first job saw no operation"
    );
    assert_eq!(
        result.await.unwrap(),
        Some(State::InFlight),
        "saw the claim"
    );
    assert_eq!(
        reader.await.unwrap(),
        Some(State::Succeeded),
        "saw the result"
    );
    assert_eq!(
        *sizes.lock().unwrap(),
        [1, 3],
        "the gate, then all three in one commit"
    );
    assert_eq!(
        ledger.get(id).await.unwrap().unwrap().state,
        State::Succeeded
    );
    let kinds: Vec<_> = ledger
        .events(id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, [EventKind::Claimed, EventKind::ResultPersisted]);
}

#[tokio::test]
async fn the_replay_snapshot_is_the_operation_without_its_field_hashes() {
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    let stored = op("p/r/snap", State::Succeeded, T0);
    assert!(
        !stored.fields.is_empty(),
        "control: the operation has field hashes"
    );
    put(&ledger, stored, vec![], Some(response(b"{\"ok\":true}"))).await;
    let full = ledger.get("p/r/snap").await.unwrap().unwrap();
    let read = ledger.replayable("p/r/snap").await.unwrap().unwrap();
    let (snapshot, resp) = &*read;
    assert_eq!(
        *snapshot,
        Operation {
            fields: BTreeMap::new(),
            ..full
        }
    );
    assert_eq!(*resp, Some(response(b"{\"ok\":true}")));
    assert_eq!(ledger.replayable("p/r/none").await.unwrap(), None);
}

/// The counters behind `stats` are summed over a batch and written when it commits: many
/// operations moving the same counters in one commit, and one created and finished inside it,
/// leave exactly the counts one commit per job would.
#[tokio::test]
async fn counters_add_up_over_a_shared_batch() {
    let dir = TempDir::new().unwrap();
    let (ledger, sizes) = open_counting(&dir).await;
    let ids: Vec<String> = (0..40).map(|i| format!("p/r/n{i}")).collect();
    let (gate_task, gate) = hold_writer(&ledger).await;
    fn writes(write: Write) -> impl FnOnce(Option<Operation>) -> (Option<Write>, ()) {
        move |_| (Some(write), ())
    }
    let mut queued_jobs = Vec::new();
    for (id, created) in ids.iter().zip(T0..) {
        let write = Write::of(op(id, State::InFlight, created), vec![]);
        queued_jobs.push(queued(ledger.update(id, writes(write))));
    }
    // Created above and finished in the same commit: in_flight +1 then -1.
    let mut done = op("p/r/n0", State::Succeeded, T0);
    done.updated_at = Timestamp(T0 + 100);
    queued_jobs.push(queued(
        ledger.update("p/r/n0", writes(Write::of(done, vec![]))),
    ));
    drop(gate);
    gate_task.await.unwrap();
    for job in queued_jobs {
        job.await.unwrap();
    }
    assert_eq!(*sizes.lock().unwrap(), [1, 41], "the gate, then one commit");
    let stats = ledger.stats().await.unwrap();
    assert_eq!(stats.by_state["in_flight"], 40, "the gate and n1..n39");
    assert_eq!(stats.by_state["succeeded"], 1);
    let all = ledger.list(&Filter::default(), 100, None).await.unwrap();
    assert_eq!(all.ops.len(), 41);
    // Reopened, the counts are what was committed.
    drop(ledger);
    let ledger = open(&dir).await;
    let stats = ledger.stats().await.unwrap();
    assert_eq!(stats.by_state["succeeded"], 1);
    assert_eq!(stats.by_state["unknown"], 40, "in flight at the restart");
    assert!(!stats.by_state.contains_key("in_flight") || stats.by_state["in_flight"] == 0);
}

/// What a replay read once is answered from memory (`hot`), and never outlives a change of its
/// operation: a rewrite or a prune, each once its batch has committed.
#[tokio::test]
async fn a_kept_replay_answer_follows_every_change_of_its_operation() {
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    let id = "p/r/kept";
    put(
        &ledger,
        op(id, State::Succeeded, T0),
        vec![],
        Some(response(b"first")),
    )
    .await;
    let body = |read: Option<Arc<Replayable>>| {
        let read = read.expect("answered from a snapshot");
        (read.0.state, read.1.as_ref().map(|r| r.body.clone()))
    };
    let first = ledger.replayable(id).await.unwrap();
    let again = ledger.replayable(id).await.unwrap();
    assert!(
        Arc::ptr_eq(first.as_ref().unwrap(), again.as_ref().unwrap()),
        "the second read is the kept answer"
    );
    assert_eq!(
        body(again),
        (State::Succeeded, Some(Bytes::from_static(b"first")))
    );

    // Rewritten (as an operator's action could): the kept answer goes with the commit.
    let mut failed = op(id, State::Failed, T0);
    failed.error = Some("refused".to_owned());
    put(&ledger, failed, vec![], None).await;
    assert_eq!(
        body(ledger.replayable(id).await.unwrap()),
        (State::Failed, None)
    );

    // Pruned: nothing is answered from memory; the claim finds the tombstone.
    assert_eq!(
        ledger
            .prune(Timestamp(T0 + 1), Timestamp(T0 + 2), 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(ledger.replayable(id).await.unwrap(), None);
}

/// A task on a shard gets the writer's answers through the shard's inbox (`handoff`): every
/// one of fifty concurrent updates is answered, on the shard's thread, and the inbox took
/// them (in as many bunches as the writer's answers found it empty).
#[tokio::test]
async fn updates_from_a_shard_are_answered_through_its_inbox() {
    let dir = TempDir::new().unwrap();
    let ledger = open(&dir).await;
    let shards = crate::shard::Shards::start(1).unwrap();
    let on_shard = shards.next().spawn(async move {
        let tasks: Vec<_> = (0..50)
            .map(|n| {
                let ledger = ledger.clone();
                tokio::spawn(async move {
                    let id = format!("p/r/inbox-{n}");
                    let write = Write {
                        op: op(&id, State::InFlight, T0),
                        events: vec![],
                        response: None,
                        request: Default::default(),
                    };
                    let answer = ledger.update(&id, move |_| (Some(write), n)).await;
                    (answer, std::thread::current().id())
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        let inbox = crate::handoff::home().expect("a shard's thread has an inbox");
        (answers, std::thread::current().id(), inbox)
    });
    let (answers, shard_thread, inbox) = on_shard.await.unwrap();
    for (n, (answer, thread)) in answers.into_iter().enumerate() {
        assert_eq!(answer.unwrap(), n);
        assert_eq!(thread, shard_thread);
    }
    let bunches = inbox.bunches.load(Ordering::Relaxed);
    assert!((1..=50).contains(&bunches), "{bunches} bunches");
    shards.stop().await;
}

/// Rewrites the redb ledger at `path` (not open) as builds before the compact layout left it:
/// JSON records and events (one entry each in `events`), kept requests in `requests`, stored
/// responses in `responses` in the first format, and the `c` index prefix of every operation with its counter.
pub(in crate::ledger) fn age(path: &std::path::Path) {
    use super::redb::store::{ALL, COUNTERS, EVENTS, INDEX, OPS, REQUESTS, RESPONSES};
    use super::redb::tombstone::TOMBSTONES;
    use ::redb::ReadableTable;
    fn all(table: &impl ReadableTable<&'static str, &'static [u8]>) -> Vec<(String, Vec<u8>)> {
        let entries = table.iter().unwrap().map(Result::unwrap);
        entries
            .map(|(k, v)| (k.value().to_owned(), v.value().to_vec()))
            .collect()
    }
    let db = ::redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut ops = txn.open_table(OPS).unwrap();
        let mut index = txn.open_table(INDEX).unwrap();
        let mut counters = txn.open_table(COUNTERS).unwrap();
        let mut events = txn.open_table(EVENTS).unwrap();
        let mut requests = txn.open_table(REQUESTS).unwrap();
        let mut responses = txn.open_table(RESPONSES).unwrap();
        let records = all(&ops);
        for (id, bytes) in &records {
            let op = codec::decode_op(bytes).unwrap();
            let json = codec::encode_op_json(&op).unwrap();
            ops.insert(id.as_str(), json.as_slice()).unwrap();
            index
                .insert((ALL, op.created_at.0, id.as_str()), ())
                .unwrap();
            let row = codec::split_row(bytes).unwrap();
            if let Some(request) = row.request {
                requests.insert(id.as_str(), request).unwrap();
            }
            if let Some(response) = row.response {
                let v1 = codec::encode_response_v1(&codec::decode_response(response).unwrap());
                responses.insert(id.as_str(), v1.as_slice()).unwrap();
            }
            for (seq, e) in codec::decode_history(row.history)
                .unwrap()
                .iter()
                .enumerate()
            {
                let json = codec::encode_event_json(e).unwrap();
                events
                    .insert((id.as_str(), seq as u32), json.as_slice())
                    .unwrap();
            }
        }
        counters.insert(ALL, records.len() as u64).unwrap();
        let mut tombs = txn.open_table(TOMBSTONES).unwrap();
        for (id, bytes) in all(&tombs) {
            let json = codec::encode_op_json(&codec::decode_op(&bytes).unwrap()).unwrap();
            tombs.insert(id.as_str(), json.as_slice()).unwrap();
        }
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn a_ledger_an_older_build_wrote_reads_lists_grows_and_prunes() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("data/ledger.redb");
    let ledger = open(&dir).await;
    for (i, state) in [
        State::Succeeded,
        State::Failed,
        State::Unknown,
        State::Succeeded,
    ]
    .into_iter()
    .enumerate()
    {
        let o = op(&format!("p/r/{i}"), state, T0 + i as i64);
        let events = vec![
            event(EventKind::Claimed, T0),
            event(EventKind::Unknown, T0 + 1),
        ];
        put(&ledger, o, events, Some(response(b"{}"))).await;
    }
    let seen = |ledger: Ledger| async move {
        let mut out = format!("{:?}\n", ledger.stats().await.unwrap());
        let all = ledger.list(&Filter::default(), 3, None).await.unwrap();
        let rest = ledger
            .list(&Filter::default(), 3, all.next.as_deref())
            .await;
        out.push_str(&format!("{all:?}\n{rest:?}\n"));
        for i in 0..4 {
            let id = format!("p/r/{i}");
            out.push_str(&format!(
                "{:?} {:?} {:?}\n",
                ledger.get(&id).await.unwrap(),
                ledger.events(&id).await.unwrap(),
                ledger.response(&id).await.unwrap()
            ));
        }
        (out, ledger)
    };
    let (before, ledger) = seen(ledger).await;
    drop(ledger);
    age(&path);
    let (after, ledger) = seen(open(&dir).await).await;
    assert_eq!(after, before);

    // New events follow the old ones; pruning takes the old index entries with it.
    let more = event(EventKind::OperatorResolved, T0 + 5);
    let o = ledger.get("p/r/2").await.unwrap().unwrap();
    let o = Operation {
        state: State::Succeeded,
        ..o
    };
    put(&ledger, o, vec![more.clone()], None).await;
    let events = ledger.events("p/r/2").await.unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(events[2], more);
    let pruned = ledger
        .prune(Timestamp(T0 + 10_000), Timestamp(T0 + 10_000), 2)
        .await;
    assert_eq!(pruned.unwrap(), 4);
    let db = ledger.redb().shared().db().unwrap();
    let txn = ::redb::ReadableDatabase::begin_read(&*db).unwrap();
    let index = txn.open_table(super::redb::store::INDEX).unwrap();
    assert_eq!(::redb::ReadableTableMetadata::len(&index).unwrap(), 0);
    let counters = txn.open_table(super::redb::store::COUNTERS).unwrap();
    assert_eq!(::redb::ReadableTableMetadata::len(&counters).unwrap(), 0);
}

/// Where a ledger's bytes go, table by table: `IDEMPROXY_STATS=PATH cargo test --lib
/// table_stats -- --ignored --nocapture` (e.g. on a ledger `bench/bytes.sh` kept).
#[test]
#[ignore]
fn table_stats() {
    use ::redb::{ReadableTableMetadata, TableHandle};
    let path = std::env::var("IDEMPROXY_STATS").expect("IDEMPROXY_STATS=PATH");
    let db = ::redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    let stats = txn.stats().unwrap();
    println!(
        "database: {} leaf pages, {} branch pages, {} B stored, {} B metadata, {} B fragmented",
        stats.leaf_pages(),
        stats.branch_pages(),
        stats.stored_bytes(),
        stats.metadata_bytes(),
        stats.fragmented_bytes()
    );
    txn.abort().unwrap();
    let read = ::redb::ReadableDatabase::begin_read(&db).unwrap();
    if let Ok(id) = std::env::var("IDEMPROXY_STATS_ID") {
        let ops = read.open_table(super::redb::store::OPS).unwrap();
        let bytes = ops.get(id.as_str()).unwrap().unwrap().value().to_vec();
        println!(
            "{} B: {:?}\n{}",
            bytes.len(),
            codec::decode_op(&bytes).unwrap(),
            hex::encode(&bytes)
        );
        let responses = read.open_table(super::redb::store::RESPONSES).unwrap();
        let bytes = responses
            .get(id.as_str())
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        println!(
            "{} B: {:?}",
            bytes.len(),
            codec::decode_response(&bytes).unwrap()
        );
    }
    for handle in read.list_tables().unwrap() {
        let name = handle.name().to_owned();
        let s = read.open_untyped_table(handle).unwrap();
        let t = s.stats().unwrap();
        println!(
            "{name}: {} entries, {} leaf pages, {} branch pages, {} B stored, {} B metadata, {} B fragmented",
            s.len().unwrap(),
            t.leaf_pages(),
            t.branch_pages(),
            t.stored_bytes(),
            t.metadata_bytes(),
            t.fragmented_bytes()
        );
    }
}
