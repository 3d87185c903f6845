//! Wall-clock timestamps as the ledger stores them and the admin API prints them.
//!
//! Time is read in one place (`Timestamp::now`) so that pure code, such as `decide`, takes
//! it as an argument and tests can pass any instant.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn now() -> Timestamp {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(since.as_millis() as i64)
    }

    /// This instant plus a duration (saturating).
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_millis().min(i64::MAX as u128) as i64),
        )
    }

    /// This instant minus a duration (saturating).
    pub fn minus(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_sub(d.as_millis().min(i64::MAX as u128) as i64),
        )
    }

    /// Time elapsed from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// The same instant as a date and time in UTC (the Unix epoch if out of range).
    pub fn to_datetime(self) -> time::OffsetDateTime {
        let nanos = i128::from(self.0) * 1_000_000;
        time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-30T09:50:45.123Z`.
    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000_000;
        match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            Ok(t) => {
                let format = time::macros::format_description!(
                    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
                );
                t.format(&format).unwrap_or_default()
            }
            Err(_) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_utc() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp(1_795_946_445_123).to_rfc3339(),
            "2026-11-29T10:00:45.123Z"
        );
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp(1000);
        assert_eq!(t.plus(Duration::from_secs(1)), Timestamp(2000));
        assert_eq!(t.since(Timestamp(3000)), Duration::ZERO);
        assert_eq!(Timestamp(3000).since(t), Duration::from_secs(2));
    }
}
