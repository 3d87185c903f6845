//! `Cluster`: a private PostgreSQL server of the test's own (Debian's `initdb` and `pg_ctl`,
//! run as the user `postgres`), so a test can crash and restart the database server itself
//! (`crash_restart`: `pg_ctl stop -m immediate`, which recovers from its write-ahead log at the
//! next start) without touching the server the rest of the suite shares. It listens on a free
//! loopback port with trust authentication and is stopped and removed when the guard drops.
//!
//! A test process killed outright (SIGKILL, a timeout) drops nothing, and its server would run
//! on: each cluster's folder names the process that made it (`owner`), and every `start` first
//! stops and removes the clusters whose owner has gone (`sweep_orphans`).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running private server.
pub struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
}

/// Where Debian keeps the server programs of the newest installed major version.
fn server_bin() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<u32> = std::fs::read_dir(root)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: the PostgreSQL server is not installed",
                root.display()
            )
        })
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    let version = versions
        .last()
        .expect("a PostgreSQL server version under /usr/lib/postgresql");
    root.join(version.to_string()).join("bin")
}

/// Runs `program args` as the user `postgres` (the server refuses to run as root).
fn as_postgres(program: &Path, args: &[&str]) -> Output {
    let mut command = if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    };
    command
        .args(args)
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn checked(output: Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// The prefix of every cluster's folder in the temporary directory.
const PREFIX: &str = "idemproxy-cluster-";
/// The file in a cluster's folder that holds the process ID of the test that made it.
const OWNER: &str = "owner";

/// Stops and removes every cluster whose owning test process is no longer running (one killed
/// before it could drop its guard); leaves the others, and folders it cannot read, alone.
/// Returns the folders it removed.
pub fn sweep_orphans() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let named = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PREFIX));
        let owner = std::fs::read_to_string(dir.join(OWNER)).ok();
        let Some(owner) = owner.and_then(|o| o.trim().parse::<u32>().ok()) else {
            continue;
        };
        if !named || Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let data = dir.join("data").to_string_lossy().into_owned();
        let _ = as_postgres(
            &server_bin().join("pg_ctl"),
            &["-D", &data, "-m", "immediate", "-w", "stop"],
        );
        if std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

impl Cluster {
    /// Initialises and starts a new server (about two seconds), once the servers of killed
    /// tests are gone (`sweep_orphans`).
    pub fn start() -> Cluster {
        sweep_orphans();
        let bin = server_bin();
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir()
            .expect("cluster dir");
        std::fs::write(dir.path().join(OWNER), std::process::id().to_string())
            .expect("write the cluster's owner");
        if is_root() {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .output()
                .expect("run chown");
            checked(chown, "chown the cluster dir");
        }
        let cluster = Cluster {
            port: free_port(),
            dir,
            bin,
        };
        let data = cluster.data().to_string_lossy().into_owned();
        let initdb = as_postgres(
            &cluster.bin.join("initdb"),
            &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        checked(initdb, "initdb");
        cluster.pg_ctl_start();
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl_start(&self) {
        let data = self.data().to_string_lossy().into_owned();
        let socket_dir = self.dir.path().to_string_lossy().into_owned();
        let options = format!(
            "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={socket_dir} \
             -c max_connections=200 -c shared_buffers=32MB",
            self.port
        );
        let log = self
            .dir
            .path()
            .join("server.log")
            .to_string_lossy()
            .into_owned();
        let start = as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D", &data, "-l", &log, "-o", &options, "-w", "-t", "60", "start",
            ],
        );
        checked(start, "pg_ctl start");
    }

    /// Where clients reach it.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A ledger URL for database `postgres` through `addr` (this server or a relay to it).
    pub fn url_at(&self, addr: SocketAddr) -> String {
        format!("postgres://postgres@{addr}/postgres?sslmode=disable")
    }

    /// The server crashes (`pg_ctl stop -m immediate`: every backend killed, nothing flushed
    /// but what its write-ahead log already holds) and starts again, recovering.
    pub fn crash_restart(&self) {
        let data = self.data().to_string_lossy().into_owned();
        let stop = as_postgres(
            &self.bin.join("pg_ctl"),
            &["-D", &data, "-m", "immediate", "-w", "stop"],
        );
        checked(stop, "pg_ctl stop -m immediate");
        self.pg_ctl_start();
    }

    /// Its folder (data, socket, log and owner).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data().to_string_lossy().into_owned();
        let _ = as_postgres(
            &self.bin.join("pg_ctl"),
            &["-D", &data, "-m", "immediate", "-w", "stop"],
        );
    }
}
