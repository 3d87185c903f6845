//! The official MCP Python SDK as the tests drive it: `server.py` (an `MCPServer` with a
//! `refund` tool that counts its effects) started on a free port, `client.py` run to its end
//! for one session's calls, and a proxy mounting the server at `/mcp/billing`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::common::Proxy;
use crate::common::process::run_to_end;

/// How the server answers a request: one JSON body, or a `text/event-stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    Json,
    Sse,
}

/// The SDK client's wire form: `legacy` (initialize, a session) or `auto` (its default, the
/// single exchange of revision 2026-07-28).
pub const WIRE_FORMS: [&str; 2] = ["legacy", "auto"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    let python = root().join("target/python-env/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash .ci/python-env`, which creates the Python environment",
        python.display()
    );
    python
}

/// A running `server.py`, killed when dropped.
pub struct McpServer {
    child: Child,
    pub port: u16,
    state: TempDir,
}

impl McpServer {
    pub async fn start(answers: Answers) -> McpServer {
        let state = TempDir::new().expect("temp dir");
        let mode = match answers {
            Answers::Json => "json",
            Answers::Sse => "sse",
        };
        let mut child = Command::new(python())
            .arg(root().join("tests/mcp/server.py"))
            .arg(state.path())
            .arg(mode)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server.py");
        let stdout = child.stdout.take().expect("server stdout");
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        })
        .await
        .expect("read port")
        .expect("server port line");
        let port = line.trim().parse().expect("server.py prints its port");
        McpServer { child, port, state }
    }

    /// The lines `refund` wrote: one per run of the tool.
    pub fn effects(&self) -> usize {
        std::fs::read_to_string(self.state.path().join("effects"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// Waits until the tool has run `n` times in all.
    pub async fn wait_for_effects(&self, n: usize) {
        while self.effects() < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Makes every later run of `refund` take `seconds` before it answers.
    pub fn slow(&self, seconds: u32) {
        std::fs::write(self.state.path().join("slow"), seconds.to_string()).expect("slow file");
    }

    /// A policy mounting this server at `/mcp/billing`, guarding `refund`, with `extra`.
    pub fn policy(&self, extra: &str) -> String {
        format!(
            "[provider]\nname = \"billing\"\nupstream = \"http://127.0.0.1:{}/mcp\"\n\
             mount = \"/mcp/billing\"\nprotocol = \"mcp\"\n{extra}\n\
             [[route]]\nname = \"refund\"\nmatch = \"tools/call refund\"\n\
             operation_id = \"{{header:x-workflow-id}}:{{json:/params/arguments/invoice}}\"\n",
            self.port
        )
    }

    /// A proxy over this server with `policy(extra)`.
    pub async fn proxy(&self, extra: &str) -> Proxy {
        Proxy::builder()
            .policy("billing", &self.policy(extra))
            .start()
            .await
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `client.py` for one session of `calls` (see its doc) through `proxy` in wire form
/// `mode` with `x-workflow-id: workflow`; one JSON value per call.
pub async fn session(proxy: &Proxy, mode: &str, workflow: &str, calls: &[&str]) -> Vec<Value> {
    let mut command = Command::new(python());
    command
        .arg(root().join("tests/mcp/client.py"))
        .args([&proxy.url("/mcp/billing"), mode, workflow])
        .args(calls)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let output = run_to_end(command, Duration::from_secs(120), "client.py").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client.py {mode} {calls:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("client.py prints JSON lines"))
        .collect()
}

/// `ops ARGS --admin URL` of `proxy`; its stdout, after asserting it succeeded.
pub async fn ops(proxy: &Proxy, args: &[&str]) -> String {
    let admin = proxy.admin_url("");
    let mut all = vec!["ops"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--admin", &admin]);
    let (status, out, err) = proxy.run_cli(&all).await;
    assert!(status.success(), "ops {args:?}: {out}\n{err}");
    out
}
