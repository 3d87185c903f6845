//! `idemproxy reload`: asks a running proxy to read proxy.toml and its policies again
//! (`POST /admin/reload`), prints what changed, and fails with every reason when the proxy
//! refused and kept its running configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use http::Method;
use serde_json::{Value, json};

use super::{Call, admin_from_config, holds_user_info, send, token};
use crate::ops::table::clean;

/// `idemproxy reload`
#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    /// proxy.toml, read for `admin_listen` when --admin is not given.
    #[arg(short, long, default_value = "proxy.toml")]
    pub config: PathBuf,
    /// The admin API's base URL [default: http://<admin_listen> from the config, else
    /// http://127.0.0.1:9901]. The token comes from IDEMPROXY_ADMIN_TOKEN.
    #[arg(long, value_name = "URL")]
    pub admin: Option<String>,
    /// Print the admin API's JSON as it came.
    #[arg(long)]
    pub json: bool,
}

/// 0 when the proxy took the configuration (or found nothing changed), 1 when it refused it
/// or could not be asked, 2 for a bad --admin.
pub fn run(args: &ReloadArgs) -> ExitCode {
    if args.admin.as_deref().is_some_and(holds_user_info) {
        eprintln!(
            "error: --admin: the URL may not hold a user or password (the admin API takes a \
             bearer token: set IDEMPROXY_ADMIN_TOKEN)"
        );
        return ExitCode::from(2);
    }
    let base = match &args.admin {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => admin_from_config(&args.config),
    };
    let call = Call {
        method: Method::POST,
        path: "/admin/reload".into(),
        body: Some(json!({})),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (status, body) = match runtime.block_on(send(&base, &call, token().as_deref())) {
        Ok(answer) => answer,
        Err(why) => {
            eprintln!("error: {why}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        println!("{}", String::from_utf8_lossy(&body));
    }
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status.is_success() {
        if !args.json {
            print!("{}", render(&value));
        }
        return ExitCode::SUCCESS;
    }
    eprintln!("error: {}", super::problem_detail(status, &body));
    if let Some(errors) = value["errors"].as_array() {
        for error in errors {
            eprintln!("  {}", clean(error.as_str().unwrap_or_default()));
        }
    }
    ExitCode::FAILURE
}

/// The answer to a reload that was taken, one line per kind of change.
fn render(value: &Value) -> String {
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(clean).collect())
            .unwrap_or_default()
    };
    let mut out = String::new();
    let outcome = value["outcome"].as_str().unwrap_or("applied");
    if outcome == "unchanged" {
        out.push_str("reloaded: unchanged (the files say what the proxy runs on)\n");
    } else {
        out.push_str("reloaded: applied to new requests\n");
    }
    for what in ["added", "removed", "changed"] {
        let list = names(&value["providers"][what]);
        if !list.is_empty() {
            out.push_str(&format!("providers {what}: {}\n", list.join(", ")));
        }
    }
    let settings = names(&value["settings"]);
    if !settings.is_empty() {
        out.push_str(&format!("settings changed: {}\n", settings.join(", ")));
    }
    for warning in names(&value["warnings"]) {
        out.push_str(&format!("warning: {warning}\n"));
    }
    out
}
