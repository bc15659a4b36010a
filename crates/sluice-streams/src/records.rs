//! Request bodies and input blocks as records: NDJSON (one JSON value per line,
//! blank lines skipped, `\r\n` accepted) or one JSON array, each record checked
//! to be JSON, placed in its partition, and cut into runs of consecutive records
//! of one partition. A run of clean NDJSON lines is a slice of the body itself:
//! records are not copied on their way to compression.

use std::borrow::Cow;
use std::fmt;

use bytes::{Bytes, BytesMut};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::json_key::JsonKey;
use time::OffsetDateTime;

use crate::error::{BadRecord, StreamError};
use crate::table::schema::{fits_as_is, StreamSchema, Version};
use crate::template::{PartitionKey, StreamKeyTemplate};

/// How a body holds its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// One JSON value per line.
    Ndjson,
    /// One JSON array whose elements are the records.
    JsonArray,
}

/// What decides whether a record is taken, and where it goes.
#[derive(Debug, Clone)]
pub struct RecordRules<'a> {
    pub template: &'a StreamKeyTemplate,
    pub time_field: Option<&'a str>,
    /// The time field is the timestamp column a table is partitioned by
    /// (Iceberg's day or hour): each record must give it, as text its
    /// column takes, and its time is read as the column reads it.
    pub time_is_column: bool,
    pub max_record_bytes: u64,
    /// When the records came in (their time without `time_field`).
    pub arrival: OffsetDateTime,
    /// The source's partition (Kafka), if any.
    pub source_partition: Option<i32>,
    /// Lines before this block (numbers in errors continue from it).
    pub first_line: u64,
    /// A Parquet stream's schema: every record is an object that fits it
    /// (growing it with new fields).
    pub schema: Option<&'a StreamSchema>,
}

/// Consecutive records of one partition, each followed by `\n`.
#[derive(Debug, Clone)]
pub struct Run {
    pub partition: PartitionKey,
    pub data: Bytes,
    pub records: u64,
    /// The source's offset of the run's first record (Kafka; its records are
    /// at consecutive offsets); `None`: the stream numbers records itself, in
    /// the order they are appended.
    pub offset: Option<u64>,
}

/// An invalid record and its bytes as they came (for a dead letter).
#[derive(Debug, Clone)]
pub struct Rejected {
    pub why: BadRecord,
    pub raw: Bytes,
}

/// A parsed body.
#[derive(Debug, Default)]
pub struct ParsedRecords {
    pub runs: Vec<Run>,
    pub records: u64,
    /// Bytes of valid records, newlines included.
    pub bytes: u64,
    pub rejected: Vec<Rejected>,
    /// Lines (or elements) seen, blank ones included.
    pub lines: u64,
}

/// Parses `body` as records under `rules`.
pub fn parse_records(
    body: Bytes,
    format: BodyFormat,
    rules: &RecordRules<'_>,
) -> Result<ParsedRecords, StreamError> {
    let picker = Picker::new(rules);
    match format {
        BodyFormat::Ndjson => Ok(parse_lines(body, rules, &picker)),
        BodyFormat::JsonArray => parse_array(&body, rules, &picker),
    }
}

fn parse_lines(body: Bytes, rules: &RecordRules<'_>, picker: &Picker<'_>) -> ParsedRecords {
    let mut parsed = ParsedRecords::default();
    let mut runs = RunBuilder::default();
    let mut pos = 0;
    let mut number = rules.first_line;
    while pos < body.len() {
        let end = memchr::memchr(b'\n', &body[pos..]).map_or(body.len(), |i| pos + i);
        let next = (end + 1).min(body.len());
        let has_newline = end < body.len();
        number += 1;
        let line = &body[pos..end];
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            pos = next;
            continue;
        }
        let checked = check_record(trimmed, rules, picker);
        match checked {
            Err(reason) => parsed.rejected.push(Rejected {
                why: BadRecord {
                    place: "line",
                    number,
                    reason,
                },
                raw: body.slice(pos..end),
            }),
            Ok(partition) => {
                parsed.records += 1;
                parsed.bytes += trimmed.len() as u64 + 1;
                if has_newline && trimmed.len() == line.len() {
                    runs.push_slice(&body, pos, next, partition, None);
                } else {
                    runs.push_owned(&body, line_copy(trimmed), partition, None);
                }
            }
        }
        pos = next;
    }
    parsed.lines = number - rules.first_line;
    parsed.runs = runs.finish(&body);
    parsed
}

