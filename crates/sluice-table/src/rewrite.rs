//! Rows rewritten through JSON lines, the way Delta checkpoints (actions to
//! and from their Parquet columns) and both formats' compaction (files under
//! one schema, written under narrower ones) convert: arrow-json fills what a
//! line lacks, nested fields included.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::ParquetMetaData;

/// `batch` as JSON lines (nulls left out).
pub fn to_lines(batch: &RecordBatch) -> Result<Vec<u8>, String> {
    let mut lines = Vec::new();
    let mut json = arrow_json::WriterBuilder::new()
        .with_explicit_nulls(false)
        .build::<_, arrow_json::writer::LineDelimited>(&mut lines);
    json.write(batch).map_err(|e| e.to_string())?;
    json.finish().map_err(|e| e.to_string())?;
    Ok(lines)
}

/// Decodes JSON `lines` under `schema` into `writer`, `batch_rows` rows at a
/// time; the rows written.
pub fn decode_into<W: std::io::Write + Send>(
    writer: &mut ArrowWriter<W>,
    schema: &SchemaRef,
    lines: &[u8],
    batch_rows: usize,
) -> Result<u64, String> {
    let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
        .with_batch_size(batch_rows.max(1))
        .build_decoder()
        .map_err(|e| e.to_string())?;
    let mut rows = 0u64;
    let mut rest = lines;
    loop {
        let read = decoder.decode(rest).map_err(|e| e.to_string())?;
        rest = &rest[read..];
        if let Some(batch) = decoder.flush().map_err(|e| e.to_string())? {
            rows += batch.num_rows() as u64;
            writer.write(&batch).map_err(|e| e.to_string())?;
        }
        if rest.is_empty() {
            break;
        }
    }
    if let Some(batch) = decoder.flush().map_err(|e| e.to_string())? {
        rows += batch.num_rows() as u64;
        writer.write(&batch).map_err(|e| e.to_string())?;
    }
    Ok(rows)
}

/// One Parquet file that compaction wrote.
pub struct Merged {
    pub bytes: Vec<u8>,
    pub records: u64,
    pub footer: ParquetMetaData,
}

/// The rows of Parquet files `parts`, in order, as one zstd Parquet file of
/// `schema` (None: the union of the files' own schemas; a column a file
/// lacks is null in its rows).
pub fn merge_parquet(parts: Vec<Bytes>, schema: Option<SchemaRef>) -> Result<Merged, String> {
    let schema = match schema {
        Some(schema) => schema,
        None => {
            let mut schemas = Vec::with_capacity(parts.len());
            for part in &parts {
                let builder = ParquetRecordBatchReaderBuilder::try_new(part.clone())
                    .map_err(|e| e.to_string())?;
                // Zones named otherwise (Spark's `UTC`) as the rows will be.
                let fields: Vec<Arc<arrow_schema::Field>> = builder
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| Arc::new(f.as_ref().clone().with_data_type(in_utc(f.data_type()))))
                    .collect();
                schemas.push(Schema::new(fields));
            }
            Arc::new(Schema::try_merge(schemas).map_err(|e| e.to_string())?)
        }
    };
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_max_row_group_row_count(Some(1 << 20))
        .build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema.clone(), Some(properties))
        .map_err(|e| e.to_string())?;
    let mut records = 0u64;
    for part in parts {
        let reader = ParquetRecordBatchReaderBuilder::try_new(part)
            .map_err(|e| e.to_string())?
            .build()
            .map_err(|e| e.to_string())?;
        for batch in reader {
            let batch = batch.map_err(|e| e.to_string())?;
            // JSON has no NaN or infinity: arrow-json writes them as null.
            for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
                if non_finite(column.as_ref()) {
                    return Err(format!(
                        "column {} holds NaN or an infinity, which this rewrite would make null; \
                         the files are left as they are",
                        field.name()
                    ));
                }
            }
            let rows = batch.num_rows();
            let lines = to_lines(&in_utc_offsets(batch)?)?;
            records += decode_into(&mut writer, &schema, &lines, rows)?;
        }
    }
    let footer = writer.close().map_err(|e| e.to_string())?;
    Ok(Merged {
        bytes,
        records,
        footer,
    })
}

/// `batch` with every zoned timestamp's zone named `+00:00`: their values
/// are instants (UTC) whatever the zone's name, and a named zone (`UTC`, as
/// Spark's files give it) would not format without a zone database.
fn in_utc_offsets(batch: RecordBatch) -> Result<RecordBatch, String> {
    use arrow_schema::Field;
    fn rebuilt(data: arrow_data::ArrayData) -> Result<arrow_data::ArrayData, String> {
        let data_type = in_utc(data.data_type());
        if &data_type == data.data_type() {
            return Ok(data);
        }
        let children = data
            .child_data()
            .iter()
            .cloned()
            .map(rebuilt)
            .collect::<Result<Vec<_>, _>>()?;
        data.into_builder()
            .data_type(data_type)
            .child_data(children)
            .build()
            .map_err(|e| e.to_string())
    }
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| &in_utc(f.data_type()) != f.data_type())
    {
        return Ok(batch);
    }
    let schema = batch.schema();
    let fields: Vec<Arc<Field>> = schema
        .fields()
        .iter()
        .map(|f| Arc::new(f.as_ref().clone().with_data_type(in_utc(f.data_type()))))
        .collect();
    let columns = batch
        .columns()
        .iter()
        .map(|c| rebuilt(c.to_data()).map(arrow_array::make_array))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}

