//! `Database`: a fresh, uniquely named PostgreSQL database on 127.0.0.1:5432 (user
//! `postgres`, trust authentication), dropped with everything in it when the guard drops.
//!
//! The harness's PostgreSQL mode (`IDEMPROXY_TEST_LEDGER=postgres`) gives every proxy one,
//! and the replica tests share one between several proxies. It talks to the server with the
//! PostgreSQL client programs (`psql`, `createdb`, `dropdb`), never through the proxy's code.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the test server listens.
pub const HOST: &str = "127.0.0.1";
pub const PORT: u16 = 5432;
/// The superuser the tests connect as.
pub const USER: &str = "postgres";

/// The environment variable that selects the harness's ledger, and its PostgreSQL value.
pub const LEDGER_ENV: &str = "IDEMPROXY_TEST_LEDGER";

/// Which ledger a harness proxy gets unless a test names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerMode {
    /// `ledger.redb` in the proxy's temp dir (the default).
    Redb,
    /// A database of its own on the local PostgreSQL.
    Postgres,
}

/// `IDEMPROXY_TEST_LEDGER`: unset, empty or `redb` is the redb file; `postgres` a database.
pub fn ledger_mode() -> LedgerMode {
    match std::env::var(LEDGER_ENV).unwrap_or_default().trim() {
        "" | "redb" => LedgerMode::Redb,
        "postgres" => LedgerMode::Postgres,
        other => panic!("{LEDGER_ENV}={other:?}: expected \"postgres\" or \"redb\" (or unset)"),
    }
}

/// How to get the test server going when it does not answer.
const HOW_TO_START: &str = "PostgreSQL must answer on 127.0.0.1:5432 (user postgres, trust \
     authentication) for these tests: start it with `sudo service postgresql start` or \
     `pg_ctlcluster 15 main start` (a test that needs it has `postgres` in its name: `.ci/test` \
     leaves those out when none answers)";

/// A database that exists from `create` until drop.
pub struct Database {
    name: String,
}

impl Database {
    /// Creates `idemproxy_test_<random>`; panics, saying how to start the server, when
    /// PostgreSQL does not answer.
    pub fn create() -> Database {
        let name = format!("idemproxy_test_{:016x}", unique());
        let output = client("createdb").arg(&name).output();
        let output = output.unwrap_or_else(|e| panic!("run createdb: {e}; {HOW_TO_START}"));
        assert!(
            output.status.success(),
            "createdb {name} failed: {}; {HOW_TO_START}",
            String::from_utf8_lossy(&output.stderr)
        );
        Database { name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ledger URL reaching this database directly.
    pub fn url(&self) -> String {
        self.url_at(SocketAddr::from(([127, 0, 0, 1], PORT)))
    }

    /// The ledger URL reaching this database through `addr` (a relay).
    pub fn url_at(&self, addr: SocketAddr) -> String {
        format!("postgres://{USER}@{addr}/{}?sslmode=disable", self.name)
    }

    /// Whether a database of this name exists on the server.
    pub fn exists(name: &str) -> bool {
        let output = client("psql")
            .args(["-X", "-t", "-A", "-d", "postgres", "-c"])
            .arg(format!(
                "SELECT count(*) FROM pg_database WHERE datname = '{name}'"
            ))
            .output()
            .expect("run psql");
        checked(output, "pg_database") == "1"
    }

    /// Runs `sql` (one or more statements) and returns what `psql -tA` printed: one line per
    /// row, columns separated by `|`. Panics when psql fails.
    pub fn sql(&self, sql: &str) -> String {
        let output = self.psql().arg("-c").arg(sql).output().expect("run psql");
        checked(output, sql)
    }

    /// Runs `sql` through `addr` (a relay) instead of the server's own port; the error is
    /// psql's message.
    pub fn sql_at(&self, addr: SocketAddr, sql: &str) -> Result<String, String> {
        let mut command = Command::new("psql");
        command
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
            .args(["-U", USER, "-d", &self.name, "-c", sql])
            .env_remove("PGPASSWORD")
            .stdin(Stdio::null());
        let output = command.output().expect("run psql");
        match output.status.success() {
            true => Ok(String::from_utf8_lossy(&output.stdout).trim().to_string()),
            false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
        }
    }

    /// Opens a session that runs `sql` inside a transaction and keeps it open (so its locks
    /// are held) until the returned `Session` ends or drops; returns once `sql` has run.
    pub fn hold(&self, sql: &str) -> Session {
        let mut child = self
            .psql()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run psql");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        writeln!(stdin, "BEGIN;\n{sql};\nSELECT 'held';").expect("write to psql");
        stdin.flush().expect("write to psql");
        wait_line(&mut stdout, "held");
        Session {
            child,
            stdin: Some(stdin),
            _stdout: stdout,
        }
    }

    /// `psql -tA` on this database, stopping at the first error.
    fn psql(&self) -> Command {
        let mut command = client("psql");
        command
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(&self.name);
        command
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // FORCE ends the sessions of proxies that are still connected (a test that panicked).
        let dropped = client("dropdb")
            .args(["--if-exists", "--force"])
            .arg(&self.name)
            .output();
        if let Ok(output) = dropped
            && !output.status.success()
        {
            eprintln!(
                "dropdb {}: {}",
                self.name,
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// An open transaction (see `Database::hold`); ending it rolls it back.
pub struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    _stdout: BufReader<ChildStdout>,
}

impl Session {
    /// Rolls the transaction back (its locks go) and waits for psql to exit.
    pub fn end(mut self) {
        self.close();
    }

    fn close(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "ROLLBACK;");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}

/// A PostgreSQL client program aimed at the test server as the test user.
fn client(program: &str) -> Command {
    let mut command = Command::new(program);
    command
        .args(["-h", HOST, "-p", &PORT.to_string(), "-U", USER])
        .env_remove("PGPASSWORD")
        .env_remove("PGDATABASE")
        .stdin(Stdio::null());
    command
}

fn checked(output: Output, sql: &str) -> String {
    assert!(
        output.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Reads lines until one equals `want` (psql echoes query results one per line).
fn wait_line(stdout: &mut BufReader<ChildStdout>, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        let n = stdout.read_line(&mut line).expect("read psql");
        assert!(n > 0, "psql ended before printing {want:?}");
        if line.trim() == want {
            return;
        }
    }
}

/// A number no other database of this or another test process gets.
fn unique() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// A fresh installation secret: 64 hex characters, as `IDEMPROXY_SECRET` takes it.
pub fn random_secret() -> String {
    (0..4).map(|_| format!("{:016x}", unique())).collect()
}
