//! Resumable uploads of local files (`sluice put --resume`): a multipart upload
//! an earlier run left behind (interrupted, killed, or failed) is continued
//! instead of started again. The parts the store holds are listed (ListParts);
//! each counts only when its size is the one this run's part plan gives it and
//! its stored checksum equals the checksum of the same bytes of the file, read
//! and computed here. Every other part is sent again under its number, which
//! replaces what the store held. A failed or interrupted resumable upload is
//! not aborted: its parts wait for the next run (or the janitor), except one
//! whose completion the store answers InvalidPart: it can never be completed.
//!
//! The upload continued is the newest one the store lists for exactly this key.
//! One whose parts carry another checksum algorithm than this run's cannot be
//! completed with this run's parts and is left alone; a fresh upload starts.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use sluice_store::*;

use crate::config::PartPlan;
use crate::error::TransferError;
use crate::file_stamp::FileStamp;
use crate::parts::PartPipeline;
use crate::progress::Tracker;
use crate::retry::Kind;
use crate::upload::{complete_parts, UploadOutcome, UploadRequest};
use crate::{Engine, UploadSource};

/// Budget held per part in flight (the part streams from the file).
const PART_RESERVATION: u64 = crate::config::MIB;

/// A finished resumable upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeOutcome {
    pub outcome: UploadOutcome,
    /// The upload continued, when there was one.
    pub continued: Option<String>,
    /// Parts found in the store, matching the file, and not sent again.
    pub parts_kept: u32,
    pub bytes_kept: u64,
}

impl Engine {
    /// Uploads the file at `path` to `request.key`, continuing an earlier
    /// run's multipart upload of that key when there is one (see the module).
    /// Files at or under the threshold go up in one PUT, as always.
    pub async fn upload_file_resuming(
        &self,
        request: UploadRequest,
        path: PathBuf,
    ) -> Result<ResumeOutcome, TransferError> {
        crate::config::validate_key(&request.key)?;
        let stamp = FileStamp::of(
            &tokio::fs::metadata(&path)
                .await
                .map_err(TransferError::Source)?,
        );
        let length = stamp.len();
        let inner = &self.inner;
        let config = &inner.config;
        if length <= config.threshold {
            let outcome = self.upload(request, UploadSource::File(path)).await?;
            return Ok(ResumeOutcome {
                outcome,
                continued: None,
                parts_kept: 0,
                bytes_kept: 0,
            });
        }
        let plan = PartPlan::for_length(config, length)?;
        let ranges = part_ranges(&plan, length);
        let earlier = match self.earlier_upload(&request.key).await? {
            Some(upload_id) => self
                .matching_parts(&request.key, &upload_id, &path, &ranges)
                .await?
                .map(|kept| (upload_id, kept)),
            None => None,
        };
        let (upload_id, kept, continued) = match earlier {
            Some((upload_id, kept)) => (upload_id.clone(), kept, Some(upload_id)),
            None => (inner.create_upload(&request).await?, BTreeMap::new(), None),
        };
        tracing::info!(upload_id = %upload_id, kept = kept.len(), parts = ranges.len(), "resumable upload");
        let tracker = Tracker::new(Some(length), request.progress.clone());
        let mut pipeline =
            PartPipeline::new(inner.clone(), &request.key, &upload_id, tracker.clone());
        let (parts_kept, bytes_kept) = (kept.len() as u32, kept.values().map(|p| p.size).sum());
        let mut kept = kept;
        let sent = async {
            for (index, &(offset, len)) in ranges.iter().enumerate() {
                let number = index as u32 + 1;
                if let Some(part) = kept.remove(&number) {
                    tracker.advance(part.size, true);
                    pipeline.adopt(part);
                    continue;
                }
                if !pipeline.wait_for_slot().await {
                    return Err(TransferError::Cancelled);
                }
                let reservation = inner.budget.reserve(PART_RESERVATION).await;
                let body = Body::File {
                    path: path.clone(),
                    offset,
                    len,
                };
                pipeline.submit(number, body, reservation);
            }
            Ok(())
        }
        .await;
        let (parts, failed) = pipeline.finish(sent.is_err()).await;
        if let Some(error) = failed {
            return Err(error);
        }
        sent?;
        // Changed while read: the parts stay for the next run, which keeps
        // only those whose CRC matches the file then.
        stamp.check_path(&path).await?;
        let completed = complete_parts(
            inner,
            &request.key,
            &upload_id,
            parts,
            length,
            request.condition.clone(),
            request.origin.as_ref(),
        )
        .await;
        let outcome = match completed {
            Err(
                error @ TransferError::Store {
                    source: StoreError::InvalidPart(_),
                    ..
                },
            ) => {
                // The store cannot complete these parts (MinIO keeps such an
                // upload after a completion stopped midway): kept, every later
                // run would continue it and meet the same answer.
                tracing::warn!(upload_id = %upload_id, "the store cannot complete this upload: aborted, the next run starts afresh");
                if let Err(abort) = inner.abort_upload(&request.key, &upload_id).await {
                    tracing::warn!(upload_id = %upload_id, error = %sluice_store::error_chain(&abort), "could not abort it; the janitor will");
                }
                return Err(error);
            }
            other => other?,
        };
        Ok(ResumeOutcome {
            outcome,
            continued,
            parts_kept,
            bytes_kept,
        })
    }

