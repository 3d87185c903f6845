//! The write-ahead log (issue 8): a batch is durable once its frame in `<ledger>.wal` is
//! synced, and the redb file catches up at a checkpoint. So what a SIGKILLed proxy answered
//! after its last checkpoint lives only in the log, and the next start must replay it: every
//! answered operation replays, nothing is sent twice. A torn tail after the last frame is
//! ignored; a log that belongs to another ledger file is refused, never replayed.

use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use http::{Method, StatusCode};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy, send};

const OPERATIONS: usize = 16;

/// No checkpoint during the test: what it writes stays in the log until the kill.
const NO_CHECKPOINT: (&str, &str) = ("IDEMPROXY_WAL_CHECKPOINT_MS", "600000");

fn log_of(ledger: &Path) -> PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

async fn proxy_without_checkpoints(provider: &FakeProvider) -> Proxy {
    builder(provider, "", &refund_route(""))
        .env(NO_CHECKPOINT.0, NO_CHECKPOINT.1)
        .start()
        .await
}

/// A proxy that answered every refund of `refund_all` and was then SIGKILLed before any
/// checkpoint: what it answered is in its log only.
async fn killed_after_refunds(provider: &FakeProvider) -> Proxy {
    let mut proxy = proxy_without_checkpoints(provider).await;
    refund_all(&proxy).await;
    assert!(!proxy.kill().await.success(), "killed by SIGKILL");
    proxy
}

/// How many of the refunds the stopped proxy's ledger file holds on its own: read from a
/// copy of the file without its log.
async fn in_the_file_alone(proxy: &Proxy) -> usize {
    let alone = tempfile::tempdir().expect("temp dir");
    let copy = alone.path().join("ledger.redb");
    std::fs::copy(proxy.ledger_path(), &copy).expect("copy the ledger file");
    let (file_only, _) = Ledger::open(copy, Timestamp::now(), LedgerOptions::default())
        .await
        .expect("open the copy");
    let mut found = 0;
    for n in 0..OPERATIONS {
        let op = file_only.get(&op_id(&format!("wf-log-{n}"))).await;
        found += usize::from(op.expect("read").is_some());
    }
    found
}

/// Refunds `wf-log-0..OPERATIONS` at once; each must be answered 200.
async fn refund_all(proxy: &Proxy) {
    let pending: Vec<_> = (0..OPERATIONS)
        .map(|n| refund_in_background(proxy, &format!("wf-log-{n}"), "amount=100"))
        .collect();
    for task in pending {
        let answer = task.await.expect("task").expect("answer");
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    }
}

/// Each refund replays from the ledger (nothing sent again).
async fn assert_all_replayed(proxy: &Proxy, provider: &FakeProvider) {
    for n in 0..OPERATIONS {
        let rendered = format!("wf-log-{n}");
        let replay = refund(proxy, &rendered, "amount=100").await;
        assert_eq!(replay.status, StatusCode::OK, "{}", replay.text());
        assert_op_headers(&replay, &op_id(&rendered), "succeeded", true);
    }
    assert_eq!(provider.request_count(), OPERATIONS, "nothing sent twice");
    assert_eq!(provider.effects(), OPERATIONS);
}

/// Where the whole frames of a log end (its format: a 16-byte header, then frames of
/// `len u32, crc u32, lsn u64, len bytes`; the scan here trusts lengths, not checksums, and
/// stops where a following sequence number does not follow).
fn frames_end(log: &[u8]) -> usize {
    let mut at = 16;
    let mut prev: Option<u64> = None;
    while at + 16 <= log.len() {
        let len = u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
        let lsn = u64::from_le_bytes(log[at + 8..at + 16].try_into().unwrap());
        if len == 0 && lsn == 0 || prev.is_some_and(|p| lsn != p + 1) || at + 16 + len > log.len() {
            break;
        }
        prev = Some(lsn);
        at += 16 + len;
    }
    at
}

#[tokio::test]
async fn answers_given_before_a_kill_survive_it_through_the_log() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = killed_after_refunds(&provider).await;
    // The ledger file alone (a copy without its log) holds none of them: they were answered
    // from the log's synced frames, not from a durable commit of the file.
    assert_eq!(
        in_the_file_alone(&proxy).await,
        0,
        "the file held them itself"
    );

    proxy.restart().await;
    assert_all_replayed(&proxy, &provider).await;
    // The restart's start-up write checkpointed them: after another kill the file alone
    // holds them all.
    assert!(!proxy.kill().await.success());
    assert_eq!(in_the_file_alone(&proxy).await, OPERATIONS);
    proxy.restart().await;
    assert_all_replayed(&proxy, &provider).await;
}

