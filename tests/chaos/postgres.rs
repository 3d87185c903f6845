//! Random kills on PostgreSQL: two replicas share a private server (`Cluster`), each through a
//! relay of its own. Every round kills one replica or both at a random moment; some rounds
//! also crash and restart the server, cut the replicas' connections for a moment, or delay
//! every packet between them and the server.

use std::time::Duration;

use crate::common::chaos::{Kind, Load, Rng, World, check, seed};
use crate::common::cluster::Cluster;
use crate::common::database::random_secret;
use crate::common::{Proxy, Relay};
use crate::{AGENTS, MAX_ROUND, PROVIDER_DELAY, kills};

/// The replicas' lease: a killed replica's claims become `unknown` this long after its last
/// renewal (the shortest the reference allows is 500ms; a loaded machine needs some slack).
const LEASE: &str = "1s";

/// What else goes wrong in a round besides the kill.
#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    /// The server crashes (`pg_ctl stop -m immediate`) and starts again, under load.
    ServerCrash,
    /// Every connection of one replica (or both) dropped, new ones refused, for a moment.
    Cut {
        both: bool,
        millis: u64,
    },
    /// Every packet between the replicas and the server waits this long.
    Delay {
        millis: u64,
    },
}

fn fault(rng: &mut Rng) -> Fault {
    match rng.below(8) {
        0 => Fault::ServerCrash,
        1 | 2 => Fault::Cut {
            both: rng.below(2) == 0,
            millis: rng.below(500),
        },
        3 => Fault::Delay {
            millis: 1 + rng.below(20),
        },
        _ => Fault::None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_kills_on_postgres_keep_every_guarantee() {
    let kills = kills();
    let mut rng = Rng::new(seed("IDEMPROXY_KILLS_SEED"));
    let cluster = tokio::task::block_in_place(Cluster::start);
    let providers = [
        ("pay", Kind::Dedupe),
        ("ship", Kind::NoDedupe),
        ("book", Kind::Lookup),
    ];
    let world = World::start(&providers, PROVIDER_DELAY).await;
    let secret = random_secret();
    let relays = [Relay::start(cluster.addr()), Relay::start(cluster.addr())];
    let mut replicas = Vec::new();
    for relay in &relays {
        let builder = world
            .policies(Proxy::builder())
            .ledger_url(&cluster.url_at(relay.addr()))
            .env("IDEMPROXY_SECRET", &secret)
            .config(&format!("[replicas]\nlease = \"{LEASE}\"\n"));
        replicas.push(builder.start().await);
    }
    let load = Load::new(&world);
    let (mut killed, mut faults) = (0, Vec::new());
    for kill in 0..kills {
        let fault = fault(&mut rng);
        faults.push(fault);
        if let Fault::Delay { millis } = fault {
            relays
                .iter()
                .for_each(|r| r.delay(Duration::from_millis(millis)));
        }
        let round = {
            let proxies: Vec<&Proxy> = replicas.iter().collect();
            load.round(&proxies, kill, AGENTS, &mut rng)
        };
        let reached = load.until_answered(1 + rng.below(MAX_ROUND)).await;
        assert!(
            reached,
            "kill {kill} ({fault:?}): no progress; logs:\n{}",
            logs(&replicas)
        );
        match fault {
            Fault::ServerCrash => tokio::task::block_in_place(|| cluster.crash_restart()),
            Fault::Cut { both, millis } => {
                let cut = if both { &relays[..] } else { &relays[..1] };
                cut.iter().for_each(Relay::cut);
                tokio::time::sleep(Duration::from_millis(millis)).await;
                cut.iter().for_each(Relay::restore);
            }
            Fault::None | Fault::Delay { .. } => {}
        }
        tokio::time::sleep(Duration::from_micros(rng.below(3000))).await;
        let victims: &[usize] = match rng.below(3) {
            0 => &[0],
            1 => &[1],
            _ => &[0, 1],
        };
        for &i in victims {
            replicas[i].kill().await;
            killed += 1;
        }
        let ops = round.stop().await;
        relays.iter().for_each(|r| r.delay(Duration::ZERO));
        for &i in victims {
            replicas[i].restart().await;
        }
        let proxies: Vec<&Proxy> = replicas.iter().collect();
        check(
            &proxies,
            &world,
            &load,
            &ops,
            &format!("kill {kill} ({fault:?})"),
            false,
        )
        .await;
    }
    let ops = load.ops();
    let proxies: Vec<&Proxy> = replicas.iter().collect();
    check(&proxies, &world, &load, &ops, "after the last kill", true).await;
    let count = |f: fn(&Fault) -> bool| faults.iter().filter(|x| f(x)).count();
    eprintln!(
        "postgres kills: {kills} rounds, {killed} replicas killed, {} server crashes, {} cuts, \
         {} delayed rounds; {} operations, {} answered succeeded, {} answers, effects {:?}",
        count(|f| matches!(f, Fault::ServerCrash)),
        count(|f| matches!(f, Fault::Cut { .. })),
        count(|f| matches!(f, Fault::Delay { .. })),
        ops.len(),
        load.succeeded(),
        load.answered(),
        world.total_effects(),
    );
}

fn logs(replicas: &[Proxy]) -> String {
    replicas
        .iter()
        .enumerate()
        .map(|(i, p)| format!("----- replica {i} -----\n{}", p.log_text()))
        .collect()
}
