//! Arrow record batches as JSON lines and back, the way checkpoints (actions
//! to and from their Parquet columns) and compaction (files under the union
//! of their schemas) convert: arrow-json fills what a line lacks, nested
//! fields included.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;

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
