//! config (stub: being written; these are the types the rest of the proxy uses).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::Provider;

pub struct Config {
    pub file: PathBuf,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub ledger: PathBuf,
    pub policies: PathBuf,
    pub limits: Limits,
    pub retention: Retention,
    pub providers: Vec<Provider>,
}

pub struct Limits {
    pub max_request_body: u64,
    pub max_stored_response: u64,
    pub in_flight_wait: Duration,
    pub shutdown_grace: Duration,
}

pub struct Retention {
    pub completed: Duration,
}

#[derive(Debug)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.join("\n"))
    }
}

pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    Err(ConfigErrors(vec![format!(
        "{}: not implemented",
        path.display()
    )]))
}

impl Config {
    pub fn routes_table(&self) -> String {
        String::new()
    }
}
