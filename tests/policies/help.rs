//! `serve --help` and `check --help` say what `-c` is and list every environment variable the
//! binary reads, from the one list docs/reference.md section 11 also follows.

use crate::common::proxy::binary;

/// The variables of docs/reference.md section 11's table, in its order.
fn documented() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md"))
        .expect("docs/reference.md");
    let section = text
        .split("## 11. Environment variables")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("section 11");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

fn help(command: &str) -> String {
    let out = std::process::Command::new(binary())
        .args([command, "--help"])
        .output()
        .expect("run idemproxy");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn serve_and_check_help_describe_the_config_and_list_every_environment_variable() {
    let documented = documented();
    assert!(documented.len() >= 9, "{documented:?}");
    for command in ["serve", "check"] {
        let text = help(command);
        assert!(
            text.contains("-c, --config <FILE>") && text.contains("policies"),
            "{command} --help says what -c is:\n{text}"
        );
        for name in &documented {
            assert!(
                text.contains(name.as_str()),
                "{command} --help lacks {name}:\n{text}"
            );
        }
        assert!(
            text.contains("notify.secret_env") && text.contains("settle_headers"),
            "{text}"
        );
    }
    assert_eq!(
        documented,
        idemproxy::env::VARIABLES
            .iter()
            .map(|v| v.name.to_string())
            .collect::<Vec<_>>(),
        "docs/reference.md section 11 lists the variables of src/env.rs, in its order"
    );
}

/// Every variable name the sources read (`env::var("NAME")`, `var_os`, the named constants)
/// is in the list, and every one in the list is read somewhere (a hook removed from the code
/// leaves the list too).
#[test]
fn every_variable_the_sources_read_is_in_the_list() {
    let listed: Vec<&str> = idemproxy::env::VARIABLES.iter().map(|v| v.name).collect();
    let mut files = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    let mut read = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("src") {
                files.push(entry.expect("entry").path());
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs")
            || path.ends_with("tests.rs")
            || path.ends_with("src/env.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source");
        for quoted in text.split('"') {
            let is_name = quoted.len() > 3
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit());
            let looks_env = quoted.starts_with("IDEMPROXY_")
                || quoted.starts_with("MIMALLOC_")
                || quoted.starts_with("PG")
                || quoted == "HOSTNAME";
            if is_name && looks_env {
                read.push((quoted.to_string(), path.display().to_string()));
            }
        }
    }
    for name in &listed {
        assert!(
            read.iter().any(|(r, _)| r == name),
            "src/env.rs lists {name}, which no source reads any more"
        );
    }
    for (name, file) in read {
        // Examples in messages name a variable the user chooses, not one the binary reads.
        if name == "IDEMPROXY_NOTIFY_SECRET" {
            continue;
        }
        assert!(
            listed.contains(&name.as_str()),
            "{file} reads {name}, not in src/env.rs"
        );
    }
}
