//! `Proxy`: the real `idemproxy` binary in a temp dir of its own (proxy.toml, policies/,
//! ledger, stderr log), started with `serve -c` and ready once it prints its ready line.
//!
//! The proxy is only ever a child process driven through files, signals, its wire and its
//! CLI: a crash test kills a real process (SIGKILL), never a future.
//!
//! With `IDEMPROXY_TEST_LEDGER=postgres` every proxy gets a fresh PostgreSQL database of its
//! own (dropped with the proxy) instead of `ledger.redb`, and an `IDEMPROXY_SECRET`, unless
//! the test names a ledger URL (`ledger_url`) or writes the whole proxy.toml (`raw_config`).

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use super::database::{Database, LedgerMode, ledger_mode, random_secret};
use super::process::{
    NotReady, PROCESS_TIMEOUT, kill_tree, run_to_end, signal, wait_exit, wait_ready,
};

const LOG_FILE: &str = "proxy.log";
/// The default proxy.toml's ledger line, which the PostgreSQL mode replaces.
const REDB_LEDGER: &str = "ledger = \"ledger.redb\"\n";

/// Builds the proxy's temp dir; `start` (or `write`) creates it.
#[derive(Clone)]
pub struct ProxyBuilder {
    proxy_toml: String,
    files: Vec<(String, String)>,
    env: Vec<(String, String)>,
    bin: (PathBuf, Vec<String>),
    ledger: Ledger,
}

/// Where the proxy's ledger lives.
#[derive(Clone)]
enum Ledger {
    /// As `IDEMPROXY_TEST_LEDGER` says: `ledger.redb`, or a database of its own.
    Default,
    /// This URL (replicas sharing a database).
    Url(String),
    /// This redb file, outside the temp dir (a ledger on a test file system).
    File(PathBuf),
    /// Whatever the test's own proxy.toml says.
    Raw,
}

/// The idemproxy binary the tests run: this build's, or the one `IDEMPROXY_TEST_BIN` names
/// (to show that a new test fails on an earlier build, e.g. one from before a fix).
pub fn binary() -> PathBuf {
    match std::env::var_os("IDEMPROXY_TEST_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => PathBuf::from(env!("CARGO_BIN_EXE_idemproxy")),
    }
}

impl Default for ProxyBuilder {
    fn default() -> Self {
        let proxy_toml = "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
                          ledger = \"ledger.redb\"\npolicies = \"policies\"\n";
        Self {
            proxy_toml: proxy_toml.to_string(),
            files: Vec::new(),
            env: vec![("IDEMPROXY_LOG".into(), "debug".into())],
            bin: (binary(), Vec::new()),
            ledger: Ledger::Default,
        }
    }
}

impl ProxyBuilder {
    /// Appends TOML (e.g. a `[limits]` table) to the default proxy.toml, which listens on
    /// port 0 for both listeners and keeps `ledger.redb` and `policies/` in the temp dir.
    pub fn config(mut self, extra: &str) -> Self {
        self.proxy_toml.push('\n');
        self.proxy_toml.push_str(extra);
        self
    }

    /// Replaces proxy.toml entirely (for config-error tests).
    pub fn raw_config(mut self, text: &str) -> Self {
        self.proxy_toml = text.to_string();
        self.ledger = Ledger::Raw;
        self
    }

    /// Puts the ledger at `url` (a `postgres://` URL) whatever `IDEMPROXY_TEST_LEDGER` says;
    /// the test provides the database and the secret.
    pub fn ledger_url(mut self, url: &str) -> Self {
        self.ledger = Ledger::Url(url.to_string());
        self
    }

    /// Puts the redb ledger at `path` whatever `IDEMPROXY_TEST_LEDGER` says (its secret file
    /// beside it, as by default).
    pub fn ledger_file(mut self, path: &Path) -> Self {
        self.ledger = Ledger::File(path.to_path_buf());
        self
    }

