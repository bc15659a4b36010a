//! Object keys of record batches, such as `{stream}/{yyyy}/{mm}/{dd}/{field:tenant}/{uuid}`.
//! A template splits records into partitions: records whose time placeholders,
//! fields and source partition render the same go into the same batch; the
//! batch's key adds `{offset}` (its first record's) and `{uuid}` when it opens.

use sluice_input::keys::validate_client_key;
use sluice_store::limits::MAX_KEY_LEN;
use time::OffsetDateTime;

use crate::compress::Compression;

/// Longest value of one `{field:…}` in a key.
const MAX_FIELD_VALUE: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Stream,
    Year,
    Month,
    Day,
    Hour,
    /// Index into [`StreamKeyTemplate::fields`].
    Field(usize),
    /// The same, as the value of a Hive-style `name=` directory (a table's
    /// partition column): escaped as Spark and Hive escape partition values.
    HiveField(usize),
    Partition,
    Offset,
    Uuid,
}

/// A parsed stream key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamKeyTemplate {
    pieces: Vec<Piece>,
    fields: Vec<String>,
    extension: &'static str,
    shard_prefix: bool,
}

/// What decides a record's batch: the values of the template's partitioning
/// placeholders (those it does not use stay empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PartitionKey {
    /// Hours since 1970 (UTC), when the template has a time placeholder:
    /// the first hour of the template's finest unit (a template without
    /// `{hh}` puts a day's records in one batch).
    pub hour: Option<i64>,
    /// The template's fields, in order, as they appear in keys.
    pub fields: Vec<String>,
    /// The source's partition (Kafka), when it has one.
    pub source_partition: Option<i32>,
}

