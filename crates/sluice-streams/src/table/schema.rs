//! The schema of a Parquet stream: the fields declared in its settings (or
//! none), widened as records bring new fields (top level or nested). Every
//! record is checked against it before it is taken: a value of another type is
//! a conflict that names the field, so that decoding a batch with arrow-json
//! never fails part-way. The schema only grows; each growth is a new version,
//! and a batch opened under an older version is flushed before records checked
//! under a newer one join it (a Parquet file has one schema). A table's NOT
//! NULL columns ([`Required`]) are its owner's rule: a record without a value
//! for one is a conflict too.

use std::sync::{Arc, Mutex};

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use serde_json::Value;

/// What the values of one field have been.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Only nulls (or empty arrays) so far: left out of files until known.
    Null,
    Bool,
    Int,
    Float,
    Text,
    List(Box<Shape>),
    Struct(Vec<(String, Shape)>),
    /// The types below are never inferred from records (a string stays a
    /// string): they come from a table's schema. Their values are JSON
    /// strings arrow-json parses as the type (checked per record).
    /// An instant: RFC 3339 (`2026-11-29T10:00:00Z`, an offset, or none:
    /// UTC); microseconds in UTC.
    Timestamp,
    /// A wall-clock time without a zone (`2026-11-29T10:00:00`).
    TimestampNtz,
    /// A calendar date (`2026-11-29`).
    Date,
    /// A decimal of this precision and scale: a JSON number or a numeric
    /// string, with at most `scale` digits after the point.
    Decimal(u8, i8),
    /// String keys (a JSON object) to values of one shape.
    Map(Box<Shape>),
}

impl Shape {
    /// From a declared type name (`bool`, `int64`, `float64`, `string`,
    /// `timestamp`, `timestamp_ntz`, `date`, `decimal(P,S)`).
    pub fn declared(name: &str) -> Option<Shape> {
        match name {
            "bool" | "boolean" => Some(Shape::Bool),
            "int" | "int64" | "bigint" | "long" => Some(Shape::Int),
            "float" | "float64" | "double" => Some(Shape::Float),
            "string" | "text" | "utf8" => Some(Shape::Text),
            "timestamp" => Some(Shape::Timestamp),
            "timestamp_ntz" => Some(Shape::TimestampNtz),
            "date" => Some(Shape::Date),
            other => Shape::decimal(other),
        }
    }

    /// `decimal(P,S)`: precision 1 to 38 (Decimal128, as Delta's), scale 0
    /// to P.
    pub fn decimal(text: &str) -> Option<Shape> {
        let (precision, scale) = text
            .strip_prefix("decimal(")?
            .strip_suffix(')')?
            .split_once(',')?;
        let precision: u8 = precision.trim().parse().ok()?;
        let scale: i8 = scale.trim().parse().ok()?;
        ((1..=38).contains(&precision) && (0..=precision as i8).contains(&scale))
            .then_some(Shape::Decimal(precision, scale))
    }

    fn name(&self) -> &'static str {
        match self {
            Shape::Null => "null",
            Shape::Bool => "a boolean",
            Shape::Int => "an integer",
            Shape::Float => "a number",
            Shape::Text => "a string",
            Shape::List(_) => "an array",
            Shape::Struct(_) => "an object",
            Shape::Timestamp => "a timestamp (an RFC 3339 string)",
            Shape::TimestampNtz => "a timestamp without a zone (`YYYY-MM-DDTHH:MM:SS`)",
            Shape::Date => "a date (`YYYY-MM-DD`)",
            Shape::Decimal(..) => "a decimal",
            Shape::Map(_) => "a map (an object)",
        }
    }

    /// Whether some value has a type (what [`Shape::arrow`] answers with
    /// `Some`), without building the type: asked of every record.
    fn is_known(&self) -> bool {
        match self {
            Shape::Null => false,
            Shape::Bool | Shape::Int | Shape::Float | Shape::Text => true,
            Shape::Timestamp | Shape::TimestampNtz | Shape::Date | Shape::Decimal(..) => true,
            Shape::Map(value) => value.is_known(),
            Shape::List(item) => item.is_known(),
            Shape::Struct(fields) => fields.iter().any(|(_, shape)| shape.is_known()),
        }
    }

    /// The Arrow type; None while nothing but nulls was seen.
    fn arrow(&self) -> Option<DataType> {
        Some(match self {
            Shape::Null => return None,
            Shape::Bool => DataType::Boolean,
            Shape::Int => DataType::Int64,
            Shape::Float => DataType::Float64,
            Shape::Text => DataType::Utf8,
            // An offset, not a zone name: arrow parses no named zones here; the
            // file's column is UTC-adjusted either way.
            Shape::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            Shape::TimestampNtz => DataType::Timestamp(TimeUnit::Microsecond, None),
            Shape::Date => DataType::Date32,
            Shape::Decimal(precision, scale) => DataType::Decimal128(*precision, *scale),
            Shape::Map(value) => DataType::Map(
                Arc::new(Field::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", DataType::Utf8, false),
                        Field::new("value", value.arrow()?, true),
                    ])),
                    false,
                )),
                false,
            ),
            Shape::List(item) => DataType::List(Arc::new(Field::new("item", item.arrow()?, true))),
            Shape::Struct(fields) => {
                let fields: Fields = fields
                    .iter()
                    .filter_map(|(name, shape)| Some(Field::new(name, shape.arrow()?, true)))
                    .collect();
                if fields.is_empty() {
                    return None;
                }
                DataType::Struct(fields)
            }
        })
    }
}

