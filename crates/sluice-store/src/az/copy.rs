//! The Azure store's server-side copies, each of the source as one HEAD
//! found it (its ETag pinned with `x-ms-source-if-match`), from this
//! container or another of the account:
//! - a whole object: Copy Blob, followed with HEADs while Azure answers
//!   `pending`; properties and metadata travel with the bytes;
//! - a part (a range, or the whole): Put Block From URL, Azure reading the
//!   source itself by a read SAS this store signs (unlike Copy Blob, it takes
//!   no authority from the request's Shared Key). A part longer than Azure
//!   copies in one such request ([`BLOCK_FROM_URL_MAX`]), or empty, streams
//!   through this process as a Put Block.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use reqwest::Method;

use super::client::{header_text, Call};
use super::errors::Context;
use super::{property_headers, quoted, AzureStore};
use crate::error::StoreError;
use crate::rest::model;
use crate::types::*;

/// The most one Put Block From URL copies (Azure's limit, 100 MiB).
pub(super) const BLOCK_FROM_URL_MAX: u64 = 100 * 1024 * 1024;

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
    /// How a part of `len` bytes is copied.
    fn of(len: u64) -> BlockCopy {
        match len {
            1..=BLOCK_FROM_URL_MAX => BlockCopy::FromUrl,
            // Azure stages no empty block from a URL.
            _ => BlockCopy::Streamed,
        }
    }
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
        let range = model::copy_range(request.source_range)?;
        let etag = quoted(&found.etag);
        match BlockCopy::of(len) {
            BlockCopy::FromUrl => {
                let url = self.client.readable_source_url(
                    source.container,
                    &source.name,
                    SOURCE_SAS_LIFETIME,
                )?;
                let name = self.full(&request.key);
                let mut call = Call::new(Method::PUT, Some(&name), self.context(&request.key))
                    .query("comp", "block")
                    .query("blockid", block)
                    .header("x-ms-copy-source", url)
                    .header("x-ms-source-if-match", etag);
                if let Some(range) = range {
                    call = call.header("x-ms-source-range", range);
                }
                let (record, staged) = tokio::join!(
                    self.check_record(&request.key, &request.upload_id),
                    self.client.send(call)
                );
                record?;
                match staged {
                    // Blocks need no blob: what is missing is the source
                    // (a missing container says so by name).
                    Err(StoreError::NoSuchKey { .. }) => Err(StoreError::NoSuchKey {
                        key: request.source_key.clone(),
                    }),
                    staged => staged.map(|_| len),
                }
            }
            BlockCopy::Streamed => {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_copied_by_azure_up_to_its_limit() {
        // (part length, how)
        let cases = [
            (0, BlockCopy::Streamed),
            (1, BlockCopy::FromUrl),
            (16 << 20, BlockCopy::FromUrl),
            (BLOCK_FROM_URL_MAX, BlockCopy::FromUrl),
            (BLOCK_FROM_URL_MAX + 1, BlockCopy::Streamed),
        ];
        for (len, how) in cases {
            assert_eq!(BlockCopy::of(len), how, "{len}");
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
