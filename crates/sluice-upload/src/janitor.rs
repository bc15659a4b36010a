//! Cleaning up multipart uploads nobody will finish: those left by a crash, a
//! lost abort or a lost answer. The janitor lists every incomplete multipart
//! upload of the store and aborts the ones older than an age, sparing those the
//! caller names as live (resumable uploads whose state is kept elsewhere).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use crate::error::TransferError;
use crate::retry::Kind;
use crate::Engine;

/// What to clean.
#[derive(Debug, Clone, Default)]
pub struct StaleUploadFilter {
    /// Uploads initiated less than this long ago are left alone. Uploads whose
    /// initiation time the store does not report count as old.
    pub older_than: Duration,
    /// Upload ids never aborted, whatever their age.
    pub spare: BTreeSet<String>,
    /// Report what would be aborted; abort nothing.
    pub dry_run: bool,
}

/// One incomplete multipart upload and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleUpload {
    pub key: String,
    pub upload_id: String,
    /// Time since initiation, when the store reports it.
    pub age: Option<Duration>,
}

/// What one pass found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaleUploadReport {
    /// Incomplete multipart uploads listed.
    pub listed: usize,
    /// Aborted (or, in a dry run, to be aborted).
    pub aborted: Vec<StaleUpload>,
    /// Left alone because the caller named them live.
    pub spared: usize,
    /// Left alone because they are younger than the age.
    pub too_young: usize,
    /// Aborts that failed (each logged); the next pass tries again.
    pub failed: Vec<StaleUpload>,
}

impl Engine {
    /// Aborts the store's incomplete multipart uploads that `filter` selects.
    pub async fn abort_stale_uploads(
        &self,
        filter: &StaleUploadFilter,
        now: SystemTime,
    ) -> Result<StaleUploadReport, TransferError> {
        let inner = &self.inner;
        let uploads = inner
            .with_retries(Kind::Transfer, "ListMultipartUploads", "", || {
                inner.store.list_multipart_uploads("")
            })
            .await?;
        let mut report = StaleUploadReport {
            listed: uploads.len(),
            ..StaleUploadReport::default()
        };
        for upload in uploads {
            if filter.spare.contains(&upload.upload_id) {
                report.spared += 1;
                continue;
            }
            let age = upload
                .initiated
                .map(|t| now.duration_since(t).unwrap_or(Duration::ZERO));
            if age.is_some_and(|age| age < filter.older_than) {
                report.too_young += 1;
                continue;
            }
            let stale = StaleUpload {
                key: upload.key,
                upload_id: upload.upload_id,
                age,
            };
            if filter.dry_run {
                report.aborted.push(stale);
                continue;
            }
            // Now or reported failed: a pass hands nothing to the background.
            match self.inner.abort_upload(&stale.key, &stale.upload_id).await {
                Ok(()) => {
                    tracing::info!(key = %stale.key, upload_id = %stale.upload_id, age_s = ?stale.age.map(|a| a.as_secs()), "stale multipart upload aborted");
                    report.aborted.push(stale);
                }
                Err(error) => {
                    tracing::warn!(key = %stale.key, upload_id = %stale.upload_id, error = %sluice_store::error_chain(&error), "could not abort a stale multipart upload");
                    report.failed.push(stale);
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineConfig;
    use sluice_store::{CreateMultipartRequest, ObjectStore};
    use std::sync::Arc;

    #[tokio::test]
    async fn aborts_old_unspared_uploads_only() {
        let store = Arc::new(sluice_testkit::MemoryStore::new());
        let engine = Engine::new(store.clone(), EngineConfig::default()).unwrap();
        let mut ids = Vec::new();
        for key in ["a/1", "a/2", "b/3"] {
            ids.push(
                store
                    .create_multipart_upload(CreateMultipartRequest::new(key))
                    .await
                    .unwrap(),
            );
        }
        let later = SystemTime::now() + Duration::from_secs(3600);
        // (older than, spare, dry run, aborted, spared, too young, left open)
        type Case<'a> = (u64, Vec<&'a String>, bool, usize, usize, usize, usize);
        let cases: Vec<Case> = vec![
            (7200, vec![], false, 0, 0, 3, 3),
            (0, vec![&ids[1]], true, 2, 1, 0, 3),
            (1800, vec![&ids[1]], false, 2, 1, 0, 1),
            (0, vec![], false, 1, 0, 0, 0),
        ];
        for (older, spare, dry_run, aborted, spared, too_young, open) in cases {
            let filter = StaleUploadFilter {
                older_than: Duration::from_secs(older),
                spare: spare.into_iter().cloned().collect(),
                dry_run,
            };
            let report = engine.abort_stale_uploads(&filter, later).await.unwrap();
            assert_eq!(
                (report.aborted.len(), report.spared, report.too_young),
                (aborted, spared, too_young),
                "{older}s dry={dry_run}"
            );
            assert!(report.failed.is_empty());
            assert_eq!(store.open_uploads(), open);
        }
    }
}
