//! The storage rules every backend applies alike: what orphaning does to an operation, which
//! writes are refused, which pruned operations leave a tombstone and what it holds, how replay
//! counts merge. Pure functions over the operation model; no backend's types.
//!
//! A backend calls these inside its own transaction and never re-implements them, so a redb
//! ledger and a PostgreSQL one write the same records for the same calls.

use std::collections::BTreeMap;

use super::ReplayNote;
use super::fault::Fault;
use crate::clock::Timestamp;
use crate::operation::{Approval, Event, EventKind, Operation, State, Write};

/// The error and event detail of an operation found `in_flight` at start (redb: the process
/// that claimed it is gone).
pub(super) fn orphan_reason() -> &'static str {
    "the proxy stopped while this operation was in flight"
}

/// The error and event detail of an operation whose owner's lease lapsed (a shared ledger).
pub(super) fn lapsed_reason() -> &'static str {
    "the replica that claimed this operation stopped renewing its lease while it was in flight"
}

/// The error and event detail of a claim whose holder could not record its result.
pub(super) fn unrecorded_reason() -> &'static str {
    "the result of this attempt could not be recorded (the ledger could not write); the outcome \
     is unknown"
}

/// The error and event detail of a claim whose own commit failed: its caller was refused
/// and sent nothing.
pub(super) fn unsent_reason() -> &'static str {
    "the ledger could not make this attempt's claim durable, so nothing was sent; the \
     operation may be sent again"
}

/// What is known of a claim nobody will finish, for the sweep that settles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Left {
    /// Its request may have reached the provider: its result could not be recorded.
    Maybe,
    /// Its own commit failed (or was not made durable), so its caller was refused and sent
    /// nothing. `clean`: the operation was new, or plainly `failed`, before this claim, so
    /// nothing of it can have taken effect.
    Never { clean: bool },
}

impl Left {
    /// A claim over `before` whose commit failed.
    pub(super) fn never(before: Option<&Operation>) -> Left {
        Left::Never {
            clean: before.is_none_or(|b| b.state == State::Failed),
        }
    }
}

/// `old`, still `in_flight` under a claim nobody will finish, as the sweep leaves it: `failed`
/// when nothing of it can have taken effect (its last claim never left, and before it there
/// was nothing or a plain failure), so the agent's retry is sent; else `unknown`, as any
/// attempt that may have taken effect. Either way with the `operation.orphaned` event.
pub(super) fn abandoned(old: &Operation, left: Left, now: Timestamp) -> (Operation, Event) {
    match left {
        Left::Never { clean: true } => released(old, State::Failed, now, unsent_reason()),
        Left::Never { clean: false } | Left::Maybe => orphaned(old, now, unrecorded_reason()),
    }
}

/// `old`, made `unknown` (fence 0, `updated_at = now`) with `reason` as its error, and the
/// `operation.orphaned` event to append with it.
pub(super) fn orphaned(old: &Operation, now: Timestamp, reason: &str) -> (Operation, Event) {
    let (mut op, event) = released(old, State::Unknown, now, reason);
    // The attempt may have taken effect, as late as now.
    op.maybe_effect_at = Some(now);
    (op, event)
}

/// `old`, whose owner's lease lapsed, made `unknown` as `orphaned` does, but marked "may have
/// taken effect" until the last moment that owner could still have sent its attempt: its
/// dispatch plus `reach` (`LedgerOptions::attempt_reach`), if that is later than now. The owner
/// may be alive (paused, or cut off from the database) and still connecting; it sends nothing
/// once its lease lapsed (`Ledger::may_send`) or after its attempt's deadline, and a lookup's
/// `not_found_final_after` counts from this mark, as for any attempt that ended unknown.
pub(super) fn lapsed(
    old: &Operation,
    now: Timestamp,
    reach: std::time::Duration,
) -> (Operation, Event) {
    let (mut op, event) = orphaned(old, now, lapsed_reason());
    let dispatched = old.last_dispatched_at.unwrap_or(old.created_at);
    op.maybe_effect_at = Some(now.max(dispatched.plus(reach)));
    (op, event)
}

/// `old`, its claim released (fence 0) into `state` at `now` with `reason` as its error, and
/// its `operation.orphaned` event.
fn released(old: &Operation, state: State, now: Timestamp, reason: &str) -> (Operation, Event) {
    let mut op = old.clone();
    op.state = state;
    op.fence = 0;
    op.updated_at = now;
    op.error = Some(reason.to_owned());
    let event = orphan_event(&op);
    (op, event)
}

/// The `operation.orphaned` event of an operation `orphaned` has just made `unknown`.
pub(super) fn orphan_event(op: &Operation) -> Event {
    Event {
        at: op.updated_at,
        kind: EventKind::Orphaned,
        attempt: op.attempts,
        detail: op.error.clone().unwrap_or_default(),
    }
}

/// Refuses a `write` for `id` that carries another operation, or that would bring back a
/// pruned operation (`tombstoned`: `id` has a tombstone; docs/reference.md section 5.8).
pub(super) fn admissible(id: &str, write: &Write, tombstoned: bool) -> Result<(), Fault> {
    if write.op.id != id {
        return Err(Fault::new(format!(
            "a write for {id} carried the operation {}",
            write.op.id
        )));
    }
    if write.op.pruned_at.is_some() || tombstoned {
        return Err(Fault::new(format!(
            "operation {id} was pruned; its tombstone refuses every write"
        )));
    }
    Ok(())
}

