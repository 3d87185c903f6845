//! `Cluster`: a private PostgreSQL server of the test's own (Debian's `initdb` and `pg_ctl`,
//! run as the user `postgres`), so a test can crash and restart the database server itself
//! (`crash_restart`: `pg_ctl stop -m immediate`, which recovers from its write-ahead log at the
//! next start) without touching the server the rest of the suite shares. It listens on a free
//! loopback port with trust authentication and is stopped and removed when the guard drops.

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

impl Cluster {
    /// Initialises and starts a new server (about two seconds).
    pub fn start() -> Cluster {
        let bin = server_bin();
        let dir = tempfile::Builder::new()
            .prefix("idemproxy-cluster-")
            .tempdir()
            .expect("cluster dir");
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
