//! What S3's model asks of a store that lacks it, the same on Azure and on
//! GCS: the record an upload keeps from its start to its end, part numbers,
//! whether a write's condition holds for what a key holds now, the Range
//! header a read or a part copy sends, a page of a listing from a cursor,
//! the checks completion makes of the parts it is given, and a copy read
//! again when its source is replaced under it.

use crate::checksum::ChecksumAlgorithm;
use crate::error::StoreError;
use crate::limits;
use crate::types::{
    ByteRange, ByteStream, CreateMultipartRequest, GetOutput, ListPage, Metadata, ObjectMeta,
    ObjectSettings, ObjectSummary, UploadedPart, WriteCondition,
};
use crate::ObjectStore;

/// How many times a copy reads its source again when the source is replaced
/// between the read of its metadata and the copy pinned to that version.
const COPY_READS: u32 = 3;

/// `copy` (a read of the source's version, then a copy pinned to it) again
/// while the source is replaced in between, up to [`COPY_READS`] times.
pub(crate) async fn copy_of_one_version<T, F>(mut copy: impl FnMut() -> F) -> Result<T, StoreError>
where
    F: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut reads = 1;
    loop {
        match copy().await {
            Err(StoreError::PreconditionFailed) if reads < COPY_READS => reads += 1,
            done => return done,
        }
    }
}

/// What an upload was started with, kept until it completes or is aborted.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct UploadRecord {
    pub key: String,
    pub content_type: Option<String>,
    pub metadata: Metadata,
    pub settings: ObjectSettings,
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
}

impl UploadRecord {
    /// The record of an upload `request` starts, as stored (JSON).
    pub fn of(request: &CreateMultipartRequest) -> bytes::Bytes {
        let record = UploadRecord {
            key: request.key.clone(),
            content_type: request.content_type.clone(),
            metadata: request.metadata.clone(),
            settings: request.settings.clone(),
            checksum_algorithm: request.checksum_algorithm,
        };
        serde_json::to_vec(&record)
            .expect("a record serializes")
            .into()
    }

    /// A record read back: `NoSuchUpload` when it is another key's.
    pub fn read(text: &str, name: &str, key: &str, upload_id: &str) -> Result<Self, StoreError> {
        let record: UploadRecord = serde_json::from_str(text).map_err(|e| StoreError::Service {
            status: 200,
            code: "UnreadableUploadRecord".into(),
            message: format!("{name}: {e}"),
        })?;
        if record.key != key {
            return Err(StoreError::NoSuchUpload {
                upload_id: upload_id.to_string(),
            });
        }
        Ok(record)
    }
}

/// Part numbers are 1..=10,000.
pub(crate) fn check_part_number(part_number: u32) -> Result<(), StoreError> {
    match (1..=limits::MAX_PARTS).contains(&part_number) {
        true => Ok(()),
        false => Err(StoreError::InvalidPart(format!(
            "part number {part_number} is outside 1..=10000"
        ))),
    }
}

/// `PreconditionFailed` unless `condition` holds for a key whose object
/// has the ETag `current` (`None`: no object).
pub(crate) fn condition_holds(
    condition: &Option<WriteCondition>,
    current: Option<&str>,
) -> Result<(), StoreError> {
    match (condition, current) {
        (Some(WriteCondition::IfNoneMatch), Some(_)) => Err(StoreError::PreconditionFailed),
        (Some(WriteCondition::IfMatch(_)), None) => Err(StoreError::PreconditionFailed),
        (Some(WriteCondition::IfMatch(want)), Some(etag)) if want != etag => {
            Err(StoreError::PreconditionFailed)
        }
        _ => Ok(()),
    }
}

/// The Range header of a read of `range`, and whether the range is empty
/// (asked as one byte, answered with none).
fn read_range(range: ByteRange) -> (String, bool) {
    match range.end.filter(|&e| e <= limits::MAX_OBJECT_SIZE) {
        Some(end) if end > range.start => (format!("bytes={}-{}", range.start, end - 1), false),
        Some(_) => (format!("bytes={}-{}", range.start, range.start), true),
        None => (format!("bytes={}-", range.start), false),
    }
}

