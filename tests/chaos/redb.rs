//! Random kills on the redb ledger: one proxy, killed at a random moment of every round.

use std::time::Duration;

use crate::common::Proxy;
use crate::common::chaos::{Kind, Load, Rng, World, check, seed};
use crate::{AGENTS, MAX_ROUND, PROVIDER_DELAY, kills};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_kills_on_redb_keep_every_guarantee() {
    let kills = kills();
    let mut rng = Rng::new(seed("IDEMPROXY_KILLS_SEED"));
    let providers = [
        ("pay", Kind::Dedupe),
        ("ship", Kind::NoDedupe),
        ("book", Kind::Lookup),
    ];
    let world = World::start(&providers, PROVIDER_DELAY).await;
    let mut proxy = world.policies(Proxy::builder()).start().await;
    let load = Load::new(&world);
    for kill in 0..kills {
        let round = load.round(&[&proxy], kill, AGENTS, &mut rng);
        let reached = load.until_answered(1 + rng.below(MAX_ROUND)).await;
        assert!(
            reached,
            "kill {kill}: no progress; log:\n{}",
            proxy.log_text()
        );
        tokio::time::sleep(Duration::from_micros(rng.below(3000))).await;
        proxy.kill().await;
        let ops = round.stop().await;
        proxy.restart().await;
        check(
            &[&proxy],
            &world,
            &load,
            &ops,
            &format!("kill {kill}"),
            false,
        )
        .await;
    }
    let ops = load.ops();
    check(&[&proxy], &world, &load, &ops, "after the last kill", true).await;
    eprintln!(
        "redb kills: {kills} kills, {} operations, {} answered succeeded, {} answers, \
         effects {:?}",
        ops.len(),
        load.succeeded(),
        load.answered(),
        world.total_effects(),
    );
}
