//! The TOML text tests write: policy files and routes, built from a few arguments so each
//! test shows only what it is about. It knows the file format of docs/reference.md, nothing else.

use std::path::Path;

/// A TOML basic string holding exactly `s`.
pub fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A policy file for provider `name` at `upstream`, mounted at `/{name}`, with `extra`
/// (more `[provider]` keys, then tables such as `[[route]]`) appended.
pub fn policy(name: &str, upstream: &str, extra: &str) -> String {
    policy_with_ca(name, upstream, None, extra)
}

/// `policy`, trusting the PEM roots in `ca_file` when given.
pub fn policy_with_ca(name: &str, upstream: &str, ca_file: Option<&Path>, extra: &str) -> String {
    let ca = ca_file.map_or_else(String::new, |path| {
        format!("ca_file = {}\n", toml_str(&path.to_string_lossy()))
    });
    format!(
        "[provider]\nname = {}\nupstream = {}\nmount = {}\n{ca}{extra}\n",
        toml_str(name),
        toml_str(upstream),
        toml_str(&format!("/{name}")),
    )
}

/// A `[[route]]` table; append more keys (`effect = ...`) right after it.
pub fn route(name: &str, matcher: &str, operation_id: &[&str]) -> String {
    let ids: Vec<String> = operation_id.iter().map(|t| toml_str(t)).collect();
    format!(
        "\n[[route]]\nname = {}\nmatch = {}\noperation_id = [{}]\n",
        toml_str(name),
        toml_str(matcher),
        ids.join(", "),
    )
}
