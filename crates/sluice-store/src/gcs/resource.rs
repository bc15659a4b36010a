//! GCS's object resource (what metadata, listing, upload and compose answer)
//! read into sluice's types, and what sluice writes into one: ETags that are
//! generations, sluice's own metadata entries beside the user's, RFC 3339
//! times.
//!
//! - **ETag.** An object's ETag in sluice is its generation in quotes
//!   (`"1700000000000000"`): every answer has the generation (a download's
//!   `X-Goog-Generation` header included), and `If-Match` becomes
//!   `ifGenerationMatch`, the precondition GCS enforces on writes.
//! - **Metadata.** GCS keeps any name; sluice's own entries are
//!   `sluice__i_NAME` (the object's checksum, the upload that made it), and a
//!   user's name that begins with `sluice__` is stored as `sluice__u_NAME`.
//!   Names are read back in lower case, as S3 reports them.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Deserialize;

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::types::{Metadata, ObjectMeta, ObjectSettings, ObjectSummary};

const OWN: &str = "sluice__i_";
const ESCAPED: &str = "sluice__u_";

/// The own entry naming the multipart upload that made an object.
pub(crate) const UPLOAD_ENTRY: &str = "upload";
/// The own entry holding a part's CRC-64/NVME (decimal).
pub(crate) const PART_CRC64_ENTRY: &str = "crc64nvme";

/// The fields of an object resource sluice reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Resource {
    pub name: String,
    pub size: Option<String>,
    pub generation: Option<String>,
    pub updated: Option<String>,
    pub content_type: Option<String>,
    pub cache_control: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub storage_class: Option<String>,
    pub crc32c: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A listing page.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Listing {
    pub items: Vec<Resource>,
    pub next_page_token: Option<String>,
}

impl Resource {
    pub fn size(&self) -> u64 {
        self.size
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    pub fn generation(&self) -> u64 {
        self.generation
            .as_deref()
            .and_then(|g| g.parse().ok())
            .unwrap_or(0)
    }

    pub fn etag(&self) -> String {
        etag_of(self.generation())
    }

    pub fn updated(&self) -> SystemTime {
        self.updated
            .as_deref()
            .and_then(parse_rfc3339)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The CRC-32C GCS keeps (verified on every write, composed on compose).
    pub fn crc32c(&self) -> Option<u32> {
        crc32c_in(self.crc32c.as_deref()?)
    }

    /// An own entry's value.
    pub fn own(&self, name: &str) -> Option<&str> {
        self.metadata
            .as_ref()?
            .get(&format!("{OWN}{name}"))
            .map(String::as_str)
    }

    pub fn summary(&self, key: String) -> ObjectSummary {
        ObjectSummary {
            key,
            size: self.size(),
            etag: self.etag(),
            last_modified: self.updated(),
        }
    }

    pub fn meta(&self, key: &str) -> ObjectMeta {
        let (metadata, own) = split_metadata(
            self.metadata
                .iter()
                .flatten()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        ObjectMeta {
            key: key.to_string(),
            size: self.size(),
            etag: self.etag(),
            last_modified: self.updated(),
            content_type: self.content_type.clone(),
            metadata,
            settings: ObjectSettings {
                cache_control: self.cache_control.clone(),
                content_encoding: self.content_encoding.clone(),
                content_disposition: self.content_disposition.clone(),
                storage_class: self.storage_class.clone(),
                acl: None,
                encryption: None,
            },
            checksum: object_checksum(&own, self.crc32c()),
        }
    }
}

/// What a rewrite answers: the new object's resource when it is done, else a
/// token to send the next call of the same rewrite with (GCS rewrites large
/// objects, or into another location or class, in steps).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct RewriteAnswer {
    pub done: bool,
    pub rewrite_token: Option<String>,
    pub resource: Option<Resource>,
}

/// User entries and own entries (by their names without the prefix).
pub(crate) fn split_metadata<'a>(
    entries: impl Iterator<Item = (&'a str, &'a str)>,
) -> (Metadata, BTreeMap<String, String>) {
    let mut user = Metadata::new();
    let mut own = BTreeMap::new();
    for (name, value) in entries {
        if let Some(own_name) = name.strip_prefix(OWN) {
            own.insert(own_name.to_string(), value.to_string());
        } else {
            // In lower case, as S3 reports names (and a download's headers
            // bring them).
            let name = name.strip_prefix(ESCAPED).unwrap_or(name);
            user.insert(name.to_ascii_lowercase(), value.to_string());
        }
    }
    (user, own)
}

/// The object's checksum: the one sluice kept, else GCS's CRC-32C.
pub(crate) fn object_checksum(
    own: &BTreeMap<String, String>,
    crc32c: Option<u32>,
) -> Option<Checksum> {
    [ChecksumAlgorithm::Crc64nvme, ChecksumAlgorithm::Crc32c]
        .into_iter()
        .find_map(|a| {
            own.get(a.name())
                .and_then(|text| Checksum::from_base64(a, text))
        })
        .or_else(|| {
            crc32c.map(|value| Checksum {
                algorithm: ChecksumAlgorithm::Crc32c,
                value: u64::from(value),
            })
        })
}

/// The metadata map sluice writes: the user's entries and its own.
pub(crate) fn metadata_out(
    user: &Metadata,
    own: &[(&str, String)],
) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (name, value) in user {
        let stored = if name.starts_with("sluice__") {
            format!("{ESCAPED}{name}")
        } else {
            name.clone()
        };
        out.insert(stored, value.clone().into());
    }
    for (name, value) in own {
        out.insert(format!("{OWN}{name}"), value.clone().into());
    }
    out
}