fn parse_array(
    body: &[u8],
    rules: &RecordRules<'_>,
    picker: &Picker<'_>,
) -> Result<ParsedRecords, StreamError> {
    let elements: Vec<&RawValue> = serde_json::from_slice(body)
        .map_err(|e| StreamError::BadInput(format!("the body is not a JSON array: {e}")))?;
    let mut parsed = ParsedRecords::default();
    let mut out = BytesMut::with_capacity(body.len());
    let mut bounds: Vec<(usize, usize, PartitionKey)> = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        let text = element.get().as_bytes();
        let number = rules.first_line + index as u64 + 1;
        // An element of a JSON array that parsed is JSON.
        let compact = compact_json(text).unwrap_or(Cow::Borrowed(text));
        match check_record(&compact, rules, picker) {
            Err(reason) => parsed.rejected.push(Rejected {
                why: BadRecord {
                    place: "element",
                    number,
                    reason,
                },
                raw: Bytes::copy_from_slice(text),
            }),
            Ok(partition) => {
                let start = out.len();
                out.extend_from_slice(&compact);
                out.extend_from_slice(b"\n");
                parsed.records += 1;
                bounds.push((start, out.len(), partition));
            }
        }
    }
    parsed.lines = elements.len() as u64;
    parsed.bytes = out.len() as u64;
    let data = out.freeze();
    let mut runs = RunBuilder::default();
    for (start, end, partition) in bounds {
        runs.push_slice(&data, start, end, partition, None);
    }
    parsed.runs = runs.finish(&data);
    Ok(parsed)
}

/// Checks single records (such as Kafka message values) under one set of rules.
pub struct RecordChecker<'a> {
    rules: &'a RecordRules<'a>,
    picker: Picker<'a>,
}

impl<'a> RecordChecker<'a> {
    pub fn new(rules: &'a RecordRules<'a>) -> RecordChecker<'a> {
        RecordChecker {
            rules,
            picker: Picker::new(rules),
        }
    }

    /// The record's partition, or why it is not taken. `record` must be one
    /// line: JSON spread over lines is compacted first ([`compact_json`]).
    pub fn check(&self, record: &[u8]) -> Result<PartitionKey, String> {
        check_record(record.trim_ascii(), self.rules, &self.picker)
    }
}

/// JSON text on one line: as it is when it has no line break, else with the
/// whitespace between its tokens dropped (None when it is not JSON). Nothing
/// else changes: keys keep their order, numbers and escapes their spelling.
pub fn compact_json(text: &[u8]) -> Option<Cow<'_, [u8]>> {
    // memchr: a byte-at-a-time scan was a tenth of the Kafka source's CPU.
    if memchr::memchr2(b'\n', b'\r', text).is_none() {
        return Some(Cow::Borrowed(text));
    }
    // Checked first: dropping whitespace joins tokens (`12 34`, `tr ue`).
    serde_json::from_slice::<IgnoredAny>(text).ok()?;
    Some(Cow::Owned(without_whitespace(text)))
}

/// Valid JSON `text` without the whitespace outside its strings.
fn without_whitespace(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for &byte in text {
        if in_string {
            out.push(byte);
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
        } else if !matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
            in_string = byte == b'"';
            out.push(byte);
        }
    }
    out
}