/// `data_type` with every zoned timestamp's zone named `+00:00` (see
/// [`in_utc_offsets`]).
fn in_utc(data_type: &arrow_schema::DataType) -> arrow_schema::DataType {
    use arrow_schema::{DataType, Field};
    let field = |f: &Arc<Field>| Arc::new(f.as_ref().clone().with_data_type(in_utc(f.data_type())));
    match data_type {
        DataType::Timestamp(unit, Some(_)) => DataType::Timestamp(*unit, Some("+00:00".into())),
        DataType::List(f) => DataType::List(field(f)),
        DataType::LargeList(f) => DataType::LargeList(field(f)),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(field).collect()),
        DataType::Map(f, sorted) => DataType::Map(field(f), *sorted),
        other => other.clone(),
    }
}

/// Whether `array` (or a field, element or value nested in it) holds a
/// floating-point NaN or infinity.
fn non_finite(array: &dyn arrow_array::Array) -> bool {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float16Type, Float32Type, Float64Type};
    use arrow_schema::DataType;
    match array.data_type() {
        DataType::Float16 => array
            .as_primitive::<Float16Type>()
            .iter()
            .flatten()
            .any(|v| !v.is_finite()),
        DataType::Float32 => array
            .as_primitive::<Float32Type>()
            .iter()
            .flatten()
            .any(|v| !v.is_finite()),
        DataType::Float64 => array
            .as_primitive::<Float64Type>()
            .iter()
            .flatten()
            .any(|v| !v.is_finite()),
        DataType::Struct(_) => array
            .as_struct()
            .columns()
            .iter()
            .any(|c| non_finite(c.as_ref())),
        DataType::List(_) => non_finite(array.as_list::<i32>().values().as_ref()),
        DataType::LargeList(_) => non_finite(array.as_list::<i64>().values().as_ref()),
        DataType::Map(_, _) => non_finite(array.as_map().entries()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Float64Array, Int64Array};
    use arrow_schema::{DataType, Field};

    fn file(values: Vec<Option<f64>>) -> Bytes {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("x", DataType::Float64, true),
        ]));
        let ids: Vec<i64> = (0..values.len() as i64).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)) as ArrayRef,
                Arc::new(Float64Array::from(values)) as ArrayRef,
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        Bytes::from(out)
    }

    /// A timestamp column whose zone is named (`UTC`, in Spark's files)
    /// merges with sluice's (`+00:00`): the same instants come out, under
    /// the target schema's zone, at the top level and in a struct.
    #[test]
    fn zoned_timestamps_merge_whatever_their_zone_is_named() {
        use arrow_array::{StructArray, TimestampMicrosecondArray};
        use arrow_schema::TimeUnit;
        let zoned = |zone: &str| DataType::Timestamp(TimeUnit::Microsecond, Some(zone.into()));
        let file = |zone: &str, micros: i64| {
            let ts = Arc::new(TimestampMicrosecondArray::from(vec![micros]).with_timezone(zone))
                as ArrayRef;
            let inner = Field::new("at", zoned(zone), true);
            let nested =
                Arc::new(StructArray::from(vec![(Arc::new(inner), ts.clone())])) as ArrayRef;
            let batch = RecordBatch::try_from_iter(vec![("ts", ts), ("s", nested)]).unwrap();
            let mut out = Vec::new();
            let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            Bytes::from(out)
        };
        let target = Arc::new(Schema::new(vec![
            Field::new("ts", zoned("+00:00"), true),
            Field::new(
                "s",
                DataType::Struct(vec![Field::new("at", zoned("+00:00"), true)].into()),
                true,
            ),
        ]));
        let at = 1_795_913_491_000_000i64;
        // Into a table's schema (Iceberg), and into the files' own (Delta).
        for target in [Some(target), None] {
            let merged =
                merge_parquet(vec![file("UTC", at), file("+00:00", at + 1)], target).unwrap();
            assert_eq!(merged.records, 2);
            let batch = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(merged.bytes))
                .unwrap()
                .build()
                .unwrap()
                .next()
                .unwrap()
                .unwrap();
            use arrow_array::cast::AsArray;
            let ts = batch
                .column(0)
                .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
            assert_eq!(ts.values().to_vec(), vec![at, at + 1]);
            let nested = batch.column(1).as_struct().column(0);
            let nested = nested.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
            assert_eq!(nested.values().to_vec(), vec![at, at + 1]);
        }
    }

    /// (case, values of the second file, rows merged or the refusal)
    #[test]
    fn files_merge_whole_or_not_at_all() {
        type Case = (&'static str, Vec<Option<f64>>, Result<u64, &'static str>);
        let cases: Vec<Case> = vec![
            ("finite values and nulls", vec![Some(1.5), None], Ok(4)),
            ("a NaN", vec![Some(f64::NAN)], Err("column x holds NaN")),
            (
                "an infinity",
                vec![None, Some(f64::INFINITY)],
                Err("column x holds NaN"),
            ),
        ];
        for (case, values, want) in cases {
            let got = merge_parquet(vec![file(vec![Some(0.25), Some(-2.0)]), file(values)], None)
                .map(|m| m.records);
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{case}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{case}: {got}"),
                (got, want) => panic!("{case}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
