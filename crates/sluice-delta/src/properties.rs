//! The table properties (`metaData.configuration`) that say how long a
//! table's history is kept, as the Delta protocol spells them: durations are
//! calendar intervals (`interval 30 days`, `interval 1 hour`).

use std::collections::BTreeMap;
use std::time::Duration;

/// How long commits and checkpoints are kept (the table's property).
pub const LOG_RETENTION: &str = "delta.logRetentionDuration";
/// Without the property: Delta's default, 30 days.
pub const DEFAULT_LOG_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Whether old log files are removed at checkpoints (default true).
pub const EXPIRED_LOG_CLEANUP: &str = "delta.enableExpiredLogCleanup";
/// How long a removed file stays for readers of older versions.
pub const DELETED_FILE_RETENTION: &str = "delta.deletedFileRetentionDuration";
/// Without the property: Delta's default, 1 week. A checkpoint keeps
/// tombstones this recent, and drops older ones.
pub const DEFAULT_DELETED_FILE_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Whether commits carry an `inCommitTimestamp` (feature `inCommitTimestamp`).
pub const IN_COMMIT_TIMESTAMPS: &str = "delta.enableInCommitTimestamps";
/// While true, writers assign no row ids (feature `rowTracking`).
pub const ROW_TRACKING_SUSPENDED: &str = "delta.rowTrackingSuspended";
/// `v2` or `classic`: the kind of checkpoint writers make.
pub const CHECKPOINT_POLICY: &str = "delta.checkpointPolicy";
/// Log files before this version are kept (feature `checkpointProtection`).
pub const CHECKPOINT_PROTECTION: &str = "delta.requireCheckpointProtectionBeforeVersion";

/// The version before which feature `checkpointProtection` keeps the log.
pub fn protected_before(configuration: &BTreeMap<String, Option<String>>) -> Option<u64> {
    text(configuration, CHECKPOINT_PROTECTION)?
        .trim()
        .parse()
        .ok()
}

/// A property's text, if set.
fn text<'a>(configuration: &'a BTreeMap<String, Option<String>>, key: &str) -> Option<&'a str> {
    configuration.get(key)?.as_deref()
}

/// A duration property, when set and well formed.
pub fn duration(configuration: &BTreeMap<String, Option<String>>, key: &str) -> Option<Duration> {
    parse_interval(text(configuration, key)?)
}

/// Whether the table lets old log files be removed.
pub fn expired_log_cleanup(configuration: &BTreeMap<String, Option<String>>) -> bool {
    text(configuration, EXPIRED_LOG_CLEANUP).is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"))
}

/// `interval 30 days` (the word `interval` optional; weeks down to
/// milliseconds, singular or plural) as a duration.
pub fn parse_interval(text: &str) -> Option<Duration> {
    let mut words = text.split_whitespace();
    let mut first = words.next()?;
    if first.eq_ignore_ascii_case("interval") {
        first = words.next()?;
    }
    let count: u64 = first.parse().ok()?;
    let unit = words.next()?.to_ascii_lowercase();
    if words.next().is_some() {
        return None;
    }
    let seconds = match unit.trim_end_matches('s') {
        "week" => 7 * 24 * 3600,
        "day" => 24 * 3600,
        "hour" => 3600,
        "minute" => 60,
        "second" => 1,
        "millisecond" => return Some(Duration::from_millis(count)),
        _ => return None,
    };
    Some(Duration::from_secs(count.checked_mul(seconds)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_as_delta_writes_them() {
        let cases = [
            ("interval 30 days", Some(30 * 86_400_000)),
            ("interval 1 hour", Some(3_600_000)),
            ("interval 2 weeks", Some(14 * 86_400_000)),
            ("7 days", Some(7 * 86_400_000)),
            ("INTERVAL 90 SECONDS", Some(90_000)),
            ("interval 250 milliseconds", Some(250)),
            ("interval", None),
            ("interval x days", None),
            ("interval 3 fortnights", None),
            ("interval 1 day 2 hours", None),
        ];
        for (text, millis) in cases {
            assert_eq!(
                parse_interval(text).map(|d| d.as_millis() as u64),
                millis,
                "{text}"
            );
        }
    }
}