    /// Writes `policies/{name}.toml`.
    pub fn policy(self, name: &str, text: &str) -> Self {
        self.file(&format!("policies/{name}.toml"), text)
    }

    /// Writes any file, relative to the temp dir.
    pub fn file(mut self, path: &str, text: &str) -> Self {
        self.files.push((path.to_string(), text.to_string()));
        self
    }

    /// Sets an environment variable for the proxy (and for `run_cli`); `IDEMPROXY_LOG`
    /// defaults to `debug`; `IDEMPROXY_ADMIN_TOKEN`, `IDEMPROXY_SECRET` and `IDEMPROXY_SECRET_FILE`
    /// are unset unless given here.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Runs `program ARGS...` in place of the idemproxy binary, the usual arguments
    /// following (the harness's own tests use `sh script`).
    pub fn bin(mut self, program: impl Into<PathBuf>, args: &[&str]) -> Self {
        self.bin = (program.into(), args.iter().map(|a| a.to_string()).collect());
        self
    }

    /// Creates the temp dir with every file, `policies/` always present (and, in the
    /// PostgreSQL mode, the proxy's database).
    pub fn write(mut self) -> ConfigDir {
        let database = self.place_ledger();
        let ledger_file = match &self.ledger {
            Ledger::File(path) => Some(path.clone()),
            _ => None,
        };
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("policies")).expect("policies dir");
        std::fs::write(dir.path().join("proxy.toml"), &self.proxy_toml).expect("proxy.toml");
        for (path, text) in &self.files {
            let path = dir.path().join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("file's folder");
            }
            std::fs::write(path, text).expect("write test file");
        }
        ConfigDir {
            dir,
            env: self.env,
            bin: self.bin,
            database,
            ledger_file,
        }
    }

    /// Writes the ledger URL into proxy.toml when there is one; in the PostgreSQL mode,
    /// creates the database (returned: it lives as long as the dir) and sets a secret.
    fn place_ledger(&mut self) -> Option<Database> {
        let (url, database) = match &self.ledger {
            Ledger::Raw => return None,
            Ledger::Url(url) => (url.clone(), None),
            Ledger::File(path) => (path.to_string_lossy().into_owned(), None),
            Ledger::Default if ledger_mode() == LedgerMode::Redb => return None,
            Ledger::Default => {
                let database = Database::create();
                let has_secret = self
                    .env
                    .iter()
                    .any(|(k, _)| k.starts_with("IDEMPROXY_SECRET"));
                if !has_secret {
                    self.env.push(("IDEMPROXY_SECRET".into(), random_secret()));
                }
                (database.url(), Some(database))
            }
        };
        let line = format!("ledger = {}\n", super::files::toml_str(&url));
        self.proxy_toml = self.proxy_toml.replacen(REDB_LEDGER, &line, 1);
        database
    }

    pub async fn start(self) -> Proxy {
        self.write().start().await
    }

    /// Starts a proxy that must refuse to start; returns its exit status and stderr.
    pub async fn start_expect_failure(self) -> (ExitStatus, String) {
        self.write().start_expect_failure().await
    }
}

/// The proxy's temp dir and how to launch things in it; removed on drop.
pub struct ConfigDir {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    bin: (PathBuf, Vec<String>),
    /// The PostgreSQL mode's database; dropped after the process (fields drop in order).
    database: Option<Database>,
    /// The redb ledger's path when it is not `ledger.redb` in the dir (`ledger_file`).
    ledger_file: Option<PathBuf>,
}

