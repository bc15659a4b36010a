//! Checked NDJSON records straight into Arrow arrays, in one pass over the
//! bytes: the decoder of a Parquet file's frames ([`super::file`]).
//!
//! arrow-json first tokenizes every record onto a tape and then walks the
//! tape into arrays, finding each field by name; with the check pass before
//! it (which dead-letters a bad record with its line and field) a record was
//! read three times. Here each value goes into its column's builder as it is
//! read, and a record's fields are found by trying the one after the last
//! found first (records mostly list their fields in one order).
//!
//! Values are read as arrow-json 59 reads them, with the same parsers
//! (lexical-core for numbers; arrow-cast for timestamps, dates and
//! decimals); `the_rows_are_those_arrow_json_decodes` holds the two side by
//! side. Two differences, both arrow-json's:
//! - An escaped surrogate pair is read as UTF-16 says. arrow-json 59.3 ORs
//!   the halves where it should add them, so `"\ud840\udc00"` (U+20000, and
//!   every other character of planes 2 to 16 written as escapes) became a
//!   character of plane 1 in files sluice wrote before this decoder.
//! - A key given twice: the last value counts, as with arrow-json and
//!   serde_json, but a value is appended as it is read, so a batch that
//!   meets a repeat ([`RowsError::KeyTwice`]), or that fails for any other
//!   reason, is read again with each record first rewritten with its keys
//!   given once (the last value kept, at every depth, the values' text as
//!   it came). A batch that fails that way too is refused.
//!
//! The records were checked as JSON before (the check pass refuses what is
//! not), so this reader does not check everything again (control
//! characters inside strings, the grammar of a skipped number): it refuses
//! what it cannot read as a column's value.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::timezone::Tz;
use arrow_array::types::{Date32Type, Decimal128Type, Float64Type, Int64Type};
use arrow_array::{ArrayRef, ListArray, MapArray, RecordBatch, StructArray};
use arrow_buffer::{NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_cast::parse::{parse_decimal, string_to_datetime, Parser};
use arrow_schema::{DataType, FieldRef, Fields, SchemaRef, TimeUnit};

/// Why records could not be decoded here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowsError {
    /// A record gives a key twice (the batch is read again, its keys made
    /// unique).
    #[error("a record gives a key twice")]
    KeyTwice,
    /// Not a value of the column, or not JSON.
    #[error("{0}")]
    Invalid(String),
    /// A type this decoder does not build (none of a stream's schemas has one).
    #[error("no JSON decoder for Arrow type {0}")]
    Unsupported(DataType),
}

/// Decodes records into batches of at most a set number of rows.
pub(crate) struct RowDecoder {
    schema: SchemaRef,
    root: Record,
    rows: usize,
    batch_rows: usize,
    /// Unescaped text of the string being read (one with a `\`).
    scratch: String,
}

impl RowDecoder {
    /// A decoder for records of `schema`, `batch_rows` rows per batch.
    pub(crate) fn new(schema: SchemaRef, batch_rows: usize) -> Result<RowDecoder, RowsError> {
        let batch_rows = batch_rows.max(1);
        let root = Record::new(schema.fields(), batch_rows)?;
        Ok(RowDecoder {
            schema,
            root,
            rows: 0,
            batch_rows,
            scratch: String::new(),
        })
    }

    /// Reads whole records from `records` until a batch is full or the
    /// bytes end: how many bytes it read, and the batch (None when they held
    /// no record). A batch that fails is read again with each record's keys
    /// made unique ([`last_wins`]); the error is that second reading's.
    pub(crate) fn batch(
        &mut self,
        records: &str,
    ) -> Result<(usize, Option<RecordBatch>), RowsError> {
        let read = match self.read(records, false) {
            Ok(read) => read,
            Err(_) => {
                // Its columns hold part of a record: start the batch anew.
                self.root = Record::new(self.schema.fields(), self.batch_rows)?;
                self.rows = 0;
                self.read(records, true)?
            }
        };
        Ok((read, self.flush()?))
    }

    /// Reads records into the columns, each rewritten by [`last_wins`] first
    /// when `unique_keys`.
    fn read(&mut self, records: &str, unique_keys: bool) -> Result<usize, RowsError> {
        let mut reader = Reader::new(records, &mut self.scratch);
        let mut rewritten = String::new();
        let mut scratch = String::new();
        while self.rows < self.batch_rows {
            reader.whitespace();
            if reader.at == records.len() {
                break;
            }
            if unique_keys {
                rewritten.clear();
                last_wins(&mut reader, &mut rewritten, 0)?;
                self.root
                    .object(&mut Reader::new(&rewritten, &mut scratch))?;
            } else {
                self.root.object(&mut reader)?;
            }
            self.rows += 1;
        }
        Ok(reader.at)
    }

    /// The rows read so far as a batch (None when there are none); the
    /// decoder starts a new batch.
    fn flush(&mut self) -> Result<Option<RecordBatch>, RowsError> {
        if self.rows == 0 {
            return Ok(None);
        }
        let columns = self.root.finish()?;
        let rows = std::mem::take(&mut self.rows);
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
            .map(Some)
            .map_err(|e| RowsError::Invalid(e.to_string()))
    }
}