/// A value that does not fit its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The field, dotted (`a.b`; `[]` for an array's items).
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "field `{}`: {}", self.field, self.reason)
    }
}

/// The fields every record must give a value (a table's NOT NULL columns),
/// as paths. A nested one binds when its parent struct is there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Required {
    paths: Vec<Vec<String>>,
    /// Top-level ones whose empty string is no value either (a partition
    /// column: an empty partition value is null).
    non_empty: Vec<String>,
    /// The top-level names, when no path is nested (the one-pass check
    /// handles those; nested ones send every record to the full check).
    top_level: Option<Vec<String>>,
    /// A table that takes no new column: why, and the top-level names it
    /// takes anyway (its partition columns, which are no file's column).
    closed: Option<(String, Vec<String>)>,
}

impl Required {
    pub fn new(paths: Vec<Vec<String>>) -> Required {
        let top_level = paths
            .iter()
            .map(|p| (p.len() == 1).then(|| p[0].clone()))
            .collect();
        Required {
            paths,
            top_level,
            non_empty: Vec::new(),
            closed: None,
        }
    }

    /// A table's required `paths`; those of its `partition_columns` refuse
    /// an empty string too (an empty partition value is the default
    /// partition: null).
    pub fn of_table(paths: Vec<Vec<String>>, partition_columns: &[String]) -> Required {
        let partitions = paths
            .iter()
            .filter(|p| p.len() == 1 && partition_columns.contains(&p[0]))
            .map(|p| p[0].clone())
            .collect();
        Required::new(paths).with_non_empty(partitions)
    }

    /// The same, refusing a record that brings a field the schema does not
    /// have (but for the top-level `besides`), with `reason`.
    pub fn closed(mut self, reason: String, besides: Vec<String>) -> Required {
        self.closed = Some((reason, besides));
        self
    }

