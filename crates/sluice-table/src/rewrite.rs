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
                schemas.push(
                    builder
                        .schema()
                        .as_ref()
                        .clone()
                        .with_metadata(Default::default()),
                );
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
            let lines = to_lines(&batch)?;
            records += decode_into(&mut writer, &schema, &lines, batch.num_rows())?;
        }
    }
    let footer = writer.close().map_err(|e| e.to_string())?;
    Ok(Merged {
        bytes,
        records,
        footer,
    })
}