/// Checks one record (no surrounding whitespace) and finds its partition.
fn check_record(
    record: &[u8],
    rules: &RecordRules<'_>,
    picker: &Picker<'_>,
) -> Result<PartitionKey, String> {
    if record.len() as u64 > rules.max_record_bytes {
        return Err(format!(
            "the record is {} bytes; at most {} are allowed",
            record.len(),
            rules.max_record_bytes
        ));
    }
    let not_json = |e: serde_json::Error| format!("not JSON: {e}");
    let picked = match &picker.schema {
        Some((schema, seen)) => {
            // One pass checks the JSON and its fit (the common case); a record
            // that brings something new is read whole to grow the schema.
            if !fits_as_is(seen, record).map_err(not_json)? {
                let value: serde_json::Value = serde_json::from_slice(record).map_err(not_json)?;
                schema
                    .check(seen, &value)
                    .map_err(|conflict| conflict.to_string())?;
            }
            if picker.names.is_empty() {
                Vec::new()
            } else {
                picker.pick(record).map_err(not_json)?
            }
        }
        None => picker.pick(record).map_err(not_json)?,
    };
    let mut time = rules.arrival;
    let mut fields = Vec::with_capacity(picker.fields);
    for (i, value) in picked.into_iter().enumerate() {
        if i < picker.fields {
            fields.push(value.map(Scalar::into_text).unwrap_or_default());
        } else if rules.time_is_column {
            time = value.and_then(Scalar::into_column_time).ok_or_else(|| {
                format!(
                    "the record has no timestamp in `{}`, which the table is partitioned by",
                    rules.time_field.unwrap_or_default()
                )
            })?;
        } else if let Some(at) = value.and_then(Scalar::into_time) {
            time = at;
        }
    }
    Ok(rules
        .template
        .partition_of(time, fields, rules.source_partition))
}

/// Builds runs: slices of one buffer while records follow each other in the
/// same partition (and, with source offsets, at consecutive offsets), owned
/// copies otherwise; runs come out in the order their records went in.
#[derive(Default)]
pub(crate) struct RunBuilder {
    runs: Vec<Run>,
    /// The open run as a range of the buffer.
    open: Option<OpenRun>,
}

struct OpenRun {
    start: usize,
    end: usize,
    partition: PartitionKey,
    records: u64,
    offset: Option<u64>,
}

impl RunBuilder {
    /// Adds the record `buffer[start..end]` (its `\n` included).
    pub(crate) fn push_slice(
        &mut self,
        buffer: &Bytes,
        start: usize,
        end: usize,
        partition: PartitionKey,
        offset: Option<u64>,
    ) {
        if let Some(open) = &mut self.open {
            let follows = match (open.offset, offset) {
                (None, None) => true,
                (Some(first), Some(next)) => first + open.records == next,
                _ => false,
            };
            if open.end == start && follows && open.partition == partition {
                open.end = end;
                open.records += 1;
                return;
            }
        }
        self.close(buffer);
        self.open = Some(OpenRun {
            start,
            end,
            partition,
            records: 1,
            offset,
        });
    }

    /// Adds a record copied out of the buffer (its `\n` included).
    pub(crate) fn push_owned(
        &mut self,
        buffer: &Bytes,
        data: Bytes,
        partition: PartitionKey,
        offset: Option<u64>,
    ) {
        self.close(buffer);
        self.runs.push(Run {
            partition,
            data,
            records: 1,
            offset,
        });
    }

    fn close(&mut self, buffer: &Bytes) {
        if let Some(open) = self.open.take() {
            self.runs.push(Run {
                partition: open.partition,
                data: buffer.slice(open.start..open.end),
                records: open.records,
                offset: open.offset,
            });
        }
    }

    pub(crate) fn finish(mut self, buffer: &Bytes) -> Vec<Run> {
        self.close(buffer);
        self.runs
    }
}

/// `record` and its `\n`, copied.
pub(crate) fn line_copy(record: &[u8]) -> Bytes {
    let mut copy = BytesMut::with_capacity(record.len() + 1);
    copy.extend_from_slice(record);
    copy.extend_from_slice(b"\n");
    copy.freeze()
}

/// Reads the top-level fields the template and the time field need, checking
/// that the whole record is JSON on the way.
struct Picker<'a> {
    names: Vec<&'a str>,
    /// How many of `names` are template fields (the time field comes last).
    fields: usize,
    /// The Parquet schema, and the version records are checked against first.
    schema: Option<(&'a StreamSchema, std::sync::Arc<Version>)>,
}