/// A graceful stop checkpoints what the log holds: the file alone is the whole ledger (it can
/// be copied or backed up by itself, reference section 12) and the log holds nothing to replay.
#[tokio::test]
async fn after_a_graceful_stop_the_file_alone_holds_every_answer() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = proxy_without_checkpoints(&provider).await;
    refund_all(&proxy).await;
    assert!(proxy.terminate().await.success(), "a graceful stop");
    assert_eq!(in_the_file_alone(&proxy).await, OPERATIONS);
    // And the log was checkpointed: it holds no frame for the next start to replay.
    let log = std::fs::read(log_of(&proxy.ledger_path())).expect("read the log");
    assert_eq!(frames_end(&log), 16, "the log still holds frames");
}

#[tokio::test]
async fn a_torn_tail_after_the_last_frame_is_ignored() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = killed_after_refunds(&provider).await;

    // A frame cut short after the last whole one, as an unsynced append leaves it: a head
    // announcing 4 KiB and only half its bytes.
    let path = log_of(&proxy.ledger_path());
    let log = std::fs::read(&path).expect("read the log");
    let end = frames_end(&log);
    assert!(end > 16, "the log holds the frames of the test");
    let mut torn = Vec::new();
    torn.extend_from_slice(&4096_u32.to_le_bytes());
    torn.extend_from_slice(&0xdead_beef_u32.to_le_bytes());
    torn.extend_from_slice(&u64::MAX.to_le_bytes());
    torn.extend(std::iter::repeat_n(0x5a, 2048));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open the log");
    file.seek(SeekFrom::Start(end as u64)).expect("seek");
    file.write_all(&torn).expect("tear the tail");
    drop(file);

    proxy.restart().await;
    assert_all_replayed(&proxy, &provider).await;
    // The start says what it ignored: one frame, as many bytes as its head announced.
    let said = proxy.log_text();
    assert!(
        said.contains("ignored_frames=1") && said.contains("ignored_bytes=4112"),
        "{said}"
    );
    let created = refund(&proxy, "wf-log-after", "amount=1").await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.text());
    assert!(!proxy.kill().await.success());
    proxy.restart().await;
    let replay = refund(&proxy, "wf-log-after", "amount=1").await;
    assert_op_headers(&replay, &op_id("wf-log-after"), "succeeded", true);
}

/// The offsets of the whole frames of a log (see `frames_end`).
fn frame_offsets(log: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut at = 16;
    while at < frames_end(log) {
        offsets.push(at);
        at += 16 + u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
    }
    offsets
}

/// One flipped bit in a frame in the middle of the log is corruption, not a torn tail: the
/// frames after it were synced and answered. The start refuses, naming the log and the
/// damaged frame's offset, and nothing is sent again; before, the scan ended at the damage
/// and every operation of the later frames was forgotten (and sent again on a retry).
#[tokio::test]
async fn a_damaged_frame_in_the_middle_of_the_log_refuses_the_start() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = killed_after_refunds(&provider).await;
    let path = log_of(&proxy.ledger_path());
    let mut log = std::fs::read(&path).expect("read the log");
    let frames = frame_offsets(&log);
    assert!(
        frames.len() >= 3,
        "the refunds left {} frames",
        frames.len()
    );
    let middle = frames[frames.len() / 2];
    log[middle + 20] ^= 0x01;
    std::fs::write(&path, &log).expect("damage the log");

    let (status, said) = proxy.restart_expect_failure().await;
    assert!(!status.success(), "{said}");
    assert!(
        said.contains(&path.display().to_string())
            && said.contains(&format!("the frame at byte {middle} is damaged")),
        "the refusal names the log and the damaged frame: {said}"
    );
    assert_eq!(provider.request_count(), OPERATIONS, "nothing sent again");
}

#[tokio::test]
async fn a_log_left_beside_another_ledger_file_is_refused() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = killed_after_refunds(&provider).await;

    // The ledger file is gone (deleted, or replaced by a fresh one); its log is not.
    std::fs::remove_file(proxy.ledger_path()).expect("remove the ledger file");
    let (status, log) = proxy.restart_expect_failure().await;
    assert!(!status.success(), "{log}");
    let wal = log_of(&proxy.ledger_path());
    assert!(
        log.contains(&wal.display().to_string()) && log.contains("another ledger file"),
        "the refusal names the log and why: {log}"
    );

    // Moved away, the operator starts on the empty ledger.
    std::fs::rename(&wal, wal.with_extension("wal.old")).expect("move the log away");
    proxy.restart().await;
    let fresh = refund(&proxy, "wf-log-0", "amount=100").await;
    assert_op_headers(&fresh, &op_id("wf-log-0"), "succeeded", false);
}