impl ConfigDir {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("proxy.toml")
    }

    /// The redb ledger file. Tests that read it do not apply to the PostgreSQL mode; they
    /// fail here, saying so, rather than read a file that is not there.
    pub fn ledger_path(&self) -> PathBuf {
        assert!(
            self.database.is_none(),
            "this test reads the redb ledger file: it does not apply with IDEMPROXY_TEST_LEDGER=postgres"
        );
        match &self.ledger_file {
            Some(path) => path.clone(),
            None => self.dir.path().join("ledger.redb"),
        }
    }

    /// The PostgreSQL mode's database, if this proxy has one.
    pub fn database(&self) -> Option<&Database> {
        self.database.as_ref()
    }

    /// Everything the proxy processes started here wrote to stderr, across restarts.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }

    /// The binary with this dir's environment; no other `IDEMPROXY_*` leaks in.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin.0);
        command
            .args(&self.bin.1)
            .env_remove("IDEMPROXY_ADMIN_TOKEN")
            .env_remove("IDEMPROXY_LOG")
            .env_remove("IDEMPROXY_SECRET")
            .env_remove("IDEMPROXY_SECRET_FILE")
            .env_remove("MIMALLOC_ALLOW_THP")
            .env_remove("FAILPOINTS")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        command
    }

    /// Runs `idemproxy ARGS` (e.g. `check -c <config_path>`) to its end; returns
    /// (status, stdout, stderr).
    pub async fn run_cli(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let mut command = self.command();
        command.args(args);
        let output = run_to_end(command, PROCESS_TIMEOUT, &format!("idemproxy {args:?}")).await;
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (output.status, text(&output.stdout), text(&output.stderr))
    }

    /// Spawns `serve -c proxy.toml`, stdout piped for the ready line, stderr appended to
    /// the log file.
    fn spawn(&self) -> Child {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(LOG_FILE))
            .expect("log file");
        self.command()
            .arg("serve")
            .arg("-c")
            .arg(self.config_path())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn idemproxy")
    }

    pub async fn start(self) -> Proxy {
        let mut child = self.spawn();
        match wait_ready(&mut child).await {
            Ok((proxy, admin)) => Proxy {
                config: self,
                child: Some(child),
                proxy,
                admin,
            },
            Err(why) => {
                let _ = kill_tree(&mut child);
                let _ = child.wait();
                panic!("idemproxy {why}; stderr:\n{}", self.log_text())
            }
        }
    }

    /// Starts a proxy that must refuse to start; returns its exit status and stderr.
    pub async fn start_expect_failure(&self) -> (ExitStatus, String) {
        let mut child = self.spawn();
        match wait_ready(&mut child).await {
            Err(NotReady::Exited) => (wait_exit(child).await, self.log_text()),
            outcome => {
                let _ = kill_tree(&mut child);
                let _ = child.wait();
                panic!("idemproxy should have refused to start but {outcome:?}")
            }
        }
    }
}

/// A running proxy; dropping it SIGKILLs the process (and any under it) and removes its dir.
pub struct Proxy {
    config: ConfigDir,
    child: Option<Child>,
    proxy: SocketAddr,
    admin: SocketAddr,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_tree(&mut child);
            let _ = child.wait();
        }
    }
}