    /// The newest incomplete upload of exactly `key`.
    async fn earlier_upload(&self, key: &str) -> Result<Option<String>, TransferError> {
        let inner = &self.inner;
        let uploads = inner
            .with_retries(Kind::Transfer, "ListMultipartUploads", key, || {
                inner.store.list_multipart_uploads(key)
            })
            .await?;
        Ok(uploads
            .into_iter()
            .filter(|u| u.key == key)
            .max_by_key(|u| u.initiated)
            .map(|u| u.upload_id))
    }

    /// The stored parts of `upload_id` that hold the bytes of the file this
    /// run's plan puts in them, checked by checksum; `None` when the upload's
    /// parts carry another checksum algorithm than this run's.
    async fn matching_parts(
        &self,
        key: &str,
        upload_id: &str,
        path: &Path,
        ranges: &[(u64, u64)],
    ) -> Result<Option<BTreeMap<u32, UploadedPart>>, TransferError> {
        let inner = &self.inner;
        let stored = inner
            .with_retries(Kind::Transfer, "ListParts", key, || {
                inner.store.list_parts(key, upload_id)
            })
            .await?;
        let algorithms = stored.iter().map(|p| p.checksum.map(|c| c.algorithm));
        if algorithms
            .clone()
            .any(|a| a.is_some() && a != inner.config.checksum)
        {
            return Ok(None);
        }
        let mut kept = BTreeMap::new();
        for part in stored {
            let index = (part.part_number as usize).checked_sub(1);
            let Some(&(offset, len)) = index.and_then(|i| ranges.get(i)) else {
                continue;
            };
            let Some(stored_sum) = part.checksum else {
                continue;
            };
            if part.size != len {
                continue;
            }
            let (file, algorithm) = (path.to_path_buf(), stored_sum.algorithm);
            let sum =
                tokio::task::spawn_blocking(move || range_checksum(&file, offset, len, algorithm))
                    .await
                    .map_err(|e| TransferError::PartTask(e.to_string()))?
                    .map_err(TransferError::Source)?;
            if sum == stored_sum {
                kept.insert(part.part_number, part);
            }
        }
        Ok(Some(kept))
    }
}

/// `(offset, len)` of every part of a file of `length` bytes.
fn part_ranges(plan: &PartPlan, length: u64) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    let (mut offset, mut number) = (0u64, 1u32);
    while offset < length {
        let len = plan.size_of(number).min(length - offset);
        ranges.push((offset, len));
        offset += len;
        number += 1;
    }
    ranges
}

fn range_checksum(
    path: &Path,
    offset: u64,
    len: u64,
    algorithm: ChecksumAlgorithm,
) -> io::Result<Checksum> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut hasher = Hasher::new(algorithm);
    let mut left = len;
    let mut buffer = vec![0u8; 1 << 20];
    while left > 0 {
        let want = buffer.len().min(left as usize);
        let n = file.read(&mut buffer[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file is shorter than its part plan",
            ));
        }
        hasher.update(&buffer[..n]);
        left -= n as u64;
    }
    Ok(hasher.finish())
}