/// A log that cannot be synced leaves the claim undurable, so its request is never sent: the
/// agent gets `503 ledger-unavailable`, and the ledger is reopened from what the disk holds.
/// (`IDEMPROXY_FAIL=ledger.sync` fails every sync of the log.)
#[tokio::test]
async fn a_log_that_cannot_be_synced_sends_nothing() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_FAIL", "ledger.sync")
        .start()
        .await;
    let resp = refund(&proxy, "wf-unsynced", "amount=500").await;
    let body = problem(&resp, StatusCode::SERVICE_UNAVAILABLE, "ledger-unavailable");
    assert_next(
        &body,
        "retry_same",
        &["nothing was sent", "Retry the same request"],
    );
    for n in 0..4 {
        let again = refund(&proxy, &format!("wf-unsynced-{n}"), "amount=5").await;
        assert_eq!(again.status, StatusCode::SERVICE_UNAVAILABLE, "{again:?}");
    }
    assert_eq!(provider.request_count(), 0, "the provider got nothing");
    let log = proxy.log_text();
    assert!(log.contains("could not be synced"), "{log}");
    // Broken as by any storage error (logged once) and reopened from what the disk holds.
    assert_eq!(log.matches(common::LEDGER_BROKE).count(), 1, "{log}");
}

/// Runs the proxy under strace when `FAIL_SYNC_OF` names a file: the first `fdatasync` of
/// that file (the log) really fails with `EIO` (strace injects it into the system call; every
/// other system call, and every later sync, is the kernel's own). Without it, the proxy as is.
const FIRST_SYNC_FAILS: &str = r#"
if [ -n "$FAIL_SYNC_OF" ]; then
  command -v strace >/dev/null || { echo "this test needs strace (apt-get install strace)" >&2; exit 3; }
  exec strace -f -qq --seccomp-bpf -o /dev/null -e trace=fdatasync \
    -e inject=fdatasync:error=EIO:when=1 -P "$FAIL_SYNC_OF" -- "$0" "$@"
fi
exec "$0" "$@""#;

/// A real failed `fdatasync` of the log (EIO from the kernel's call, injected by strace):
/// the claim is not durable, so its request is never sent and the agent is told so (`503`,
/// "nothing was sent ... retry later"). When the ledger can write again, the agent's retry is
/// sent, once, and succeeds: the claim that never left is not taken for an attempt whose
/// outcome is unknown (which, at a provider that cannot deduplicate, would hold the retry
/// for a person although nothing was ever sent). Its history says what happened.
#[tokio::test]
async fn a_claim_whose_log_sync_failed_is_sent_once_when_the_agent_retries() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refunded")).await;
    let bin = env!("CARGO_BIN_EXE_idemproxy");
    let mut proxy = builder(&provider, "dedupe = \"none\"", &refund_route(""))
        .bin("sh", &["-c", FIRST_SYNC_FAILS, bin])
        .start()
        .await;
    // The first start created the log (and synced it); the injection starts with the next.
    let wal = log_of(&proxy.ledger_path());
    proxy.set_env("FAIL_SYNC_OF", &wal.display().to_string());
    proxy.restart().await;

    let refused = refund(&proxy, "wf-eio", "amount=500").await;
    let body = problem(
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("nothing was sent"), "{detail}");
    assert_eq!(provider.request_count(), 0, "the provider got nothing");
    assert!(
        proxy.log_text().contains("Input/output error"),
        "the real error is logged: {}",
        proxy.log_text()
    );

    proxy.until_healthy().await;
    // Settled as what it was: an attempt that never left, nothing of which can have taken
    // effect.
    let settled = proxy.op_json(&op_id("wf-eio")).await;
    assert_eq!(settled["state"], "failed", "{settled}");
    assert_eq!(settled["attempts"], 1, "{settled}");
    let retried = refund(&proxy, "wf-eio", "amount=500").await;
    assert_eq!(
        retried.status,
        StatusCode::OK,
        "{retried:?}\n{}",
        proxy.log_text()
    );
    assert_eq!(retried.text(), "refunded");
    assert_op_headers(&retried, &op_id("wf-eio"), "succeeded", false);
    assert_eq!(provider.request_count(), 1, "sent once, on the retry");
    let again = refund(&proxy, "wf-eio", "amount=500").await;
    assert_op_headers(&again, &op_id("wf-eio"), "succeeded", true);
    assert_eq!(provider.request_count(), 1, "never twice");

    let op = proxy.op_json(&op_id("wf-eio")).await;
    let events = op["events"].as_array().expect("events");
    let details: Vec<&str> = events
        .iter()
        .map(|e| e["detail"].as_str().unwrap_or_default())
        .collect();
    assert!(
        details.iter().any(|d| d.contains("nothing was sent")),
        "the history tells of the attempt that never left: {op}"
    );
    assert_eq!(
        op["attempts"], 2,
        "the refused attempt and the sent one: {op}"
    );

    // Nothing outlives the test: the process the harness started is strace, and a tracer's
    // death only detaches its tracee, which would serve on with nobody to stop it.
    let tracer = proxy.pid().expect("the proxy runs");
    let traced = common::process::descendants(tracer);
    assert_eq!(traced.len(), 1, "strace traces one process: {traced:?}");
    drop(proxy);
    for pid in traced {
        if !common::process::gone_within(pid, std::time::Duration::from_secs(10)).await {
            common::process::signal(pid, "KILL");
            panic!("the proxy {pid} outlived strace, its parent");
        }
    }
}

