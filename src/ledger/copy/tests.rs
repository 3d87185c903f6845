//! `ledger copy` between redb files: a copy reads back exactly as its source, leaves the
//! source untouched, refuses a destination that holds anything, and a copy that did not
//! finish is never opened.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tempfile::TempDir;

use super::page::*;
use super::*;
use crate::clock::Timestamp;
use crate::ledger::postgres::tests::TestDb;
use crate::ledger::{Filter, Ledger, LedgerError, LedgerOptions, ReplayNote};
use crate::operation::{
    Approval, Event, EventKind, Operation, RequestChange, StoredResponse, Write,
};

const T0: i64 = 1_800_000_000_000;
const CHECK: &str = "check-value-a";

fn opts(check: &str) -> LedgerOptions {
    LedgerOptions {
        secret_check: Some(check.to_owned()),
        ..LedgerOptions::default()
    }
}

async fn open(path: &Path, now: i64, check: &str) -> Result<Ledger, LedgerError> {
    Ledger::open(path, Timestamp(now), opts(check))
        .await
        .map(|(ledger, _)| ledger)
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
        status: 201,
        headers,
        body: Bytes::from_static(body),
    }
}

async fn put(ledger: &Ledger, op: Operation, response: Option<StoredResponse>, sealed: bool) {
    let id = op.id.clone();
    let events = vec![
        event(EventKind::Claimed, op.created_at.0),
        event(EventKind::ProviderRequested, op.created_at.0 + 1),
    ];
    let request = match sealed {
        true => RequestChange::Store(format!("sealed {id}").into_bytes()),
        false => RequestChange::Keep,
    };
    let write = Write {
        op,
        events,
        response,
        request,
    };
    ledger.update(&id, |_| (Some(write), ())).await.unwrap();
}

/// A ledger with an operation in every state, one of them in flight under a live claim, a
/// replay count, a kept request and two tombstones (a succeeded and a rejected one).
async fn source(path: &Path) {
    let ledger = open(path, T0, CHECK).await.unwrap();
    let at = |n: i64| Timestamp(T0 + n * 1000);
    for (n, id) in ["p/r/gone", "p/r/nope"].into_iter().enumerate() {
        let state = [State::Succeeded, State::Failed][n];
        let approval = [Approval::NotRequired, Approval::Rejected][n];
        let op = Operation {
            approval,
            ..Operation::example(id, state, Timestamp(T0))
        };
        put(&ledger, op, None, false).await;
    }
    let pruned = ledger.prune(Timestamp(T0 + 1), Timestamp(T0 + 500), 10);
    assert_eq!(pruned.await.unwrap(), 2);
    let done = Operation::example("p/r/done", State::Succeeded, at(1));
    put(&ledger, done, Some(response(b"{\"id\":\"re_1\"}")), false).await;
    let claim = Operation {
        fence: ledger.fence(),
        ..Operation::example("p/r/flying", State::InFlight, at(2))
    };
    put(&ledger, claim, None, true).await;
    for (n, state) in [State::Failed, State::Unknown, State::Prepared]
        .into_iter()
        .enumerate()
    {
        let id = format!("q/s/{}", state.as_str());
        let op = Operation::example(&id, state, at(3 + n as i64));
        put(&ledger, op, None, true).await;
    }
    let note = ReplayNote {
        id: "p/r/done".into(),
        count: 7,
        first: at(9),
        last: at(10),
    };
    assert_eq!(ledger.note_replays(vec![note]).await.unwrap(), 1);
}

/// Everything a ledger answers, for every ID it may hold, as one comparable text.
async fn everything(ledger: &Ledger, ids: &[&str]) -> String {
    let mut out = format!("{:?}\n", ledger.stats().await.unwrap());
    out.push_str(&listed(ledger).await);
    out.push_str(&each(ledger, ids).await);
    out
}

