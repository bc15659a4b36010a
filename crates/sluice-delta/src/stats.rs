//! A data file's statistics for its `add.stats`, as the Delta protocol
//! describes them ("Per-file Statistics"): `numRecords`, and per column
//! `minValues`, `maxValues` and `nullCount`, nested as the columns are, so
//! that readers can skip files. They come from the Parquet footer the writer
//! made anyway (each row group's column statistics), not from another pass
//! over the rows.
//!
//! Which columns: the first `delta.dataSkippingNumIndexedCols` leaf columns
//! (32 without the property; -1: all), or those `delta.dataSkippingStatsColumns`
//! names. Columns inside a list have none (a leaf's nulls there count
//! elements, not rows). Minimum and maximum are given for numbers, strings,
//! dates (`2026-11-29`), timestamps (`2026-11-29T10:00:00.000Z`, without the
//! `Z` for `timestamp_ntz`: milliseconds, as Spark writes them, the minimum
//! rounded down and the maximum up so that they still bound every value) and
//! decimals of up to 15 digits (a JSON number; longer ones would not survive
//! a reader's double). A string is cut to its first 32 characters, and a
//! maximum that was cut gets U+10FFFF after the cut, so that it is still at
//! least every value. A value the footer does not know exactly, or a float
//! that is not finite, is left out: a reader skips on what is there.

use std::collections::BTreeMap;

use parquet::basic::{LogicalType, Type as PhysicalType};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;
use serde_json::{json, Map, Value};

/// Leaf columns with statistics when the table does not say.
pub const DEFAULT_INDEXED_COLUMNS: i64 = 32;

/// Characters of a string kept in its minimum and maximum.
pub const STRING_PREFIX: usize = 32;

/// Which columns get statistics, from the table's properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsColumns {
    /// The first N leaf columns (all when negative).
    First(i64),
    /// These columns (dotted names; a struct's name covers its fields).
    Named(Vec<String>),
}

impl StatsColumns {
    /// From a table's `configuration`.
    pub fn of(configuration: &BTreeMap<String, Option<String>>) -> StatsColumns {
        let property = |name: &str| configuration.get(name).cloned().flatten();
        if let Some(names) = property("delta.dataSkippingStatsColumns") {
            return StatsColumns::Named(
                names
                    .split(',')
                    .map(|n| n.trim().trim_matches('`').to_owned())
                    .filter(|n| !n.is_empty())
                    .collect(),
            );
        }
        StatsColumns::First(
            property("delta.dataSkippingNumIndexedCols")
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(DEFAULT_INDEXED_COLUMNS),
        )
    }

    fn includes(&self, leaf: usize, path: &[String]) -> bool {
        match self {
            StatsColumns::First(n) => *n < 0 || (leaf as i64) < *n,
            StatsColumns::Named(names) => names.iter().any(|name| {
                let dotted = path.join(".");
                dotted == *name || dotted.starts_with(&format!("{name}."))
            }),
        }
    }
}

/// The `add.stats` document of a file of `records` rows whose footer is
/// `footer` (None: `numRecords` only).
pub fn file_stats(records: u64, footer: Option<&ParquetMetaData>, columns: &StatsColumns) -> Value {
    let mut min = Map::new();
    let mut max = Map::new();
    let mut nulls = Map::new();
    if let Some(footer) = footer {
        let schema = footer.file_metadata().schema_descr();
        for (leaf, column) in schema.columns().iter().enumerate() {
            let path = column.path().parts();
            if column.max_rep_level() > 0 || !columns.includes(leaf, path) {
                continue;
            }
            let chunks: Vec<Option<&Statistics>> = footer
                .row_groups()
                .iter()
                .map(|group| group.column(leaf).statistics())
                .collect();
            let kind = ColumnKind::of(column);
            let null_count: Option<u64> = chunks
                .iter()
                .map(|s| s.and_then(Statistics::null_count_opt))
                .sum();
            if let Some(count) = null_count {
                insert(&mut nulls, path, json!(count));
            }
            if let Some((low, high)) = bounds(&chunks, kind) {
                insert(&mut min, path, low);
                insert(&mut max, path, high);
            }
        }
    }
    let mut stats = Map::new();
    stats.insert("numRecords".into(), json!(records));
    if !min.is_empty() {
        stats.insert("minValues".into(), Value::Object(min));
        stats.insert("maxValues".into(), Value::Object(max));
    }
    if !nulls.is_empty() {
        stats.insert("nullCount".into(), Value::Object(nulls));
    }
    Value::Object(stats)
}

