//! A new ledger's names are durable (docs/reference.md section 12): the first start creates
//! the ledger file, the installation secret file and the folder
//! proxy.toml names for them, and syncs the folder holding each new name before it prints
//! its ready line (POSIX makes a new name durable only with an fsync of its folder; without
//! it a power cut could lose the whole ledger, and the next start would begin on an empty
//! one). A start that finds them creates nothing and syncs no folder. Watched on the real
//! binary with strace, which prints the path behind every file descriptor (`-y`).

use std::path::{Path, PathBuf};

use crate::common::{self, Proxy};

/// Runs the proxy under strace, its opens, folder creations, fsyncs and writes going to
/// `$TRACE_TO`.
const TRACED: &str = r#"
command -v strace >/dev/null || { echo "this test needs strace (apt-get install strace)" >&2; exit 3; }
exec strace -f -qq -y --seccomp-bpf -o "$TRACE_TO" \
  -e trace=openat,mkdir,mkdirat,fsync,write -- "$0" "$@""#;

const CONFIG: &str = "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
                      ledger = \"data/ledger.redb\"\npolicies = \"policies\"\n";

/// One start's trace, line by line.
struct Trace {
    lines: Vec<String>,
}

impl Trace {
    fn read(path: &Path) -> Trace {
        let text = std::fs::read_to_string(path).expect("the trace");
        Trace {
            lines: text.lines().map(str::to_owned).collect(),
        }
    }

    /// The line where the proxy printed its ready line.
    fn ready(&self) -> usize {
        (self.lines.iter())
            .position(|l| l.contains("write(1<") && l.contains("\"idemproxy ready"))
            .unwrap_or_else(|| panic!("no ready line in the trace:\n{}", self.text()))
    }

    /// The first open that returned a descriptor on `file`: where it was created, when it
    /// did not exist.
    fn first_open(&self, file: &Path) -> Option<usize> {
        let result = format!("<{}>", file.display());
        (self.lines.iter()).position(|l| l.contains("openat") && l.ends_with(&result))
    }

    /// Where `folder` was made.
    fn made(&self, folder: &Path) -> Option<usize> {
        let arg = format!("\"{}\"", folder.display());
        (self.lines.iter()).position(|l| l.contains("mkdir") && l.contains(&arg))
    }

    /// Whether `folder` is synced after line `after` and before line `before`.
    fn synced_between(&self, folder: &Path, after: usize, before: usize) -> bool {
        (self.folder_syncs(folder, after).first()).is_some_and(|&at| at < before)
    }

    /// The lines, from `from` on, that fsync a descriptor on `folder`.
    fn folder_syncs(&self, folder: &Path, from: usize) -> Vec<usize> {
        let shown = format!("<{}>", folder.display());
        (self.lines.iter().enumerate().skip(from))
            .filter(|(_, l)| {
                l.split_once("fsync(").is_some_and(|(_, arg)| {
                    let arg = arg.trim_start_matches(|c: char| c.is_ascii_digit());
                    arg.starts_with(&shown)
                })
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// The first start syncs the folder of every name it creates (the three files in `data/`,
/// `data/` in the proxy's folder) after creating it and before its ready line; the second
/// creates none and syncs no folder.
#[tokio::test]
async fn a_new_ledgers_names_are_synced_into_their_folders_once() {
    let bin = env!("CARGO_BIN_EXE_idemproxy");
    let scratch = tempfile::tempdir().expect("a folder for the traces");
    let first = scratch.path().join("first.trace");
    let mut proxy = Proxy::builder()
        .raw_config(CONFIG)
        .policy("shop", &common::policy("shop", "http://127.0.0.1:9", ""))
        .env("TRACE_TO", &first.display().to_string())
        .bin("sh", &["-c", TRACED, bin])
        .start()
        .await;
    proxy.kill().await;

    // The descriptors' paths strace shows are canonical; `mkdir` shows the path as given.
    let home = std::fs::canonicalize(proxy.dir().path()).expect("the proxy's folder");
    let data = home.join("data");
    let data_as_given = proxy.dir().path().join("data");
    let files: Vec<PathBuf> = ["ledger.redb", "ledger.redb.secret"]
        .iter()
        .map(|name| data.join(name))
        .collect();
    let trace = Trace::read(&first);
    let ready = trace.ready();
    let made = trace
        .made(&data_as_given)
        .unwrap_or_else(|| panic!("data/ made:\n{}", trace.text()));
    assert!(
        trace.synced_between(&home, made, ready),
        "the proxy's folder is synced after data/ is made, before the ready line:\n{}",
        trace.text()
    );
    for file in &files {
        let created = (trace.first_open(file))
            .unwrap_or_else(|| panic!("{} created:\n{}", file.display(), trace.text()));
        assert!(
            trace.synced_between(&data, created, ready),
            "data/ is synced after {} is created, before the ready line:\n{}",
            file.display(),
            trace.text()
        );
    }

    let second = scratch.path().join("second.trace");
    proxy.set_env("TRACE_TO", &second.display().to_string());
    proxy.restart().await;
    proxy.kill().await;
    let trace = Trace::read(&second);
    trace.ready();
    assert_eq!(trace.made(&data_as_given), None, "{}", trace.text());
    for folder in [&home, &data] {
        assert_eq!(
            trace.folder_syncs(folder, 0),
            Vec::<usize>::new(),
            "nothing new, no folder synced:\n{}",
            trace.text()
        );
    }
}