/// A sync that fails while the writer is busy with other writes: the writer must take the
/// failure (and reopen the ledger from what the log holds) before any recovery. It once could
/// see the ledger unwritable a moment before it saw the failure, recover at once without that
/// reopen, and break again on the next sync: two breaks for one failure.
#[tokio::test]
async fn a_sync_failing_under_concurrent_writes_breaks_the_ledger_once() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_FAIL", "ledger.sync")
        .start()
        .await;
    let ids: Vec<String> = (0..48).map(|n| format!("wf-busy-{n}")).collect();
    let answers =
        futures_util::future::join_all(ids.iter().map(|id| refund(&proxy, id, "amount=5"))).await;
    for resp in &answers {
        assert_eq!(resp.status, StatusCode::SERVICE_UNAVAILABLE, "{resp:?}");
    }
    assert_eq!(provider.request_count(), 0, "the provider got nothing");
    let log = proxy.log_text();
    assert_eq!(log.matches(common::LEDGER_BROKE).count(), 1, "{log}");
}

/// The same race held open on purpose: `IDEMPROXY_SYNC_FAILURE_PAUSE_MS` makes the syncer
/// wait after a failed sync has stopped writes, before it wakes the writer or answers anyone,
/// and a second claim is sent into that wait. The writer must take the failure (reopen the
/// ledger from what the log holds) before any recovery, and recover only once the syncer has
/// answered the failed batch and left its claim for the sweep: `/healthz` stays 503 until
/// then, there is one break, and the first claim ends `failed` (it never left). The syncer
/// once stopped writes and marked the failure for the writer in two steps; a writer that came
/// between them, or a syncer stalled between them longer than the first backoff, made the
/// ledger recover and then break again.
#[tokio::test]
async fn a_write_while_the_syncer_handles_a_failed_sync_breaks_the_ledger_once() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_FAIL", "ledger.sync")
        .env("IDEMPROXY_SYNC_FAILURE_PAUSE_MS", "3000")
        .start()
        .await;
    let first = refund_in_background(&proxy, "wf-first", "amount=5");
    // The first claim's sync has failed; the syncer is inside its pause.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !proxy.log_text().contains("could not be synced") {
        assert!(
            std::time::Instant::now() < deadline,
            "no failed sync: {}",
            proxy.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let seen = std::time::Instant::now();
    let second = refund(&proxy, "wf-second", "amount=5").await;
    assert_eq!(second.status, StatusCode::SERVICE_UNAVAILABLE, "{second:?}");
    // The ledger stays broken until the failed batch is answered and its claim buried: a
    // recovery before would leave the first claim pending behind a 200 from `/healthz`.
    // Sampled for the first half of the pause (which began before the line was seen).
    while seen.elapsed() < std::time::Duration::from_millis(1500) {
        let health = send(Method::GET, &proxy.admin_url("/healthz"), &[], "")
            .await
            .expect("admin answers");
        assert_eq!(
            health.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            proxy.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let first = first
        .await
        .expect("the task ends")
        .expect("the proxy answers");
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE, "{first:?}");
    proxy.until_healthy().await;
    assert_eq!(
        proxy
            .op_state(&format!("{PROVIDER}/{ROUTE}/wf-first"))
            .await,
        "failed"
    );
    assert_eq!(provider.request_count(), 0, "the provider got nothing");
    let log = proxy.log_text();
    assert_eq!(log.matches(common::LEDGER_BROKE).count(), 1, "{log}");
    assert_eq!(
        log.matches("the ledger can write again").count(),
        1,
        "{log}"
    );
}
