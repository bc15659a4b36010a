//! Which columns of a Parquet file are written without a dictionary, chosen
//! from the file's first batch of rows.
//!
//! The `parquet` crate dictionary-encodes every column and gives up on a
//! column's dictionary only once it passes its size limit, in every row group
//! again: for a column of (nearly) unique values (ids, timestamps,
//! coordinates, free text) each value is hashed and interned for nothing,
//! which was a fifth of the CPU of records into Parquet. A column whose first
//! batch has more distinct values than half its values is written plain
//! (as DuckDB decides per row group); the others keep their dictionary and
//! the crate's own fallback. The choice changes the encoding only: readers
//! see the same values.

use std::collections::HashSet;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::schema::types::{ColumnPath, SchemaDescriptor};

/// Fewer values than this in the first batch say nothing: every column keeps
/// its dictionary.
const MIN_SAMPLE: usize = 1024;

/// The leaf columns of `batch` (in the order of `stored`'s leaves) whose
/// values are more than half distinct: to be written plain.
pub(crate) fn plain_columns(batch: &RecordBatch, stored: &SchemaDescriptor) -> Vec<ColumnPath> {
    let mut leaves = Vec::with_capacity(stored.num_columns());
    for column in batch.columns() {
        push_leaves(column, &mut leaves);
    }
    // Arrow's leaves and Parquet's come in the same (depth-first) order; a
    // schema this walk does not follow keeps the crate's defaults.
    if leaves.len() != stored.num_columns() {
        return Vec::new();
    }
    leaves
        .iter()
        .zip(stored.columns())
        .filter(|(leaf, _)| mostly_distinct(leaf))
        .map(|(_, column)| column.path().clone())
        .collect()
}

/// The arrays holding the leaf values of `array`, depth first.
fn push_leaves(array: &ArrayRef, leaves: &mut Vec<ArrayRef>) {
    use arrow_array::cast::AsArray;
    match array.data_type() {
        DataType::Struct(_) => {
            for child in array.as_struct().columns() {
                push_leaves(child, leaves);
            }
        }
        DataType::List(_) => push_leaves(array.as_list::<i32>().values(), leaves),
        DataType::LargeList(_) => push_leaves(array.as_list::<i64>().values(), leaves),
        DataType::FixedSizeList(_, _) => push_leaves(array.as_fixed_size_list().values(), leaves),
        DataType::Map(_, _) => {
            for child in array.as_map().entries().columns() {
                push_leaves(child, leaves);
            }
        }
        _ => leaves.push(array.clone()),
    }
}

/// Whether more than half of the leaf's non-null values (at least
/// [`MIN_SAMPLE`] of them) are distinct. Types without a dictionary of
/// their own (booleans, nulls) and types not counted here: false.
fn mostly_distinct(leaf: &ArrayRef) -> bool {
    let valid = leaf.len() - leaf.null_count();
    if valid < MIN_SAMPLE {
        return false;
    }
    let Some(distinct) = distinct_values(leaf) else {
        return false;
    };
    distinct * 2 > valid
}

/// How many distinct non-null values the leaf has, by their bytes.
fn distinct_values(leaf: &ArrayRef) -> Option<usize> {
    use arrow_array::cast::AsArray;
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(leaf.len());
    match leaf.data_type() {
        DataType::Utf8 => seen.extend(leaf.as_string::<i32>().iter().flatten().map(str::as_bytes)),
        DataType::LargeUtf8 => {
            seen.extend(leaf.as_string::<i64>().iter().flatten().map(str::as_bytes))
        }
        DataType::Binary => seen.extend(leaf.as_binary::<i32>().iter().flatten()),
        DataType::LargeBinary => seen.extend(leaf.as_binary::<i64>().iter().flatten()),
        DataType::Boolean | DataType::Null => return None,
        data_type => return distinct_fixed_width(leaf, data_type.primitive_width()?),
    }
    Some(seen.len())
}

