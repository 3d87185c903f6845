//! A full disk (issue 7 item 12): one storage error must not stop the proxy until restart.
//!
//! The ledger lives on a real 4 MiB tmpfs filled to ENOSPC by a filler file. A result that
//! cannot be recorded leaves the operation `unknown` (never `in_flight` without an owner) and
//! the agent with `202 outcome-unknown`; `/healthz` is 503 and new operations are 503
//! `ledger-unavailable` (nothing sent) while the ledger cannot write; a `succeeded`
//! operation's replay is answered throughout; once the filler is gone the ledger reopens
//! itself and everything works again, with no restart. Needs root (`mount`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use http::{Method, StatusCode};

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy, Resp, send};

/// A tmpfs of `size` mounted on a temp dir, unmounted (lazily) on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "this test needs a real full disk: `mount -t tmpfs` on {} failed ({status}); run \
             it as root (or with CAP_SYS_ADMIN)",
            dir.path().display()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the file system holding `path` until a write fails with ENOSPC.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).expect("create the filler");
    let chunk = vec![0xA5_u8; 64 * 1024];
    let mut small = [0_u8; 512];
    small.fill(0x5A);
    let full = loop {
        if let Err(e) = file.write_all(&chunk) {
            break e;
        }
    };
    assert_eq!(full.raw_os_error(), Some(28), "ENOSPC expected: {full}");
    // Take the last partial blocks too.
    while file.write_all(&small).is_ok() {}
    let _ = file.sync_all();
}

async fn healthz(proxy: &Proxy) -> Resp {
    send(Method::GET, &proxy.admin_url("/healthz"), &[], "")
        .await
        .expect("the admin listener answers")
}

async fn assert_replayed(proxy: &Proxy, id: &str) {
    let replay = refund(proxy, "wf-done", "amount=100").await;
    assert_eq!(replay.status, StatusCode::OK, "{replay:?}");
    assert_eq!(replay.text(), "refunded");
    assert_op_headers(&replay, id, "succeeded", true);
}

#[tokio::test]
async fn a_full_disk_makes_the_unrecorded_attempt_unknown_and_the_ledger_recovers_by_itself() {
    let disk = Tmpfs::mount("4m");
    let ledger: PathBuf = disk.path().join("ledger.redb");
    let filler = disk.path().join("filler");
    let provider = FakeProvider::start(Behavior::fixed(200, "refunded")).await;
    let config = format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{}\"\n\
         policies = \"policies\"\n",
        ledger.display()
    );
    let proxy = builder(&provider, "dedupe = \"none\"", &refund_route(""))
        .raw_config(&config)
        .start()
        .await;
    let (done, lost, new) = (op_id("wf-done"), op_id("wf-lost"), op_id("wf-new"));

    let first = refund(&proxy, "wf-done", "amount=100").await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");

    // The claim of wf-lost commits; its (large) answer arrives once the disk is full.
    let big = vec![b'r'; 512 * 1024];
    provider.set_behavior(Behavior::fixed(200, big).hold());
    let pending = refund_in_background(&proxy, "wf-lost", "amount=200");
    provider.wait_for_requests(2).await;
    fill(&filler);
    provider.release();
    let answer = pending.await.expect("join").expect("the proxy answers");
    let body = problem(&answer, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &lost, "unknown");
    assert_op_headers(&answer, &lost, "unknown", false);

    let health = healthz(&proxy).await;
    problem(
        &health,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    provider.set_behavior(Behavior::fixed(200, "new refund"));
    let refused = refund(&proxy, "wf-new", "amount=300").await;
    problem(
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    assert_eq!(
        provider.request_count(),
        2,
        "nothing is sent while unwritable"
    );
    assert_replayed(&proxy, &done).await;

    std::fs::remove_file(&filler).expect("free the disk");
    proxy.until_healthy().await;
    let stuck = proxy.op_json(&lost).await;
    assert_eq!(stuck["state"], "unknown", "{stuck}");
    let events = stuck["events"].as_array().expect("events");
    let orphaned = events
        .iter()
        .find(|e| e["kind"] == "operation.orphaned")
        .unwrap_or_else(|| panic!("an operation.orphaned event: {stuck}"));
    let detail = orphaned["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("could not be recorded"), "{detail}");

    let created = refund(&proxy, "wf-new", "amount=300").await;
    assert_eq!(created.status, StatusCode::OK, "{created:?}");
    assert_op_headers(&created, &new, "succeeded", false);
    assert_eq!(provider.request_count(), 3);
    assert_replayed(&proxy, &done).await;
    let log = proxy.log_text();
    assert_eq!(log.matches(common::LEDGER_BROKE).count(), 1, "{log}");
    assert_eq!(
        log.matches("the ledger can write again").count(),
        1,
        "{log}"
    );
    drop(proxy);
    drop(disk);
}