impl StreamKeyTemplate {
    /// Parses `text`; keys end with `compression`'s extension.
    pub fn parse(text: &str, compression: Compression) -> Result<StreamKeyTemplate, String> {
        let mut pieces = Vec::new();
        let mut fields: Vec<String> = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let close = rest[open..].find('}').ok_or("an unclosed '{'")? + open;
            let name = &rest[open + 1..close];
            pieces.push(match name {
                "stream" => Piece::Stream,
                "yyyy" => Piece::Year,
                "mm" => Piece::Month,
                "dd" => Piece::Day,
                "hh" => Piece::Hour,
                "partition" => Piece::Partition,
                "offset" => Piece::Offset,
                "uuid" => Piece::Uuid,
                other => match other.strip_prefix("field:") {
                    Some(field) if !field.is_empty() => {
                        let index = match fields.iter().position(|f| f == field) {
                            Some(index) => index,
                            None => {
                                fields.push(field.to_string());
                                fields.len() - 1
                            }
                        };
                        // Right after `name=`: a partition directory.
                        match pieces.last() {
                            Some(Piece::Text(text)) if text.ends_with('=') => {
                                Piece::HiveField(index)
                            }
                            _ => Piece::Field(index),
                        }
                    }
                    _ => {
                        return Err(format!(
                            "unknown placeholder {{{other}}} (known: stream, yyyy, mm, dd, hh, field:NAME, partition, offset, uuid)"
                        ))
                    }
                },
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        if !pieces.contains(&Piece::Uuid) && !pieces.contains(&Piece::Offset) {
            return Err("the template needs {uuid} or {offset} so that keys are unique".into());
        }
        let template = StreamKeyTemplate {
            pieces,
            fields,
            extension: compression.extension(),
            shard_prefix: false,
        };
        // Placeholders never render empty, '/', '.' or '..', so the literal
        // text decides whether keys are valid: one sample tells for all.
        let sample = template.render("s", &PartitionKey::default(), 0, uuid::Uuid::nil());
        if sample.len() > MAX_KEY_LEN / 2 {
            return Err(format!(
                "the template makes keys of {} bytes before any value is put in; at most {} are allowed",
                sample.len(),
                MAX_KEY_LEN / 2
            ));
        }
        validate_client_key(&sample)
            .map_err(|reason| format!("the template makes invalid keys ({sample:?}): {reason}"))?;
        Ok(template)
    }

    /// Keys end with `extension` instead (`.parquet`).
    pub fn with_extension(mut self, extension: &'static str) -> Self {
        self.extension = extension;
        self
    }

    pub fn with_shard_prefix(mut self, on: bool) -> Self {
        self.shard_prefix = on;
        self
    }

    /// The record fields the template names, in order.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// Whether records are split by time.
    pub fn uses_time(&self) -> bool {
        self.pieces
            .iter()
            .any(|p| matches!(p, Piece::Year | Piece::Month | Piece::Day | Piece::Hour))
    }

    /// Whether keys name a batch's first offset.
    pub fn uses_offset(&self) -> bool {
        self.pieces.contains(&Piece::Offset)
    }

    /// Whether keys carry a fresh uuid.
    pub fn uses_uuid(&self) -> bool {
        self.pieces.contains(&Piece::Uuid)
    }

    /// Checks that keys are `…{partition}…{offset}…` and nothing else varies
    /// (no time, field or uuid, no shard prefix): what a Kafka stream needs so
    /// that a partition's stored batches can be found by listing, in offset order.
    pub fn check_offset_layout(&self) -> Result<(), String> {
        let varying_ok = self.pieces.iter().all(|p| {
            matches!(
                p,
                Piece::Text(_) | Piece::Stream | Piece::Partition | Piece::Offset
            )
        });
        let partition = self.pieces.iter().position(|p| *p == Piece::Partition);
        let offset = self.pieces.iter().position(|p| *p == Piece::Offset);
        // A '/' between them, so that partition 1's prefix is not partition 10's.
        let separated = matches!((partition, offset), (Some(p), Some(o)) if p < o && self.pieces[p + 1..o]
            .iter()
            .any(|piece| matches!(piece, Piece::Text(text) if text.contains('/'))));
        let after_offset_is_text = offset.is_some_and(|o| {
            self.pieces[o + 1..]
                .iter()
                .all(|p| matches!(p, Piece::Text(_)))
        });
        match (varying_ok, partition, offset) {
            (true, Some(p), Some(o))
                if p < o && separated && after_offset_is_text && !self.shard_prefix =>
            {
                Ok(())
            }
            _ => Err(
                "a Kafka stream's keys must be made of {stream}, {partition}, a '/' and then {offset} only \
                 (no time, field or uuid placeholder, no shard prefix): replays find stored batches by listing them"
                    .into(),
            ),
        }
    }

    /// Checks that keys hold `{partition}` and `{uuid}`: what a Kafka stream
    /// into a table needs (files from different partitions apart; a replay's
    /// file never in the way of the one a killed run stored and did not
    /// commit).
    ///
    /// And nothing else varies (no time or field placeholder): one batch per
    /// partition is open at a time, so that its offsets run in order and a
    /// commit's offset covers exactly the files it adds.
    pub fn check_table_layout(&self) -> Result<(), String> {
        let fixed = self.pieces.iter().all(|p| {
            matches!(
                p,
                Piece::Text(_) | Piece::Stream | Piece::Partition | Piece::Offset | Piece::Uuid
            )
        });
        if fixed && self.pieces.contains(&Piece::Partition) && self.pieces.contains(&Piece::Uuid) {
            return Ok(());
        }
        Err(
            "a Kafka stream into a table needs {partition} and {uuid} in its keys and no time \
             or field placeholder (such as {stream}/{partition}/{offset}-{uuid}): a replay writes \
             its files beside those a killed run stored and did not commit, and a partition's \
             batches must hold its offsets in order"
                .into(),
        )
    }

    /// What every key of `partition`'s batches starts with, up to the offset
    /// (for templates that pass [`Self::check_offset_layout`]).
    pub fn offset_prefix(&self, stream: &str, partition: &PartitionKey) -> String {
        let key = self.render(stream, partition, 0, uuid::Uuid::nil());
        let tail: usize = self.pieces[self
            .pieces
            .iter()
            .position(|p| *p == Piece::Offset)
            .unwrap_or(self.pieces.len())..]
            .iter()
            .map(|p| match p {
                Piece::Text(text) => text.len(),
                Piece::Offset => 20,
                _ => 0,
            })
            .sum::<usize>()
            + self.extension.len();
        key[..key.len() - tail].to_string()
    }

    /// The first offset of a batch key that starts with [`Self::offset_prefix`].
    pub fn offset_of(&self, key_after_prefix: &str) -> Option<u64> {
        let digits = key_after_prefix.get(..20)?;
        let rest = &key_after_prefix[20..];
        let tail: String = self.pieces[self.pieces.iter().position(|p| *p == Piece::Offset)? + 1..]
            .iter()
            .filter_map(|p| match p {
                Piece::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if rest != format!("{tail}{}", self.extension)
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        digits.parse().ok()
    }

    /// The partition of a record that came (or claims to come) at `time`, with
    /// these field values (`None`: missing) from source partition `source`.
    pub fn partition_of(
        &self,
        time: OffsetDateTime,
        fields: Vec<String>,
        source: Option<i32>,
    ) -> PartitionKey {
        PartitionKey {
            hour: self
                .uses_time()
                .then(|| self.unit_start(time).unix_timestamp().div_euclid(3600)),
            fields,
            source_partition: source,
        }
    }

    /// The start of the finest time unit the template renders that holds
    /// `time` (UTC).
    fn unit_start(&self, time: OffsetDateTime) -> OffsetDateTime {
        let time = time.to_offset(time::UtcOffset::UTC);
        let has = |piece: Piece| self.pieces.contains(&piece);
        if has(Piece::Hour) {
            return time;
        }
        let day = time.replace_time(time::Time::MIDNIGHT);
        if has(Piece::Day) {
            return day;
        }
        let month = day.replace_day(1).expect("every month has a first day");
        if has(Piece::Month) {
            return month;
        }
        month
            .replace_month(time::Month::January)
            .expect("January has a first day")
    }

    /// The key of a batch of `partition` whose first record is at `offset`.
    pub fn render(
        &self,
        stream: &str,
        partition: &PartitionKey,
        offset: u64,
        uuid: uuid::Uuid,
    ) -> String {
        let time = OffsetDateTime::from_unix_timestamp(partition.hour.unwrap_or(0) * 3600)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        let mut key = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => key.push_str(text),
                Piece::Stream => key.push_str(stream),
                Piece::Year => key.push_str(&format!("{:04}", time.year())),
                Piece::Month => key.push_str(&format!("{:02}", u8::from(time.month()))),
                Piece::Day => key.push_str(&format!("{:02}", time.day())),
                Piece::Hour => key.push_str(&format!("{:02}", time.hour())),
                Piece::HiveField(index) => key.push_str(&hive_segment(
                    partition.fields.get(*index).map(String::as_str),
                )),
                Piece::Field(index) => {
                    key.push_str(&segment(partition.fields.get(*index).map(String::as_str)))
                }
                Piece::Partition => match partition.source_partition {
                    Some(p) => key.push_str(&p.to_string()),
                    None => key.push('_'),
                },
                // Zero-padded so that keys sort in offset order.
                Piece::Offset => key.push_str(&format!("{offset:020}")),
                Piece::Uuid => key.push_str(&uuid.simple().to_string()),
            }
        }
        if self.shard_prefix {
            key = format!("{:04x}/{key}", fnv1a(key.as_bytes()) & 0xffff);
        }
        key.push_str(self.extension);
        key
    }
}

/// A field value as one safe key segment: control characters and separators
/// replaced, at most 128 bytes, never empty, `.` or `..` (those become `_`).
fn segment(value: Option<&str>) -> String {
    let mut out = String::new();
    for c in value.unwrap_or("").chars() {
        if out.len() + c.len_utf8() > MAX_FIELD_VALUE {
            break;
        }
        out.push(if c.is_control() || c == '/' || c == '\\' {
            '_'
        } else {
            c
        });
    }
    match out.as_str() {
        "" | "." | ".." => "_".into(),
        _ => out,
    }
}

pub use sluice_delta::HIVE_DEFAULT_PARTITION;

/// A field value as a partition directory's value, escaped as Spark escapes
/// them (`ExternalCatalogUtils.escapePathName`: control characters and
/// `"#%'*/:=?\{[]^` as `%XX`), so that every reader of Hive-style
/// partitions (Spark, DuckDB, deltalake) reads back the value itself; at most
/// 128 bytes of value; no value (or an empty one) is Hive's default partition.
fn hive_segment(value: Option<&str>) -> String {
    let value = match value {
        None | Some("") => return HIVE_DEFAULT_PARTITION.into(),
        Some(value) => value,
    };
    let mut out = String::new();
    let mut taken = 0;
    for c in value.chars() {
        if taken + c.len_utf8() > MAX_FIELD_VALUE {
            break;
        }
        taken += c.len_utf8();
        let escaped = c.is_control()
            || matches!(
                c,
                '"' | '#' | '%' | '\'' | '*' | '/' | ':' | '=' | '?' | '\\' | '{' | '[' | ']' | '^'
            );
        if escaped {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// FNV-1a: stable across releases, for shard prefixes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(template: &str, partition: &PartitionKey, offset: u64) -> String {
        StreamKeyTemplate::parse(template, Compression::Zstd)
            .unwrap()
            .render("clicks", partition, offset, uuid::Uuid::from_u128(0xab))
    }

    #[test]
    fn renders_keys() {
        let t = StreamKeyTemplate::parse(
            "{stream}/{yyyy}/{mm}/{dd}/{hh}/{field:tenant}/{uuid}",
            Compression::Zstd,
        )
        .unwrap();
        let time = time::macros::datetime!(2026-11-25 13:59:59 UTC);
        let p = t.partition_of(time, vec!["acme".into()], None);
        let cases: Vec<(&str, PartitionKey, &str)> = vec![
            (
                "{stream}/{yyyy}/{mm}/{dd}/{hh}/{field:tenant}/{uuid}",
                p.clone(),
                "clicks/2026/11/25/13/acme/000000000000000000000000000000ab.ndjson.zst",
            ),
            (
                "{stream}/{partition}/{offset}",
                PartitionKey {
                    source_partition: Some(7),
                    ..Default::default()
                },
                "clicks/7/00000000000000000042.ndjson.zst",
            ),
            (
                "{field:tenant}/{uuid}",
                PartitionKey {
                    fields: vec!["../x/y\n".into()],
                    ..Default::default()
                },
                ".._x_y_/000000000000000000000000000000ab.ndjson.zst",
            ),
            (
                "{field:tenant}/{uuid}",
                PartitionKey {
                    fields: vec!["..".into()],
                    ..Default::default()
                },
                "_/000000000000000000000000000000ab.ndjson.zst",
            ),
        ];
        // A partition directory (`name=`): escaped as Spark escapes them,
        // null or empty as Hive's default partition.
        let field = |value: Option<&str>| PartitionKey {
            fields: value.into_iter().map(str::to_owned).collect(),
            ..Default::default()
        };
        let hive = "t/tenant={field:tenant}/{uuid}";
        let uuid = "000000000000000000000000000000ab.ndjson.zst";
        let mut cases = cases;
        cases.extend([
            (hive, field(Some("acme")), "t/tenant=acme/"),
            (hive, field(Some("h?q#1")), "t/tenant=h%3Fq%231/"),
            (
                hive,
                field(Some("100%/x:y=z")),
                "t/tenant=100%25%2Fx%3Ay%3Dz/",
            ),
            (
                hive,
                field(Some("a\nb\\c\"d'e*f{g[h]i^j")),
                "t/tenant=a%0Ab%5Cc%22d%27e%2Af%7Bg%5Bh%5Di%5Ej/",
            ),
            (hive, field(Some("sp ace é")), "t/tenant=sp ace é/"),
            (
                hive,
                field(Some("")),
                "t/tenant=__HIVE_DEFAULT_PARTITION__/",
            ),
            (hive, field(None), "t/tenant=__HIVE_DEFAULT_PARTITION__/"),
        ]);
        for (template, partition, want) in cases {
            let got = key(template, &partition, 42);
            match want.ends_with('/') {
                true => assert_eq!(got, format!("{want}{uuid}"), "{template}"),
                false => assert_eq!(got, want, "{template}"),
            }
        }
        let other_hour = t.partition_of(time + time::Duration::SECOND, vec!["acme".into()], None);
        assert_ne!(p, other_hour);
        let untimed = StreamKeyTemplate::parse("{stream}/{uuid}", Compression::None).unwrap();
        assert_eq!(untimed.partition_of(time, vec![], None).hour, None);
        // A batch spans the template's finest unit: (template, two times,
        // whether they share a batch)
        let at = |text: &str| {
            OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
        };
        let units = [
            (
                "{hh}/{uuid}",
                "2026-11-29T10:59:59Z",
                "2026-11-29T11:00:00Z",
                false,
            ),
            (
                "{dd}/{uuid}",
                "2026-11-29T00:00:00Z",
                "2026-11-29T23:59:59Z",
                true,
            ),
            (
                "{dd}/{uuid}",
                "2026-11-29T23:59:59Z",
                "2026-11-30T00:00:00Z",
                false,
            ),
            (
                "{dd}/{uuid}",
                "2026-11-29T23:30:00-01:00",
                "2026-11-30T01:00:00Z",
                true,
            ),
            (
                "{yyyy}/{mm}/{uuid}",
                "2026-11-01T00:00:00Z",
                "2026-11-30T23:00:00Z",
                true,
            ),
            (
                "{yyyy}/{mm}/{uuid}",
                "2026-11-30T23:00:00Z",
                "2026-12-01T00:00:00Z",
                false,
            ),
            (
                "{yyyy}/{uuid}",
                "2026-01-01T00:00:00Z",
                "2026-12-31T23:00:00Z",
                true,
            ),
        ];
        for (template, one, other, shared) in units {
            let t = StreamKeyTemplate::parse(template, Compression::None).unwrap();
            let (one, other) = (at(one), at(other));
            let (a, b) = (
                t.partition_of(one, vec![], None),
                t.partition_of(other, vec![], None),
            );
            assert_eq!(a == b, shared, "{template}: {one} {other}");
            // And the batch's key renders the record's own unit.
            let uuid = uuid::Uuid::nil();
            let rendered =
                |time: OffsetDateTime| t.render("s", &t.partition_of(time, vec![], None), 0, uuid);
            let exact = |time: OffsetDateTime| {
                let hour = time.unix_timestamp().div_euclid(3600);
                let key = PartitionKey {
                    hour: Some(hour),
                    ..PartitionKey::default()
                };
                t.render("s", &key, 0, uuid)
            };
            assert_eq!(rendered(one), exact(one), "{template}");
            assert_eq!(rendered(other), exact(other), "{template}");
        }
    }

    #[test]
    fn refuses_bad_templates() {
        for bad in [
            "{stream}/{yyyy}",
            "{stream}/{field:}/{uuid}",
            "{nope}/{uuid}",
            "{uuid",
            "/{uuid}",
            "a//{uuid}",
            "_sluice/{uuid}",
        ] {
            assert!(
                StreamKeyTemplate::parse(bad, Compression::Zstd).is_err(),
                "{bad}"
            );
        }
        let long = format!("{}/{{uuid}}", "x".repeat(600));
        assert!(StreamKeyTemplate::parse(&long, Compression::Zstd).is_err());
    }

    #[test]
    fn kafka_layouts() {
        let cases = [
            ("{stream}/{partition}/{offset}", true),
            ("kafka/{stream}/p{partition}/o{offset}.batch", true),
            ("{stream}/{partition}{offset}", false),
            ("{stream}/{offset}/{partition}", false),
            ("{stream}/{partition}/{uuid}/{offset}", false),
            ("{stream}/{yyyy}/{partition}/{offset}", false),
            ("{stream}/{offset}", false),
        ];
        for (text, ok) in cases {
            let t = StreamKeyTemplate::parse(text, Compression::Zstd).unwrap();
            assert_eq!(t.check_offset_layout().is_ok(), ok, "{text}");
        }
        let t =
            StreamKeyTemplate::parse("{stream}/{partition}/{offset}", Compression::Zstd).unwrap();
        let p = PartitionKey {
            source_partition: Some(1),
            ..Default::default()
        };
        let prefix = t.offset_prefix("s", &p);
        assert_eq!(prefix, "s/1/");
        let key = t.render("s", &p, 42, uuid::Uuid::nil());
        assert_eq!(t.offset_of(&key[prefix.len()..]), Some(42));
        for other in [
            "00000000000000000042.ndjson.gz",
            "0000000000000000004x.ndjson.zst",
            "42.ndjson.zst",
        ] {
            assert_eq!(t.offset_of(other), None, "{other}");
        }
    }

    #[test]
    fn shard_prefix_is_stable() {
        let t = StreamKeyTemplate::parse("{stream}/{offset}", Compression::Gzip)
            .unwrap()
            .with_shard_prefix(true);
        let a = t.render("s", &PartitionKey::default(), 1, uuid::Uuid::nil());
        assert_eq!(
            a,
            t.render("s", &PartitionKey::default(), 1, uuid::Uuid::nil())
        );
        assert!(a.ends_with("/s/00000000000000000001.ndjson.gz"), "{a}");
        assert_eq!(a.find('/'), Some(4));
    }
}
