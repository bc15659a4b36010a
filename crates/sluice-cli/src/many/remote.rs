//! The store side of a transfer of many objects: a bucket (or a directory
//! store) and a key prefix, and the objects under it with their keys relative
//! to the prefix, in key order.

use std::sync::Arc;
use std::time::SystemTime;

use sluice_store::{is_reserved_key, ObjectStore, ObjectSummary, StoreError};
use sluice_upload::SourceBucket;

use super::filter::Filter;

/// Keys per listing request.
const LIST_PAGE: usize = 1000;

/// A prefix in a store.
#[derive(Clone)]
pub struct Prefix {
    pub store: Arc<dyn ObjectStore>,
    /// The S3 bucket, for server-side copies from it into another bucket.
    pub bucket: Option<String>,
    /// Empty, or ending in `/`.
    pub prefix: String,
    /// `s3://bucket/prefix/` or the directory, for messages.
    pub display: String,
}

/// An object under a [`Prefix`].
#[derive(Debug, Clone)]
pub struct RemoteObject {
    /// The key without the prefix.
    pub relative: String,
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub last_modified: SystemTime,
}

impl RemoteObject {
    /// The listing entry it came from.
    pub fn into_summary(self) -> ObjectSummary {
        ObjectSummary {
            key: self.key,
            size: self.size,
            etag: self.etag,
            last_modified: self.last_modified,
        }
    }
}

impl Prefix {
    /// The key of `relative` under the prefix.
    pub fn key(&self, relative: &str) -> String {
        format!("{}{relative}", self.prefix)
    }

    /// How to name `relative` in messages.
    pub fn show(&self, relative: &str) -> String {
        format!("{}{relative}", self.display)
    }

    /// What its keys are shown after: the display without the prefix
    /// (`s3://bucket/`), so that root and key make [`Prefix::show`]'s name.
    pub fn root(&self) -> String {
        self.display
            .strip_suffix(&self.prefix)
            .unwrap_or(&self.display)
            .to_string()
    }

    /// This prefix as the source of server-side copies into `target`: its
    /// bucket when that is another one (copies inside one bucket name none).
    pub fn copy_source_for(&self, target: &Prefix) -> Option<SourceBucket> {
        let name = self
            .bucket
            .clone()
            .filter(|name| target.bucket.as_ref() != Some(name))?;
        Some(SourceBucket {
            name,
            store: self.store.clone(),
        })
    }

    /// Every object under the prefix that `filter` takes. Keys ending in `/`
    /// (folder markers some tools write) are no files and are left out, and so
    /// is sluice's own state (`_sluice/`) when listing a whole bucket.
    pub async fn list(
        &self,
        store: &dyn ObjectStore,
        filter: &Filter,
    ) -> Result<Vec<RemoteObject>, StoreError> {
        let mut objects = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = store
                .list_objects(&self.prefix, cursor.as_deref(), LIST_PAGE)
                .await?;
            for object in page.objects {
                let Some(relative) = object.key.strip_prefix(&self.prefix) else {
                    continue;
                };
                if relative.is_empty()
                    || relative.ends_with('/')
                    || (self.prefix.is_empty() && is_reserved_key(&object.key))
                    || !filter.accepts(relative)
                {
                    continue;
                }
                objects.push(RemoteObject {
                    relative: relative.to_string(),
                    key: object.key.clone(),
                    size: object.size,
                    etag: object.etag.clone(),
                    last_modified: object.last_modified,
                });
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(objects),
            }
        }
    }
}