impl<'a> Picker<'a> {
    fn new(rules: &RecordRules<'a>) -> Picker<'a> {
        let mut names: Vec<&str> = rules.template.fields().iter().map(String::as_str).collect();
        let fields = names.len();
        names.extend(rules.time_field);
        let schema = rules.schema.map(|schema| (schema, schema.current()));
        Picker {
            names,
            fields,
            schema,
        }
    }

    fn pick(&self, record: &[u8]) -> Result<Vec<Option<Scalar>>, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(record);
        if self.names.is_empty() {
            de::Deserialize::deserialize(&mut de).map(|_: IgnoredAny| ())?;
            de.end()?;
            return Ok(Vec::new());
        }
        let picked = PickSeed { names: &self.names }.deserialize(&mut de)?;
        de.end()?;
        Ok(picked)
    }
}

/// A picked field's value, when it is a scalar.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Text(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn into_text(self) -> String {
        match self {
            Scalar::Text(text) => text,
            Scalar::Integer(n) => n.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }

    /// RFC 3339 text, or seconds (milliseconds from 10^11 on) since 1970.
    fn into_time(self) -> Option<OffsetDateTime> {
        const MILLIS_FROM: i64 = 100_000_000_000;
        match self {
            Scalar::Text(text) => {
                OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339).ok()
            }
            Scalar::Integer(n) if n.abs() >= MILLIS_FROM => {
                OffsetDateTime::from_unix_timestamp_nanos(n as i128 * 1_000_000).ok()
            }
            Scalar::Integer(n) => OffsetDateTime::from_unix_timestamp(n).ok(),
            Scalar::Float(f) if f.is_finite() => {
                OffsetDateTime::from_unix_timestamp_nanos((f * 1e9) as i128).ok()
            }
            _ => None,
        }
    }
}

impl Scalar {
    /// A timestamp column's value, computed as arrow-json computes it into
    /// the column (RFC 3339, a space for the `T`, no offset as UTC; whole
    /// microseconds, rounded down); a column without a zone reads the same
    /// digits.
    fn into_column_time(self) -> Option<OffsetDateTime> {
        let Scalar::Text(text) = self else {
            return None;
        };
        let utc: arrow_array::timezone::Tz = "+00:00".parse().ok()?;
        let micros = arrow_cast::parse::string_to_datetime(&utc, &text)
            .ok()?
            .timestamp_micros();
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000).ok()
    }
}

struct PickSeed<'n> {
    names: &'n [&'n str],
}

impl<'de> DeserializeSeed<'de> for PickSeed<'_> {
    type Value = Vec<Option<Scalar>>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PickSeed<'_> {
    type Value = Vec<Option<Scalar>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut picked = vec![None; self.names.len()];
        while let Some(JsonKey(key)) = map.next_key::<JsonKey<'de>>()? {
            match self.names.iter().position(|n| *n == key) {
                Some(i) => picked[i] = map.next_value::<MaybeScalar>()?.0,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(picked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(vec![None; self.names.len()])
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(vec![None; self.names.len()])
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(vec![None; self.names.len()])
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(vec![None; self.names.len()])
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(vec![None; self.names.len()])
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(vec![None; self.names.len()])
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(vec![None; self.names.len()])
    }
}

/// A value that is kept when it is a scalar and skipped otherwise.
struct MaybeScalar(Option<Scalar>);

