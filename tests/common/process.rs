//! The child process plumbing under `Proxy`: the ready line, signals, and waiting for an
//! exit without blocking the async workers (the fake provider shares them).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use tokio::sync::oneshot;

/// How long a start, a stop or a CLI run may take before the test fails.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(20);
const READY_PREFIX: &str = "idemproxy ready ";

/// Why no ready line came.
#[derive(Debug)]
pub enum NotReady {
    Exited,
    TimedOut,
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited => write!(f, "closed stdout (exited?) before its ready line"),
            Self::TimedOut => write!(f, "printed no ready line within {PROCESS_TIMEOUT:?}"),
        }
    }
}

/// Parses `idemproxy ready proxy=127.0.0.1:PORT admin=127.0.0.1:PORT`.
pub fn parse_ready(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let (mut proxy, mut admin) = (None, None);
    for part in line
        .trim_end()
        .strip_prefix(READY_PREFIX)?
        .split_whitespace()
    {
        match part.split_once('=')? {
            ("proxy", addr) => proxy = Some(addr.parse().ok()?),
            ("admin", addr) => admin = Some(addr.parse().ok()?),
            _ => {}
        }
    }
    Some((proxy?, admin?))
}

/// Waits for the ready line on the child's stdout. A thread reads stdout to its end, so
/// the child never blocks on a full pipe.
pub async fn wait_ready(child: &mut Child) -> Result<(SocketAddr, SocketAddr), NotReady> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = oneshot::channel();
    std::thread::spawn(move || read_stdout(stdout, tx));
    match tokio::time::timeout(PROCESS_TIMEOUT, rx).await {
        Ok(Ok(addrs)) => Ok(addrs),
        Ok(Err(_)) => Err(NotReady::Exited),
        Err(_) => Err(NotReady::TimedOut),
    }
}

fn read_stdout(stdout: ChildStdout, tx: oneshot::Sender<(SocketAddr, SocketAddr)>) {
    let (mut tx, mut reader, mut line) = (Some(tx), BufReader::new(stdout), Vec::new());
    // Bytes, not `lines()`: a non-UTF-8 line must not stop the draining.
    while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        if let Some(addrs) = parse_ready(&String::from_utf8_lossy(&line))
            && let Some(tx) = tx.take()
        {
            let _ = tx.send(addrs);
        }
        line.clear();
    }
}

/// Sends a signal with the `kill` command (no libc in the test dependencies).
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// SIGKILLs `child` and every process under it. Killing the child alone is not enough when
/// it is a wrapper that did not `exec` the proxy: strace, killed, only detaches the proxy it
/// traces, which would then serve on, orphaned, after the test.
pub fn kill_tree(child: &mut Child) -> std::io::Result<()> {
    kill_under(child.id());
    child.kill()
}

/// SIGKILLs every process under `pid` (not `pid` itself). Some may have ended meanwhile:
/// `kill` then fails for them, which is what we want.
fn kill_under(pid: u32) {
    let under = descendants(pid);
    if !under.is_empty() {
        let _ = Command::new("kill")
            .arg("-KILL")
            .args(under.iter().map(u32::to_string))
            .status();
    }
}

/// `kill_tree` for a child that another thread is waiting on (so it is not reaped, and its
/// pid is still its own): everything under `pid`, then `pid`.
fn kill_tree_of(pid: u32) {
    kill_under(pid);
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .status();
}

/// Every process under `pid` (its children, theirs, ...), from `/proc`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        let tasks = std::fs::read_dir(format!("/proc/{parent}/task"))
            .into_iter()
            .flatten();
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                found.push(child);
                next.push(child);
            }
        }
    }
    found
}

/// Waits for the child off the async workers; SIGKILLs it, and every process under it, and
/// fails after the timeout.
pub async fn wait_exit(child: Child) -> ExitStatus {
    wait_exit_within(child, PROCESS_TIMEOUT).await
}

/// `wait_exit` with a limit of the caller's.
pub async fn wait_exit_within(mut child: Child, limit: Duration) -> ExitStatus {
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || child.wait());
    match tokio::time::timeout(limit, waited).await {
        Ok(Ok(Ok(status))) => status,
        Ok(failed) => panic!("waiting for idemproxy: {failed:?}"),
        Err(_) => {
            kill_tree_of(pid);
            panic!("idemproxy (pid {pid}) did not exit within {limit:?}")
        }
    }
}

/// Runs `command` to its end with stdout and stderr captured, without blocking the async
/// workers; kills it, and every process under it, and panics (naming `what`) if it takes
/// longer than `limit`.
pub async fn run_to_end(mut command: Command, limit: Duration, what: &str) -> Output {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let pid = child.id();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output());
    match tokio::time::timeout(limit, output).await {
        Ok(Ok(Ok(output))) => output,
        Ok(failed) => panic!("waiting for {what}: {failed:?}"),
        Err(_) => {
            kill_tree_of(pid);
            panic!("{what} did not finish within {limit:?}")
        }
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet) within `limit`.
pub async fn gone_within(pid: u32, limit: Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if matches!(state, None | Some('Z' | 'X')) {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