/// The fields of an object: a record, or a struct column's value.
struct Record {
    names: Vec<Box<[u8]>>,
    columns: Vec<Column>,
    /// Which fields the object being read gave (a field it leaves out is
    /// null).
    given: Vec<bool>,
    /// Where the last field found was: the next one is tried first.
    next: usize,
}

impl Record {
    /// Fields of `fields`, with room for `rows` values each.
    fn new(fields: &Fields, rows: usize) -> Result<Record, RowsError> {
        Ok(Record {
            names: fields.iter().map(|f| f.name().as_bytes().into()).collect(),
            columns: fields
                .iter()
                .map(|f| Column::new(f.data_type(), rows))
                .collect::<Result<_, _>>()?,
            given: vec![false; fields.len()],
            next: 0,
        })
    }

    /// Reads an object's fields into the columns.
    fn object(&mut self, reader: &mut Reader<'_, '_>) -> Result<(), RowsError> {
        self.given.fill(false);
        self.next = 0;
        reader.elements(b'{', b'}', "an object", |reader| {
            let field = self.field(reader)?;
            reader.member_value()?;
            match field {
                Some(at) => {
                    if std::mem::replace(&mut self.given[at], true) {
                        return Err(RowsError::KeyTwice);
                    }
                    self.columns[at].value(reader)
                }
                None => reader.skip_value(0),
            }
        })?;
        for (column, given) in self.columns.iter_mut().zip(&self.given) {
            if !given {
                column.null();
            }
        }
        Ok(())
    }

    /// Reads a key; the index of its field, None when the object's fields
    /// have none of that name.
    fn field(&mut self, reader: &mut Reader<'_, '_>) -> Result<Option<usize>, RowsError> {
        let key = reader.string("a key")?.as_bytes();
        let at = match self.names.get(self.next) {
            Some(name) if **name == *key => Some(self.next),
            _ => self.names.iter().position(|name| **name == *key),
        };
        if let Some(at) = at {
            self.next = at + 1;
        }
        Ok(at)
    }

    fn null(&mut self) {
        for column in &mut self.columns {
            column.null();
        }
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, RowsError> {
        self.columns.iter_mut().map(Column::finish).collect()
    }
}

/// A column being built.
enum Column {
    Bool(BooleanBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Text(StringBuilder),
    Timestamp(TimestampMicrosecondBuilder, Tz),
    Date(Date32Builder),
    Decimal(Decimal128Builder, u8, i8),
    List {
        item_field: FieldRef,
        offsets: Vec<i32>,
        nulls: NullBufferBuilder,
        item: Box<Column>,
    },
    Struct {
        fields: Fields,
        nulls: NullBufferBuilder,
        record: Record,
    },
    Map {
        entries: FieldRef,
        offsets: Vec<i32>,
        nulls: NullBufferBuilder,
        keys: StringBuilder,
        values: Box<Column>,
    },
}

impl Column {
    /// A column with room for `rows` values (and items: a guess, one a row).
    fn new(data_type: &DataType, rows: usize) -> Result<Column, RowsError> {
        Ok(match data_type {
            DataType::Boolean => Column::Bool(BooleanBuilder::with_capacity(rows)),
            DataType::Int64 => Column::Int(Int64Builder::with_capacity(rows)),
            DataType::Float64 => Column::Float(Float64Builder::with_capacity(rows)),
            DataType::Utf8 => Column::Text(StringBuilder::with_capacity(rows, rows * 16)),
            DataType::Timestamp(TimeUnit::Microsecond, zone) => {
                // arrow-json reads a time without an offset in the column's
                // zone, UTC when it has none.
                let tz: Tz = zone
                    .as_deref()
                    .unwrap_or("+00:00")
                    .parse()
                    .map_err(|e: arrow_schema::ArrowError| RowsError::Invalid(e.to_string()))?;
                Column::Timestamp(
                    TimestampMicrosecondBuilder::with_capacity(rows)
                        .with_data_type(data_type.clone()),
                    tz,
                )
            }
            DataType::Date32 => Column::Date(Date32Builder::with_capacity(rows)),
            DataType::Decimal128(precision, scale) => {
                Column::Decimal(Decimal128Builder::with_capacity(rows), *precision, *scale)
            }
            DataType::List(item) => Column::List {
                item_field: item.clone(),
                offsets: first_offset(rows),
                nulls: NullBufferBuilder::new(rows),
                item: Box::new(Column::new(item.data_type(), rows)?),
            },
            DataType::Struct(fields) => Column::Struct {
                fields: fields.clone(),
                nulls: NullBufferBuilder::new(rows),
                record: Record::new(fields, rows)?,
            },
            DataType::Map(entries, false) => {
                let DataType::Struct(pair) = entries.data_type() else {
                    return Err(RowsError::Unsupported(data_type.clone()));
                };
                if pair.len() != 2 || pair[0].data_type() != &DataType::Utf8 {
                    return Err(RowsError::Unsupported(data_type.clone()));
                }
                Column::Map {
                    entries: entries.clone(),
                    offsets: first_offset(rows),
                    nulls: NullBufferBuilder::new(rows),
                    keys: StringBuilder::with_capacity(rows, rows * 8),
                    values: Box::new(Column::new(pair[1].data_type(), rows)?),
                }
            }
            other => return Err(RowsError::Unsupported(other.clone())),
        })
    }

