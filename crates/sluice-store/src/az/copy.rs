//! The Azure store's server-side copies, each of the source as one HEAD
//! found it, from this container or another of the account:
//! - a whole object: Copy Blob, pinned to the source's ETag
//!   (`x-ms-source-if-match`) and followed with HEADs while Azure answers
//!   `pending`; properties and metadata travel with the bytes;
//! - a part (a range, or the whole): Put Block From URL, pinned the same way,
//!   Azure reading the source itself by a read SAS this store signs (unlike
//!   Copy Blob, it takes no authority from the request's Shared Key). A part
//!   over [`BLOCK_FROM_URL_MAX`], an empty one, or any once the service said
//!   it cannot read sources by URL (an emulator without the operation, an
//!   account whose network rules keep Azure from reading it) streams through
//!   this process as a Put Block, its GET pinned with `If-Match`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use reqwest::Method;

use super::client::{header_text, Call};
use super::errors::Context;
use super::{property_headers, quoted, AzureStore};
use crate::error::StoreError;
use crate::rest::model;
use crate::types::*;

/// The most one Put Block From URL copies: 100 MiB, the limit Azure long
/// documented for it (copy tools keep to it), which also keeps the request's
/// wait bounded ([`COPY_RATE_FLOOR`]).
const BLOCK_FROM_URL_MAX: u64 = 100 * MIB;

/// The slowest Azure is expected to copy: a Put Block From URL may go
/// without an answer for the store's stall timeout plus a second per MiB
/// it copies.
const COPY_RATE_FLOOR: u64 = MIB;

const MIB: u64 = 1024 * 1024;

/// How long the read SAS of a Put Block From URL's source lasts. Azure reads
/// the source within the request; the margin covers clocks that disagree.
const SOURCE_SAS_LIFETIME: Duration = Duration::from_secs(3600);

/// How long to wait before looking again at a copy Azure answered `pending`.
const COPY_POLL: Duration = Duration::from_millis(200);
const COPY_POLL_MAX: Duration = Duration::from_secs(5);

/// The source of a copy.
struct Source<'a> {
    /// Another container than the store's, whose keys are taken as they are
    /// (as S3 takes a copy source's key); `None`: the store's, under its prefix.
    container: Option<&'a str>,
    /// The blob's full name.
    name: String,
    /// What its errors name.
    context: Context<'a>,
}

/// How a part's bytes get into its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockCopy {
    /// Put Block From URL: Azure reads the source.
    FromUrl,
    /// A GET streamed into a Put Block.
    Streamed,
}

impl BlockCopy {
    /// How a part of `len` bytes is copied, `by_url` while the service takes
    /// Put Block From URL.
    fn of(len: u64, by_url: bool) -> BlockCopy {
        match len {
            // Azure stages no empty block from a URL.
            1..=BLOCK_FROM_URL_MAX if by_url => BlockCopy::FromUrl,
            _ => BlockCopy::Streamed,
        }
    }
}

/// Whether `error` says the service cannot stage blocks from URLs at all:
/// the operation not there (an emulator without it answers 501, or 500
/// `APINotImplemented`), or the source unreadable to Azure where it is
/// readable to this process (`CannotVerifyCopySource`: network rules).
fn cannot_copy_by_url(error: &StoreError) -> bool {
    match error {
        StoreError::Service { status: 501, .. } => true,
        StoreError::Service { code, .. } => code == "APINotImplemented",
        StoreError::AccessDenied(said) => said.starts_with("CannotVerifyCopySource"),
        _ => false,
    }
}

/// `x-ms-source-range` / `x-ms-range` for `len` bytes of `range`, closed at
/// both ends; `None` for the whole source.
fn range_header(range: Option<ByteRange>, len: u64) -> Option<String> {
    range.map(|r| format!("bytes={}-{}", r.start, r.start + len - 1))
}

/// The bytes of a source of `size` a part copy takes: `range`, or all of it;
/// a range past the end is refused, as S3 does.
fn part_len(range: Option<ByteRange>, size: u64) -> Result<u64, StoreError> {
    model::past_the_end(range, size)?;
    match range {
        None => Ok(size),
        Some(range) => range
            .end
            .unwrap_or(size)
            .checked_sub(range.start)
            .filter(|len| *len > 0)
            .ok_or(StoreError::InvalidRange),
    }
}