/// Puts `value` at `path` in nested objects.
fn insert(into: &mut Map<String, Value>, path: &[String], value: Value) {
    let (last, parents) = path.split_last().expect("a column has a name");
    let mut at = into;
    for parent in parents {
        let next = at
            .entry(parent.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        at = match next {
            Value::Object(map) => map,
            _ => return,
        };
    }
    at.insert(last.clone(), value);
}

/// What a column's bounds may be given as: what its stored values mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnKind {
    /// A signed integer or a float: its value is the number stored.
    Number,
    /// A UTF-8 string.
    Text,
    /// Days since 1970-01-01.
    Date,
    /// Units since 1970-01-01T00:00:00 (`utc`: an instant, else a wall clock).
    Timestamp { per_second: i64, utc: bool },
    /// An unscaled integer of up to 15 digits, divided by 10^scale.
    Decimal { scale: i32 },
    /// Anything else (bytes, a long decimal, Spark's INT96 timestamps…):
    /// no bounds.
    Other,
}

/// Digits of a decimal whose bounds are given: a JSON number a reader parses
/// as a double holds 15 exactly.
const DECIMAL_DIGITS_WITH_BOUNDS: i32 = 15;

impl ColumnKind {
    fn of(column: &parquet::schema::types::ColumnDescriptor) -> ColumnKind {
        use parquet::basic::{ConvertedType, TimeUnit};
        let integer = matches!(
            column.physical_type(),
            PhysicalType::INT32 | PhysicalType::INT64
        );
        match (column.logical_type_ref(), column.converted_type()) {
            (Some(LogicalType::Integer(int)), _) if integer => match int.is_signed {
                true => ColumnKind::Number,
                false => ColumnKind::Other,
            },
            (
                None,
                ConvertedType::NONE
                | ConvertedType::INT_8
                | ConvertedType::INT_16
                | ConvertedType::INT_32
                | ConvertedType::INT_64,
            ) if integer => ColumnKind::Number,
            (None, ConvertedType::NONE)
                if matches!(
                    column.physical_type(),
                    PhysicalType::FLOAT | PhysicalType::DOUBLE
                ) =>
            {
                ColumnKind::Number
            }
            (Some(LogicalType::String), _) | (None, ConvertedType::UTF8)
                if column.physical_type() == PhysicalType::BYTE_ARRAY =>
            {
                ColumnKind::Text
            }
            (Some(LogicalType::Date), _) | (None, ConvertedType::DATE)
                if column.physical_type() == PhysicalType::INT32 =>
            {
                ColumnKind::Date
            }
            (Some(LogicalType::Timestamp(timestamp)), _)
                if column.physical_type() == PhysicalType::INT64 =>
            {
                ColumnKind::Timestamp {
                    per_second: match timestamp.unit {
                        TimeUnit::MILLIS => 1_000,
                        TimeUnit::MICROS => 1_000_000,
                        TimeUnit::NANOS => 1_000_000_000,
                    },
                    utc: timestamp.is_adjusted_to_u_t_c,
                }
            }
            (None, ConvertedType::TIMESTAMP_MILLIS | ConvertedType::TIMESTAMP_MICROS)
                if column.physical_type() == PhysicalType::INT64 =>
            {
                ColumnKind::Timestamp {
                    per_second: match column.converted_type() {
                        ConvertedType::TIMESTAMP_MILLIS => 1_000,
                        _ => 1_000_000,
                    },
                    utc: true,
                }
            }
            (Some(LogicalType::Decimal(decimal)), _)
                if integer && decimal.precision <= DECIMAL_DIGITS_WITH_BOUNDS =>
            {
                ColumnKind::Decimal {
                    scale: decimal.scale,
                }
            }
            (None, ConvertedType::DECIMAL)
                if integer && column.type_precision() <= DECIMAL_DIGITS_WITH_BOUNDS =>
            {
                ColumnKind::Decimal {
                    scale: column.type_scale(),
                }
            }
            _ => ColumnKind::Other,
        }
    }
}

