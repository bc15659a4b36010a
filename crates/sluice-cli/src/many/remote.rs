//! The store side of a transfer of many objects: a bucket (or a directory
//! store) and a key prefix, and the objects under it with their keys relative
//! to the prefix, in key order, listed a page ahead of their use.

use std::sync::Arc;
use std::time::SystemTime;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio_util::task::AbortOnDropHandle;

use sluice_store::{is_reserved_key, ObjectStore, ObjectSummary, StoreError};
use sluice_upload::SourceBucket;

use super::filter::Filter;

/// Keys per listing request.
const LIST_PAGE: usize = 1000;

/// Pages read while the one before is being used, by a task of the listing's
/// own. The run holds thousands of jobs ahead anyway (`many::LOOKAHEAD`); what
/// this moves is the work: every job of a run is polled in the run's one task,
/// and the listing's requests and the parsing of its pages ran there too. In a
/// task of their own they run on a worker beside it: 10,000 small downloads
/// went from 1.11-1.14x s5cmd's rate to 1.29x (medians of 7, two sets), with
/// 11-25% less kernel time (bench/results/2026-12-01/listing-read-ahead-ab.txt).
const PAGES_AHEAD: usize = 1;

/// A prefix in a store.
#[derive(Clone)]
pub struct Prefix {
    pub store: Arc<dyn ObjectStore>,
    /// The service of a bucket's prefix (`None`: a directory store).
    pub service: Option<sluice_store::Service>,
    /// The bucket (container), for server-side copies from it into another
    /// bucket of its service.
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

    /// Every object under the prefix that `filter` takes, in key order, as a
    /// stream. The first page is read before this returns: a prefix that
    /// cannot be listed at all is an error here, before any transfer. Then a
    /// task of the listing's own reads one page ahead of the one being used
    /// ([`PAGES_AHEAD`]), so that a listing of a million keys is never held
    /// whole and the jobs rarely wait for a page. Keys ending in `/` (folder
    /// markers some tools write) are no files and are left out, and so is
    /// sluice's own state (`_sluice/`) when listing a whole bucket. The task
    /// ends with the stream (a request under way is dropped), and a panic in
    /// it goes on in the stream's reader: a listing that stopped is never
    /// taken for one that ended (`sync --delete` would remove what it missed).
    pub async fn listing(
        &self,
        store: Arc<dyn ObjectStore>,
        filter: Filter,
    ) -> Result<Listing, StoreError> {
        let mut pages = self.pages(filter);
        let first = pages.next(store.as_ref()).await?.unwrap_or_default();
        let (ahead, pages_read) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let reader = tokio::spawn(async move {
            // A slot is taken before the request: a page is read only once
            // the one before it has been taken up.
            while let Ok(slot) = ahead.reserve().await {
                match pages.next(store.as_ref()).await {
                    Ok(Some(page)) => slot.send(Ok(page)),
                    Ok(None) => return,
                    Err(error) => return slot.send(Err(error)),
                }
            }
        });
        let rest = futures::stream::unfold(
            (pages_read, Some(AbortOnDropHandle::new(reader))),
            |(mut pages_read, mut reader)| async move {
                let page: Vec<_> = match pages_read.recv().await {
                    Some(Ok(page)) => page.into_iter().map(Ok).collect(),
                    Some(Err(error)) => vec![Err(error)],
                    None => {
                        // The reader is done: ended, or stopped by a panic.
                        let stopped = reader.take()?.await.err()?;
                        if stopped.is_panic() {
                            std::panic::resume_unwind(stopped.into_panic());
                        }
                        vec![Err(StoreError::transport(format!(
                            "the listing stopped part way: {stopped}"
                        )))]
                    }
                };
                Some((futures::stream::iter(page), (pages_read, reader)))
            },
        )
        .flatten();
        Ok(futures::stream::iter(first.into_iter().map(Ok))
            .chain(rest)
            .boxed())
    }

    fn pages(&self, filter: Filter) -> Pages {
        Pages {
            prefix: self.prefix.clone(),
            filter,
            cursor: Cursor::Start,
        }
    }
}

/// Objects under a prefix as a listing gives them, a page at a time.
pub type Listing = BoxStream<'static, Result<RemoteObject, StoreError>>;

enum Cursor {
    Start,
    After(String),
    Ended,
}

/// A listing under way.
struct Pages {
    prefix: String,
    filter: Filter,
    cursor: Cursor,
}

impl Pages {
    /// The next page's objects that the filter takes, or none at the end.
    async fn next(
        &mut self,
        store: &dyn ObjectStore,
    ) -> Result<Option<Vec<RemoteObject>>, StoreError> {
        let cursor = match &self.cursor {
            Cursor::Start => None,
            Cursor::After(cursor) => Some(cursor.as_str()),
            Cursor::Ended => return Ok(None),
        };
        let page = store.list_objects(&self.prefix, cursor, LIST_PAGE).await?;
        let objects = page
            .objects
            .into_iter()
            .filter_map(|object| {
                let relative = object.key.strip_prefix(&self.prefix)?;
                let no_file = relative.is_empty() || relative.ends_with('/');
                let own_state = self.prefix.is_empty() && is_reserved_key(&object.key);
                (!no_file && !own_state && self.filter.accepts(relative)).then(|| RemoteObject {
                    relative: relative.to_string(),
                    key: object.key.clone(),
                    size: object.size,
                    etag: object.etag,
                    last_modified: object.last_modified,
                })
            })
            .collect();
        self.cursor = match page.next_cursor {
            Some(next) => Cursor::After(next),
            None => Cursor::Ended,
        };
        Ok(Some(objects))
    }
}