/// A read of an object, whole or ranged, answered as S3 answers it where
/// the services differ: an empty range has no bytes, `0-` of an empty
/// object is an empty read (both services refuse any range of one), and a
/// range that starts at the end is refused (Azurite answers it with nothing).
pub(crate) struct Read {
    range: Option<ByteRange>,
    /// The Range header to send, if any.
    pub header: Option<String>,
    empty: bool,
}

impl Read {
    pub fn new(range: Option<ByteRange>) -> Result<Read, StoreError> {
        if matches!(range, Some(ByteRange { start, end: Some(end) }) if end < start) {
            return Err(StoreError::InvalidRange);
        }
        let (header, empty) = match range.map(read_range) {
            Some((header, empty)) => (Some(header), empty),
            None => (None, false),
        };
        Ok(Read {
            range,
            header,
            empty,
        })
    }

    /// What a refused request means: an empty read of `key` if it is an
    /// empty object and the range starts at 0, else the error.
    pub async fn refused(
        &self,
        error: StoreError,
        store: &dyn ObjectStore,
        key: &str,
    ) -> Result<GetOutput, StoreError> {
        if !matches!(error, StoreError::InvalidRange) || self.range.is_none_or(|r| r.start != 0) {
            return Err(error);
        }
        let meta = store.head_object(key).await?;
        if meta.size != 0 {
            return Err(StoreError::InvalidRange);
        }
        Ok(GetOutput {
            meta,
            range: (0, 0),
            body: Box::pin(futures::stream::empty()),
        })
    }

    /// The read an answer of `length` bytes gives, its body taken from
    /// `body` unless the range is empty.
    pub fn answered(
        &self,
        meta: ObjectMeta,
        length: u64,
        body: impl FnOnce() -> ByteStream,
    ) -> Result<GetOutput, StoreError> {
        if self.range.is_some_and(|r| r.resolve(meta.size).is_none()) {
            return Err(StoreError::InvalidRange);
        }
        let start = self.range.map_or(0, |r| r.start);
        if self.empty {
            return Ok(GetOutput {
                meta,
                range: (start, start),
                body: Box::pin(futures::stream::empty()),
            });
        }
        Ok(GetOutput {
            meta,
            range: (start, start + length),
            body: body(),
        })
    }
}

/// The Range header of a part copy of `range`; an empty range is refused.
pub(crate) fn copy_range(range: Option<ByteRange>) -> Result<Option<String>, StoreError> {
    match range {
        None => Ok(None),
        Some(ByteRange {
            start,
            end: Some(end),
        }) if end <= start => Err(StoreError::InvalidRange),
        Some(ByteRange {
            start,
            end: Some(end),
        }) => Ok(Some(format!("bytes={start}-{}", end - 1))),
        Some(ByteRange { start, end: None }) => Ok(Some(format!("bytes={start}-"))),
    }
}

/// A range that ends past the object's `size`, as S3 refuses it.
pub(crate) fn past_the_end(range: Option<ByteRange>, size: u64) -> Result<(), StoreError> {
    match range.and_then(|r| r.end).is_some_and(|end| end > size) {
        true => Err(StoreError::InvalidRange),
        false => Ok(()),
    }
}

/// A page being gathered from a service's listing, which starts at the
/// cursor key itself (Azure's `startFrom`, GCS's `startOffset`) and may
/// take several of the service's pages.
pub(crate) struct Page<'a> {
    cursor: Option<&'a str>,
    limit: usize,
    objects: Vec<ObjectSummary>,
}

impl<'a> Page<'a> {
    pub fn new(cursor: Option<&'a str>, limit: usize) -> Self {
        Page {
            cursor,
            limit,
            objects: Vec::new(),
        }
    }

    /// Takes an object listed (its key relative to the store). Only the
    /// cursor's own key is skipped: the service's order, not Rust's, decides
    /// what comes after it.
    pub fn take(&mut self, object: ObjectSummary) {
        if self.cursor != Some(object.key.as_str()) {
            self.objects.push(object);
        }
    }

