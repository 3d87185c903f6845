//! The operator's console: `GET /ui`, a page over the admin API's own calls (summary, list,
//! an operation with its history, approve, reject, resolve), and its script and style sheet.
//!
//! The files are compiled into the binary (`include_str!`); nothing is fetched at run time.
//! They hold no data, so they are served without the token (the page asks for it and sends it
//! as `Authorization: Bearer` on its own calls, which need it as always), but after the same
//! `Host` and `Origin` checks as every call. This module never reads the ledger or the token.
//! Every answer carries a Content-Security-Policy that allows only this origin's script,
//! style and calls (no inline script, no framing, no form submission), and `X-Frame-Options`.

use http::{HeaderValue, Method, Response, StatusCode, header};

use super::error::AdminError;
use crate::wire::{ProxyBody, full};

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/console.js");
const STYLE: &str = include_str!("ui/console.css");

/// The console's Content-Security-Policy: this origin's files and calls only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; base-uri 'none'; form-action 'none'; \
                       frame-ancestors 'none'";

/// Whether `path` is the console's: `/ui`, and everything under `/ui/`.
pub fn owns(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The page, its script or its style sheet; a 404 for any other path under `/ui/`.
pub fn serve(method: &Method, path: &str) -> Response<ProxyBody> {
    if method != Method::GET {
        return AdminError::Method("GET").into_response();
    }
    let (body, content_type) = match path {
        "/ui" | "/ui/" => (PAGE, "text/html; charset=utf-8"),
        "/ui/console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/ui/console.css" => (STYLE, "text/css; charset=utf-8"),
        other => return AdminError::NoPath(other.to_string()).into_response(),
    };
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::OK;
    let headers = resp.headers_mut();
    let fixed = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_its_script_and_style_from_files_and_has_no_inline_script() {
        assert!(PAGE.contains(r#"<script src="/ui/console.js""#));
        assert!(PAGE.contains(r#"href="/ui/console.css""#));
        assert_eq!(
            PAGE.matches("<script").count(),
            1,
            "one script, its own file"
        );
        let handler = PAGE.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert_eq!(handler, None, "no inline event handlers");
        assert!(!PAGE.contains("style="), "no inline style");
        assert!(
            !SCRIPT.contains("innerHTML"),
            "data is rendered with textContent"
        );
    }

    #[test]
    fn only_the_three_files_exist_and_only_for_get() {
        assert!(owns("/ui") && owns("/ui/x") && !owns("/uix") && !owns("/ops"));
        for path in ["/ui", "/ui/", "/ui/console.js", "/ui/console.css"] {
            let resp = serve(&Method::GET, path);
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            assert_eq!(resp.headers()[header::X_FRAME_OPTIONS], "DENY");
            assert_eq!(resp.headers()[header::CONTENT_SECURITY_POLICY], CSP);
        }
        assert_eq!(
            serve(&Method::GET, "/ui/secret").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            serve(&Method::POST, "/ui").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
