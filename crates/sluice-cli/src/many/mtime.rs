//! A file's modification time kept with its object, so that a download can
//! restore it and a second `sync` can tell an unchanged file from a changed one
//! without reading either. Stored as user metadata `mtime` in decimal Unix
//! seconds with nanoseconds (`1700000000.123456789`), the form rclone writes
//! and reads under the same name.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The metadata name.
pub const KEY: &str = "mtime";

/// Times closer than this are the same (filesystems keep different precisions).
const TOLERANCE: Duration = Duration::from_millis(1);

pub fn encode(time: SystemTime) -> String {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => format!("{}.{:09}", since.as_secs(), since.subsec_nanos()),
        Err(before) => {
            let before = before.duration();
            format!("-{}.{:09}", before.as_secs(), before.subsec_nanos())
        }
    }
}

pub fn decode(text: &str) -> Option<SystemTime> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (secs, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let secs: u64 = secs.parse().ok()?;
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").parse().ok()?
    };
    let offset = Duration::new(secs, nanos);
    if negative {
        UNIX_EPOCH.checked_sub(offset)
    } else {
        UNIX_EPOCH.checked_add(offset)
    }
}

/// Whether two times are the same within [`TOLERANCE`].
pub fn same(a: SystemTime, b: SystemTime) -> bool {
    let difference = a.duration_since(b).or_else(|e| Ok::<_, ()>(e.duration()));
    difference.is_ok_and(|d| d < TOLERANCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_rclone_values() {
        let cases = [
            (
                "1700000000.123456789",
                Some(Duration::new(1_700_000_000, 123_456_789)),
            ),
            (
                "1700000000.5",
                Some(Duration::new(1_700_000_000, 500_000_000)),
            ),
            ("1700000000", Some(Duration::new(1_700_000_000, 0))),
            ("17x", None),
            ("1.1234567891", None),
            ("", None),
        ];
        for (text, expected) in cases {
            let decoded = decode(text);
            assert_eq!(decoded, expected.map(|d| UNIX_EPOCH + d), "{text}");
            if let Some(time) = decoded {
                assert_eq!(decode(&encode(time)), Some(time), "{text}");
            }
        }
        let before = UNIX_EPOCH - Duration::from_millis(1500);
        assert_eq!(decode(&encode(before)), Some(before));
    }

    #[test]
    fn sameness_tolerates_a_millisecond() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert!(same(t, t + Duration::from_micros(999)));
        assert!(same(t + Duration::from_micros(999), t));
        assert!(!same(t, t + Duration::from_millis(2)));
    }
}
