//! The configuration loader: any proxy.toml with any one policy file loads or is refused with
//! errors that each name a file and say what is wrong, never a panic.
//!
//! Input: proxy.toml, NUL, the policy file (so the seeds are the repository's files).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// One folder per fuzzing process, with its `policies/` folder, kept until the process ends.
fn folder() -> &'static PathBuf {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::create_dir(dir.path().join("policies")).expect("policies/");
        let path = dir.path().to_path_buf();
        (dir, path)
    });
    path
}

fuzz_target!(|data: &[u8]| {
    let (proxy_text, policy) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let dir = folder();
    let proxy = dir.join("proxy.toml");
    std::fs::write(&proxy, proxy_text).expect("proxy.toml written");
    std::fs::write(dir.join("policies/fuzzed.toml"), policy).expect("policy written");
    if let Err(errors) = idemproxy::config::load(&proxy) {
        assert!(!errors.0.is_empty(), "refused without an error");
        for error in &errors.0 {
            assert!(!error.to_string().is_empty());
        }
    }
});
