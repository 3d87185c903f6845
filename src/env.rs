//! The environment variables the binary reads: one list, the one `serve --help` and
//! `check --help` print and docs/reference.md section 11 follows (a test holds them to it, and
//! holds the sources to it: a variable read anywhere in `src/` is in this list).
//!
//! It only names them; each is read where it is used.

/// One variable the binary reads.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    pub name: &'static str,
    /// Who reads it and what it does, in a few words.
    pub summary: &'static str,
}

/// Every variable, in the order of docs/reference.md section 11.
pub const VARIABLES: &[Variable] = &[
    var(
        "IDEMPROXY_LOG",
        "the log filter: info (default), debug, idemproxy=debug,hyper=warn",
    ),
    var(
        "IDEMPROXY_ADMIN_TOKEN",
        "the admin API's bearer token (serve, ops, reload)",
    ),
    var(
        "IDEMPROXY_SECRET",
        "the installation secret, 64 hex characters",
    ),
    var(
        "IDEMPROXY_SECRET_FILE",
        "the file holding it [default: <ledger>.secret]",
    ),
    var(
        "PGPASSWORD",
        "the PostgreSQL password when the ledger URL holds none",
    ),
    var("HOSTNAME", "this replica's name in a PostgreSQL ledger"),
    var(
        "MIMALLOC_ALLOW_THP",
        "set: let the allocator use transparent huge pages",
    ),
    var(
        "MIMALLOC_PURGE_DELAY",
        "ms before freed memory goes back to the kernel [default: 10]",
    ),
    var("IDEMPROXY_FAIL", "test hook: fault points (ledger.commit)"),
];

const fn var(name: &'static str, summary: &'static str) -> Variable {
    Variable { name, summary }
}

/// The help text's section: every variable with its summary, then those the configuration
/// names.
pub fn help() -> String {
    let width = VARIABLES.iter().map(|v| v.name.len()).max().unwrap_or(0);
    let mut text = String::from("Environment variables (docs/reference.md section 11):\n");
    for v in VARIABLES {
        text.push_str(&format!("  {:width$}  {}\n", v.name, v.summary));
    }
    text.push_str(
        "  and the variables the configuration names: notify.secret_env (the notifications'\n  \
         signing secret) and the ${NAME}s of a policy's settle_headers.",
    );
    text
}
