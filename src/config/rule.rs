//! `[[provider.rule]]` tables into `AnswerRule`s, and the warnings a provider's rules earn
//! against its routes. Each error names the rule by its index (`provider.rule[1].means`); it
//! never judges an answer (that is `rules`).

use std::path::Path;

use toml::Value;

use super::raw::RawRule;
use super::required;
use super::values::json_pointer;
use super::values::status_rule;
use super::{ConfigError, Scope};
use crate::policy::rule::{AnswerRule, Means};
use crate::policy::{ApprovalMode, Provider};
use crate::template::Part;

const MEANS: &[(&str, Means)] = &[
    ("succeeded", Means::Succeeded),
    ("failed", Means::Failed),
    ("unknown", Means::Unknown),
    ("pending", Means::Pending),
    ("reconcile", Means::Reconcile),
];

/// Every rule, in order; `None` if any has an error.
pub(super) fn rules(s: &mut Scope, raw: Vec<RawRule>) -> Option<Vec<AnswerRule>> {
    let checked: Vec<Option<AnswerRule>> = raw
        .into_iter()
        .enumerate()
        .map(|(i, raw)| rule(&mut s.nested(&format!("rule[{i}].")), raw))
        .collect();
    checked.into_iter().collect()
}

fn rule(s: &mut Scope, raw: RawRule) -> Option<AnswerRule> {
    let status = match raw.status.as_ref() {
        None => {
            let fix = "name the answer's status, e.g. status = 409 or status = \"4xx\"";
            s.push("status", format!("missing ({fix})"));
            None
        }
        Some(v) => s.check("status", status_rule(v)),
    };
    let pointer_given = raw.pointer.is_some();
    let pointer = match raw.pointer {
        None => Some(None),
        Some(p) => s.check("pointer", json_pointer(&p, false)).map(Some),
    };
    let equals = match (&raw.equals, pointer_given) {
        (None, _) => Some(None),
        (Some(_), false) => {
            let fix = "add pointer = \"/error/code\" (where the value is), or remove equals";
            s.push("equals", format!("equals needs a pointer ({fix})"));
            None
        }
        (Some(v), true) => s.check("equals", scalar(v)).map(Some),
    };
    let means = required(s, "means", raw.means, |v| {
        super::values::choice(Some(v), Means::Unknown, MEANS)
    });
    Some(AnswerRule {
        status: status?,
        pointer: pointer?,
        equals: equals?,
        means: means?,
    })
}

/// `equals`: a string, a number or a boolean, as JSON.
fn scalar(v: &Value) -> Result<serde_json::Value, String> {
    let fix = "compare with a string, a number or a boolean";
    match v {
        Value::String(s) => Ok(serde_json::Value::from(s.as_str())),
        Value::Integer(n) => Ok(serde_json::Value::from(*n)),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("{f} is not a JSON number ({fix})")),
        Value::Boolean(b) => Ok(serde_json::Value::from(*b)),
        other => Err(format!("{other} is not a scalar ({fix})")),
    }
}

/// Settings that load but do less than they seem to: `approval_show` on a route nobody
/// approves and whose `operator_show` is set (so no one sees it), a `reconcile` rule on a guarded route
/// without a lookup (there it counts as `unknown`), and a lookup that only a `reconcile`
/// rule's answer could fill on a provider without one (it is never sent).
pub(super) fn warnings(file: &Path, provider: &Provider) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let warn = |key: String, message: String| ConfigError {
        file: file.to_path_buf(),
        key,
        message,
    };
    let reconcile_rule = provider
        .rules
        .iter()
        .position(|r| r.means == Means::Reconcile);
    for route in &provider.routes {
        // Unset, `operator_show` is `approval_show`: then the operator sees those fields.
        let unused = route.operator_show != route.approval_show;
        if !route.approval_show.is_empty() && route.approval == ApprovalMode::None && unused {
            out.push(warn(
                format!("route \"{}\": approval_show", route.name),
                "ignored: it lists the fields shown to the person who approves, but this route \
                 has approval = \"none\", so nobody is asked, and operator_show is set (set \
                 approval = \"required\", or remove approval_show)"
                    .into(),
            ));
        }
    }
    let guarded = provider.routes.iter().filter(|r| r.is_guarded());
    match reconcile_rule {
        Some(i) => {
            let bare: Vec<String> = guarded
                .filter(|r| r.reconcile.is_none())
                .map(|r| format!("\"{}\"", r.name))
                .collect();
            if !bare.is_empty() {
                out.push(warn(
                    format!("provider.rule[{i}].means"),
                    format!(
                        "\"reconcile\" needs a [route.reconcile] lookup, which route {} lacks: \
                         there the rule counts as \"unknown\" (add a lookup, or mean \"unknown\")",
                        bare.join(", ")
                    ),
                ));
            }
        }
        None => {
            for route in guarded {
                let Some(rc) = &route.reconcile else { continue };
                let reads_answer = |t: &crate::template::Template| {
                    t.parts().iter().any(|p| matches!(p, Part::Answer(_)))
                };
                if rc.lookups.iter().all(|l| reads_answer(&l.target)) {
                    out.push(warn(
                        format!("route \"{}\": reconcile.lookup", route.name),
                        "every template reads {answer:...}, which only the answer of a \
                         means = \"reconcile\" rule provides, and the provider has none: the \
                         lookup is never sent (add a rule, or a template with {key})"
                            .into(),
                    ));
                }
            }
        }
    }
    out
}