/// The fence of the new claim `write` makes over `old`, if it makes one: `in_flight` under a
/// token the operation did not carry before.
pub(super) fn new_claim(old: Option<&Operation>, write: &Write) -> Option<u64> {
    let fence = write.op.fence;
    let claims = write.op.state == State::InFlight && fence != 0;
    (claims && old.is_none_or(|old| old.fence != fence)).then_some(fence)
}

/// Whether pruning `op` must leave a tombstone: its effect happened (`succeeded`), or an
/// operator ruled it must never happen (rejected). A plainly `failed` operation's effect
/// definitively did not happen, so it may be forgotten.
pub(super) fn leaves_tombstone(op: &Operation) -> bool {
    match op.state {
        State::Succeeded => true,
        State::Failed => op.approval == Approval::Rejected,
        State::Prepared | State::InFlight | State::Unknown => false,
    }
}

/// The tombstone of `op` pruned at `at`: no response, no per-field hashes, `pruned_at` set.
pub(super) fn tombstone_of(op: &Operation, at: Timestamp) -> Operation {
    Operation {
        fields: BTreeMap::new(),
        response: None,
        fence: 0,
        pruned_at: Some(at),
        ..op.clone()
    }
}

/// The detail of the one `operation.replayed` event an operation gets.
const FIRST_REPLAY: &str = "answered from the ledger; later replays are counted in `replays`";

/// `note` merged into what is kept (`None`: its first replays) as `(count, first, last)`.
pub(super) fn merged(kept: Option<(u64, i64, i64)>, note: &ReplayNote) -> (u64, i64, i64) {
    let (first, last) = (note.first.0, note.last.0);
    match kept {
        None => (note.count, first, last),
        Some((count, kept_first, kept_last)) => (
            count.saturating_add(note.count),
            kept_first.min(first),
            kept_last.max(last),
        ),
    }
}

/// The `operation.replayed` event appended with an operation's first counted replays.
pub(super) fn first_replay(op: &Operation, note: &ReplayNote) -> Event {
    Event {
        at: note.first,
        kind: EventKind::Replayed,
        attempt: op.attempts,
        detail: FIRST_REPLAY.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_000);
    const NOW: Timestamp = Timestamp(2_000);

    fn claimed(fence: u64) -> Operation {
        let mut op = Operation::example("p/r/x", State::InFlight, T0);
        op.fence = fence;
        op
    }

    #[test]
    fn a_claim_that_never_left_is_clean_only_over_nothing_or_a_plain_failure() {
        assert_eq!(Left::never(None), Left::Never { clean: true });
        let before = |state| Operation::example("p/r/x", state, T0);
        assert_eq!(
            Left::never(Some(&before(State::Failed))),
            Left::Never { clean: true }
        );
        for state in [State::Unknown, State::Prepared, State::InFlight] {
            assert_eq!(
                Left::never(Some(&before(state))),
                Left::Never { clean: false },
                "{state:?}: an earlier attempt may have taken effect, or a gate was passed"
            );
        }
    }

    #[test]
    fn a_clean_claim_that_never_left_fails_and_every_other_becomes_unknown() {
        let (op, event) = abandoned(&claimed(7), Left::Never { clean: true }, NOW);
        assert_eq!((op.state, op.fence, op.updated_at), (State::Failed, 0, NOW));
        assert_eq!(op.error.as_deref(), Some(unsent_reason()));
        assert_eq!(op.maybe_effect_at, None, "nothing can have taken effect");
        assert_eq!(
            (event.kind, event.detail.as_str()),
            (EventKind::Orphaned, unsent_reason())
        );

        for left in [Left::Maybe, Left::Never { clean: false }] {
            let (op, event) = abandoned(&claimed(7), left, NOW);
            assert_eq!((op.state, op.fence), (State::Unknown, 0), "{left:?}");
            assert_eq!(op.maybe_effect_at, Some(NOW), "{left:?}");
            assert_eq!(op.error.as_deref(), Some(unrecorded_reason()), "{left:?}");
            assert_eq!(event.kind, EventKind::Orphaned);
        }
    }

    /// A lapsed owner may still be connecting: the mark is its dispatch plus the reach, or
    /// the orphaning if that is later.
    #[test]
    fn a_lapsed_claim_may_have_taken_effect_until_its_owner_could_no_longer_send() {
        let reach = std::time::Duration::from_secs(31);
        let (op, event) = lapsed(&claimed(7), NOW, reach);
        assert_eq!((op.state, op.fence), (State::Unknown, 0));
        assert_eq!(
            op.maybe_effect_at,
            Some(T0.plus(reach)),
            "T0 + 31 s is after NOW"
        );
        assert_eq!(op.error.as_deref(), Some(lapsed_reason()));
        assert_eq!(event.kind, EventKind::Orphaned);

        let much_later = T0.plus(std::time::Duration::from_secs(3600));
        let (op, _) = lapsed(&claimed(7), much_later, reach);
        assert_eq!(op.maybe_effect_at, Some(much_later));
    }
}
