//! Multipart uploads a dead writer left that no record names. A gateway
//! killed between creating an upload's multipart upload and recording it
//! (or while finishing an upload from its carried bytes) leaves one in the
//! bucket; the writer after it would start another, and the first would wait
//! for the janitor's sweep of stale multipart uploads (a day, by default).
//!
//! They are found by the upload's key: only when that key is the upload's
//! own (it holds the upload's id, as the default key template makes it),
//! since a key shared with other uploads may hold their multipart uploads.
//! The next writer looks when it takes a lock whose lease ran out (its holder
//! never released it: see [`crate::UploadLock::follows_a_lapsed_lease`]), so a
//! writer after a clean one pays no listing; a terminated or cancelled upload
//! always looks. An upload left to expire needs neither: by its expiry what
//! it left is older than the janitor's age for stale multipart uploads.
//! Best effort: what cannot be listed or aborted now is the janitor's.

use crate::record::UploadRecord;
use crate::Resumable;

impl Resumable {
    /// Aborts the multipart uploads of `record`'s key other than the one it
    /// names, when the key is the upload's own; how many.
    pub(crate) async fn abort_strays(&self, record: &UploadRecord) -> usize {
        if !record.key_is_its_own() {
            return 0;
        }
        let key = &record.key;
        let open = match self.store.list_multipart_uploads(key).await {
            Ok(open) => open,
            Err(error) => {
                tracing::warn!(upload_id = %record.id(), %key, error = %sluice_store::error_chain(&error), "could not look for multipart uploads a dead writer left; the janitor will");
                return 0;
            }
        };
        let mut aborted = 0;
        for stray in open
            .iter()
            .filter(|u| u.key == *key && Some(u.upload_id.as_str()) != record.multipart_id())
        {
            match self.engine.abort_multipart(key, &stray.upload_id).await {
                Ok(_) => aborted += 1,
                Err(error) => {
                    tracing::warn!(upload_id = %record.id(), %key, multipart_id = %stray.upload_id, error = %sluice_store::error_chain(&error), "could not abort a multipart upload a dead writer left; the janitor will");
                }
            }
        }
        if aborted > 0 {
            tracing::info!(upload_id = %record.id(), %key, aborted, "aborted the multipart uploads a dead writer left unrecorded");
        }
        aborted
    }
}
