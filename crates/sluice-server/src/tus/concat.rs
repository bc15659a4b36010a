//! The concatenation extension: a final upload made of finished partial uploads.
//! Where every partial but the last holds at least S3's 5 MiB minimum part (and at
//! most 5 GiB), each becomes one part by server-side copy and no byte passes
//! through the gateway; otherwise the partials are streamed, in order, through the
//! engine into the final object.

use std::io;
use std::time::SystemTime;

use axum::response::Response;
use futures::{StreamExt, TryStreamExt};
use sluice_store::{limits, CompleteMultipartRequest, CopyPartRequest, CreateMultipartRequest};
use sluice_tus::{Concat, Metadata, TusError, Upload};
use sluice_upload::{UploadRequest, UploadSource};

use super::record::{RecordError, TusRecord};
use super::{created, valid_id, Tus, BASE_PATH};
use crate::error::{from_transfer, ApiError};
use crate::AppState;

/// The id of a partial upload named by URL or path in `Upload-Concat`.
fn partial_id(url: &str) -> Option<String> {
    let path = match url.parse::<http::Uri>() {
        Ok(uri) if uri.scheme().is_some() => uri.path().to_owned(),
        _ => url.to_owned(),
    };
    let id = path.strip_prefix(BASE_PATH)?.trim_end_matches('/');
    valid_id(id).then(|| id.to_owned())
}

/// Creates the final upload `id` at `key` from the partial uploads at `urls`.
pub async fn create_final(
    state: &AppState,
    id: String,
    key: String,
    content_type: Option<String>,
    metadata: Metadata,
    urls: &[String],
) -> Result<Response, ApiError> {
    let tus = &state.tus;
    let invalid = |m: String| ApiError::Tus(TusError::InvalidConcat(m));
    if urls.len() > limits::MAX_PARTS as usize {
        return Err(invalid(format!(
            "at most {} partial uploads",
            limits::MAX_PARTS
        )));
    }
    let mut partials = Vec::with_capacity(urls.len());
    for url in urls {
        let partial = partial_id(url)
            .ok_or_else(|| invalid(format!("{url} is not an upload of this server")))?;
        let record = match tus.records.load(&partial).await {
            Ok(loaded) => loaded.record,
            Err(RecordError::NotFound) => {
                return Err(invalid(format!("there is no upload at {url}")))
            }
            Err(e) => return Err(e.into()),
        };
        if record.upload.concat != Concat::Partial {
            return Err(invalid(format!("{url} is not a partial upload")));
        }
        if !record.is_finished() {
            return Err(invalid(format!("{url} is not complete")));
        }
        partials.push(record);
    }
    let total: u64 = partials.iter().filter_map(|p| p.upload.length).sum();
    if total > tus.max_size {
        return Err(ApiError::Tus(TusError::TooLarge { max: tus.max_size }));
    }
    let etag = if copyable(&partials) {
        copy_parts(tus, &key, content_type.clone(), &partials).await?
    } else {
        stream_through(state, &key, content_type.clone(), &partials, total).await?
    };
    let mut upload = Upload::new(
        id,
        Some(total),
        metadata,
        Concat::Final(partials.iter().map(|p| p.upload.id.clone()).collect()),
        SystemTime::now(),
        tus.expiry,
    );
    upload.offset = total;
    let record = TusRecord {
        upload,
        key,
        content_type,
        multipart_id: None,
        parts: Vec::new(),
        segments: Vec::new(),
        next_segment: 0,
        finished_etag: Some(etag),
    };
    tus.records.create(&record).await?;
    tracing::info!(upload_id = %record.upload.id, key = %record.key, partials = partials.len(), size = total, "final upload concatenated");
    Ok(created(&record, true))
}

/// Every partial can be one part: 5 MiB to 5 GiB, the last one from 1 byte.
fn copyable(partials: &[TusRecord]) -> bool {
    let last = partials.len().saturating_sub(1);
    partials.iter().enumerate().all(|(i, p)| {
        let len = p.upload.length.unwrap_or(0);
        len <= limits::MAX_PART_SIZE && len > 0 && (len >= limits::MIN_PART_SIZE || i == last)
    })
}

async fn copy_parts(
    tus: &Tus,
    key: &str,
    content_type: Option<String>,
    partials: &[TusRecord],
) -> Result<String, ApiError> {
    let mut create = CreateMultipartRequest::new(key);
    create.content_type = content_type;
    let upload_id = tus.store.create_multipart_upload(create).await?;
    let copied = async {
        let mut parts = Vec::with_capacity(partials.len());
        for (i, partial) in partials.iter().enumerate() {
            let part = tus
                .store
                .upload_part_copy(CopyPartRequest {
                    key: key.to_owned(),
                    upload_id: upload_id.clone(),
                    part_number: i as u32 + 1,
                    source_key: partial.key.clone(),
                })
                .await?;
            // The copy's own checksum may be missing; the partials were verified on the way in.
            parts.push(sluice_store::UploadedPart {
                checksum: None,
                ..part
            });
        }
        tus.store
            .complete_multipart_upload(CompleteMultipartRequest {
                key: key.to_owned(),
                upload_id: upload_id.clone(),
                parts,
                checksum: None,
            })
            .await
    }
    .await;
    match copied {
        Ok(output) => Ok(output.etag),
        Err(error) => {
            if let Err(abort) = tus.engine.abort_multipart(key, &upload_id).await {
                tracing::warn!(%key, error = %sluice_store::error_chain(&abort), "could not abort a failed concatenation; the janitor will");
            }
            Err(error.into())
        }
    }
}

async fn stream_through(
    state: &AppState,
    key: &str,
    content_type: Option<String>,
    partials: &[TusRecord],
    total: u64,
) -> Result<String, ApiError> {
    let store = state.tus.store.clone();
    let keys: Vec<String> = partials.iter().map(|p| p.key.clone()).collect();
    let stream = futures::stream::iter(keys)
        .then(move |source| {
            let store = store.clone();
            async move {
                store
                    .get_object(&source, None)
                    .await
                    .map(|output| output.body.map_err(io::Error::other))
            }
        })
        .map_err(io::Error::other)
        .try_flatten()
        .boxed();
    let request = UploadRequest {
        key: key.to_owned(),
        content_type,
        ..UploadRequest::default()
    };
    let outcome = state
        .tus
        .engine
        .upload(
            request,
            UploadSource::Stream {
                stream,
                length: Some(total),
            },
        )
        .await
        .map_err(from_transfer)?;
    Ok(outcome.etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_urls_table() {
        let id = "0123456789abcdef0123456789abcdef";
        let cases = [
            (format!("/v1/tus/{id}"), true),
            (format!("http://gateway.example:8080/v1/tus/{id}"), true),
            (format!("/v1/tus/{id}/"), true),
            (format!("/files/{id}"), false),
            ("/v1/tus/../state".to_owned(), false),
            ("/v1/tus/".to_owned(), false),
        ];
        for (url, ok) in cases {
            assert_eq!(partial_id(&url).is_some(), ok, "{url}");
        }
    }
}
