//! Power cuts under load: the real proxy keeps its redb ledger on `lazyfs`, agents send
//! distinct operations and duplicates to a provider that deduplicates on the proxy's key
//! (`pay`) and to one that does not (`ship`), and at a random moment the power is cut: the
//! proxy is SIGKILLed, every write the ledger had not synced is dropped (a third of the cuts
//! tear the last unsynced write of each file instead: half of it, or half a page), the file
//! system is unmounted and mounted again, and the proxy restarted. After each cut the ledger
//! opens (the restart succeeds), and every operation the round touched (all of them at the
//! end) passes `common::chaos::check`: answers replay unchanged, one effect at most, executed
//! means `succeeded` or `unknown`, and `unknown` at `pay` settles `succeeded`.
//!
//! Over the run the cuts must have dropped bytes (else nothing was proven). Names are durable
//! at once and contents at a sync of their file (`lazyfs`, docs/decisions.md "Power loss").
//!
//! `IDEMPROXY_POWER_CUTS` (default 30) sets the number of cuts, `IDEMPROXY_POWER_SEED` the
//! seed of the random choices (printed; the load's interleaving is not reproducible): the long
//! form is `IDEMPROXY_POWER_CUTS=200 cargo test --test power -- --nocapture`.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::Proxy;
use crate::common::chaos::{Kind, Load, Rng, World, check, env_number, seed};
use crate::lazyfs::{Cut, Lost, Mounted};

const AGENTS: usize = 6;
/// The most answers a round waits for before its cut (at least one).
const MAX_ROUND: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_cuts_under_load_lose_no_answer_and_never_repeat_an_effect() {
    let cuts = env_number("IDEMPROXY_POWER_CUTS", 30) as usize;
    eprintln!("power: {cuts} cuts");
    let mut rng = Rng::new(seed("IDEMPROXY_POWER_SEED"));

    let backing = tempfile::tempdir().expect("backing dir");
    let mountpoint = tempfile::tempdir().expect("mount point");
    let mut mounted = Mounted::mount(backing.path(), mountpoint.path());
    let providers = [("pay", Kind::Dedupe), ("ship", Kind::NoDedupe)];
    let world = World::start(&providers, Duration::from_millis(2)).await;
    let ledger: PathBuf = mountpoint.path().join("data/ledger.redb");
    let mut proxy = world
        .policies(Proxy::builder().ledger_file(&ledger))
        .start()
        .await;

    let load = Load::new(&world);
    let (mut total, mut torn_cuts) = (Lost::default(), 0);
    for cut in 0..cuts {
        let round = load.round(&[&proxy], cut, AGENTS, &mut rng);
        let reached = load.until_answered(1 + rng.below(MAX_ROUND)).await;
        assert!(
            reached,
            "cut {cut}: no progress; log:\n{}",
            proxy.log_text()
        );
        // A moment inside the next requests, not only between two.
        tokio::time::sleep(Duration::from_micros(rng.below(3000))).await;
        proxy.kill().await;
        let ops = round.stop().await;

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
        check(&[&proxy], &world, &load, &ops, &format!("cut {cut}"), false).await;
    }

    let ops = load.ops();
    check(&[&proxy], &world, &load, &ops, "after the last cut", true).await;
    eprintln!(
        "power: {cuts} cuts ({torn_cuts} torn), {} operations, {} answered succeeded, \
         {} answers, effects {:?}; dropped {} unsynced bytes and {} length changes, kept {} \
         torn bytes",
        ops.len(),
        load.succeeded(),
        load.answered(),
        world.total_effects(),
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
