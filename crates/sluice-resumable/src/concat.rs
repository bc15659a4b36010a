//! The concatenation extension: a final upload made of finished partial uploads.
//! Where every partial but the last holds at least S3's 5 MiB minimum part (and
//! at most 5 GiB), each becomes one part by server-side copy (UploadPartCopy; the
//! fs store copies file to file) and no byte passes through the gateway;
//! otherwise the partials are streamed, in order, through the engine. Either way
//! memory stays within the budget, and a concatenation dropped midway aborts its
//! multipart upload.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use sluice_store::{limits, CopyPartRequest, CreateMultipartRequest, StoreError, UploadedPart};
use sluice_tus::{Concat, TusError, Upload};
use sluice_upload::{Origin, UploadKind, UploadOutcome, UploadRequest, UploadSource};

use crate::error::ResumableError;
use crate::record::{Finished, Phase, UploadRecord};
use crate::{NewUpload, Resumable, Written};

fn invalid(message: String) -> ResumableError {
    TusError::InvalidConcat(message).into()
}

impl Resumable {
    /// Creates the final upload `new` from the partial uploads `partial_ids`, in
    /// order. Refused (nothing stored): more than `max_partials`, an id twice, an
    /// id that is not a finished partial upload, or a total over the maximum size.
    pub async fn concatenate(
        &self,
        new: NewUpload,
        partial_ids: &[String],
    ) -> Result<Written, ResumableError> {
        self.store.check_key(&new.key).await?;
        let max = self.config.max_partials;
        if partial_ids.len() > max {
            return Err(invalid(format!("at most {max} partial uploads")));
        }
        let mut seen = BTreeSet::new();
        if let Some(twice) = partial_ids.iter().find(|id| !seen.insert(id.as_str())) {
            return Err(invalid(format!("upload {twice} is named twice")));
        }
        let mut partials = Vec::with_capacity(partial_ids.len());
        for id in partial_ids {
            let record = match self.records.load(id).await {
                Ok(loaded) => loaded.record,
                Err(e) if e.is_not_found() => {
                    return Err(invalid(format!("there is no upload {id}")))
                }
                Err(e) => return Err(e),
            };
            if record.upload.concat != Concat::Partial {
                return Err(invalid(format!("upload {id} is not a partial upload")));
            }
            if !record.is_finished() {
                return Err(invalid(format!("upload {id} is not complete")));
            }
            partials.push(record);
        }
        let total: u64 = partials.iter().filter_map(|p| p.upload.length).sum();
        if total > self.config.max_size {
            return Err(TusError::TooLarge {
                max: self.config.max_size,
            }
            .into());
        }
        let origin = crate::record::origin(
            UploadKind::TusConcatenation,
            &new.id,
            &new.owner,
            &new.content_type,
            &new.metadata,
        );
        let copied = match copyable(&partials) {
            true => self.copy_parts(&new, &partials, total, &origin).await?,
            false => None,
        };
        let outcome = match copied {
            Some(outcome) => outcome,
            None => self.stream_through(&new, &partials, total, origin).await?,
        };
        let mut upload = Upload::new(
            new.id,
            Some(total),
            new.metadata,
            Concat::Final(partials.iter().map(|p| p.upload.id.clone()).collect()),
            self.clock.now(),
            self.config.expiry,
        );
        upload.offset = total;
        let record = UploadRecord {
            upload,
            key: new.key,
            content_type: new.content_type,
            owner: new.owner,
            protocol: new.protocol,
            digest: None,
            phase: Phase::Finished(Finished {
                etag: outcome.etag.clone(),
                checksum: outcome.checksum,
            }),
        };
        self.records.create(&record).await?;
        tracing::info!(upload_id = %record.id(), key = %record.key, partials = partials.len(), size = total, "final upload concatenated");
        Ok(Written {
            record,
            finished: Some(outcome),
        })
    }

    /// Joins the partials by copying each into a part; None when the store
    /// cannot copy (the caller streams them instead).
    async fn copy_parts(
        &self,
        new: &NewUpload,
        partials: &[UploadRecord],
        total: u64,
        origin: &Arc<Origin>,
    ) -> Result<Option<UploadOutcome>, ResumableError> {
        // No checksum algorithm: the copies' checksums are the store's own; the
        // partials were verified on the way in.
        let mut create = CreateMultipartRequest::new(new.key.clone());
        create.content_type = new.content_type.clone();
        let upload_id = self.store.create_multipart_upload(create).await?;
        let guard = self.engine.abort_on_drop(&new.key, &upload_id);
        let copied = async {
            let mut parts = Vec::with_capacity(partials.len());
            for (i, partial) in partials.iter().enumerate() {
                let part = self
                    .store
                    .upload_part_copy(CopyPartRequest {
                        key: new.key.clone(),
                        upload_id: upload_id.clone(),
                        part_number: i as u32 + 1,
                        source_key: partial.key.clone(),
                        source_bucket: None,
                        source_range: None,
                        source_if_match: None,
                    })
                    .await?;
                // The copy's own checksum may be missing; the partials were verified on the way in.
                parts.push(UploadedPart {
                    checksum: None,
                    ..part
                });
            }
            Ok::<_, StoreError>(parts)
        }
        .await;
        let parts = match copied {
            Ok(parts) => parts,
            Err(StoreError::Unsupported(_)) => {
                guard.abort().await;
                return Ok(None);
            }
            Err(error) => {
                guard.abort().await;
                return Err(error.into());
            }
        };
        // Through the engine: the completion runs to its end if this request stops.
        match self
            .engine
            .complete_multipart(&new.key, &upload_id, parts, total, Some(origin.clone()))
            .await
        {
            Ok(outcome) => {
                guard.disarm();
                Ok(Some(outcome))
            }
            Err(error) => {
                guard.abort().await;
                Err(error.into())
            }
        }
    }

    async fn stream_through(
        &self,
        new: &NewUpload,
        partials: &[UploadRecord],
        total: u64,
        origin: Arc<Origin>,
    ) -> Result<UploadOutcome, ResumableError> {
        let store = self.store.clone();
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
            key: new.key.clone(),
            content_type: new.content_type.clone(),
            origin: Some(origin),
            ..UploadRequest::default()
        };
        let source = UploadSource::Stream {
            stream,
            length: Some(total),
        };
        Ok(self.engine.upload(request, source).await?)
    }
}

/// Every partial can be one part: 5 MiB to 5 GiB, the last one from 1 byte.
fn copyable(partials: &[UploadRecord]) -> bool {
    let last = partials.len().saturating_sub(1);
    partials.iter().enumerate().all(|(i, p)| {
        let len = p.upload.length.unwrap_or(0);
        len <= limits::MAX_PART_SIZE && len > 0 && (len >= limits::MIN_PART_SIZE || i == last)
    })
}