    /// Refuses the growth from `before` to `after` of a closed schema.
    fn check_growth(&self, before: &Shape, after: &Shape) -> Result<(), Conflict> {
        let Some((reason, besides)) = &self.closed else {
            return Ok(());
        };
        match new_field(before, after, "", besides) {
            Some(field) => Err(Conflict {
                field,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The same, with `names` (top-level) refusing an empty string too; the
    /// full check looks at every record then.
    pub fn with_non_empty(mut self, names: Vec<String>) -> Required {
        if !names.is_empty() {
            self.top_level = None;
        }
        self.non_empty = names;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The fields every record must give, as paths.
    pub fn paths(&self) -> &[Vec<String>] {
        &self.paths
    }

    /// The first path `record` gives no value (missing, or null).
    fn check(&self, record: &Value) -> Result<(), Conflict> {
        'paths: for path in &self.paths {
            let mut value = record;
            for (depth, name) in path.iter().enumerate() {
                match value.get(name) {
                    Some(Value::Null) | None => {
                        // A struct on the way is not there: its fields' rule
                        // does not bind.
                        if depth + 1 < path.len() {
                            continue 'paths;
                        }
                        return Err(Conflict {
                            field: path.join("."),
                            reason: "missing or null, and the table's column is NOT NULL".into(),
                        });
                    }
                    Some(Value::String(text))
                        if text.is_empty() && path.len() == 1 && self.non_empty.contains(name) =>
                    {
                        return Err(Conflict {
                            field: path.join("."),
                            reason: "empty, and the table's partition column is NOT NULL (an \
                                     empty partition value is null)"
                                .into(),
                        });
                    }
                    Some(inner) => value = inner,
                }
            }
        }
        Ok(())
    }
}

/// The first field (dotted) `after` has and `before` has not, but for the
/// top-level names `besides`.
fn new_field(before: &Shape, after: &Shape, path: &str, besides: &[String]) -> Option<String> {
    match (before, after) {
        (Shape::Struct(old), Shape::Struct(new)) => new.iter().find_map(|(name, shape)| {
            let dotted = sluice_delta::schema::dotted(path, name);
            match old.iter().find(|(n, _)| n == name) {
                Some((_, was)) => new_field(was, shape, &dotted, besides),
                None if path.is_empty() && besides.contains(name) => None,
                None => Some(dotted),
            }
        }),
        (Shape::List(old), Shape::List(new)) => new_field(old, new, &format!("{path}[]"), besides),
        (Shape::Null, after) if after.is_known() => Some(path.to_string()),
        _ => None,
    }
}

/// Whether the text of a JSON string (or, for a decimal, of a number) is a
/// value of `shape`, parsed as arrow-json parses it; None for shapes that
/// take no such scalar.
fn scalar_fits(shape: &Shape, text: &str) -> Option<bool> {
    use arrow_array::types::{Date32Type, Decimal128Type, TimestampMicrosecondType};
    use arrow_cast::parse::Parser;
    Some(match shape {
        Shape::Timestamp => TimestampMicrosecondType::parse(text).is_some(),
        // A zone would name an instant, not a wall-clock time.
        Shape::TimestampNtz => {
            let time = text.get(11..).unwrap_or("");
            TimestampMicrosecondType::parse(text).is_some() && !time.contains(['+', '-', 'Z', 'z'])
        }
        Shape::Date => Date32Type::parse(text).is_some(),
        Shape::Decimal(precision, scale) => {
            arrow_cast::parse::parse_decimal::<Decimal128Type>(text, *precision, *scale).is_ok()
                && decimal_digits_fit(text, *scale)
        }
        _ => return None,
    })
}

/// Whether a JSON string `text` fits `shape` as it is.
fn string_fits(shape: &Shape, text: &str) -> bool {
    matches!(shape, Shape::Text) || scalar_fits(shape, text) == Some(true)
}

/// Whether `text` has no more digits after its point than `scale` (arrow
/// would round them away: a value is stored as given, or refused).
fn decimal_digits_fit(text: &str, scale: i8) -> bool {
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    match mantissa.split_once('.') {
        Some((_, fraction)) => fraction.trim_end_matches('0').len() <= scale.max(0) as usize,
        None => true,
    }
}

/// Whether `value` fits `shape`; `Ok(true)` when it fits only once `shape`
/// grows (done in place).
fn merge(shape: &mut Shape, value: &Value, path: &mut String) -> Result<bool, Conflict> {
    let conflict = |shape: &Shape, value: &str, path: &str| Conflict {
        field: path.to_string(),
        reason: format!("{value} where the column holds {}", shape.name()),
    };
    match (&mut *shape, value) {
        (_, Value::Null) => Ok(false),
        (Shape::Decimal(..), Value::Number(n)) => match scalar_fits(shape, &n.to_string()) {
            Some(true) => Ok(false),
            _ => Err(Conflict {
                field: path.clone(),
                reason: format!("{n} is not {}", shape.name()),
            }),
        },
        (
            Shape::Timestamp | Shape::TimestampNtz | Shape::Date | Shape::Decimal(..),
            Value::String(text),
        ) => match scalar_fits(shape, text) {
            Some(true) => Ok(false),
            _ => Err(Conflict {
                field: path.clone(),
                reason: format!("{text:?} is not {}", shape.name()),
            }),
        },
        (Shape::Map(values), Value::Object(map)) => {
            let mut grew = false;
            let len = path.len();
            path.push_str("{}");
            for value in map.values() {
                grew |= merge(values, value, path)?;
            }
            path.truncate(len);
            Ok(grew)
        }
        (Shape::Bool, Value::Bool(_)) => Ok(false),
        (Shape::Text, Value::String(_)) => Ok(false),
        (Shape::Float, Value::Number(_)) => Ok(false),
        (Shape::Int, Value::Number(n)) if n.is_i64() => Ok(false),
        (Shape::Int, Value::Number(n)) if n.is_u64() => Err(Conflict {
            field: path.clone(),
            reason: format!("{n} is past the largest 64-bit integer"),
        }),
        (Shape::Int, Value::Number(n)) => {
            Err(conflict(shape, &format!("{n} (with a fraction)"), path))
        }
        (Shape::List(item), Value::Array(items)) => {
            let mut grew = false;
            let len = path.len();
            path.push_str("[]");
            for element in items {
                grew |= merge(item, element, path)?;
            }
            path.truncate(len);
            Ok(grew)
        }
        (Shape::Struct(fields), Value::Object(map)) => {
            let mut grew = false;
            for (key, value) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match fields.iter_mut().find(|(name, _)| name == key) {
                    Some((_, field)) => grew |= merge(field, value, path)?,
                    None => {
                        let mut field = Shape::Null;
                        merge(&mut field, value, path)?;
                        // A field with no type yet waits for one.
                        if field.is_known() {
                            fields.push((key.clone(), field));
                            grew = true;
                        }
                    }
                }
                path.truncate(len);
            }
            Ok(grew)
        }
        (Shape::Null, value) => {
            let mut grown = match value {
                Value::Bool(_) => Shape::Bool,
                Value::Number(n) if n.is_i64() => Shape::Int,
                Value::Number(n) if n.is_u64() => {
                    return Err(Conflict {
                        field: path.clone(),
                        reason: format!("{n} is past the largest 64-bit integer"),
                    })
                }
                Value::Number(_) => Shape::Float,
                Value::String(_) => Shape::Text,
                Value::Array(_) => Shape::List(Box::new(Shape::Null)),
                Value::Object(_) => Shape::Struct(Vec::new()),
                Value::Null => unreachable!("matched above"),
            };
            merge(&mut grown, value, path)?;
            // An empty array or object is still nothing known.
            let known = grown.is_known();
            if known {
                *shape = grown;
            }
            Ok(known)
        }
        (shape, value) => {
            let what = match value {
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
                Value::Null => "null",
            };
            Err(conflict(shape, what, path))
        }
    }
}

/// Whether the JSON `record` fits `version` as it is (no new field, no
/// conflict), read in one pass without building it: the common case, after
/// which the record is taken. `Ok(false)`: something new or a conflict, for
/// [`StreamSchema::check`] to sort out. An error: not JSON.
pub fn fits_as_is(version: &Version, record: &[u8]) -> Result<bool, serde_json::Error> {
    use serde::de::DeserializeSeed;
    // Only an object can be a row, and only once some field has a type.
    if record.first() != Some(&b'{') || !version.root.is_known() {
        return Ok(false);
    }
    // Checking the UTF-8 once for the whole record (ASCII goes by words) lets
    // the parser skip checking each string.
    let text = match std::str::from_utf8(record) {
        Ok(text) => text,
        Err(e) => {
            return Err(serde::de::Error::custom(format_args!(
                "invalid UTF-8 at byte {}",
                e.valid_up_to()
            )))
        }
    };
    let required = match (version.required.is_empty(), &version.required.top_level) {
        (true, _) => &[][..],
        (false, Some(names)) => names.as_slice(),
        // Nested NOT NULL fields: the full check looks.
        (false, None) => return Ok(false),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let fits = Fit::requiring(&version.root, required).deserialize(&mut de)?;
    de.end()?;
    Ok(fits)
}

/// Reads one value against a shape; true when it fits without growing it
/// (and, at the top, gives a value to every `required` field).
struct Fit<'s> {
    shape: &'s Shape,
    required: &'s [String],
}

impl<'s> Fit<'s> {
    fn of(shape: &'s Shape) -> Fit<'s> {
        Fit {
            shape,
            required: &[],
        }
    }

    fn requiring(shape: &'s Shape, required: &'s [String]) -> Fit<'s> {
        Fit { shape, required }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Fit<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Fit<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(matches!(self.shape, Shape::Bool))
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(matches!(self.shape, Shape::Int | Shape::Float))
    }
    fn visit_u64<E>(self, n: u64) -> Result<bool, E> {
        Ok(match self.shape {
            Shape::Int => i64::try_from(n).is_ok(),
            Shape::Float => true,
            _ => false,
        })
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        // A decimal's number: the full check reads its text.
        Ok(matches!(self.shape, Shape::Float))
    }
    fn visit_str<E>(self, text: &str) -> Result<bool, E> {
        Ok(string_fits(self.shape, text))
    }
    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<bool, E> {
        Ok(string_fits(self.shape, text))
    }
    fn visit_string<E>(self, text: String) -> Result<bool, E> {
        Ok(string_fits(self.shape, &text))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let item = match self.shape {
            Shape::List(item) => Some(&**item),
            _ => None,
        };
        let mut fits = true;
        loop {
            let next = match item {
                Some(item) if fits => seq.next_element_seed(Fit::of(item))?,
                _ => seq.next_element::<serde::de::IgnoredAny>()?.map(|_| false),
            };
            match next {
                Some(element) => fits &= element,
                None => break,
            }
        }
        // An empty array fits a list, and is nothing new anywhere else.
        Ok(fits && (item.is_some() || matches!(self.shape, Shape::Null)))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let fields = match self.shape {
            Shape::Struct(fields) => Some(fields),
            _ => None,
        };
        let mut fits = fields.is_some();
        let mut given_required = vec![false; self.required.len()];
        // Records mostly list their fields in the schema's order: the field
        // after the last one found is tried first.
        let mut next = 0;
        while let Some(crate::json_key::JsonKey(key)) =
            map.next_key::<crate::json_key::JsonKey<'de>>()?
        {
            let field = fields.and_then(|fields| {
                let at = match fields.get(next) {
                    Some((name, _)) if *name == key => next,
                    _ => fields.iter().position(|(name, _)| *name == key)?,
                };
                next = at + 1;
                Some(&fields[at])
            });
            if let Some(at) = self.required.iter().position(|name| *name == key) {
                // A NOT NULL field: its value, read raw, must not be null.
                let raw = map.next_value::<&serde_json::value::RawValue>()?;
                let given = raw.get() != "null";
                given_required[at] |= given;
                fits &= given
                    && match field {
                        Some((_, shape)) => {
                            use serde::de::DeserializeSeed;
                            let mut de = serde_json::Deserializer::from_str(raw.get());
                            Fit::of(shape)
                                .deserialize(&mut de)
                                .map_err(serde::de::Error::custom)?
                        }
                        None => false,
                    };
                continue;
            }
            match field {
                Some((_, shape)) if fits => fits &= map.next_value_seed(Fit::of(shape))?,
                _ => {
                    // Unknown: new unless it is null (a field with no type yet).
                    let value = map.next_value::<Option<serde::de::IgnoredAny>>()?;
                    fits &= value.is_none() && fields.is_some();
                }
            }
        }
        Ok(fits && given_required.iter().all(|given| *given))
    }
}

/// One version of a stream's schema.
#[derive(Debug, Clone)]
pub struct Version {
    pub number: u64,
    root: Shape,
    required: Arc<Required>,
}

impl Version {
    /// The fields known so far, as a struct shape.
    pub fn root(&self) -> &Shape {
        &self.root
    }

    /// The schema of a file written under this version (fields known so far).
    pub fn arrow_schema(&self) -> SchemaRef {
        struct_schema(&self.root)
    }

    /// The fields every record of this version gives (a table's NOT NULL
    /// columns).
    pub fn required(&self) -> &Required {
        &self.required
    }
}

/// The Arrow schema of a struct shape's fields (those with a type).
fn struct_schema(root: &Shape) -> SchemaRef {
    match root.arrow() {
        Some(DataType::Struct(fields)) => Arc::new(Schema::new(fields)),
        _ => Arc::new(Schema::empty()),
    }
}

/// The Arrow schema of top-level `fields` (those with a type).
pub fn arrow_schema_of(fields: Vec<(String, Shape)>) -> SchemaRef {
    struct_schema(&Shape::Struct(fields))
}

/// A stream's schema, shared by everything that checks its records.
#[derive(Debug)]
pub struct StreamSchema {
    current: Mutex<Arc<Version>>,
}

impl StreamSchema {
    /// Starts from declared top-level fields (name, shape).
    pub fn new(declared: Vec<(String, Shape)>) -> StreamSchema {
        StreamSchema::with_required(declared, Required::default())
    }

    /// Starts from declared fields, with the fields every record must give.
    pub fn with_required(declared: Vec<(String, Shape)>, required: Required) -> StreamSchema {
        StreamSchema {
            current: Mutex::new(Arc::new(Version {
                number: 0,
                root: Shape::Struct(declared),
                required: Arc::new(required),
            })),
        }
    }

    pub fn current(&self) -> Arc<Version> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Checks one record (a JSON object) against `seen` (a recent version),
    /// growing the schema when it brings something new; the version it needs.
    pub fn check(&self, seen: &Arc<Version>, record: &Value) -> Result<u64, Conflict> {
        if !record.is_object() {
            return Err(Conflict {
                field: String::new(),
                reason: "a Parquet stream's records are JSON objects".into(),
            });
        }
        let mut root = seen.root.clone();
        let grew = merge(&mut root, record, &mut String::new())?;
        seen.required.check(record)?;
        if grew {
            seen.required.check_growth(&seen.root, &root)?;
        }
        if !root.is_known() {
            // A Parquet file without a column holds no rows.
            return Err(Conflict {
                field: String::new(),
                reason: "no field has had a value yet, and a Parquet row needs one \
                         (declare a schema to take such records)"
                    .into(),
            });
        }
        if !grew {
            return Ok(seen.number);
        }
        // Something new: merged again into the latest version, under the lock,
        // so that two records growing the schema at once both count.
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let mut root = current.root.clone();
        if merge(&mut root, record, &mut String::new())? {
            *current = Arc::new(Version {
                number: current.number + 1,
                root,
                required: current.required.clone(),
            });
        }
        Ok(current.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// (records in order, each Ok(schema version needed) or Err(field))
    type Case<'a> = (&'a str, Vec<(&'a str, Result<u64, &'a str>)>, &'a str);

    #[test]
    fn records_grow_the_schema_or_conflict_with_it() {
        let cases: Vec<Case> = vec![
            (
                "new fields grow it once each",
                vec![
                    (r#"{"a":1}"#, Ok(1)),
                    (r#"{"a":2}"#, Ok(1)),
                    (r#"{"a":3,"b":"x"}"#, Ok(2)),
                    (r#"{"b":null}"#, Ok(2)),
                ],
                "a: Int64, b: Utf8",
            ),
            (
                "a type conflict names the field and grows nothing",
                vec![
                    (r#"{"a":1}"#, Ok(1)),
                    (r#"{"a":"one","c":true}"#, Err("a")),
                    (r#"{"a":1.5}"#, Err("a")),
                ],
                "a: Int64",
            ),
            (
                "integers fit a float column",
                vec![(r#"{"p":1.5}"#, Ok(1)), (r#"{"p":2}"#, Ok(1))],
                "p: Float64",
            ),
            (
                "nulls and empty arrays wait for a type",
                vec![
                    (r#"{"n":null,"l":[]}"#, Err("")),
                    (r#"{"l":[1,2]}"#, Ok(1)),
                    (r#"{"n":"x"}"#, Ok(2)),
                ],
                "l: List(Int64), n: Utf8",
            ),
            (
                "nested fields grow and conflict by path",
                vec![
                    (r#"{"o":{"x":1}}"#, Ok(1)),
                    (r#"{"o":{"y":[true]}}"#, Ok(2)),
                    (r#"{"o":{"y":[1]}}"#, Err("o.y[]")),
                ],
                "o: Struct(x: Int64, y: List(Boolean))",
            ),
            (
                "records are objects",
                vec![("[1]", Err("")), ("7", Err("")), ("null", Err(""))],
                "",
            ),
            (
                "a row needs a typed field, then may have none",
                vec![
                    ("{}", Err("")),
                    (r#"{"x":null}"#, Err("")),
                    (r#"{"a":1}"#, Ok(1)),
                    ("{}", Ok(1)),
                    (r#"{"x":null}"#, Ok(1)),
                ],
                "a: Int64",
            ),
            (
                "integers past i64",
                vec![(r#"{"big":18446744073709551615}"#, Err("big"))],
                "",
            ),
        ];
        for (name, records, want) in cases {
            let schema = StreamSchema::new(Vec::new());
            for (record, expected) in records {
                let value: Value = serde_json::from_str(record).unwrap();
                let seen = schema.current();
                let got = schema.check(&seen, &value).map_err(|c| c.field);
                assert_eq!(got, expected.map_err(str::to_string), "{name}: {record}");
            }
            let fields: Vec<String> = schema
                .current()
                .arrow_schema()
                .fields()
                .iter()
                .map(|f| format!("{}: {}", f.name(), short(f.data_type())))
                .collect();
            assert_eq!(fields.join(", "), want, "{name}");
        }
    }

    fn short(data_type: &DataType) -> String {
        match data_type {
            DataType::List(item) => format!("List({})", short(item.data_type())),
            DataType::Struct(fields) => format!(
                "Struct({})",
                fields
                    .iter()
                    .map(|f| format!("{}: {}", f.name(), short(f.data_type())))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn the_one_pass_check_agrees_with_the_full_one() {
        let schema = StreamSchema::new(Vec::new());
        let seed: Value = serde_json::from_str(
            r#"{"i":1,"f":1.5,"s":"x","b":true,"l":[1],"o":{"x":1,"l":["a"]}}"#,
        )
        .unwrap();
        schema.check(&schema.current(), &seed).unwrap();
        let version = schema.current();
        // (record, fits as it is)
        #[rustfmt::skip]
        let cases = [
            (r#"{"i":2,"f":2,"s":"y","b":false,"l":[],"o":{"x":2,"l":[]}}"#, true),
            (r#"{"i":null,"o":null,"l":null}"#, true),
            (r#"{}"#, true),
            (r#"{"\u0069":3}"#, true),
            (r#"{"new":null}"#, true),
            (r#"{"o":{"l":["b"],"x":3},"s":"z","i":4}"#, true),
            (r#"{"new":{"a":1}}"#, false),
            (r#"{"new":[]}"#, false),
            (r#"{"new":1}"#, false),
            (r#"{"o":{"y":1}}"#, false),
            (r#"{"i":"x"}"#, false),
            (r#"{"i":1.5}"#, false),
            (r#"{"i":18446744073709551615}"#, false),
            (r#"{"l":[1,"a"]}"#, false),
            (r#"{"l":{"a":1}}"#, false),
            (r#"{"o":[1]}"#, false),
            (r#"[1]"#, false),
            ("null", false),
            (r#"3"#, false),
        ];
        for (record, want) in cases {
            let fast = fits_as_is(&version, record.as_bytes()).unwrap();
            assert_eq!(fast, want, "{record}");
            // When it fits as is, the full check agrees and grows nothing.
            if fast {
                let value: Value = serde_json::from_str(record).unwrap();
                assert_eq!(
                    schema.check(&version, &value),
                    Ok(version.number),
                    "{record}"
                );
            }
        }
        for not_json in [&b"{\"i\":"[..], b"{\"s\":\"\xff\"}", b"{\"s\":\"\\ud800\"}"] {
            assert!(fits_as_is(&version, not_json).is_err(), "{not_json:?}");
        }
    }

    /// Issue 48: a table's NOT NULL columns. A record that gives each a
    /// value passes (the one-pass check included); one without a value, or
    /// with null, is a conflict naming the field, whichever check sees it
    /// first. A nested one binds when its parent struct is there.
    #[test]
    fn a_not_null_field_takes_no_record_without_a_value() {
        let fields = vec![
            ("id".to_string(), Shape::Int),
            ("name".to_string(), Shape::Text),
            (
                "o".to_string(),
                Shape::Struct(vec![("x".to_string(), Shape::Int)]),
            ),
        ];
        // (required paths, record, Ok or the field named)
        type Case<'a> = (&'a [&'a [&'a str]], &'a str, Result<(), &'a str>);
        #[rustfmt::skip]
        let cases: [Case; 10] = [
            (&[&["id"]], r#"{"id":1,"name":"a"}"#, Ok(())),
            (&[&["id"]], r#"{"name":"a","id":2}"#, Ok(())),
            (&[&["id"]], r#"{"name":"a"}"#, Err("id")),
            (&[&["id"]], r#"{"id":null,"name":"a"}"#, Err("id")),
            (&[&["id"]], r#"{}"#, Err("id")),
            (&[&["id"], &["name"]], r#"{"id":1}"#, Err("name")),
            (&[&["id"]], r#"{"id":"one"}"#, Err("id")),
            (&[&["o", "x"]], r#"{"o":{"x":1}}"#, Ok(())),
            (&[&["o", "x"]], r#"{"id":1}"#, Ok(())),
            (&[&["o", "x"]], r#"{"o":{}}"#, Err("o.x")),
        ];
        for (paths, record, want) in cases {
            let paths = paths
                .iter()
                .map(|p| p.iter().map(|s| s.to_string()).collect())
                .collect();
            let schema = StreamSchema::with_required(fields.clone(), Required::new(paths));
            let version = schema.current();
            let fast = fits_as_is(&version, record.as_bytes()).unwrap();
            let value: Value = serde_json::from_str(record).unwrap();
            let full = schema.check(&version, &value);
            match want {
                Ok(()) => assert_eq!(full, Ok(version.number), "{record}"),
                Err(field) => {
                    assert!(!fast, "{record}: passed the one-pass check");
                    assert_eq!(
                        full.map_err(|c| c.field),
                        Err(field.to_string()),
                        "{record}"
                    );
                }
            }
        }
        // A NOT NULL partition column: an empty value is the null default
        // partition, so it is no value either.
        let partition = StreamSchema::with_required(
            vec![("d".to_string(), Shape::Text)],
            Required::new(vec![vec!["d".to_string()]]).with_non_empty(vec!["d".to_string()]),
        );
        let version = partition.current();
        for (record, want) in [(r#"{"d":"x"}"#, true), (r#"{"d":""}"#, false)] {
            assert!(
                !fits_as_is(&version, record.as_bytes()).unwrap(),
                "{record}"
            );
            let value: Value = serde_json::from_str(record).unwrap();
            assert_eq!(partition.check(&version, &value).is_ok(), want, "{record}");
        }
    }

    #[test]
    fn declared_fields_come_first_and_hold_their_type() {
        let schema = StreamSchema::new(vec![("price".into(), Shape::Float)]);
        let seen = schema.current();
        let record: Value = serde_json::from_str(r#"{"price":3,"sku":"a"}"#).unwrap();
        assert_eq!(schema.check(&seen, &record), Ok(1));
        let names: Vec<String> = schema
            .current()
            .arrow_schema()
            .fields()
            .iter()
            .map(|f| format!("{}:{}", f.name(), f.data_type()))
            .collect();
        assert_eq!(names, ["price:Float64", "sku:Utf8"]);
    }

    /// Issue 48: the types of other writers' tables. A value the check takes
    /// is one arrow-json decodes as the column's type (a batch never fails
    /// part-way); one it refuses names the field and the type.
    #[test]
    fn typed_columns_take_their_values_and_refuse_others() {
        let cases: Vec<(Shape, Value, bool)> = vec![
            (Shape::Timestamp, json!("2026-11-29T10:00:00Z"), true),
            (
                Shape::Timestamp,
                json!("2026-11-29T10:00:00.123456+02:00"),
                true,
            ),
            (Shape::Timestamp, json!("2026-11-29 10:00:00"), true),
            (Shape::Timestamp, json!("yesterday"), false),
            (Shape::Timestamp, json!(1795913491469i64), false),
            (Shape::TimestampNtz, json!("2026-11-29T10:00:00"), true),
            (Shape::TimestampNtz, json!("2026-11-29T10:00:00Z"), false),
            (
                Shape::TimestampNtz,
                json!("2026-11-29T10:00:00-05:00"),
                false,
            ),
            (Shape::Date, json!("2026-11-29"), true),
            (Shape::Date, json!("2026-13-01"), false),
            (Shape::Date, json!("29/11/2026"), false),
            (Shape::Decimal(10, 2), json!(1.5), true),
            (Shape::Decimal(10, 2), json!("12345678.99"), true),
            (Shape::Decimal(10, 2), json!(-3), true),
            (Shape::Decimal(10, 2), json!(1.005), false),
            (Shape::Decimal(10, 2), json!("123456789.5"), false),
            (Shape::Decimal(10, 2), json!("1,5"), false),
            (
                Shape::Map(Box::new(Shape::Text)),
                json!({"k": "v", "l": null}),
                true,
            ),
            (Shape::Map(Box::new(Shape::Int)), json!({"k": "v"}), false),
            (Shape::Map(Box::new(Shape::Text)), json!(["k"]), false),
        ];
        for (shape, value, fits) in cases {
            let schema = StreamSchema::new(vec![("c".into(), shape.clone())]);
            let version = schema.current();
            let record = json!({"c": value});
            let checked = schema.check(&version, &record);
            assert_eq!(checked.is_ok(), fits, "{shape:?} {value}: {checked:?}");
            let fast = fits_as_is(&version, record.to_string().as_bytes()).unwrap();
            assert!(!fast || fits, "{shape:?} {value}: the fast check took it");
            match checked {
                Ok(_) => {
                    let mut decoder = arrow_json::ReaderBuilder::new(version.arrow_schema())
                        .build_decoder()
                        .unwrap();
                    decoder.decode(record.to_string().as_bytes()).unwrap();
                    let batch = decoder.flush().unwrap().unwrap();
                    assert_eq!(batch.num_rows(), 1, "{shape:?} {value}");
                }
                Err(conflict) => {
                    // A map's value is named `c{}`.
                    assert!(
                        conflict.field.starts_with('c'),
                        "{shape:?} {value}: {conflict}"
                    );
                }
            }
        }
    }

    #[test]
    fn typed_columns_come_from_declared_names_and_delta_types() {
        let cases = [
            ("timestamp", Some(Shape::Timestamp)),
            ("timestamp_ntz", Some(Shape::TimestampNtz)),
            ("date", Some(Shape::Date)),
            ("decimal(10,2)", Some(Shape::Decimal(10, 2))),
            ("decimal(38, 0)", Some(Shape::Decimal(38, 0))),
            ("decimal(39,0)", None),
            ("decimal(5,6)", None),
            ("interval", None),
        ];
        for (name, want) in cases {
            assert_eq!(Shape::declared(name), want, "{name}");
            let delta = crate::table::columns::shape_of(&json!(name));
            assert_eq!(delta, want, "{name} as a Delta type");
            if let Some(shape) = want {
                let back = crate::table::columns::delta_type(&shape).unwrap();
                assert_eq!(back, json!(name.replace(' ', "")), "{name}");
            }
        }
    }
}
