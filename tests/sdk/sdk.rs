//! The providers' official Python SDKs driven through the real binary (tests/sdk/): one test
//! per SDK, each running its pytest file against fake upstreams shaped like the provider, with
//! the shipped policy. It proves that what ships works with the SDKs agents really use: their
//! own retries and an agent's re-run make one effect, a parameter change is that SDK's error,
//! an unknown outcome is never taken for a success.
//!
//! The Python environment (pinned SDKs) is target/python-env, which `bash .ci/test` creates.

use std::path::Path;
use std::process::Command;

fn pytest(file: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/python-env/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash .ci/test`, which creates the Python environment",
        python.display()
    );
    let output = Command::new(&python)
        .args(["-m", "pytest", "-q", &format!("tests/sdk/{file}")])
        .current_dir(root)
        .env("IDEMPROXY_BIN", env!("CARGO_BIN_EXE_idemproxy"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run pytest");
    assert!(
        output.status.success(),
        "pytest tests/sdk/{file} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn stripe_sdk() {
    pytest("test_stripe.py");
}

#[test]
fn square_sdk() {
    pytest("test_square.py");
}

#[test]
fn gocardless_sdk() {
    pytest("test_gocardless.py");
}

#[test]
fn increase_sdk() {
    pytest("test_increase.py");
}

#[test]
fn resend_sdk() {
    pytest("test_resend.py");
}

#[test]
fn agent_examples() {
    pytest("test_examples.py");
}

/// Agents that only honour HTTPS_PROXY: requests, httpx (h1 and h2) and the stripe SDK
/// through `[intercept]`, talking to `https://api.stripe.com` as always.
#[test]
fn https_proxy_clients() {
    pytest("test_intercept.py");
}
