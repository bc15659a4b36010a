//! Recovery when a partition is taken up: the batches that earlier runs stored
//! from the committed offset on (a run that died after storing them and before
//! committing), with their record counts, found by listing the partition's
//! keys and reading the batches back; and the multipart uploads a run killed
//! mid-batch left under the partition's keys, aborted (the partition is this
//! member's now: an owner that gave it up stored its batches first).

use std::collections::VecDeque;

use futures::TryStreamExt;

use super::KafkaError;
use crate::config::{Compression, RecordFormat};
use crate::stream::RecordStream;
use crate::template::PartitionKey;

/// Batches stored for `partition` from `offset` on by earlier runs: their
/// first offsets and record counts, in offset order.
pub(super) async fn stored_from(
    stream: &RecordStream,
    partition: i32,
    offset: i64,
) -> Result<VecDeque<(u64, u64)>, KafkaError> {
    let key = PartitionKey {
        source_partition: Some(partition),
        ..PartitionKey::default()
    };
    let template = stream.template();
    let prefix = template.offset_prefix(stream.name(), &key);
    // Through the engine's retrying handle, as every other store request.
    let store: std::sync::Arc<dyn sluice_store::ObjectStore> =
        std::sync::Arc::new(stream.engine().retrying_store());
    let recovery = |key: &str, reason: String| KafkaError::Recovery {
        key: key.to_string(),
        reason,
    };
    let mut batches: Vec<(u64, String)> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_objects(&prefix, cursor.as_deref(), 1000)
            .await
            .map_err(|e| recovery(&prefix, e.to_string()))?;
        for object in &page.objects {
            if let Some(first) = template.offset_of(&object.key[prefix.len()..]) {
                if first >= offset as u64 {
                    batches.push((first, object.key.clone()));
                }
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    batches.sort();
    abort_left_uploads(store.as_ref(), &prefix).await?;
    let mut stored = VecDeque::new();
    for (first, key) in batches {
        let mut body = store
            .get_object(&key, None)
            .await
            .map_err(|e| recovery(&key, e.to_string()))?
            .body;
        let mut data = Vec::new();
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| recovery(&key, e.to_string()))?
        {
            data.extend_from_slice(&chunk);
        }
        let (compression, format) = (stream.config().compression, stream.config().format);
        let records = stream
            .pool()
            .run(move || records_in(format, compression, data))
            .await
            .map_err(|e| recovery(&key, e))?;
        tracing::info!(key = %key, records, "a stored batch of an earlier run: its records are skipped");
        stored.push_back((first, records));
    }
    Ok(stored)
}

/// How many records a stored batch holds: its lines (NDJSON), or the rows its
/// Parquet footer counts.
fn records_in(
    format: RecordFormat,
    compression: Compression,
    data: Vec<u8>,
) -> Result<u64, String> {
    match format {
        RecordFormat::Ndjson => {
            let plain =
                crate::compress::decompress(compression, &data).map_err(|e| e.to_string())?;
            Ok(plain.iter().filter(|&&b| b == b'\n').count() as u64)
        }
        RecordFormat::Parquet => {
            use parquet::file::reader::FileReader;
            let file = parquet::file::reader::SerializedFileReader::new(bytes::Bytes::from(data))
                .map_err(|e| e.to_string())?;
            Ok(file.metadata().file_metadata().num_rows().max(0) as u64)
        }
    }
}

/// Aborts the multipart uploads under `prefix`: batches of a run that died
/// before completing them (their records are read again from the committed
/// offset).
async fn abort_left_uploads(
    store: &dyn sluice_store::ObjectStore,
    prefix: &str,
) -> Result<(), KafkaError> {
    let recovery = |key: &str, reason: String| KafkaError::Recovery {
        key: key.to_string(),
        reason,
    };
    let left = store
        .list_multipart_uploads(prefix)
        .await
        .map_err(|e| recovery(prefix, e.to_string()))?;
    for upload in left {
        match store
            .abort_multipart_upload(&upload.key, &upload.upload_id)
            .await
        {
            Ok(()) | Err(sluice_store::StoreError::NoSuchUpload { .. }) => {
                tracing::info!(key = %upload.key, "aborted the upload of a batch an earlier run left unfinished");
            }
            Err(e) => return Err(recovery(&upload.key, e.to_string())),
        }
    }
    Ok(())
}