/// The file's least and greatest value of one column, from its row groups'
/// statistics: only when every row group with values knows them exactly.
fn bounds(chunks: &[Option<&Statistics>], kind: ColumnKind) -> Option<(Value, Value)> {
    if kind == ColumnKind::Other {
        return None;
    }
    let string = kind == ColumnKind::Text;
    let mut low: Option<Bound> = None;
    let mut high: Option<Bound> = None;
    for chunk in chunks {
        let chunk = (*chunk)?;
        let (Some(lo), Some(hi)) = (Bound::min_of(chunk, string), Bound::max_of(chunk, string))
        else {
            // A row group of nulls only has no bounds; one that has values
            // but no statistics leaves the file's unknown.
            match chunk.min_bytes_opt() {
                None if chunk.null_count_opt().is_some() => continue,
                _ => return None,
            }
        };
        low = Some(match low {
            Some(l) if l.le(&lo) => l,
            _ => lo,
        });
        high = Some(match high {
            Some(h) if hi.le(&h) => h,
            _ => hi,
        });
    }
    Some((low?.json(false, kind)?, high?.json(true, kind)?))
}

/// One bound of a column's values.
#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Int(i64),
    Float(f64),
    /// A string, and whether it is the whole value (not a prefix).
    Text(String, bool),
}

impl Bound {
    fn min_of(s: &Statistics, string: bool) -> Option<Bound> {
        Self::of(s, string, true)
    }

    fn max_of(s: &Statistics, string: bool) -> Option<Bound> {
        Self::of(s, string, false)
    }

    fn of(s: &Statistics, string: bool, min: bool) -> Option<Bound> {
        let exact = if min {
            s.min_is_exact()
        } else {
            s.max_is_exact()
        };
        match s {
            Statistics::Int32(v) => {
                let n = if min { v.min_opt() } else { v.max_opt() }?;
                exact.then_some(Bound::Int(i64::from(*n)))
            }
            Statistics::Int64(v) => {
                let n = if min { v.min_opt() } else { v.max_opt() }?;
                exact.then_some(Bound::Int(*n))
            }
            Statistics::Float(v) => {
                let n = if min { v.min_opt() } else { v.max_opt() }?;
                (exact && n.is_finite()).then_some(Bound::Float(f64::from(*n)))
            }
            Statistics::Double(v) => {
                let n = if min { v.min_opt() } else { v.max_opt() }?;
                (exact && n.is_finite()).then_some(Bound::Float(*n))
            }
            Statistics::ByteArray(v) if string => {
                let bytes = if min { v.min_opt() } else { v.max_opt() }?;
                let text = std::str::from_utf8(bytes.data()).ok()?;
                // An inexact minimum is a prefix, still at most every value;
                // an inexact maximum is one too, and is raised past them.
                Some(Bound::Text(text.to_owned(), exact))
            }
            _ => None,
        }
    }

    fn le(&self, other: &Bound) -> bool {
        match (self, other) {
            (Bound::Int(a), Bound::Int(b)) => a <= b,
            (Bound::Float(a), Bound::Float(b)) => a <= b,
            (Bound::Text(a, _), Bound::Text(b, _)) => a.as_bytes() <= b.as_bytes(),
            _ => false,
        }
    }