    /// The page, if it is full (more may follow) or the service said it has
    /// nothing more (`service_more` false); `None` asks for the service's
    /// next page.
    pub fn finish(&mut self, service_more: bool) -> Option<ListPage> {
        let more = if self.objects.len() > self.limit {
            self.objects.truncate(self.limit);
            true
        } else if self.objects.len() == self.limit && service_more {
            true
        } else if service_more {
            return None;
        } else {
            false
        };
        let objects = std::mem::take(&mut self.objects);
        let next_cursor = more
            .then(|| objects.last().map(|o| o.key.clone()))
            .flatten();
        Some(ListPage {
            objects,
            next_cursor,
        })
    }
}

/// The checks completion makes of a part it is given, the `index`th of
/// `count`, stored with `size`, after a part numbered `last_number`.
pub(crate) fn check_part_in_order(
    part: &UploadedPart,
    index: usize,
    count: usize,
    size: u64,
    last_number: &mut u32,
) -> Result<(), StoreError> {
    if part.part_number <= *last_number {
        return Err(StoreError::InvalidPart(
            "the parts are not in ascending order".into(),
        ));
    }
    *last_number = part.part_number;
    if index + 1 < count && size < limits::MIN_PART_SIZE {
        return Err(StoreError::EntityTooSmall);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_copy_reads_a_replaced_source_again_three_times_at_most() {
        // (times the source is replaced under the copy, copied?, reads)
        let cases = [(0, true, 1), (1, true, 2), (2, true, 3), (3, false, 3)];
        for (replaced, copied, reads) in cases {
            let tried = std::cell::Cell::new(0);
            let result = copy_of_one_version(|| {
                tried.set(tried.get() + 1);
                let n = tried.get();
                async move {
                    match n > replaced {
                        true => Ok(n),
                        false => Err(StoreError::PreconditionFailed),
                    }
                }
            })
            .await;
            assert_eq!(result.is_ok(), copied, "{replaced}");
            assert_eq!(tried.get(), reads, "{replaced}");
        }
        // Any other failure is not read again.
        let tried = std::cell::Cell::new(0);
        let result: Result<(), _> = copy_of_one_version(|| {
            tried.set(tried.get() + 1);
            async { Err(StoreError::Unsupported("x")) }
        })
        .await;
        assert!(matches!(result, Err(StoreError::Unsupported(_))));
        assert_eq!(tried.get(), 1);
    }

    #[test]
    fn ranges_are_asked_as_http_writes_them() {
        // (range, read header, empty)
        let cases = [
            (ByteRange::new(0, 10), "bytes=0-9", false),
            (ByteRange::new(5, 5), "bytes=5-5", true),
            (ByteRange::from(7), "bytes=7-", false),
        ];
        for (range, header, empty) in cases {
            assert_eq!(read_range(range), (header.to_string(), empty), "{range:?}");
        }
        assert!(matches!(
            copy_range(Some(ByteRange::new(5, 5))),
            Err(StoreError::InvalidRange)
        ));
        assert_eq!(
            copy_range(Some(ByteRange::new(0, 10))).unwrap().as_deref(),
            Some("bytes=0-9")
        );
    }

    #[test]
    fn conditions_hold_or_fail_as_s3s_do() {
        let etag = Some(WriteCondition::IfMatch("\"1\"".into()));
        // (condition, current, holds)
        let cases = [
            (None, None, true),
            (None, Some("\"1\""), true),
            (Some(WriteCondition::IfNoneMatch), None, true),
            (Some(WriteCondition::IfNoneMatch), Some("\"1\""), false),
            (etag.clone(), Some("\"1\""), true),
            (etag.clone(), Some("\"2\""), false),
            (etag, None, false),
        ];
        for (condition, current, holds) in cases {
            assert_eq!(
                condition_holds(&condition, current).is_ok(),
                holds,
                "{condition:?} {current:?}"
            );
        }
    }
}