/// The name of the own entry holding an object's checksum of `algorithm`.
pub(crate) fn checksum_entry(algorithm: ChecksumAlgorithm) -> &'static str {
    algorithm.name()
}

/// A generation as sluice's ETag.
pub(crate) fn etag_of(generation: u64) -> String {
    format!("\"{generation}\"")
}

/// The generation an ETag names; `None` for an ETag sluice did not make
/// (it names no generation, so it matches nothing).
pub(crate) fn generation_of(etag: &str) -> Option<u64> {
    etag.trim_matches('"').parse().ok()
}

/// `crc32c` as GCS writes it: base64 of the big-endian bytes.
pub(crate) fn crc32c_text(value: u32) -> String {
    BASE64.encode(value.to_be_bytes())
}

pub(crate) fn crc32c_in(text: &str) -> Option<u32> {
    let bytes = BASE64.decode(text.trim()).ok()?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}

/// `2026-11-30T01:02:03.456Z` (or with an offset) as a time.
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b'T' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        let padded = format!("{:0<9}", &fraction[..digits.min(9)]);
        nanos = padded.parse().ok()?;
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let seconds = u64::try_from(seconds).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::new(seconds, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_rfc_3339_writes_them() {
        // (text, seconds, nanos)
        let cases = [
            ("1970-01-01T00:00:00Z", Some((0, 0))),
            (
                "2026-11-30T01:02:03.456Z",
                Some((1_796_000_523, 456_000_000)),
            ),
            (
                "2026-11-30T02:02:03.456+01:00",
                Some((1_796_000_523, 456_000_000)),
            ),
            ("2000-02-29T12:00:00.000000001Z", Some((951_825_600, 1))),
            ("yesterday", None),
        ];
        for (text, want) in cases {
            let got = parse_rfc3339(text).map(|t| {
                let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
                (d.as_secs(), d.subsec_nanos())
            });
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn metadata_keeps_user_names_apart_from_sluices() {
        let user: Metadata = [
            ("plain".to_string(), "1".to_string()),
            ("sluice__i_checksum".to_string(), "2".to_string()),
            ("mixed case".to_string(), "3".to_string()),
        ]
        .into();
        let stored = metadata_out(&user, &[("crc64nvme", "x".into())]);
        let (back, own) = split_metadata(
            stored
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str().unwrap())),
        );
        assert_eq!(back, user);
        assert_eq!(own.get("crc64nvme").map(String::as_str), Some("x"));
        assert_eq!(own.len(), 1);
    }

    #[test]
    fn etags_are_generations() {
        assert_eq!(etag_of(17), "\"17\"");
        assert_eq!(generation_of("\"17\""), Some(17));
        assert_eq!(generation_of("\"0x8D1\""), None);
        assert_eq!(crc32c_in(&crc32c_text(0xDEAD_BEEF)), Some(0xDEAD_BEEF));
    }
}