/// [`distinct_values`] of fixed-width values (numbers, dates, times,
/// decimals): each value's bytes in the values buffer.
fn distinct_fixed_width(leaf: &ArrayRef, width: usize) -> Option<usize> {
    let data = leaf.to_data();
    let values = data.buffers().first()?.as_slice();
    let start = data.offset() * width;
    let values = values.get(start..start + data.len() * width)?;
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(data.len());
    for (i, value) in values.chunks_exact(width).enumerate() {
        if data.is_valid(i) {
            seen.insert(value);
        }
    }
    Some(seen.len())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{BooleanArray, Float64Array, Int64Array, StringArray, StructArray};
    use arrow_schema::{Field, Fields, Schema};
    use parquet::arrow::ArrowSchemaConverter;

    use super::*;

    fn plain_of(batch: &RecordBatch) -> Vec<String> {
        let stored = ArrowSchemaConverter::new()
            .convert(&batch.schema())
            .unwrap();
        plain_columns(batch, &stored)
            .iter()
            .map(|path| path.string())
            .collect()
    }

    fn column(name: &str, array: ArrayRef) -> (Field, ArrayRef) {
        (Field::new(name, array.data_type().clone(), true), array)
    }

    fn batch(columns: Vec<(Field, ArrayRef)>) -> RecordBatch {
        let (fields, arrays): (Vec<_>, Vec<_>) = columns.into_iter().unzip();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
    }

    const ROWS: i64 = 4096;

    #[test]
    fn columns_of_mostly_distinct_values_are_the_plain_ones() {
        let unique = Arc::new(Int64Array::from_iter_values(0..ROWS)) as ArrayRef;
        let few = Arc::new(Int64Array::from_iter_values((0..ROWS).map(|i| i % 19))) as ArrayRef;
        // Exactly half distinct: keeps its dictionary; one more than half: plain.
        let half = Arc::new(Int64Array::from_iter_values((0..ROWS).map(|i| i / 2))) as ArrayRef;
        let over = Arc::new(Int64Array::from_iter_values((0..ROWS).map(|i| {
            if i < ROWS / 2 + 2 {
                i
            } else {
                0
            }
        }))) as ArrayRef;
        let floats = Arc::new(Float64Array::from_iter_values(
            (0..ROWS).map(|i| i as f64 * 0.5),
        )) as ArrayRef;
        let text = Arc::new(StringArray::from_iter_values(
            (0..ROWS).map(|i| format!("user-{i}")),
        )) as ArrayRef;
        let words = Arc::new(StringArray::from_iter_values(
            (0..ROWS).map(|i| ["view", "click", "cart"][i as usize % 3]),
        )) as ArrayRef;
        let flags =
            Arc::new(BooleanArray::from_iter((0..ROWS).map(|i| Some(i % 2 == 0)))) as ArrayRef;
        // Unique where present, but too few present to say.
        let sparse = Arc::new(Int64Array::from_iter(
            (0..ROWS).map(|i| (i % 8 == 0).then_some(i)),
        )) as ArrayRef;
        let rows = batch(vec![
            column("unique", unique),
            column("few", few),
            column("half", half),
            column("over", over),
            column("floats", floats),
            column("text", text),
            column("words", words),
            column("flags", flags),
            column("sparse", sparse),
        ]);
        assert_eq!(plain_of(&rows), ["unique", "over", "floats", "text"]);
    }

    #[test]
    fn nested_leaves_are_judged_one_by_one_under_their_parquet_paths() {
        let city = Arc::new(StringArray::from_iter_values(
            (0..ROWS).map(|i| format!("c{}", i % 50)),
        )) as ArrayRef;
        let lat = Arc::new(Float64Array::from_iter_values(
            (0..ROWS).map(|i| i as f64 / 7.0),
        )) as ArrayRef;
        let place = StructArray::new(
            Fields::from(vec![
                Field::new("city", DataType::Utf8, true),
                Field::new("lat", DataType::Float64, true),
            ]),
            vec![city, lat],
            None,
        );
        let mut tags = ListBuilder::new(StringBuilder::new());
        let mut ids = ListBuilder::new(StringBuilder::new());
        for i in 0..ROWS {
            tags.values().append_value(["new", "sale"][i as usize % 2]);
            tags.append(true);
            ids.values().append_value(format!("id-{i}"));
            ids.values().append_value(format!("id-{i}-b"));
            ids.append(true);
        }
        let rows = batch(vec![
            column("place", Arc::new(place)),
            column("tags", Arc::new(tags.finish())),
            column("ids", Arc::new(ids.finish())),
        ]);
        assert_eq!(plain_of(&rows), ["place.lat", "ids.list.item"]);
    }

    #[test]
    fn a_first_batch_too_small_to_say_keeps_every_dictionary() {
        let few_rows = batch(vec![column(
            "unique",
            Arc::new(Int64Array::from_iter_values(0..(MIN_SAMPLE as i64 - 1))),
        )]);
        assert!(plain_of(&few_rows).is_empty());
    }
}