/// Every page of the list, as one text.
async fn listed(ledger: &Ledger) -> String {
    let mut out = String::new();
    let mut after = None;
    loop {
        let all = Filter::default();
        let page = ledger.list(&all, 2, after.as_deref()).await.unwrap();
        out.push_str(&format!("{:?}\n", page.ops));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    out
}

/// What the ledger answers for each of `ids`, as one text.
async fn each(ledger: &Ledger, ids: &[&str]) -> String {
    let mut out = String::new();
    for id in ids {
        out.push_str(&format!(
            "{id}: {:?} {:?} {:?} {:?} {:?} {:?}\n",
            ledger.get(id).await.unwrap(),
            ledger.events(id).await.unwrap(),
            ledger.response(id).await.unwrap(),
            ledger.kept_request(id).await.unwrap(),
            ledger.replays(id).await.unwrap(),
            ledger.tombstone(id).await.unwrap(),
        ));
    }
    out
}

const IDS: [&str; 8] = [
    "p/r/gone",
    "p/r/nope",
    "p/r/done",
    "p/r/flying",
    "q/s/failed",
    "q/s/unknown",
    "q/s/prepared",
    "p/r/never",
];

fn files(dir: &TempDir) -> (PathBuf, PathBuf) {
    (dir.path().join("src.redb"), dir.path().join("to/dst.redb"))
}

async fn copy_files(from: &Path, to: &Path) -> Result<Copied, CopyError> {
    copy(&LedgerAt::File(from.into()), &LedgerAt::File(to.into())).await
}

#[tokio::test]
async fn a_copy_reads_back_exactly_as_its_source_and_leaves_it_untouched() {
    let dir = TempDir::new().unwrap();
    let (src, dst) = files(&dir);
    source(&src).await;
    let before = std::fs::read(&src).unwrap();

    let copied = copy_files(&src, &dst).await.unwrap();
    let want = Copied {
        operations: 5,
        events: 11,
        tombstones: 2,
        responses: 1,
        requests: 4,
        replays: 1,
        in_flight: 1,
        secret_check: true,
    };
    assert_eq!(copied, want);
    assert!(std::fs::read(&src).unwrap() == before, "the source's bytes");

    // Both opened at the same instant: the claim in flight is orphaned alike in both.
    let later = T0 + 60_000;
    let source = open(&src, later, CHECK).await.unwrap();
    let copy = open(&dst, later, CHECK).await.unwrap();
    assert_eq!(
        everything(&copy, &IDS).await,
        everything(&source, &IDS).await
    );
    let flying = copy.get("p/r/flying").await.unwrap().unwrap();
    assert_eq!(
        flying.state,
        State::Unknown,
        "orphaned by the copy's first open"
    );
    assert_eq!(
        copy.fence() >> 32,
        source.fence() >> 32,
        "the copy's fences start past every fence its source issued"
    );
}

/// `ledger copy` of a ledger an older build wrote (JSON records, one entry per event, the
/// first response format, the index of every operation): every record reads back the same.
#[tokio::test]
async fn a_copy_of_a_ledger_an_older_build_wrote_reads_back_exactly_as_before() {
    let dir = TempDir::new().unwrap();
    let (src, dst) = files(&dir);
    source(&src).await;
    let later = T0 + 60_000;
    // Opened once first, so its claim in flight is orphaned before the comparisons.
    let ledger = open(&src, later, CHECK).await.unwrap();
    let want = everything(&ledger, &IDS).await;
    drop(ledger);
    crate::ledger::tests::age(&src);
    let ledger = open(&src, later, CHECK).await.unwrap();
    assert_eq!(
        everything(&ledger, &IDS).await,
        want,
        "the old ledger as read"
    );
    drop(ledger);
    copy_files(&src, &dst).await.unwrap();
    let copy = open(&dst, later, CHECK).await.unwrap();
    assert_eq!(everything(&copy, &IDS).await, want, "its copy");
}

#[tokio::test]
async fn the_copy_opens_only_with_the_source_secret() {
    let dir = TempDir::new().unwrap();
    let (src, dst) = files(&dir);
    source(&src).await;
    // A ledger opened once with another secret, and empty, may be a destination.
    drop(open(&dst, T0, "check-value-b").await.unwrap());
    copy_files(&src, &dst).await.unwrap();
    assert!(matches!(
        open(&dst, T0, "check-value-b").await,
        Err(LedgerError::OtherSecret { .. })
    ));
    open(&dst, T0, CHECK)
        .await
        .expect("the source's secret opens it");
}

#[tokio::test]
async fn a_destination_holding_anything_is_refused_and_left_unchanged() {
    let dir = TempDir::new().unwrap();
    let (src, dst) = files(&dir);
    source(&src).await;
    let ledger = open(&dst, T0, CHECK).await.unwrap();
    put(
        &ledger,
        Operation::example("z/z/mine", State::Succeeded, Timestamp(T0)),
        None,
        false,
    )
    .await;
    drop(ledger);
    let before = std::fs::read(&dst).unwrap();
    let refused = copy_files(&src, &dst).await.unwrap_err();
    assert!(matches!(refused, CopyError::NotEmpty { .. }), "{refused}");
    assert!(
        refused.to_string().contains("nothing was changed"),
        "{refused}"
    );
    assert!(
        std::fs::read(&dst).unwrap() == before,
        "the destination's bytes"
    );

    // A tombstone alone makes a ledger not empty either.
    let tombs = dir.path().join("tombs.redb");
    let ledger = open(&tombs, T0, CHECK).await.unwrap();
    put(
        &ledger,
        Operation::example("z/z/old", State::Succeeded, Timestamp(T0)),
        None,
        false,
    )
    .await;
    let cutoff = Timestamp(T0 + 1);
    assert_eq!(ledger.prune(cutoff, cutoff, 1).await.unwrap(), 1);
    drop(ledger);
    let refused = copy_files(&src, &tombs).await.unwrap_err();
    assert!(matches!(refused, CopyError::NotEmpty { .. }), "{refused}");
}

#[tokio::test]
async fn a_source_held_by_a_running_ledger_is_refused() {
    let dir = TempDir::new().unwrap();
    let (src, dst) = files(&dir);
    source(&src).await;
    let running = open(&src, T0, CHECK).await.unwrap();
    let refused = copy_files(&src, &dst).await.unwrap_err();
    assert!(matches!(refused, CopyError::InUse { .. }), "{refused}");
    assert!(refused.to_string().contains("stop it first"), "{refused}");
    assert!(!dst.exists(), "nothing was created");
    drop(running);

    let missing = copy_files(&dir.path().join("nope.redb"), &dst).await;
    assert!(matches!(missing, Err(CopyError::Missing { .. })));
    let same = copy_files(&src, &dir.path().join("./src.redb")).await;
    assert!(matches!(same, Err(CopyError::Usage(_))));
}

#[tokio::test]
async fn a_copy_that_did_not_finish_is_never_opened() {
    let dir = TempDir::new().unwrap();
    let (src, dst) = files(&dir);
    source(&src).await;
    // A copy that stopped after its first commit and one page.
    let mut reader = redb::Reader::open(&src).await.unwrap();
    let loader = redb::Loader::open(&dst).await.unwrap();
    loader.begin(&reader.header().await.unwrap()).await.unwrap();
    loader.load(reader.page(2).await.unwrap()).await.unwrap();
    drop((reader, loader));

    let refused = open(&dst, T0, CHECK).await.err().expect("refused");
    assert!(refused.to_string().contains(UNFINISHED), "{refused}");
    let again = copy_files(&src, &dst).await.unwrap_err();
    assert!(
        again.to_string().contains("did not finish: delete it"),
        "{again}"
    );

    std::fs::remove_file(&dst).unwrap();
    copy_files(&src, &dst).await.expect("a fresh copy");
    let copy = open(&dst, T0 + 1, CHECK).await.unwrap();
    assert!(copy.get("p/r/done").await.unwrap().is_some());
}

/// The IDs of every page of the list, in order.
async fn listed_ids(ledger: &Ledger) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let all = Filter::default();
        let page = ledger.list(&all, 2, after.as_deref()).await.unwrap();
        out.extend(page.ops.iter().map(|op| op.id.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_to_postgresql_and_back_reads_back_exactly_as_its_source() {
    let dir = TempDir::new().unwrap();
    let (src, back) = files(&dir);
    source(&src).await;
    let db = TestDb::new().await;
    let there = copy(&LedgerAt::File(src.clone()), &db.at).await.unwrap();
    let returned = copy(&db.at, &LedgerAt::File(back.clone())).await.unwrap();
    assert_eq!(there, returned, "the same counts both ways");
    assert_eq!(
        (there.operations, there.tombstones, there.events),
        (5, 2, 11)
    );

    let later = T0 + 60_000;
    let source = open(&src, later, CHECK).await.unwrap();
    let copy_back = open(&back, later, CHECK).await.unwrap();
    assert_eq!(
        everything(&copy_back, &IDS).await,
        everything(&source, &IDS).await
    );
    assert_eq!(copy_back.fence() >> 32, source.fence() >> 32);

    // Served from PostgreSQL: the same answers (the claim in flight is orphaned by the
    // database's own clock, so it is compared by its state only), in the same list order.
    let served = Ledger::open(&db.at, Timestamp(later), opts(CHECK)).await;
    let (served, _) = served.unwrap();
    let settled: Vec<&str> = IDS
        .iter()
        .copied()
        .filter(|id| *id != "p/r/flying")
        .collect();
    assert_eq!(each(&served, &settled).await, each(&source, &settled).await);
    assert_eq!(listed_ids(&served).await, listed_ids(&source).await);
    let stats = (served.stats().await.unwrap(), source.stats().await.unwrap());
    assert_eq!(stats.0.by_state, stats.1.by_state);
    let flying = served.get("p/r/flying").await.unwrap().unwrap();
    assert_eq!(flying.state, State::Unknown);
    assert!(
        served.fence() >> 32 > 1,
        "the replica's fences start past every fence the source issued (epoch 1)"
    );
    drop(served);
    let other = Ledger::open(&db.at, Timestamp(later), opts("check-value-b")).await;
    assert!(matches!(other, Err(LedgerError::OtherSecret { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_a_replica_serves_or_that_holds_anything_is_refused() {
    let dir = TempDir::new().unwrap();
    let (src, dst) = files(&dir);
    source(&src).await;
    let db = TestDb::new().await;
    let served = Ledger::open(&db.at, Timestamp(T0), opts(CHECK))
        .await
        .unwrap()
        .0;
    let refused = copy(&LedgerAt::File(src.clone()), &db.at)
        .await
        .unwrap_err();
    assert!(matches!(refused, CopyError::InUse { .. }), "{refused}");
    let refused = copy(&db.at, &LedgerAt::File(dst.clone()))
        .await
        .unwrap_err();
    assert!(matches!(refused, CopyError::InUse { .. }), "{refused}");
    assert!(!dst.exists());
    drop(served);

    let full = TestDb::new().await;
    copy(&LedgerAt::File(src.clone()), &full.at).await.unwrap();
    let refused = copy(&LedgerAt::File(src.clone()), &full.at)
        .await
        .unwrap_err();
    assert!(matches!(refused, CopyError::NotEmpty { .. }), "{refused}");

    let empty = TestDb::new().await;
    let missing = copy(&empty.at, &LedgerAt::File(dst.clone()))
        .await
        .unwrap_err();
    assert!(matches!(missing, CopyError::Missing { .. }), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_into_postgresql_that_did_not_finish_is_never_opened() {
    let dir = TempDir::new().unwrap();
    let (src, _) = files(&dir);
    source(&src).await;
    let db = TestDb::new().await;
    let LedgerAt::Postgres(url) = &db.at else {
        unreachable!("a database")
    };
    let mut reader = redb::Reader::open(&src).await.unwrap();
    let loader = postgres::Loader::open(url).await.unwrap();
    loader.begin(&reader.header().await.unwrap()).await.unwrap();
    loader.load(reader.page(2).await.unwrap()).await.unwrap();
    drop((reader, loader));

    let refused = Ledger::open(&db.at, Timestamp(T0), opts(CHECK)).await;
    let refused = refused.err().expect("refused").to_string();
    assert!(refused.contains(UNFINISHED), "{refused}");
    let again = copy(&LedgerAt::File(src.clone()), &db.at)
        .await
        .unwrap_err();
    assert!(
        again.to_string().contains("did not finish: delete it"),
        "{again}"
    );
    let onward = copy(&db.at, &LedgerAt::File(dir.path().join("onward.redb"))).await;
    let onward = onward.unwrap_err().to_string();
    assert!(
        onward.contains(UNFINISHED),
        "never copied on as if whole: {onward}"
    );
}

#[test]
fn a_page_ends_once_its_stored_bytes_reach_the_bound() {
    assert_eq!(within_page([]), 0);
    assert_eq!(within_page([1, 2, 3]), 3);
    assert_eq!(within_page([PAGE_BYTES + 1, 1]), 1, "at least one");
    assert_eq!(within_page([PAGE_BYTES / 2, PAGE_BYTES / 2, 5]), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_responses_cut_postgres_pages_without_losing_or_repeating_an_operation() {
    let dir = TempDir::new().unwrap();
    let (src, back) = files(&dir);
    let ledger = open(&src, T0, CHECK).await.unwrap();
    let body = Bytes::from(vec![b'r'; 6 << 20]);
    for n in 0..12 {
        let op = Operation::example(&format!("p/r/big-{n:02}"), State::Succeeded, Timestamp(T0));
        let response = StoredResponse {
            body: body.clone(),
            ..response(b"")
        };
        put(&ledger, op, Some(response), n % 2 == 0).await;
    }
    drop(ledger);
    let db = TestDb::new().await;
    let there = copy(&LedgerAt::File(src.clone()), &db.at).await.unwrap();
    let returned = copy(&db.at, &LedgerAt::File(back.clone())).await.unwrap();
    assert_eq!(
        (there.operations, there.responses, there.requests),
        (12, 12, 6)
    );
    assert_eq!(returned, there);
    let ids: Vec<String> = (0..12).map(|n| format!("p/r/big-{n:02}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (source, copied) = (
        open(&src, T0, CHECK).await.unwrap(),
        open(&back, T0, CHECK).await.unwrap(),
    );
    assert_eq!(
        everything(&copied, &ids).await,
        everything(&source, &ids).await
    );
}
