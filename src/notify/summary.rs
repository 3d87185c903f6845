//! The periodic summary of what still waits for a person: operations awaiting approval and
//! `unknown` ones, with how many of those only an operator can settle, and the oldest age
//! of each. Sent only when something waits.
//!
//! It reads the ledger's `prepared` and `unknown` operations page by page through the
//! domain API (never a write); the counting itself is pure.

use serde_json::json;

use super::message::Notice;
use crate::app::App;
use crate::clock::Timestamp;
use crate::decide::{Rules, needs_person};
use crate::ledger::{Filter, LedgerError};
use crate::operation::{Approval, Operation, State};

/// Operations read per ledger page.
const PAGE: usize = 500;

/// How many operations of one kind wait, and since when the oldest (its `created_at`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    pub count: u64,
    pub oldest: Option<Timestamp>,
}

impl Count {
    fn add(&mut self, op: &Operation) {
        self.count += 1;
        self.oldest = Some(self.oldest.map_or(op.created_at, |t| t.min(op.created_at)));
    }

    fn json(&self, now: Timestamp) -> serde_json::Value {
        json!({
            "count": self.count,
            "oldest_age_seconds": self.oldest.map(|t| now.since(t).as_secs()),
        })
    }
}

/// What waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waiting {
    pub awaiting_approval: Count,
    pub unknown: Count,
    /// Of `unknown`, those `decide::needs_person` says only an operator can settle.
    pub needs_operator: Count,
}

impl Waiting {
    /// Counts `op` where it belongs; `rules`: its route's, if still configured.
    pub fn add(&mut self, op: &Operation, rules: Option<Rules>, now: Timestamp) {
        match op.state {
            State::Prepared if op.approval == Approval::Pending => {
                self.awaiting_approval.add(op);
            }
            State::Unknown => {
                self.unknown.add(op);
                if rules.is_some_and(|r| needs_person(op, r, now)) {
                    self.needs_operator.add(op);
                }
            }
            _ => {}
        }
    }

    /// The summary notification, or `None` when nothing waits.
    pub fn notice(&self, now: Timestamp) -> Option<Notice> {
        if self.awaiting_approval.count == 0 && self.unknown.count == 0 {
            return None;
        }
        let age = |c: &Count| {
            c.oldest
                .map(|t| format!(", the oldest for {}", short(now.since(t))))
                .unwrap_or_default()
        };
        let detail = format!(
            "{} awaiting approval{}; {} unknown{} ({} only an operator can settle). \
             See `idemproxy ops list --state prepared` and `--state unknown`.",
            self.awaiting_approval.count,
            age(&self.awaiting_approval),
            self.unknown.count,
            age(&self.unknown),
            self.needs_operator.count,
        );
        let waiting = json!({
            "awaiting_approval": self.awaiting_approval.json(now),
            "unknown": self.unknown.json(now),
            "needs_operator": self.needs_operator.json(now),
        });
        Some(Notice {
            event: "summary",
            operation_id: None,
            provider: None,
            route: None,
            state: None,
            at: now,
            detail,
            waiting: Some(waiting),
        })
    }
}

/// A duration in whole units a person reads at a glance: `3d 4h`, `2h 5m`, `40s`.
fn short(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Reads what waits from the ledger.
pub async fn waiting(app: &App, now: Timestamp) -> Result<Waiting, LedgerError> {
    let mut waiting = Waiting::default();
    for state in [State::Prepared, State::Unknown] {
        let filter = Filter {
            state: Some(state),
            ..Filter::default()
        };
        let mut after: Option<String> = None;
        loop {
            let page = app.ledger.list(&filter, PAGE, after.as_deref()).await?;
            for op in &page.ops {
                waiting.add(op, app.rules(&op.provider, &op.route), now);
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(waiting)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{ApprovalMode, Dedupe, Effect};

    const NOW: Timestamp = Timestamp(1_800_000_000_000);

    fn rules() -> Rules {
        Rules {
            effect: Effect::Irreversible,
            dedupe: Dedupe::None,
            approval: ApprovalMode::None,
            key_retention: Duration::ZERO,
            timeout: Duration::from_secs(30),
            reconcile: false,
        }
    }

    fn op(state: State, approval: Approval, age_secs: u64) -> Operation {
        let created = NOW.minus(Duration::from_secs(age_secs));
        Operation {
            approval,
            ..Operation::example("p/r/x", state, created)
        }
    }

    #[test]
    fn it_counts_what_waits_and_the_oldest_age() {
        let mut w = Waiting::default();
        w.add(&op(State::Prepared, Approval::Pending, 7200), None, NOW);
        w.add(&op(State::Prepared, Approval::Approved, 9000), None, NOW);
        w.add(
            &op(State::Unknown, Approval::NotRequired, 60),
            Some(rules()),
            NOW,
        );
        w.add(&op(State::Unknown, Approval::NotRequired, 30), None, NOW);
        w.add(&op(State::Succeeded, Approval::NotRequired, 99), None, NOW);
        assert_eq!(
            w.awaiting_approval.count, 1,
            "an approved one waits for the agent"
        );
        assert_eq!(w.unknown.count, 2);
        assert_eq!(w.needs_operator.count, 1);
        let n = w.notice(NOW).unwrap();
        assert_eq!(n.event, "summary");
        assert!(
            n.detail.starts_with(
                "1 awaiting approval, the oldest for 2h 0m; 2 unknown, the oldest for 1m (1 only"
            ),
            "{}",
            n.detail
        );
        let waiting = n.waiting.unwrap();
        assert_eq!(waiting["awaiting_approval"]["oldest_age_seconds"], 7200);
        assert_eq!(waiting["needs_operator"]["count"], 1);
    }

    #[test]
    fn nothing_waiting_sends_nothing() {
        let mut w = Waiting::default();
        w.add(&op(State::Failed, Approval::Rejected, 5), None, NOW);
        assert_eq!(w.notice(NOW), None);
    }
}