impl<'de> de::Deserialize<'de> for MaybeScalar {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeScalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<MaybeScalar, E> {
                Ok(MaybeScalar(Some(Scalar::Bool(v))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<MaybeScalar, E> {
                Ok(MaybeScalar(Some(Scalar::Integer(v))))
            }
            fn visit_u64<E>(self, v: u64) -> Result<MaybeScalar, E> {
                Ok(MaybeScalar(Some(match i64::try_from(v) {
                    Ok(v) => Scalar::Integer(v),
                    Err(_) => Scalar::Float(v as f64),
                })))
            }
            fn visit_f64<E>(self, v: f64) -> Result<MaybeScalar, E> {
                Ok(MaybeScalar(Some(Scalar::Float(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<MaybeScalar, E> {
                Ok(MaybeScalar(Some(Scalar::Text(v.to_string()))))
            }
            fn visit_unit<E>(self) -> Result<MaybeScalar, E> {
                Ok(MaybeScalar(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeScalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeScalar(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeScalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(MaybeScalar(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Compression;

    fn rules(template: &StreamKeyTemplate) -> RecordRules<'_> {
        RecordRules {
            template,
            time_field: Some("ts"),
            time_is_column: false,
            max_record_bytes: 64,
            arrival: time::macros::datetime!(2026-11-25 10:30 UTC),
            source_partition: None,
            first_line: 0,
            schema: None,
        }
    }

    /// (name, records as (source partition, offset, sliced), runs as
    /// (source partition, first offset, records, data))
    type RunCase<'a> = (
        &'a str,
        Vec<(i32, u64, bool)>,
        Vec<(i32, u64, u64, &'a str)>,
    );

    #[test]
    fn runs_of_source_records() {
        // Record i is the buffer's line i ("a\n", "b\n", …); an owned record
        // is an upper-case copy, so the data says which way it went.
        let buffer = Bytes::from_static(b"a\nb\nc\nd\ne\n");
        let cases: Vec<RunCase> = vec![
            (
                "consecutive offsets, one run",
                vec![(0, 5, true), (0, 6, true), (0, 7, true)],
                vec![(0, 5, 3, "a\nb\nc\n")],
            ),
            (
                "a gap in offsets (compaction) starts a run",
                vec![(0, 5, true), (0, 6, true), (0, 9, true)],
                vec![(0, 5, 2, "a\nb\n"), (0, 9, 1, "c\n")],
            ),
            (
                "another partition starts a run",
                vec![(0, 5, true), (1, 6, true), (0, 6, true)],
                vec![(0, 5, 1, "a\n"), (1, 6, 1, "b\n"), (0, 6, 1, "c\n")],
            ),
            (
                "a copy keeps its place between slices",
                vec![(0, 5, true), (0, 6, false), (0, 7, true), (0, 8, true)],
                vec![(0, 5, 1, "a\n"), (0, 6, 1, "B\n"), (0, 7, 2, "c\nd\n")],
            ),
        ];
        for (name, records, want) in cases {
            let mut builder = RunBuilder::default();
            for (i, (source, offset, sliced)) in records.into_iter().enumerate() {
                let partition = PartitionKey {
                    source_partition: Some(source),
                    ..PartitionKey::default()
                };
                let (start, end) = (2 * i, 2 * i + 2);
                if sliced {
                    builder.push_slice(&buffer, start, end, partition, Some(offset));
                } else {
                    let copy = line_copy(&buffer[start..end - 1].to_ascii_uppercase());
                    builder.push_owned(&buffer, copy, partition, Some(offset));
                }
            }
            let got: Vec<(i32, u64, u64, String)> = builder
                .finish(&buffer)
                .into_iter()
                .map(|run| {
                    (
                        run.partition.source_partition.unwrap(),
                        run.offset.unwrap(),
                        run.records,
                        String::from_utf8(run.data.to_vec()).unwrap(),
                    )
                })
                .collect();
            let want: Vec<(i32, u64, u64, String)> = want
                .into_iter()
                .map(|(p, o, r, d)| (p, o, r, d.to_string()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    /// (name, body, records taken, runs, rejected line numbers, stored bytes)
    type LineCase<'a> = (&'a str, &'a str, u64, usize, Vec<u64>, &'a str);

    #[test]
    fn ndjson_bodies() {
        let template =
            StreamKeyTemplate::parse("{hh}/{field:t}/{uuid}", Compression::None).unwrap();
        let long = format!("{{\"x\":\"{}\"}}\n", "a".repeat(80));
        let cases: Vec<LineCase> = vec![
            ("empty", "", 0, 0, vec![], ""),
            ("one line", "{\"a\":1}\n", 1, 1, vec![], "{\"a\":1}\n"),
            ("no final newline", "{\"a\":1}", 1, 1, vec![], "{\"a\":1}\n"),
            ("crlf", "1\r\n2\r\n", 2, 2, vec![], "1\n2\n"),
            ("blank lines", "\n1\n\n  \n2\n", 2, 2, vec![], "1\n2\n"),
            (
                "a copied line between clean ones keeps its place",
                "1\n 2\n3\n",
                3,
                3,
                vec![],
                "1\n2\n3\n",
            ),
            (
                "one partition, one run",
                "1\n2\n3\n",
                3,
                1,
                vec![],
                "1\n2\n3\n",
            ),
            (
                "fields split runs",
                "{\"t\":\"a\"}\n{\"t\":\"a\"}\n{\"t\":\"b\"}\n{\"t\":\"a\"}\n",
                4,
                3,
                vec![],
                "{\"t\":\"a\"}\n{\"t\":\"a\"}\n{\"t\":\"b\"}\n{\"t\":\"a\"}\n",
            ),
            ("bad json", "1\n{nope\n3\n", 2, 2, vec![2], "1\n3\n"),
            ("two values on a line", "1 2\n", 0, 0, vec![1], ""),
            ("too long", long.as_str(), 0, 0, vec![1], ""),
            (
                "nested field ignored",
                "{\"t\":{\"x\":1}}\n",
                1,
                1,
                vec![],
                "{\"t\":{\"x\":1}}\n",
            ),
        ];
        for (name, body, records, runs, bad, stored) in cases {
            let parsed = parse_records(
                Bytes::copy_from_slice(body.as_bytes()),
                BodyFormat::Ndjson,
                &rules(&template),
            )
            .unwrap();
            assert_eq!(parsed.records, records, "{name}");
            assert_eq!(parsed.runs.len(), runs, "{name}");
            let lines: Vec<u64> = parsed.rejected.iter().map(|r| r.why.number).collect();
            assert_eq!(lines, bad, "{name}");
            let all: Vec<u8> = parsed.runs.iter().flat_map(|r| r.data.to_vec()).collect();
            assert_eq!(String::from_utf8(all).unwrap(), stored, "{name}");
            assert_eq!(parsed.bytes, stored.len() as u64, "{name}");
        }
    }

    #[test]
    fn partitions_by_field_and_record_time() {
        let template =
            StreamKeyTemplate::parse("{hh}/{field:t}/{uuid}", Compression::None).unwrap();
        let body = concat!(
            "{\"t\":\"a\",\"ts\":\"2026-11-25T08:15:00Z\"}\n",
            "{\"t\":7,\"ts\":1795600000}\n",
            "{\"ts\":1795600000000}\n",
            "{\"t\":\"a\",\"ts\":\"yesterday\"}\n",
            "[1,2]\n",
        );
        let parsed =
            parse_records(Bytes::from(body), BodyFormat::Ndjson, &rules(&template)).unwrap();
        let got: Vec<(Option<i64>, Vec<String>)> = parsed
            .runs
            .iter()
            .map(|r| (r.partition.hour.map(|h| h % 24), r.partition.fields.clone()))
            .collect();
        // 1795600000 s is 2026-11-25 09:26:40 UTC; arrival is 10:30.
        assert_eq!(
            got,
            vec![
                (Some(8), vec!["a".to_string()]),
                (Some(9), vec!["7".to_string()]),
                (Some(9), vec![String::new()]),
                (Some(10), vec!["a".to_string()]),
                (Some(10), vec![String::new()]),
            ]
        );
    }

    /// A table partitioned by the day or hour of the time field takes each
    /// record's time as its timestamp column reads it, and refuses a record
    /// without one (its partition would not be its column's).
    /// (record, the hour of its partition, or the refusal)
    #[test]
    fn a_time_that_partitions_a_table_is_read_as_its_column_reads_it() {
        let template = StreamKeyTemplate::parse("{hh}/{uuid}", Compression::None).unwrap();
        let rules = RecordRules {
            time_is_column: true,
            max_record_bytes: 1024,
            ..rules(&template)
        };
        let cases: Vec<(&str, Result<i64, &str>)> = vec![
            (r#"{"ts":"2026-11-25T08:15:00Z"}"#, Ok(8)),
            (r#"{"ts":"2026-11-25T23:15:00-02:00"}"#, Ok(1)),
            // No offset: UTC, as the column (or a wall-clock column) reads it.
            (r#"{"ts":"2026-11-25T08:15:00"}"#, Ok(8)),
            (r#"{"ts":"2026-11-25 08:15:00"}"#, Ok(8)),
            // Rounded down to the microsecond, as the column holds it: still
            // 1969 (review finding: rounding toward zero made it 1970).
            (r#"{"ts":"1969-12-31T23:59:59.9999995Z"}"#, Ok(23)),
            (r#"{"ts":1795600000}"#, Err("no timestamp in `ts`")),
            (r#"{"ts":null}"#, Err("no timestamp in `ts`")),
            (r#"{"other":1}"#, Err("no timestamp in `ts`")),
            (r#"{"ts":"yesterday"}"#, Err("no timestamp in `ts`")),
        ];
        for (record, want) in cases {
            let body = Bytes::from(format!("{record}\n"));
            let parsed = parse_records(body, BodyFormat::Ndjson, &rules).unwrap();
            match want {
                Ok(hour) => {
                    assert_eq!(parsed.runs.len(), 1, "{record}");
                    assert_eq!(
                        parsed.runs[0].partition.hour.map(|h| h.rem_euclid(24)),
                        Some(hour),
                        "{record}"
                    );
                }
                Err(want) => {
                    assert_eq!(parsed.rejected.len(), 1, "{record}");
                    let reason = &parsed.rejected[0].why.reason;
                    assert!(reason.contains(want), "{record}: {reason}");
                }
            }
        }
    }

    #[test]
    fn compacting_keeps_the_bytes_as_they_came() {
        let cases: [(&str, Option<&str>); 8] = [
            ("{\"a\":1}", Some("{\"a\":1}")),
            ("{\"b\": 1,\n \"a\": 2}", Some("{\"b\":1,\"a\":2}")),
            (
                "{\r\n\t\"z\": [1, 2.50, \"\\u00e9 \\\" x\"],\n \"y\": {\"b\": null, \"a\": true}\n}",
                Some("{\"z\":[1,2.50,\"\\u00e9 \\\" x\"],\"y\":{\"b\":null,\"a\":true}}"),
            ),
            ("\"a b\n\"", None),
            ("12\n34", None),
            ("tr\nue", None),
            ("{\"a\":1}\n{\"b\":2}", None),
            ("{\n", None),
        ];
        for (text, want) in cases {
            let got =
                compact_json(text.as_bytes()).map(|c| String::from_utf8(c.into_owned()).unwrap());
            assert_eq!(got.as_deref(), want, "{text:?}");
        }
    }

    /// (body, Ok((stored, rejected element numbers)) or Err(()) for a refused body)
    type ArrayCase<'a> = (&'a str, Result<(&'a str, Vec<u64>), ()>);

    #[test]
    fn json_arrays() {
        let template = StreamKeyTemplate::parse("{uuid}", Compression::None).unwrap();
        let cases: Vec<ArrayCase> = vec![
            ("[]", Ok(("", vec![]))),
            ("[1, \"two\", {\"a\": [1, 2]}]", Ok(("1\n\"two\"\n{\"a\": [1, 2]}\n", vec![]))),
            ("[{\n  \"a\": 1\n}]", Ok(("{\"a\":1}\n", vec![]))),
            (
                "[{\n  \"b\": 1,\n  \"a\": \"x y\\n\"\n}]",
                Ok(("{\"b\":1,\"a\":\"x y\\n\"}\n", vec![])),
            ),
            (
                "[{\"x\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}, 2]",
                Ok(("2\n", vec![1])),
            ),
            ("{\"a\":1}", Err(())),
            ("[1,", Err(())),
        ];
        for (body, want) in cases {
            let got = parse_records(Bytes::from(body), BodyFormat::JsonArray, &rules(&template));
            match (got, want) {
                (Ok(parsed), Ok((stored, bad))) => {
                    let all: Vec<u8> = parsed.runs.iter().flat_map(|r| r.data.to_vec()).collect();
                    assert_eq!(String::from_utf8(all).unwrap(), stored, "{body}");
                    let numbers: Vec<u64> = parsed.rejected.iter().map(|r| r.why.number).collect();
                    assert_eq!(numbers, bad, "{body}");
                }
                (Err(StreamError::BadInput(_)), Err(())) => {}
                (got, _) => panic!("{body}: {got:?}"),
            }
        }
    }
}
