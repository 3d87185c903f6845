//! The `idemproxy` command: parses the command line and calls into the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};

/// mimalloc instead of the system allocator: hyper and the request path allocate a few dozen
/// small buffers per request, and glibc's malloc spent about an eighth of the pass-through
/// CPU time on them (bench/run.sh, callgrind).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process unless `MIMALLOC_ALLOW_THP` is set (then
/// the allocator does as that says). mimalloc asks for huge pages for its arenas, and a 2 MiB
/// page is resident as soon as one byte of it is touched: under 256 concurrent fresh operations
/// on a 1,000,000-operation ledger that was 13 MiB more peak RSS (76.6 against 61-64 MiB),
/// over the 64 MiB the proxy is held to, while the CPU per request moved within the noise
/// (docs/performance.md). Best effort: a kernel or sandbox that refuses the flag leaves them on.
fn huge_pages_off_unless_asked() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        let _ = rustix::thread::disable_transparent_huge_pages(true);
    }
}

/// mimalloc's `mi_option_purge_delay`, by its place in the `mi_option_t` enum of the mimalloc
/// this build links (`libmimalloc-sys` 0.1.49, mimalloc v3, `include/mimalloc.h`), which the
/// Rust bindings do not name.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before mimalloc gives it back to the kernel,
/// unless `MIMALLOC_PURGE_DELAY` says otherwise: 10 ms, the delay mimalloc documents, not the
/// 1 s its v3 sources default to. Under 256 concurrent fresh operations on a
/// 1,000,000-operation ledger, memory freed by one burst of requests stayed resident for that
/// second while the next burst took new memory: peak RSS 55-57 MiB, against 50-52 MiB with
/// 10 ms (docs/performance.md).
fn purge_freed_memory_sooner_unless_asked() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` only stores the value in mimalloc's option table; it is
        // safe to call from any thread at any time, and the purge delay is read afresh at
        // every purge.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10) };
    }
}

#[derive(Parser)]
#[command(
    name = "idemproxy",
    version,
    about = "An HTTP proxy that stops AI agents from doing the same real-world thing twice"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy and its admin API. SIGHUP reloads the configuration; SIGTERM, SIGINT
    /// and SIGQUIT stop gracefully.
    #[command(after_help = idemproxy::env::help())]
    Serve {
        /// proxy.toml: the listeners, the ledger, the policies folder and the limits. Relative
        /// paths in it (ledger, policies) are taken from its own folder.
        #[arg(short, long, value_name = "FILE", default_value = "proxy.toml")]
        config: PathBuf,
    },
    /// Validate proxy.toml and every policy; print the routes table.
    #[command(after_help = idemproxy::env::help())]
    Check {
        /// proxy.toml to validate, with every *.toml of the policies folder it names. Relative
        /// paths in it (ledger, policies) are taken from its own folder.
        #[arg(short, long, value_name = "FILE", default_value = "proxy.toml")]
        config: PathBuf,
    },
    /// Inspect and settle operations through a running proxy's admin API.
    Ops(idemproxy::ops::OpsArgs),
    /// Make a running proxy read proxy.toml and its policies again (as SIGHUP does).
    Reload(idemproxy::ops::ReloadArgs),
    /// Work on a ledger itself; no proxy may run on it meanwhile.
    #[command(subcommand)]
    Ledger(LedgerVerb),
    /// A lost-response refund, end to end, offline.
    Demo,
    /// The local CA of [intercept], for clients that only honour HTTPS_PROXY.
    #[command(subcommand)]
    Ca(CaVerb),
}

#[derive(Subcommand)]
enum CaVerb {
    /// Make a new CA: DIR/ca.pem and DIR/ca.key (mode 0600). Never overwrites either; print
    /// how to configure the proxy and trust the CA.
    Init {
        /// proxy.toml: its folder holds the default DIR (`ca`), and its `listen` goes into the
        /// HTTPS_PROXY line printed. It need not exist yet.
        #[arg(short, long, value_name = "FILE", default_value = "proxy.toml")]
        config: PathBuf,
        /// Where to write ca.pem and ca.key (created if needed); default: `ca` beside
        /// proxy.toml. To rotate the CA, name a new folder.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum LedgerVerb {
    /// Copy every operation, event, response and tombstone into a new or empty ledger.
    Copy {
        /// The ledger to copy: a redb file, or a postgres:// URL. No proxy may run on it;
        /// it is read, never changed.
        #[arg(long, value_name = "FILE|URL")]
        from: String,
        /// Where to copy it: a redb file (created if absent) or a postgres:// URL; it must
        /// hold no operation and no tombstone.
        #[arg(long, value_name = "FILE|URL")]
        to: String,
    },
}

fn main() -> ExitCode {
    huge_pages_off_unless_asked();
    purge_freed_memory_sooner_unless_asked();
    let cli = Cli::parse();
    // The demo's output is its story; only warnings and worse interrupt it.
    let default_filter = match cli.command {
        Command::Demo => "warn",
        _ => "info",
    };
    init_logs(cli.log_format, default_filter);
    match cli.command {
        Command::Serve { config } => serve(config),
        Command::Check { config } => check(config),
        Command::Ops(args) => idemproxy::ops::run(args),
        Command::Reload(args) => idemproxy::ops::reload(&args),
        Command::Ledger(LedgerVerb::Copy { from, to }) => ledger_copy(&from, &to),
        Command::Demo => demo(),
        Command::Ca(CaVerb::Init { config, dir }) => ca_init(&config, dir),
    }
}

/// `idemproxy ca init`: the two files, then the lines that put them to use.
fn ca_init(config: &std::path::Path, dir: Option<PathBuf>) -> ExitCode {
    let base = config.parent().unwrap_or(std::path::Path::new(""));
    let dir = dir.unwrap_or_else(|| base.join("ca"));
    let now = idemproxy::clock::Timestamp::now().to_datetime();
    let (cert, key) = match idemproxy::authority::init(&dir, now) {
        Ok(paths) => paths,
        Err(e) => {
            eprintln!("idemproxy ca init: {e}");
            return ExitCode::from(2);
        }
    };
    let absolute = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.into());
    // Relative to proxy.toml's folder when inside it, as proxy.toml's paths are read.
    let folder = absolute(match base.as_os_str().is_empty() {
        true => std::path::Path::new("."),
        false => base,
    });
    let in_config = |p: &std::path::Path| {
        let p = absolute(p);
        p.strip_prefix(&folder)
            .map_or_else(|_| p.display().to_string(), |r| r.display().to_string())
    };
    let listen = idemproxy::config::listen_of(config);
    let pem = absolute(&cert).display().to_string();
    println!(
        "wrote {} (the CA certificate) and {} (its key, mode 0600: keep it private)",
        cert.display(),
        key.display()
    );
    println!();
    println!("In {}:", config.display());
    println!("[intercept]");
    println!("ca_cert = {:?}", in_config(&cert));
    println!("ca_key  = {:?}", in_config(&key));
    println!();
    println!("In the agent's environment (trust this CA, send HTTPS through the proxy):");
    println!("export HTTPS_PROXY=http://{listen}");
    println!("export SSL_CERT_FILE={pem}        # Python (ssl, httpx); replaces the default roots");
    println!("export REQUESTS_CA_BUNDLE={pem}   # Python requests; replaces the default roots");
    println!("export NODE_EXTRA_CA_CERTS={pem}  # Node.js; added to the default roots");
    ExitCode::SUCCESS
}

fn init_logs(format: LogFormat, default_filter: &str) {
    let asked = std::env::var("IDEMPROXY_LOG").unwrap_or_default();
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("IDEMPROXY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // The PostgreSQL client's debug lines print every statement's parameters (stored answers
    // among them): held back unless the filter names it.
    if !asked.contains("tokio_postgres")
        && let Ok(quiet) = "tokio_postgres=info".parse()
    {
        filter = filter.add_directive(quiet);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a person at a terminal: in a file or a collector they are
        // noise that breaks grepping for `status=200`.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        // A line that cannot be written is lost, never reported: the library reports it with
        // a print to that same stderr, which panics when stderr is unwritable (a full disk),
        // and a task that panics mid-attempt dies before its answer and its recording.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

fn load(path: &std::path::Path) -> Result<idemproxy::config::Config, ExitCode> {
    idemproxy::config::load(path).map_err(|errors| {
        eprintln!("{errors}");
        ExitCode::from(2)
    })
}

fn check(path: PathBuf) -> ExitCode {
    match load(&path) {
        Ok(config) => {
            if let Some(warning) = idemproxy::notify::secret_warning(&config) {
                eprintln!("{warning}");
            }
            for warning in &config.warnings {
                eprintln!("warning: {warning}");
            }
            if let Err(e) = check_ledger(&config) {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
            print!("{}", config.routes_table());
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// The ledger must be one `serve` would open: a PostgreSQL ledger reachable, of a schema this
/// binary knows and kept with this installation's secret; either kind not left half filled by
/// an unfinished `ledger copy`. A file ledger is only read (a running proxy holds it: then it
/// is not looked at).
fn check_ledger(config: &idemproxy::config::Config) -> Result<(), String> {
    use idemproxy::config::LedgerAt;
    use idemproxy::ledger::{Checked, Ledger, LedgerError};
    use idemproxy::secret::Secret;
    // `Display` shows a URL's password as `***`.
    let shown = &config.ledger;
    let postgres = matches!(shown, LedgerAt::Postgres(_));
    // A file ledger's secret is not compared: only a PostgreSQL one needs it here.
    let check_value = if postgres {
        Secret::load(&shown.place())
            .map_err(|e| e.to_string())?
            .check_value()
    } else {
        String::new()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let checked = runtime.block_on(Ledger::check(&config.ledger, &check_value));
    let file = config.file.display();
    match checked {
        Ok(Checked::Ready { .. } | Checked::NotRead) => Ok(()),
        Ok(Checked::Empty) => {
            if postgres {
                println!(
                    "ledger {shown}: reachable; holds no ledger yet (the first start creates it)"
                );
            }
            Ok(())
        }
        Ok(Checked::Unfinished) => Err(format!("{file}: ledger: {shown}: {}", Checked::UNFINISHED)),
        Err(LedgerError::OtherSecret { .. }) => {
            Err(Secret::other_secret(&config.ledger.place()).to_string())
        }
        Err(LedgerError::Open { reason, .. }) if postgres => Err(format!(
            "{file}: ledger: {shown} cannot be reached: {reason} (check the URL, the network \
                 and that PostgreSQL is running)"
        )),
        Err(e) => Err(format!("{file}: ledger: {e}")),
    }
}

fn serve(path: PathBuf) -> ExitCode {
    let config = match load(&path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    // The listener, the admin API and the background tasks; the agents' connections are
    // served on the shards (one runtime per core, `idemproxy::shard`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let services = match idemproxy::server::Services::new(&config) {
            Ok(services) => services,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
        let app = match idemproxy::app::App::new(config).await {
            Ok((app, orphaned)) => {
                services.opened(&app, &orphaned);
                Arc::new(app)
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
        match idemproxy::server::serve(app, services).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn ledger_copy(from: &str, to: &str) -> ExitCode {
    use idemproxy::ledger::copy;
    let named = |flag: &str, text: &str| copy::parse(text).map_err(|e| (flag.to_owned(), e));
    let places = named("--from", from).and_then(|from| Ok((from, named("--to", to)?)));
    let (from, to) = match places {
        Ok(places) => places,
        Err((flag, e)) => {
            eprintln!("error: {flag}: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(copy::copy(&from, &to)) {
        Ok(copied) => {
            println!("{copied} from {from} to {to}");
            for note in copy::notes(&from, &to, &copied) {
                eprintln!("note: {note}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn demo() -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    match runtime.block_on(idemproxy::demo::run(&mut stdout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemproxy demo: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MI_OPTION_PURGE_DELAY;

    /// `MI_OPTION_PURGE_DELAY` names the purge delay: of mimalloc's options, only it defaults
    /// to 1000 (ms) in the v3 this build links, and it reads `MIMALLOC_PURGE_DELAY`. A newer
    /// mimalloc that moves or changes it fails here, not silently in production.
    #[test]
    fn the_purge_delay_option_is_the_one_mimalloc_reads_from_its_variable() {
        // SAFETY: `mi_option_get` only reads mimalloc's option table (and the environment
        // once, for an option not read before).
        let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let expected = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        assert_eq!(value, expected);
    }
}
