//! The `Range` header of a GET (RFC 9110, section 14): one byte range, or none.

use sluice_store::ByteRange;

/// A parsed single `Range: bytes=…` header (RFC 9110, section 14.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `bytes=a-b` (inclusive; a last position past the end means the end) or `bytes=a-`.
    From { start: u64, last: Option<u64> },
    /// `bytes=-n`: the last n bytes (the whole object when it is shorter).
    Suffix(u64),
}

impl RangeSpec {
    /// The range as the store reads it; a suffix needs the object's size.
    pub fn to_byte_range(self, size: Option<u64>) -> ByteRange {
        match self {
            RangeSpec::From { start, last } => ByteRange {
                start,
                // A last position of u64::MAX means "to the end", not an overflow.
                end: last.map(|l| l.saturating_add(1)),
            },
            RangeSpec::Suffix(n) => ByteRange::from(size.unwrap_or(0).saturating_sub(n)),
        }
    }
}

/// Parses a single byte range; anything else (several ranges, other units,
/// nonsense) is ignored and the whole object is sent with 200, as RFC 9110
/// allows: sluice never answers multipart/byteranges.
pub fn parse_range(value: &str) -> Option<RangeSpec> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        return last.parse().ok().map(RangeSpec::Suffix);
    }
    let start = first.parse().ok()?;
    let last = if last.is_empty() {
        None
    } else {
        Some(last.parse().ok()?)
    };
    if matches!(last, Some(l) if l < start) {
        return None;
    }
    Some(RangeSpec::From { start, last })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_table() {
        let from = |start, last| Some(RangeSpec::From { start, last });
        let cases = [
            ("bytes=0-9", from(0, Some(9))),
            ("bytes=10-", from(10, None)),
            ("bytes=-5", Some(RangeSpec::Suffix(5))),
            ("bytes=5-3", None),
            ("bytes=0-1,4-5", None),
            ("items=0-1", None),
            ("bytes=a-b", None),
            ("bytes=0-18446744073709551615", from(0, Some(u64::MAX))),
            ("bytes=0-18446744073709551616", None),
            ("bytes=--5", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_range(text), expected, "{text}");
        }
    }

    #[test]
    fn ranges_resolve_within_the_object() {
        // (range, object size, what the store is asked for)
        let cases = [
            (
                RangeSpec::From {
                    start: 0,
                    last: Some(u64::MAX),
                },
                None,
                (0, Some(u64::MAX)),
            ),
            (
                RangeSpec::From {
                    start: 3,
                    last: Some(4),
                },
                None,
                (3, Some(5)),
            ),
            (
                RangeSpec::From {
                    start: 3,
                    last: None,
                },
                None,
                (3, None),
            ),
            (RangeSpec::Suffix(5), Some(100), (95, None)),
            (RangeSpec::Suffix(500), Some(100), (0, None)),
        ];
        for (spec, size, (start, end)) in cases {
            let resolved = spec.to_byte_range(size);
            assert_eq!((resolved.start, resolved.end), (start, end), "{spec:?}");
        }
    }
}