    /// As `add.stats` gives it for a column of `kind`; None when it cannot
    /// be given (a date or time out of range).
    fn json(self, is_max: bool, kind: ColumnKind) -> Option<Value> {
        Some(match (self, kind) {
            (Bound::Int(days), ColumnKind::Date) => {
                let day = time::Date::from_julian_day(
                    UNIX_EPOCH_JULIAN_DAY.checked_add(i32::try_from(days).ok()?)?,
                )
                .ok()?;
                json!(day.format(DATE).ok()?)
            }
            (Bound::Int(n), ColumnKind::Timestamp { per_second, utc }) => {
                // Milliseconds, rounded outwards.
                let per_milli = per_second / 1_000;
                let millis = match is_max {
                    true => n.div_euclid(per_milli) + i64::from(n.rem_euclid(per_milli) != 0),
                    false => n.div_euclid(per_milli),
                };
                let at =
                    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000)
                        .ok()?;
                let text = at.format(TIMESTAMP).ok()?;
                json!(if utc { format!("{text}Z") } else { text })
            }
            (Bound::Int(unscaled), ColumnKind::Decimal { scale }) => {
                let value = format!("{unscaled}e{}", -scale).parse::<f64>().ok()?;
                json!(value)
            }
            (Bound::Int(n), _) => json!(n),
            (Bound::Float(n), _) => json!(n),
            (Bound::Text(text, exact), _) => {
                let cut: String = text.chars().take(STRING_PREFIX).collect();
                let was_cut = !exact || cut.len() < text.len();
                match (is_max, was_cut) {
                    (true, true) => json!(format!("{cut}\u{10FFFF}")),
                    _ => json!(cut),
                }
            }
        })
    }
}

/// The Julian day of 1970-01-01.
const UNIX_EPOCH_JULIAN_DAY: i32 = 2_440_588;

