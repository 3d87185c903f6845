//! The routes table `idemproxy check` prints: plain text, aligned columns, for a terminal.
//! It only formats a validated `Config`; it never checks anything.

use std::time::Duration;

use super::Config;
use crate::policy::{ApprovalMode, BaseUrl, Dedupe, KeyPlacement, Provider, Route, Unmatched};

impl Config {
    /// The table `idemproxy check` prints: per provider its mount, upstream, dedupe and key,
    /// then per route its name, match, effect, approval and whether it is guarded, with its
    /// operation_id templates and reconcile lookup listed beneath.
    pub fn routes_table(&self) -> String {
        let mut out = String::new();
        for (i, p) in self.providers.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let mut key = match &p.key {
                KeyPlacement::Header(h) => format!("header {h}"),
                KeyPlacement::JsonField(ptr) => format!("json {ptr}"),
            };
            if p.key_length < 64 {
                key.push_str(&format!(" ({} chars)", p.key_length));
            }
            let head = [
                row(&[
                    "PROVIDER",
                    "MOUNT",
                    "UPSTREAM",
                    "DEDUPE",
                    "KEY",
                    "UNMATCHED",
                ]),
                vec![
                    p.name.clone(),
                    p.mount.clone(),
                    upstream_url(&p.upstream),
                    dedupe_text(p),
                    key,
                    unmatched_text(p.unmatched).into(),
                ],
            ];
            out.push_str(&columns(&head, ""));
            out.push_str(&routes_block(&p.routes));
        }
        out
    }
}

fn routes_block(routes: &[Route]) -> String {
    if routes.is_empty() {
        return "  (no routes: every request is unmatched)\n".into();
    }
    let mut rows = vec![row(&["ROUTE", "MATCH", "EFFECT", "APPROVAL", "GUARDED"])];
    let mut details = Vec::new();
    for r in routes {
        let approval = match r.approval {
            ApprovalMode::None => "none",
            ApprovalMode::Required => "required",
        };
        let guarded = if r.is_guarded() { "yes" } else { "no" };
        rows.push(row(&[
            &r.name,
            &r.pattern,
            r.effect.as_str(),
            approval,
            guarded,
        ]));
        let mut lines: Vec<String> = r
            .operation_id
            .iter()
            .enumerate()
            .map(|(i, t)| format!("      operation_id[{i}]  {}\n", t.as_str()))
            .collect();
        if let Some(rc) = &r.reconcile {
            // `found = ""` (the whole body) is shown as written, not as nothing.
            let found = match rc.found.as_str() {
                "" => "\"\" (the whole body)",
                pointer => pointer,
            };
            for lookup in &rc.lookups {
                lines.push(format!(
                    "      reconcile        {} {}  found {found}\n",
                    lookup.method,
                    lookup.target.as_str(),
                ));
            }
        }
        details.push(lines.concat());
    }
    let table = columns(&rows, "  ");
    let mut lines = table.lines();
    let mut out = format!("{}\n", lines.next().unwrap_or_default());
    for (line, detail) in lines.zip(details) {
        out.push_str(line);
        out.push('\n');
        out.push_str(&detail);
    }
    out
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// Left-aligned columns, two spaces apart, without trailing spaces.
fn columns(rows: &[Vec<String>], indent: &str) -> String {
    let mut widths = Vec::new();
    for row in rows {
        widths.resize(widths.len().max(row.len()), 0);
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_string();
        for (cell, w) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn upstream_url(u: &BaseUrl) -> String {
    format!("{}://{}{}", u.scheme.as_str(), u.authority(), u.base_path)
}

fn dedupe_text(p: &Provider) -> String {
    match p.dedupe {
        Dedupe::Key => format!("key ({})", short_duration(p.key_retention)),
        Dedupe::None => "none".into(),
    }
}

/// `24h`, `30d`, `90s`, `250ms`: the largest unit that divides the duration, as written in configs.
pub(super) fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    // Whole days read better as hours up to one day: docs/reference.md writes "24h".
    let fits =
        |unit: u128| ms >= unit && ms.is_multiple_of(unit) && !(unit == 86_400_000 && ms == unit);
    match units.iter().find(|(unit, _)| fits(*unit)) {
        Some((unit, name)) => format!("{}{name}", ms / unit),
        None => format!("{ms}ms"),
    }
}

fn unmatched_text(u: Unmatched) -> &'static str {
    match u {
        Unmatched::Pass => "pass",
        Unmatched::Reject => "reject",
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn shipped_config_table() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("proxy.toml");
        let config = crate::config::load(&path).expect("shipped config loads");
        let table = config.routes_table();
        let lines: Vec<&str> = table.lines().collect();
        let expected = [
            "PROVIDER  MOUNT    UPSTREAM                DEDUPE     KEY                     UNMATCHED",
            "stripe    /stripe  https://api.stripe.com  key (24h)  header idempotency-key  pass",
            "  ROUTE                    MATCH                                  EFFECT        APPROVAL  GUARDED",
            "  create_refund            POST /v1/refunds                       irreversible  none      yes",
            "      operation_id[0]  {header:x-operation-id}",
            "  retrieve_refund          GET /v1/refunds/{id}                   read_only     none      no",
        ];
        for line in expected {
            assert!(lines.contains(&line), "missing {line:?} in:\n{table}");
        }
        let whole_body = "found \"\" (the whole body)";
        assert!(
            table.contains(whole_body),
            "GoCardless replays the whole body:\n{table}"
        );
        assert!(
            lines.iter().all(|l| l.trim_end() == *l),
            "trailing spaces:\n{table}"
        );
        let square = lines.iter().position(|l| l.starts_with("square "));
        let stripe = lines.iter().position(|l| l.starts_with("stripe "));
        assert!(square < stripe, "providers in name order");
    }

    #[test]
    fn columns_align_on_the_widest_cell() {
        let rows = [row(&["a", "bb", "c"]), row(&["aaa", "b", ""])];
        assert_eq!(columns(&rows, "> "), "> a    bb  c\n> aaa  b\n");
    }

    #[test]
    fn durations_in_the_largest_whole_unit() {
        let cases = [
            (86_400_000, "24h"),
            (2 * 86_400_000, "2d"),
            (90_000, "90s"),
            (250, "250ms"),
            (300_000, "5m"),
        ];
        for (ms, text) in cases {
            assert_eq!(short_duration(Duration::from_millis(ms)), text);
        }
    }
}