impl AzureStore {
    /// The source of a copy of `key`, in `container` when it is not the
    /// store's.
    fn copy_source<'a>(&'a self, key: &'a str, container: Option<&'a str>) -> Source<'a> {
        Source {
            container,
            name: match container {
                Some(_) => key.to_string(),
                None => self.full(key),
            },
            context: Context {
                key,
                container: container.unwrap_or(self.client.container()),
                create_only: false,
            },
        }
    }

    /// A call about the source blob.
    fn source_call<'a>(&self, method: Method, source: &'a Source<'a>) -> Call<'a> {
        let call = Call::new(method, Some(&source.name), source.context);
        match source.container {
            Some(container) => call.in_container(container),
            None => call,
        }
    }

    /// The source as it is now, if it is the version `if_match` names (else
    /// [`StoreError::PreconditionFailed`]).
    async fn head_source(
        &self,
        source: &Source<'_>,
        if_match: Option<&str>,
    ) -> Result<ObjectMeta, StoreError> {
        let mut head = self.source_call(Method::HEAD, source);
        if let Some(etag) = if_match {
            head = head.header("if-match", etag);
        }
        let answer = self.client.send(head).await?;
        Ok(self.meta_of(source.context.key, &answer, true))
    }

    /// [`crate::ObjectStore::copy_object`] of the source as its HEAD finds it now.
    pub(super) async fn copy_version(
        &self,
        request: &CopyObjectRequest,
    ) -> Result<PutOutput, StoreError> {
        // The tier asked for; ACL and encryption are refused as on a put.
        let placement = property_headers(
            None,
            &Metadata::new(),
            &ObjectSettings {
                storage_class: request.placement.storage_class.clone(),
                acl: request.placement.acl.clone(),
                encryption: request.placement.encryption.clone(),
                ..ObjectSettings::default()
            },
            None,
        )?;
        let source = self.copy_source(&request.source_key, request.source_bucket.as_deref());
        let found = self.head_source(&source, None).await?;
        let name = self.full(&request.key);
        // Properties and metadata (sluice's checksum entry among them)
        // travel with the bytes when the request names none.
        // The source was just found: what this request runs into is the
        // destination's (a source replaced since answers 412).
        let call = Call::new(Method::PUT, Some(&name), self.context(&request.key))
            .header(
                "x-ms-copy-source",
                self.client.source_url(source.container, &source.name),
            )
            .header("x-ms-source-if-match", quoted(&found.etag))
            .headers(placement);
        let answer = self.client.send(call).await?;
        let mut etag = header_text(&answer, "etag").unwrap_or_default();
        let copy_id = header_text(&answer, "x-ms-copy-id").unwrap_or_default();
        let mut status = header_text(&answer, "x-ms-copy-status").unwrap_or_default();
        let mut said = String::new();
        let mut pause = COPY_POLL;
        while status == "pending" {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(COPY_POLL_MAX);
            let head = Call::new(Method::HEAD, Some(&name), self.context(&request.key));
            let answer = match self.client.send(head).await {
                Ok(answer) => answer,
                // The copy goes on at Azure: a look that failed is tried again.
                Err(e) if e.is_transient() => continue,
                Err(e) => return Err(e),
            };
            if header_text(&answer, "x-ms-copy-id").unwrap_or_default() != copy_id {
                return Err(StoreError::Service {
                    status: 409,
                    code: "CopyReplaced".into(),
                    message: format!(
                        "{} was written by another request while it was being copied",
                        request.key
                    ),
                });
            }
            etag = header_text(&answer, "etag").unwrap_or_default();
            status = header_text(&answer, "x-ms-copy-status").unwrap_or_default();
            said = header_text(&answer, "x-ms-copy-status-description").unwrap_or_default();
        }
        if status != "success" {
            return Err(StoreError::Service {
                status: 500,
                code: "CopyFailed".into(),
                message: format!("Azure's copy ended {status:?}: {said}"),
            });
        }
        Ok(PutOutput {
            etag,
            checksum: found.checksum,
        })
    }

    /// Block `block` of [`crate::ObjectStore::upload_part_copy`], from the
    /// source as its HEAD finds it now (the version the request pins, if it
    /// pins one); answers the block's length.
    pub(super) async fn copy_block(
        &self,
        request: &CopyPartRequest,
        block: &str,
    ) -> Result<u64, StoreError> {
        let source = self.copy_source(&request.source_key, request.source_bucket.as_deref());
        let found = self
            .head_source(&source, request.source_if_match.as_deref())
            .await?;
        let len = part_len(request.source_range, found.size)?;
        let range = range_header(request.source_range, len);
        let etag = quoted(&found.etag);
        let by_url = self.blocks_by_url.load(Ordering::Relaxed);
        if BlockCopy::of(len, by_url) == BlockCopy::FromUrl {
            match self
                .block_from_url(request, &source, range.clone(), &etag, block, len)
                .await
            {
                Err(e) if cannot_copy_by_url(&e) => {
                    if self.blocks_by_url.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            error = %e,
                            "Azure cannot copy parts by URL here: they stream through sluice from now on"
                        );
                    }
                }
                copied => return copied.map(|()| len),
            }
        }
        let mut get = self
            .source_call(Method::GET, &source)
            .header("if-match", etag);
        if let Some(range) = range {
            get = get.header("x-ms-range", range);
        }
        let answer = self.client.send(get).await?;
        let sent = self
            .client
            .body_stream(answer)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .boxed();
        self.stage_block(&request.key, &request.upload_id, block, sent, len, None)
            .await?;
        Ok(len)
    }

    /// Put Block From URL: `len` bytes of the source (`range`, else all of
    /// it) as block `block`, if the source still has ETag `etag`.
    async fn block_from_url(
        &self,
        request: &CopyPartRequest,
        source: &Source<'_>,
        range: Option<String>,
        etag: &str,
        block: &str,
        len: u64,
    ) -> Result<(), StoreError> {
        let url =
            self.client
                .readable_source_url(source.container, &source.name, SOURCE_SAS_LIFETIME)?;
        let name = self.full(&request.key);
        let mut call = Call::new(Method::PUT, Some(&name), self.context(&request.key))
            .query("comp", "block")
            .query("blockid", block)
            .header("x-ms-copy-source", url)
            .header("x-ms-source-if-match", etag)
            .patience(Duration::from_secs(len.div_ceil(COPY_RATE_FLOOR)));
        if let Some(range) = range {
            call = call.header("x-ms-source-range", range);
        }
        let (record, staged) = tokio::join!(
            self.check_record(&request.key, &request.upload_id),
            self.client.send(call)
        );
        record?;
        match staged {
            // Blocks need no blob: what is missing is the source (a missing
            // container says so by name).
            Err(StoreError::NoSuchKey { .. }) => Err(StoreError::NoSuchKey {
                key: request.source_key.clone(),
            }),
            staged => staged.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_copied_by_azure_up_to_its_limit_while_it_can() {
        // (part length, Put Block From URL taken, how)
        let cases = [
            (0, true, BlockCopy::Streamed),
            (1, true, BlockCopy::FromUrl),
            (16 << 20, true, BlockCopy::FromUrl),
            (BLOCK_FROM_URL_MAX, true, BlockCopy::FromUrl),
            (BLOCK_FROM_URL_MAX + 1, true, BlockCopy::Streamed),
            (16 << 20, false, BlockCopy::Streamed),
        ];
        for (len, by_url, how) in cases {
            assert_eq!(BlockCopy::of(len, by_url), how, "{len} {by_url}");
        }
    }

    #[test]
    fn only_a_service_that_cannot_read_by_url_turns_it_off() {
        let service = |status, code: &str| StoreError::Service {
            status,
            code: code.into(),
            message: String::new(),
        };
        // (error, copies by URL no longer tried)
        let cases = [
            (service(501, "NotImplemented"), true),
            (service(500, "APINotImplemented"), true),
            (
                StoreError::AccessDenied(
                    "CannotVerifyCopySource: This request is not authorized".into(),
                ),
                true,
            ),
            (service(500, "InternalError"), false),
            (
                StoreError::AccessDenied("AuthorizationPermissionMismatch: no".into()),
                false,
            ),
            (StoreError::PreconditionFailed, false),
            (StoreError::Throttled { retry_after: None }, false),
        ];
        for (error, off) in cases {
            assert_eq!(cannot_copy_by_url(&error), off, "{error:?}");
        }
    }

    #[test]
    fn ranges_are_sent_closed() {
        let range = |start, end| Some(ByteRange { start, end });
        // (range, its length, header)
        let cases = [
            (None, 10, None),
            (range(0, Some(10)), 10, Some("bytes=0-9")),
            (range(3, None), 7, Some("bytes=3-9")),
            (range(5, Some(6)), 1, Some("bytes=5-5")),
        ];
        for (range, len, header) in cases {
            assert_eq!(range_header(range, len).as_deref(), header, "{range:?}");
        }
    }

    #[test]
    fn a_part_takes_its_range_or_the_whole_source() {
        let range = |start, end| Some(ByteRange { start, end });
        // (range, source size, length or refused)
        let cases = [
            (None, 10, Some(10)),
            (None, 0, Some(0)),
            (range(0, Some(10)), 10, Some(10)),
            (range(3, Some(7)), 10, Some(4)),
            (range(3, None), 10, Some(7)),
            (range(0, Some(11)), 10, None),
            (range(10, None), 10, None),
            (range(5, Some(5)), 10, None),
        ];
        for (range, size, expected) in cases {
            let got = part_len(range, size);
            match expected {
                Some(len) => assert_eq!(got.unwrap(), len, "{range:?} of {size}"),
                None => assert!(
                    matches!(got, Err(StoreError::InvalidRange)),
                    "{range:?} of {size}: {got:?}"
                ),
            }
        }
    }
}
