//! `Replicas`: several real `idemproxy` processes sharing one fresh PostgreSQL database,
//! with the same policies and installation secret, each with its own listeners and temp
//! dir, each reaching the database through a `Relay` of its own, so a test can cut the
//! database off from all of them (`cut`) or from one (`relay(i).cut()`, a partition).

use std::net::SocketAddr;
use std::ops::{Index, IndexMut};

use futures_util::future::join_all;

use super::database::{Database, random_secret};
use super::proxy::{Proxy, ProxyBuilder};
use super::relay::Relay;

/// The running replicas; dropping it kills them, then closes the relays and drops the
/// database (fields drop in declaration order).
pub struct Replicas {
    proxies: Vec<Proxy>,
    /// `relays[i]` is replica `i`'s way to the database.
    relays: Vec<Relay>,
    database: Database,
    builder: ProxyBuilder,
    secret: String,
}

impl Replicas {
    /// Starts `n` replicas of `builder` at once (so they race to create the schema) on a new
    /// database. The builder's ledger line and secret are replaced.
    pub async fn start(builder: ProxyBuilder, n: usize) -> Replicas {
        let mut replicas = Replicas {
            proxies: Vec::new(),
            relays: Vec::new(),
            database: Database::create(),
            builder,
            secret: random_secret(),
        };
        let starts: Vec<_> = (0..n).map(|_| replicas.replica().start()).collect();
        replicas.proxies = join_all(starts).await;
        replicas
    }

    /// A builder for one more replica: the shared one with this database (through a new
    /// relay, that of the next replica `add`ed or started) and this secret. Change it
    /// (another secret) before starting it.
    pub fn replica(&mut self) -> ProxyBuilder {
        let relay = Relay::start(SocketAddr::from(([127, 0, 0, 1], super::database::PORT)));
        let url = self.database.url_at(relay.addr());
        self.relays.push(relay);
        self.builder
            .clone()
            .ledger_url(&url)
            .env("IDEMPROXY_SECRET", &self.secret)
    }

    /// Starts one more replica and returns its index.
    pub async fn add(&mut self) -> usize {
        let proxy = self.replica().start().await;
        self.proxies.push(proxy);
        self.proxies.len() - 1
    }

    /// The database becomes unreachable for every replica (see `Relay::cut`).
    pub fn cut(&self) {
        self.relays.iter().for_each(Relay::cut);
    }

    /// The database is reachable again for every replica.
    pub fn restore(&self) {
        self.relays.iter().for_each(Relay::restore);
    }

    pub fn len(&self) -> usize {
        self.proxies.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Proxy> {
        self.proxies.iter()
    }

    /// Replica `i`'s relay, to cut it off alone.
    pub fn relay(&self, i: usize) -> &Relay {
        &self.relays[i]
    }

    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The secret every replica shares.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Every replica's log, each under a header line, for failure messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for (i, proxy) in self.proxies.iter().enumerate() {
            text.push_str(&format!("----- replica {i} -----\n{}", proxy.log_text()));
        }
        text
    }
}

impl Index<usize> for Replicas {
    type Output = Proxy;
    fn index(&self, i: usize) -> &Proxy {
        &self.proxies[i]
    }
}

impl IndexMut<usize> for Replicas {
    fn index_mut(&mut self, i: usize) -> &mut Proxy {
        &mut self.proxies[i]
    }
}