    fn null(&mut self) {
        match self {
            Column::Bool(b) => b.append_null(),
            Column::Int(b) => b.append_null(),
            Column::Float(b) => b.append_null(),
            Column::Text(b) => b.append_null(),
            Column::Timestamp(b, _) => b.append_null(),
            Column::Date(b) => b.append_null(),
            Column::Decimal(b, ..) => b.append_null(),
            Column::List { offsets, nulls, .. } | Column::Map { offsets, nulls, .. } => {
                offsets.push(*offsets.last().expect("starts with 0"));
                nulls.append_null();
            }
            Column::Struct { nulls, record, .. } => {
                nulls.append_null();
                record.null();
            }
        }
    }

    /// Reads one value into the column.
    fn value(&mut self, reader: &mut Reader<'_, '_>) -> Result<(), RowsError> {
        reader.whitespace();
        if reader.peek() == Some(b'n') {
            reader.literal(b"null")?;
            self.null();
            return Ok(());
        }
        match self {
            Column::Bool(b) => match reader.peek() {
                Some(b't') => {
                    reader.literal(b"true")?;
                    b.append_value(true);
                }
                Some(b'f') => {
                    reader.literal(b"false")?;
                    b.append_value(false);
                }
                _ => return Err(reader.not_a("boolean")),
            },
            Column::Int(b) => {
                b.append_value(reader.scalar("Int64", Int64Type::parse, parse_number::<i64>)?)
            }
            Column::Float(b) => {
                b.append_value(reader.scalar("Float64", Float64Type::parse, |text| {
                    lexical_core::parse(text).ok()
                })?)
            }
            Column::Text(b) => {
                let text = reader.string("Utf8")?;
                append_text(b, text)?;
            }
            Column::Timestamp(b, tz) => b.append_value(reader.scalar(
                "Timestamp",
                |text| Some(string_to_datetime(tz, text).ok()?.timestamp_micros()),
                |text| {
                    lexical_core::parse::<i64>(text)
                        .or_else(|_| lexical_core::parse::<f64>(text).map(|x| x as i64))
                        .ok()
                },
            )?),
            Column::Date(b) => {
                b.append_value(reader.scalar("Date32", Date32Type::parse, parse_number::<i32>)?)
            }
            Column::Decimal(b, precision, scale) => {
                let decimal =
                    |text: &str| parse_decimal::<Decimal128Type>(text, *precision, *scale).ok();
                b.append_value(reader.scalar("Decimal128", decimal, |text| {
                    // A number's text is ASCII (digits, sign, point, exponent).
                    decimal(std::str::from_utf8(text).ok()?)
                })?);
            }
            Column::List {
                offsets,
                nulls,
                item,
                ..
            } => {
                let count = reader.elements(b'[', b']', "an array", |reader| item.value(reader))?;
                push_offset(offsets, count)?;
                nulls.append_non_null();
            }
            Column::Struct { nulls, record, .. } => {
                record.object(reader)?;
                nulls.append_non_null();
            }
            Column::Map {
                offsets,
                nulls,
                keys,
                values,
                ..
            } => {
                let count = reader.elements(b'{', b'}', "an object", |reader| {
                    append_text(keys, reader.string("Utf8")?)?;
                    reader.member_value()?;
                    values.value(reader)
                })?;
                push_offset(offsets, count)?;
                nulls.append_non_null();
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, RowsError> {
        let invalid = |e: arrow_schema::ArrowError| RowsError::Invalid(e.to_string());
        Ok(match self {
            Column::Bool(b) => Arc::new(b.finish()),
            Column::Int(b) => Arc::new(b.finish()),
            Column::Float(b) => Arc::new(b.finish()),
            Column::Text(b) => Arc::new(b.finish()),
            Column::Timestamp(b, _) => Arc::new(b.finish()),
            Column::Date(b) => Arc::new(b.finish()),
            Column::Decimal(b, precision, scale) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*precision, *scale)
                    .map_err(invalid)?,
            ),
            Column::List {
                item_field,
                offsets,
                nulls,
                item,
            } => Arc::new(
                ListArray::try_new(
                    item_field.clone(),
                    take_offsets(offsets),
                    item.finish()?,
                    nulls.finish(),
                )
                .map_err(invalid)?,
            ),
            Column::Struct {
                fields,
                nulls,
                record,
            } => Arc::new(
                StructArray::try_new(fields.clone(), record.finish()?, nulls.finish())
                    .map_err(invalid)?,
            ),
            Column::Map {
                entries,
                offsets,
                nulls,
                keys,
                values,
            } => {
                let DataType::Struct(pair) = entries.data_type() else {
                    unreachable!("checked when the column was made");
                };
                let keys: ArrayRef = Arc::new(keys.finish());
                let pairs = StructArray::try_new(pair.clone(), vec![keys, values.finish()?], None)
                    .map_err(invalid)?;
                Arc::new(
                    MapArray::try_new(
                        entries.clone(),
                        take_offsets(offsets),
                        pairs,
                        nulls.finish(),
                        false,
                    )
                    .map_err(invalid)?,
                )
            }
        })
    }
}

/// Appends a string, refused (where the builder would panic) once the
/// batch's text outgrows an Arrow string array's 32-bit offsets.
fn append_text(builder: &mut StringBuilder, text: &str) -> Result<(), RowsError> {
    if builder.values_slice().len() + text.len() > i32::MAX as usize {
        return Err(RowsError::Invalid(
            "more text in a batch than an Arrow string column holds (2 GiB)".into(),
        ));
    }
    builder.append_value(text);
    Ok(())
}

/// A list's offsets before its first row: 0, with room for `rows` more.
fn first_offset(rows: usize) -> Vec<i32> {
    let mut offsets = Vec::with_capacity(rows + 1);
    offsets.push(0);
    offsets
}

fn push_offset(offsets: &mut Vec<i32>, count: usize) -> Result<(), RowsError> {
    let last = *offsets.last().expect("starts with 0") as usize;
    let next = i32::try_from(last + count).map_err(|_| {
        RowsError::Invalid("more list items in a batch than an Arrow list holds".into())
    })?;
    offsets.push(next);
    Ok(())
}

fn take_offsets(offsets: &mut Vec<i32>) -> OffsetBuffer<i32> {
    let taken = std::mem::replace(offsets, vec![0]);
    OffsetBuffer::new(ScalarBuffer::from(taken))
}

/// An integer as arrow-json reads one: its text, or a number in other
/// notation that converts exactly enough (`1e3`).
fn parse_number<T>(text: &[u8]) -> Option<T>
where
    T: lexical_core::FromLexical + num_traits::NumCast,
{
    lexical_core::parse::<T>(text).ok().or_else(|| {
        lexical_core::parse::<f64>(text)
            .ok()
            .and_then(num_traits::NumCast::from)
    })
}

fn failed(text: &[u8], what: &str) -> RowsError {
    RowsError::Invalid(format!(
        "failed to parse {} as {what}",
        String::from_utf8_lossy(text)
    ))
}

/// Writes the value at `reader` to `out` with every object's keys given once
/// (a repeated key's last value kept, where its first one stood); scalars
/// go as they came, escapes and all.
fn last_wins(reader: &mut Reader<'_, '_>, out: &mut String, depth: usize) -> Result<(), RowsError> {
    if depth > 128 {
        return Err(RowsError::Invalid(
            "values nested more than 128 deep".into(),
        ));
    }
    reader.whitespace();
    match reader.peek() {
        Some(b'{') => {
            let mut members: Vec<(String, String)> = Vec::new();
            reader.elements(b'{', b'}', "an object", |reader| {
                let key = reader.string("a key")?.to_owned();
                reader.member_value()?;
                let mut value = String::new();
                last_wins(reader, &mut value, depth + 1)?;
                match members.iter_mut().find(|(given, _)| *given == key) {
                    Some(member) => member.1 = value,
                    None => members.push((key, value)),
                }
                Ok(())
            })?;
            out.push('{');
            for (at, (key, value)) in members.iter().enumerate() {
                if at > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::from(key.as_str()).to_string());
                out.push(':');
                out.push_str(value);
            }
            out.push('}');
        }
        Some(b'[') => {
            out.push('[');
            let mut first = true;
            reader.elements(b'[', b']', "an array", |reader| {
                if !std::mem::take(&mut first) {
                    out.push(',');
                }
                last_wins(reader, out, depth + 1)
            })?;
            out.push(']');
        }
        _ => {
            let start = reader.at;
            reader.skip_value(depth)?;
            out.push_str(&reader.text[start..reader.at]);
        }
    }
    Ok(())
}

/// A cursor over the records' bytes.
struct Reader<'a, 's> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    scratch: &'s mut String,
}

impl<'a, 's> Reader<'a, 's> {
    fn new(text: &'a str, scratch: &'s mut String) -> Reader<'a, 's> {
        Reader {
            text,
            bytes: text.as_bytes(),
            at: 0,
            scratch,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += found as usize;
        found
    }

    fn expect(&mut self, byte: u8, what: &str) -> Result<(), RowsError> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.not_a(what))
        }
    }

    fn not_a(&self, what: &str) -> RowsError {
        let found = match self.peek() {
            Some(byte) => format!("`{}`", byte.escape_ascii()),
            None => "the end".to_string(),
        };
        RowsError::Invalid(format!(
            "expected {what} at byte {}, found {found}",
            self.at
        ))
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), RowsError> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.not_a(&format!("`{}`", word.escape_ascii())))
        }
    }

    /// The elements of an array or the members of an object, from `open`
    /// to `close`: `each` reads one (after the whitespace before it); how
    /// many there were.
    fn elements(
        &mut self,
        open: u8,
        close: u8,
        what: &str,
        mut each: impl FnMut(&mut Self) -> Result<(), RowsError>,
    ) -> Result<usize, RowsError> {
        self.whitespace();
        self.expect(open, what)?;
        self.whitespace();
        if self.eat(close) {
            return Ok(0);
        }
        let mut count = 0;
        loop {
            self.whitespace();
            each(self)?;
            count += 1;
            self.whitespace();
            if self.eat(b',') {
                continue;
            }
            if self.eat(close) {
                return Ok(count);
            }
            let expected = if close == b']' {
                "`,` or `]`"
            } else {
                "`,` or `}`"
            };
            return Err(self.not_a(expected));
        }
    }

    /// The `:` between an object member's key and its value.
    fn member_value(&mut self) -> Result<(), RowsError> {
        self.whitespace();
        self.expect(b':', "`:`")
    }

    /// A number's text: a sign or a digit, then what a number holds (the
    /// grammar is left to the column's parser, which refuses what is no
    /// number).
    fn number(&mut self, what: &str) -> Result<&'a [u8], RowsError> {
        let start = self.at;
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            return Err(self.not_a(&format!("a number ({what})")));
        }
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.at += 1;
        }
        if self.at == start {
            return Err(self.not_a(&format!("a number ({what})")));
        }
        Ok(&self.bytes[start..self.at])
    }

    /// A value given as a string or as a number, parsed by the one or the
    /// other (as arrow-json takes both for numbers, dates and times).
    fn scalar<T>(
        &mut self,
        what: &str,
        from_string: impl FnOnce(&str) -> Option<T>,
        from_number: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Result<T, RowsError> {
        if self.peek() == Some(b'"') {
            let text = self.string(what)?;
            from_string(text).ok_or_else(|| failed(text.as_bytes(), what))
        } else {
            let text = self.number(what)?;
            from_number(text).ok_or_else(|| failed(text, what))
        }
    }

    /// A string's text, unescaped (into the scratch buffer when it has an
    /// escape). The text is a slice of the records' (checked once as UTF-8):
    /// a quote is ASCII, so no slice between two splits a character.
    fn string(&mut self, what: &str) -> Result<&str, RowsError> {
        if !self.eat(b'"') {
            return Err(self.not_a(&format!("a string ({what})")));
        }
        let unclosed = || RowsError::Invalid("a string without its closing quote".into());
        let start = self.at;
        let end =
            start + memchr::memchr2(b'"', b'\\', &self.bytes[start..]).ok_or_else(unclosed)?;
        self.at = end + 1;
        if self.bytes[end] == b'"' {
            return Ok(&self.text[start..end]);
        }
        self.scratch.clear();
        self.scratch.push_str(&self.text[start..end]);
        loop {
            self.escape()?;
            let run = self.at;
            let end =
                run + memchr::memchr2(b'"', b'\\', &self.bytes[run..]).ok_or_else(unclosed)?;
            self.scratch.push_str(&self.text[run..end]);
            self.at = end + 1;
            if self.bytes[end] == b'"' {
                return Ok(self.scratch.as_str());
            }
        }
    }

    /// One escape, after its `\`, onto the scratch buffer.
    fn escape(&mut self) -> Result<(), RowsError> {
        let byte = self.peek().ok_or_else(|| self.not_a("an escape"))?;
        self.at += 1;
        let c = match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                let code = if (0xD800..0xDC00).contains(&first) {
                    if !self.bytes[self.at..].starts_with(b"\\u") {
                        return Err(RowsError::Invalid(
                            "a lone surrogate in a \\u escape".into(),
                        ));
                    }
                    self.at += 2;
                    let second = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&second) {
                        return Err(RowsError::Invalid(
                            "a lone surrogate in a \\u escape".into(),
                        ));
                    }
                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                } else {
                    first
                };
                char::from_u32(code)
                    .ok_or_else(|| RowsError::Invalid("a lone surrogate in a \\u escape".into()))?
            }
            _ => {
                return Err(RowsError::Invalid(format!(
                    "an unknown escape `\\{}`",
                    byte.escape_ascii()
                )))
            }
        };
        self.scratch.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, RowsError> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| RowsError::Invalid("a \\u escape without four hex digits".into()))?;
        self.at += 4;
        Ok(digits)
    }

    /// Skips a value of a field no column has (`depth`: arrays and objects
    /// around it, from the unknown field's; a record's depth is capped by the
    /// check before, at 128).
    fn skip_value(&mut self, depth: usize) -> Result<(), RowsError> {
        if depth > 128 {
            return Err(RowsError::Invalid(
                "values nested more than 128 deep".into(),
            ));
        }
        self.whitespace();
        match self.peek() {
            Some(b'"') => {
                self.string("a string")?;
            }
            Some(b'{') => {
                self.elements(b'{', b'}', "an object", |reader| {
                    reader.string("a key")?;
                    reader.member_value()?;
                    reader.skip_value(depth + 1)
                })?;
            }
            Some(b'[') => {
                self.elements(b'[', b']', "an array", |reader| {
                    reader.skip_value(depth + 1)
                })?;
            }
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            _ => {
                self.number("a value")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{Field, Schema};

    fn field(name: &str, data_type: DataType) -> Field {
        Field::new(name, data_type, true)
    }

    fn list(item: DataType) -> DataType {
        DataType::List(Arc::new(Field::new("item", item, true)))
    }

    fn map(value: DataType) -> DataType {
        DataType::Map(
            Arc::new(Field::new(
                "key_value",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new("value", value, true),
                ])),
                false,
            )),
            false,
        )
    }

    /// Every type a stream's schema has (as `Shape::arrow` makes them).
    fn every_type() -> SchemaRef {
        let point = DataType::Struct(Fields::from(vec![
            field("x", DataType::Float64),
            field("label", DataType::Utf8),
            field(
                "inner",
                DataType::Struct(Fields::from(vec![field("deep", DataType::Int64)])),
            ),
        ]));
        Arc::new(Schema::new(vec![
            field("id", DataType::Int64),
            field("ok", DataType::Boolean),
            field("score", DataType::Float64),
            field("name", DataType::Utf8),
            field(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            ),
            field("wall", DataType::Timestamp(TimeUnit::Microsecond, None)),
            field("day", DataType::Date32),
            field("price", DataType::Decimal128(10, 2)),
            field("tags", list(DataType::Utf8)),
            field("points", list(point.clone())),
            field("point", point),
            field("counts", map(DataType::Int64)),
            field("matrix", list(list(DataType::Int64))),
        ]))
    }

    fn with_arrow_json(
        schema: &SchemaRef,
        records: &[u8],
        batch: usize,
    ) -> Result<Vec<RecordBatch>, String> {
        let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
            .with_batch_size(batch)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        let mut batches = Vec::new();
        let mut rest = records;
        loop {
            let read = decoder.decode(rest).map_err(|e| e.to_string())?;
            rest = &rest[read..];
            if let Some(b) = decoder.flush().map_err(|e| e.to_string())? {
                batches.push(b);
            }
            if rest.is_empty() {
                break;
            }
        }
        Ok(batches)
    }

    fn with_rows(
        schema: &SchemaRef,
        records: &[u8],
        batch: usize,
    ) -> Result<Vec<RecordBatch>, RowsError> {
        let mut decoder = RowDecoder::new(schema.clone(), batch)?;
        let mut batches = Vec::new();
        let mut rest =
            std::str::from_utf8(records).map_err(|e| RowsError::Invalid(e.to_string()))?;
        while !rest.is_empty() {
            let (read, batch) = decoder.batch(rest)?;
            rest = &rest[read..];
            batches.extend(batch);
        }
        Ok(batches)
    }

    #[test]
    fn the_rows_are_those_arrow_json_decodes() {
        let cases: &[(&str, &str)] = &[
            (
                "every field given",
                r#"{"id":1,"ok":true,"score":1.5,"name":"a","at":"2026-11-29T10:00:00Z","wall":"2026-11-29T10:00:00","day":"2026-11-29","price":"12.34","tags":["x","y"],"points":[{"x":1.0,"label":"p","inner":{"deep":7}}],"point":{"x":2,"label":"q"},"counts":{"a":1,"b":2},"matrix":[[1,2],[],[3]]}"#,
            ),
            ("nothing given", "{}"),
            (
                "nulls everywhere",
                r#"{"id":null,"ok":null,"score":null,"name":null,"at":null,"wall":null,"day":null,"price":null,"tags":null,"points":null,"point":null,"counts":null,"matrix":null}"#,
            ),
            (
                "nulls inside",
                r#"{"tags":[null,"x"],"points":[null,{"x":null}],"point":{"inner":null},"counts":{"a":null},"matrix":[null,[null,1]]}"#,
            ),
            (
                "fields in another order",
                r#"{"name":"b","id":2,"point":{"label":"l","x":0.5},"ok":false}"#,
            ),
            (
                "unknown fields skipped",
                r#"{"other":{"a":[1,{"b":"}"}],"c":null},"id":3,"more":[true,false,null,"\"]"],"n":-1.5e3}"#,
            ),
            (
                "escapes",
                r#"{"name":"quote \" backslash \\ slash \/ \b\f\n\r\t \u00e9 \ud83d\ude00 \u0000 end","tags":["\u2028","é ü 日本"],"counts":{"k\"ey":1}}"#,
            ),
            (
                "an escaped key",
                r#"{"n\u0061me":"by an escaped key","\u0069d":4}"#,
            ),
            (
                "integers",
                r#"{"id":-9223372036854775808}
{"id":9223372036854775807}
{"id":-0}
{"id":0}"#,
            ),
            (
                "floats",
                r#"{"score":0.1}
{"score":-0.0}
{"score":123456789.123456789}
{"score":2.2250738585072014e-308}
{"score":1.7976931348623157e308}
{"score":5e-324}
{"score":1E10}
{"score":3}
{"score":-17}
{"score":0.30000000000000004}
{"score":9007199254740993}"#,
            ),
            (
                "timestamps",
                r#"{"at":"2026-11-29T10:00:00+02:00","wall":"2026-11-29 10:00:00.123456"}
{"at":"2026-11-29T10:00:00.5","wall":"2026-11-29T23:59:59.999999"}
{"at":"2026-11-29 10:00:00Z","wall":"1970-01-01T00:00:00"}
{"at":"1969-12-31T23:59:59.999999Z"}"#,
            ),
            (
                "dates and decimals",
                r#"{"day":"1970-01-01","price":12.3}
{"day":"2000-02-29","price":"-0.5"}
{"day":"1900-01-01","price":7}
{"price":"99999999.99"}
{"price":-12.34}"#,
            ),
            (
                "whitespace and blank lines",
                "  {\"id\" : 1 , \"tags\" : [ \"a\" , \"b\" ] }\r\n\n\n\t{ \"id\":2 }\n   \n",
            ),
            ("several records on a line", r#"{"id":1} {"id":2}{"id":3}"#),
        ];
        let schema = every_type();
        for (case, records) in cases {
            for batch in [1, 2, 8192] {
                let expected = with_arrow_json(&schema, records.as_bytes(), batch)
                    .unwrap_or_else(|e| panic!("{case}: arrow-json: {e}"));
                let got = with_rows(&schema, records.as_bytes(), batch)
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                assert_eq!(got, expected, "{case} (batches of {batch})");
            }
        }
    }

    #[test]
    fn generated_records_decode_as_arrow_json_decodes_them() {
        // A small xorshift: the same records every run.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let words = [
            "",
            "a",
            "é",
            "\\\"",
            "\\n",
            "long text with spaces",
            "\\u00fc",
            "日本",
        ];
        let mut records = String::new();
        for _ in 0..3000 {
            let mut fields = Vec::new();
            if next() % 4 != 0 {
                fields.push(format!("\"id\":{}", next() as i64));
            }
            if next() % 4 != 0 {
                fields.push(format!("\"ok\":{}", next() % 2 == 0));
            }
            if next() % 4 != 0 {
                let bits = next();
                let value = f64::from_bits(bits);
                let text = if value.is_finite() {
                    format!("{value:e}")
                } else {
                    format!("{}", bits >> 40)
                };
                fields.push(format!("\"score\":{text}"));
            }
            if next() % 4 != 0 {
                fields.push(format!(
                    "\"name\":\"{}\"",
                    words[next() as usize % words.len()]
                ));
            }
            if next() % 3 == 0 {
                let micros = (next() % 4_000_000_000_000_000) as i64 - 1_000_000_000_000_000;
                let at =
                    arrow_array::temporal_conversions::timestamp_us_to_datetime(micros).unwrap();
                fields.push(format!(
                    "\"at\":\"{}\"",
                    at.format("%Y-%m-%dT%H:%M:%S%.6fZ")
                ));
                fields.push(format!(
                    "\"wall\":\"{}\"",
                    at.format("%Y-%m-%d %H:%M:%S%.3f")
                ));
                fields.push(format!("\"day\":\"{}\"", at.format("%Y-%m-%d")));
            }
            if next() % 3 == 0 {
                let cents = (next() % 2_000_000_000) as i64 - 1_000_000_000;
                fields.push(format!(
                    "\"price\":{}.{:02}",
                    cents / 100,
                    (cents % 100).abs()
                ));
            }
            if next() % 3 == 0 {
                let n = next() % 4;
                let items: Vec<String> = (0..n)
                    .map(|i| format!("{{\"x\":{i}.25,\"inner\":{{\"deep\":{}}}}}", next() % 100))
                    .collect();
                fields.push(format!("\"points\":[{}]", items.join(",")));
            }
            if next() % 3 == 0 {
                let n = next() % 3;
                let pairs: Vec<String> = (0..n)
                    .map(|i| format!("\"k{i}\":{}", next() % 1000))
                    .collect();
                fields.push(format!("\"counts\":{{{}}}", pairs.join(",")));
            }
            if next() % 5 == 0 {
                fields.push("\"unknown\":{\"x\":[1,2,{\"y\":null}]}".into());
            }
            // Fields in any order.
            let shift = next() as usize % (fields.len() + 1);
            let len = fields.len();
            fields.rotate_left(shift.min(len));
            records.push('{');
            records.push_str(&fields.join(","));
            records.push_str("}\n");
        }
        let schema = every_type();
        let expected = with_arrow_json(&schema, records.as_bytes(), 1000).unwrap();
        let got = with_rows(&schema, records.as_bytes(), 1000).unwrap();
        assert_eq!(got.len(), expected.len());
        for (at, (got, expected)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(got, expected, "batch {at}");
        }
    }

    #[test]
    fn odd_values_are_taken_or_refused_as_arrow_json_takes_or_refuses_them() {
        // (case, records, whether arrow-json takes them)
        let cases: &[(&str, &str, bool)] = &[
            ("a numeric string for an integer", r#"{"id":"12"}"#, true),
            ("a numeric string for a float", r#"{"score":"1.25"}"#, true),
            ("a float for an integer (cut to it)", r#"{"id":1.5}"#, true),
            ("an exponent for an integer", r#"{"id":1e3}"#, true),
            ("a number for a date (days)", r#"{"day":19000}"#, true),
            (
                "a number for a timestamp (its unit)",
                r#"{"at":1700000000000000}"#,
                true,
            ),
            ("a word for an integer", r#"{"id":"twelve"}"#, false),
            ("a number for a string", r#"{"name":1}"#, false),
            ("a string for a boolean", r#"{"ok":"true"}"#, false),
            ("an object for a list", r#"{"tags":{}}"#, false),
            ("a list for an object", r#"{"point":[]}"#, false),
            ("no date", r#"{"day":"yesterday"}"#, false),
            ("no timestamp", r#"{"at":"noon"}"#, false),
            (
                "too many digits for the decimal",
                r#"{"price":"123456789.5"}"#,
                false,
            ),
            ("not a record", r#"[1,2]"#, false),
            ("cut short", r#"{"id":1"#, false),
            ("a string cut short", r#"{"name":"abc"#, false),
            ("a plus sign", r#"{"id":+1}"#, false),
            ("a leading point", r#"{"score":.5}"#, false),
            ("a signed hex escape", r#"{"name":"\u+041"}"#, false),
        ];
        let schema = every_type();
        for (case, records, taken) in cases {
            let expected = with_arrow_json(&schema, records.as_bytes(), 16);
            assert_eq!(expected.is_ok(), *taken, "{case}: arrow-json {expected:?}");
            match (with_rows(&schema, records.as_bytes(), 16), expected) {
                (Ok(got), Ok(expected)) => assert_eq!(got, expected, "{case}"),
                (Err(RowsError::Invalid(_)), Err(_)) => {}
                (got, _) => panic!("{case}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value_as_arrow_json_does() {
        let schema = every_type();
        let cases = [
            ("at the top", r#"{"id":1,"name":"a","id":2}"#),
            ("in a struct", r#"{"point":{"x":1,"x":2,"label":"l"}}"#),
            (
                "in a list's struct",
                r#"{"points":[{"x":1},{"x":2,"x":3}]}"#,
            ),
            (
                "the first value no value of the column",
                r#"{"id":"x","id":1}"#,
            ),
            (
                "the first a list, the last null",
                r#"{"tags":["a"],"tags":null}"#,
            ),
            ("an escaped repeat", r#"{"name":"a","n\u0061me":"b"}"#),
            (
                "in a later record of the batch",
                "{\"id\":1}\n{\"id\":2}\n{\"id\":3,\"id\":4}\n{\"name\":\"\\u00e9\"}",
            ),
        ];
        for (case, records) in cases {
            for batch in [1, 2, 16] {
                let expected = with_arrow_json(&schema, records.as_bytes(), batch)
                    .unwrap_or_else(|e| panic!("{case}: arrow-json: {e}"));
                let got = with_rows(&schema, records.as_bytes(), batch)
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                assert_eq!(got, expected, "{case} (batches of {batch})");
            }
        }
        // The last value no value of the column: refused, as by arrow-json.
        let records = r#"{"id":1,"id":"x"}"#;
        assert!(with_arrow_json(&schema, records.as_bytes(), 16).is_err());
        assert!(matches!(
            with_rows(&schema, records.as_bytes(), 16),
            Err(RowsError::Invalid(_))
        ));
    }

    #[test]
    fn an_escaped_surrogate_pair_is_the_character_utf16_says() {
        // arrow-json 59.3 ORs the halves: U+20000 would become U+10000.
        let schema = every_type();
        let cases = [
            (r#"{"name":"\ud840\udc00"}"#, "\u{20000}"),
            (r#"{"name":"\ud842\udfb7"}"#, "\u{20bb7}"),
            (r#"{"name":"\udb40\udc41"}"#, "\u{e0041}"),
            (r#"{"name":"\udbff\udfff"}"#, "\u{10ffff}"),
            (r#"{"name":"\ud83d\ude00"}"#, "\u{1f600}"),
        ];
        for (records, expected) in cases {
            let batches = with_rows(&schema, records.as_bytes(), 16).unwrap();
            let names = batches[0]
                .column_by_name("name")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow_array::StringArray>()
                .unwrap();
            assert_eq!(names.value(0), expected, "{records}");
        }
    }

    #[test]
    fn types_no_stream_has_are_refused_when_the_decoder_is_made() {
        let schema = Arc::new(Schema::new(vec![field("small", DataType::Int32)]));
        assert!(matches!(
            RowDecoder::new(schema, 16),
            Err(RowsError::Unsupported(DataType::Int32))
        ));
    }
}