impl Proxy {
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder::default()
    }

    /// Where agents connect; changes on `restart`.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// `http://127.0.0.1:PORT{path}` on the proxy listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy)
    }

    /// `http://127.0.0.1:PORT{path}` on the admin listener.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    pub fn dir(&self) -> &ConfigDir {
        &self.config
    }

    /// Operation `id` as `GET /ops/{id}` shows it, events included (the call must succeed).
    pub async fn op_json(&self, id: &str) -> serde_json::Value {
        let url = self.admin_url(&format!("/ops/{}", id.replace('/', "%2F")));
        let resp = super::client::send(http::Method::GET, &url, &[], "")
            .await
            .expect("admin answers");
        assert_eq!(resp.status, http::StatusCode::OK, "{}", resp.text());
        resp.json()
    }

    /// The state of operation `id` as `GET /ops/{id}` shows it (the admin call must succeed).
    pub async fn op_state(&self, id: &str) -> String {
        self.op_json(id).await["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits (bounded, 20 s) until `GET /healthz` answers 200: a ledger that could not write
    /// has recovered.
    pub async fn until_healthy(&self) {
        for _ in 0..400 {
            let health =
                super::client::send(http::Method::GET, &self.admin_url("/healthz"), &[], "")
                    .await
                    .expect("admin answers");
            if health.status == http::StatusCode::OK {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!(
            "/healthz never answered 200 again; log:\n{}",
            self.log_text()
        );
    }

    /// Waits (bounded, 20 s) until operation `id` is in state `want`: for verdicts written
    /// in the background (the settler, a lookup), whose only window is the admin API.
    pub async fn until_state(&self, id: &str, want: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let now = self.op_state(id).await;
            if now == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{id} stayed {now}, never {want}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.config.ledger_path()
    }

    /// Where the ledger is, for the few tests that read it with the crate's ledger API once
    /// the process has stopped: the redb file, or the PostgreSQL mode's database.
    pub fn ledger_at(&self) -> idemproxy::ledger::LedgerAt {
        match self.config.database() {
            Some(database) => {
                let url = idemproxy::ledger::PgUrl::parse(&database.url()).expect("a ledger URL");
                idemproxy::ledger::LedgerAt::Postgres(url)
            }
            None => self.ledger_path().into(),
        }
    }

    pub fn log_text(&self) -> String {
        self.config.log_text()
    }

    /// The running process id, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: a crash, no chance to clean up. Returns once the process is gone.
    pub async fn kill(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("proxy is running");
        kill_tree(&mut child).expect("SIGKILL idemproxy");
        wait_exit(child).await
    }

    /// SIGSTOP: the process is frozen (as by a long pause of its host) until `resume`.
    pub fn pause(&self) {
        signal(self.pid().expect("proxy is running"), "STOP");
    }

    /// Sends the signal `name` (`HUP`, `USR1`, ...) to the running process and returns at once.
    pub fn signal(&self, name: &str) {
        signal(self.pid().expect("proxy is running"), name);
    }

    /// Whether the process is still running (it has not exited, whatever made it stop).
    pub fn running(&mut self) -> bool {
        let child = self.child.as_mut().expect("proxy was started");
        matches!(child.try_wait(), Ok(None))
    }

    /// Waits for the process to exit by itself (after a signal the test sent); fails after 20 s.
    pub async fn exited(&mut self) -> ExitStatus {
        let child = self.child.take().expect("proxy is running");
        wait_exit(child).await
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        signal(self.pid().expect("proxy is running"), "CONT");
    }

    /// SIGTERM: a graceful stop. Returns the exit status (fails after 20 s).
    pub async fn terminate(&mut self) -> ExitStatus {
        let child = self.child.take().expect("proxy is running");
        signal(child.id(), "TERM");
        wait_exit(child).await
    }

    /// Starts the proxy again on the same dir and ledger (terminating it first if it still
    /// runs) and waits for it to be ready; the listeners get new ports.
    pub async fn restart(&mut self) {
        if self.child.is_some() {
            self.terminate().await;
        }
        let mut child = self.config.spawn();
        match wait_ready(&mut child).await {
            Ok((proxy, admin)) => {
                (self.proxy, self.admin) = (proxy, admin);
                self.child = Some(child);
            }
            Err(why) => {
                let _ = kill_tree(&mut child);
                let _ = child.wait();
                panic!("idemproxy restart: {why}; stderr:\n{}", self.log_text())
            }
        }
    }

    /// Starts the proxy again on the same dir (terminating it first if it still runs),
    /// expecting it to refuse to start; returns its exit status and the whole log. The
    /// proxy is left stopped; `restart` may follow.
    pub async fn restart_expect_failure(&mut self) -> (ExitStatus, String) {
        if self.child.is_some() {
            self.terminate().await;
        }
        self.config.start_expect_failure().await
    }

    /// Sets an environment variable for the next `restart` (e.g. a fault injection).
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.config.env.retain(|(k, _)| k != key);
        self.config.env.push((key.to_string(), value.to_string()));
    }

    /// `ConfigDir::run_cli` with this proxy's environment (e.g. its admin token).
    pub async fn run_cli(&self, args: &[&str]) -> (ExitStatus, String, String) {
        self.config.run_cli(args).await
    }
}