const DATE: &[time::format_description::FormatItem<'static>] =
    time::macros::format_description!("[year]-[month]-[day]");

const TIMESTAMP: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]"
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    /// A Parquet file of `batches` (one row group each), its footer.
    fn footer(batches: &[Vec<(&str, ArrayRef)>]) -> ParquetMetaData {
        let first = RecordBatch::try_from_iter(batches[0].clone()).unwrap();
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(1_000_000))
            .build();
        let mut writer =
            ArrowWriter::try_new(Vec::new(), first.schema(), Some(properties)).unwrap();
        for batch in batches {
            writer
                .write(&RecordBatch::try_from_iter(batch.clone()).unwrap())
                .unwrap();
            writer.flush().unwrap();
        }
        writer.finish().unwrap()
    }

    fn columns(
        ids: Vec<Option<i64>>,
        names: Vec<Option<&str>>,
        prices: Vec<Option<f64>>,
    ) -> Vec<(&'static str, ArrayRef)> {
        vec![
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("name", Arc::new(StringArray::from(names)) as ArrayRef),
            ("price", Arc::new(Float64Array::from(prices)) as ArrayRef),
        ]
    }

    /// Two row groups; statistics for the columns the table asks for, the
    /// least and greatest across both, nulls summed, long strings cut.
    #[test]
    fn statistics_span_the_row_groups_of_the_columns_asked_for() {
        let long = "x".repeat(40);
        let footer = footer(&[
            columns(
                vec![Some(5), None, Some(9)],
                vec![Some("b"), Some(&long), None],
                vec![None, None, None],
            ),
            columns(
                vec![Some(-2), Some(7), None],
                vec![Some("a"), None, None],
                vec![Some(1.5), None, Some(-0.5)],
            ),
        ]);
        let cut = "x".repeat(32);
        // (the table's properties, the stats document)
        let cases: Vec<(Vec<(&str, &str)>, Value)> = vec![
            (
                vec![],
                json!({
                    "numRecords": 6,
                    "minValues": {"id": -2, "name": "a", "price": -0.5},
                    "maxValues": {"id": 9, "name": format!("{cut}\u{10FFFF}"), "price": 1.5},
                    "nullCount": {"id": 2, "name": 3, "price": 4},
                }),
            ),
            (
                vec![("delta.dataSkippingNumIndexedCols", "1")],
                json!({"numRecords": 6, "minValues": {"id": -2}, "maxValues": {"id": 9}, "nullCount": {"id": 2}}),
            ),
            (
                vec![("delta.dataSkippingNumIndexedCols", "0")],
                json!({"numRecords": 6}),
            ),
            (
                vec![("delta.dataSkippingStatsColumns", "price")],
                json!({"numRecords": 6, "minValues": {"price": -0.5}, "maxValues": {"price": 1.5}, "nullCount": {"price": 4}}),
            ),
        ];
        for (properties, want) in cases {
            let configuration = properties
                .iter()
                .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                .collect();
            let got = file_stats(6, Some(&footer), &StatsColumns::of(&configuration));
            assert_eq!(got, want, "{properties:?}");
        }
        assert_eq!(
            file_stats(3, None, &StatsColumns::First(32)),
            json!({"numRecords": 3})
        );
    }

    /// Review finding: a date (or a decimal) is stored as an integer that is
    /// not the value a reader compares: its bounds were once written as that
    /// integer (2026-11-28 as 20,785), and a reader would skip files wrongly.
    /// Now each kind is given as Delta gives it; what cannot be given exactly
    /// (a decimal past 15 digits, bytes) gets its null count only.
    #[test]
    fn dates_timestamps_and_decimals_get_bounds_as_delta_gives_them() {
        use arrow_array::{
            BinaryArray, Date32Array, Decimal128Array, TimestampMicrosecondArray,
            TimestampMillisecondArray,
        };
        // 2026-11-29T10:00:00.000123Z and 1969-12-31T23:59:59.999500Z, in µs.
        let (late, early) = (1_795_946_400_000_123_i64, -500_i64);
        let micros = |tz: Option<&str>| {
            let array = TimestampMicrosecondArray::from(vec![Some(late), None, Some(early)]);
            Arc::new(match tz {
                Some(tz) => array.with_timezone(tz),
                None => array,
            }) as ArrayRef
        };
        /// The minimum and maximum given (None: no bounds).
        type Bounds = Option<(Value, Value)>;
        // (column, its values, its bounds)
        let cases: Vec<(&str, ArrayRef, Bounds)> = vec![
            (
                "day",
                Arc::new(Date32Array::from(vec![Some(20_785), None, Some(-1)])),
                Some((json!("1969-12-31"), json!("2026-11-28"))),
            ),
            (
                "at",
                micros(Some("UTC")),
                Some((
                    json!("1969-12-31T23:59:59.999Z"),
                    json!("2026-11-29T10:00:00.001Z"),
                )),
            ),
            (
                "wall_clock",
                micros(None),
                Some((
                    json!("1969-12-31T23:59:59.999"),
                    json!("2026-11-29T10:00:00.001"),
                )),
            ),
            (
                "at_ms",
                Arc::new(
                    TimestampMillisecondArray::from(vec![
                        Some(1_795_946_400_000),
                        None,
                        Some(1_795_946_400_000),
                    ])
                    .with_timezone("+00:00"),
                ),
                Some((
                    json!("2026-11-29T10:00:00.000Z"),
                    json!("2026-11-29T10:00:00.000Z"),
                )),
            ),
            (
                "price",
                Arc::new(
                    Decimal128Array::from(vec![Some(1250), None, Some(-5)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Some((json!(-0.05), json!(12.5))),
            ),
            (
                "wide_decimal",
                Arc::new(
                    Decimal128Array::from(vec![Some(1250), None, Some(-5)])
                        .with_precision_and_scale(20, 2)
                        .unwrap(),
                ),
                None,
            ),
            (
                "blob",
                Arc::new(BinaryArray::from(vec![
                    Some(&b"a"[..]),
                    None,
                    Some(&b"b"[..]),
                ])),
                None,
            ),
        ];
        for (name, array, want) in cases {
            let footer = footer(&[vec![(name, array)]]);
            let mut expected = json!({"numRecords": 3, "nullCount": {name: 1}});
            if let Some((min, max)) = want {
                expected["minValues"] = json!({name: min});
                expected["maxValues"] = json!({name: max});
            }
            assert_eq!(
                file_stats(3, Some(&footer), &StatsColumns::First(32)),
                expected,
                "{name}"
            );
        }
    }
}
