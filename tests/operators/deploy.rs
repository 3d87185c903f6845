//! The shipped ways to deploy (docs/deploy.md): the systemd unit passes `systemd-analyze
//! verify` and says what the docs promise; the Dockerfile's build stage runs the build CI runs
//! and its runtime stage keeps the ledger on a volume, as a user of its own; both shipped
//! configurations pass `idemproxy check`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::proxy::binary;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The value of `key = "..."` in a TOML text (the first such line).
fn toml_value(text: &str, key: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.split('=').next().map(str::trim) == Some(key))
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"));
    let value = line.split_once('=').expect("key = value").1;
    value.split('"').nth(1).expect("a quoted value").to_string()
}

/// The folder the ledger of a shipped configuration lives in.
fn ledger_dir(config: &str) -> String {
    let ledger = toml_value(&read(config), "ledger");
    let dir = Path::new(&ledger)
        .parent()
        .expect("an absolute ledger path");
    dir.to_string_lossy().into_owned()
}

#[test]
fn the_unit_file_passes_systemd_analyze_verify() {
    let unit = read("deploy/idemproxy.service");
    for line in [
        "KillSignal=SIGTERM",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "StateDirectory=idemproxy",
        "User=idemproxy",
        "EnvironmentFile=-/etc/idemproxy/idemproxy.env",
        "ExecStart=/usr/local/bin/idemproxy serve -c /etc/idemproxy/proxy.toml",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    let writable = format!("ReadWritePaths={}", ledger_dir("deploy/proxy.toml"));
    assert!(
        unit.lines().any(|l| l == writable),
        "the unit lacks {writable}"
    );

    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "SKIPPED: systemd-analyze is not installed here (Debian's systemd package; .ci/run \
             installs it), so the unit file was not verified"
        );
        return;
    }
    // `verify` checks that ExecStart's program exists: this build's binary stands in for the
    // installed one.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("idemproxy.service");
    let installed = unit.replace("/usr/local/bin/idemproxy", &binary().to_string_lossy());
    std::fs::write(&path, installed).expect("write the unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // An unknown or misspelt key is only a warning (exit 0): any output at all fails.
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

/// The Dockerfile's stages: (FROM line, RUN commands, every other instruction line).
fn stages(dockerfile: &str) -> Vec<(String, Vec<String>, Vec<String>)> {
    let mut joined = Vec::new();
    let mut line = String::new();
    for raw in dockerfile.lines() {
        if line.is_empty() && (raw.trim().is_empty() || raw.trim_start().starts_with('#')) {
            continue;
        }
        match raw.strip_suffix('\\') {
            Some(part) => line.push_str(part),
            None => {
                line.push_str(raw);
                joined.push(std::mem::take(&mut line));
            }
        }
    }
    let mut stages: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    for line in joined {
        let (word, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match word {
            "FROM" => stages.push((rest.to_string(), Vec::new(), Vec::new())),
            "RUN" => stages
                .last_mut()
                .expect("FROM first")
                .1
                .push(rest.trim().to_string()),
            _ => stages.last_mut().expect("FROM first").2.push(line.clone()),
        }
    }
    stages
}

#[test]
fn the_dockerfile_builds_what_ci_builds_and_keeps_the_ledger_on_a_volume() {
    let dockerfile = read("Dockerfile");
    let stages = stages(&dockerfile);
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    let (from, runs, _) = &stages[0];
    assert!(
        from.starts_with("rust:") && from.ends_with(" AS build"),
        "{from}"
    );
    let ci: Vec<String> = read(".ci/run")
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    let cargo: Vec<&String> = runs.iter().filter(|r| r.starts_with("cargo ")).collect();
    assert!(!cargo.is_empty(), "the build stage runs cargo: {runs:?}");
    for command in cargo {
        assert!(
            ci.contains(command),
            "the build stage runs `{command}`, which .ci/run does not"
        );
    }

    let (from, _, rest) = &stages[1];
    assert!(from.contains("slim"), "a slim runtime: {from}");
    let has = |prefix: &str| rest.iter().find(|l| l.starts_with(prefix)).cloned();
    let user = has("USER ").expect("a USER");
    assert!(!user.contains("root") && user != "USER 0", "{user}");
    let volume = has("VOLUME ").expect("a VOLUME");
    assert_eq!(
        volume,
        format!("VOLUME {}", ledger_dir("deploy/container.toml"))
    );
    let health = has("HEALTHCHECK ").expect("a HEALTHCHECK");
    let config = read("deploy/container.toml");
    let admin_port = toml_value(&config, "admin_listen")
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    assert!(
        health.contains("/healthz") && health.contains(&admin_port),
        "{health}"
    );
    let port = toml_value(&config, "listen")
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(has("EXPOSE ").expect("an EXPOSE"), format!("EXPOSE {port}"));
    assert!(
        rest.iter()
            .any(|l| l == "COPY deploy/container.toml /etc/idemproxy/proxy.toml")
    );
}

#[test]
fn the_shipped_deploy_configurations_pass_check() {
    for config in ["deploy/proxy.toml", "deploy/container.toml"] {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("proxy.toml"), read(config)).expect("copy the config");
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).expect("policies dir");
        for entry in std::fs::read_dir(repo().join("policies")).expect("policies") {
            let entry = entry.expect("entry");
            // The policy files; a folder (policies/examples) is not loaded.
            if entry.path().is_file() {
                std::fs::copy(entry.path(), policies.join(entry.file_name())).expect("copy");
            }
        }
        let out = Command::new(binary())
            .args(["check", "-c"])
            .arg(dir.path().join("proxy.toml"))
            .env_remove("IDEMPROXY_SECRET")
            .env_remove("IDEMPROXY_SECRET_FILE")
            .output()
            .expect("run check");
        assert!(
            out.status.success(),
            "{config}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
