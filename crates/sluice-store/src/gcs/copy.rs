//! Server-side copies on GCS: a whole object is rewritten (the JSON API's
//! `rewriteTo`, followed through its token, pinned to the source's
//! generation), into the key or into a part's object; a range of one streams
//! through this process into a part, GCS having no ranged copy. A source may
//! be in another bucket of the service.

use futures::{StreamExt, TryStreamExt};
use reqwest::Method;

use super::client::{header_text, Api, Call};
use super::errors::Context;
use super::resource::{self, Resource, RewriteAnswer, UPLOAD_ENTRY};
use super::{class_of, resource_fields, sizes_of, GcsStore, REWRITE_STEP};
use crate::error::StoreError;
use crate::rest::model;
use crate::types::*;

impl GcsStore {
    /// A copy source's full name: under the prefix in this bucket, as is in
    /// another.
    pub(super) fn source_name(&self, source: &CopySource<'_>) -> String {
        match source.bucket {
            Some(_) => source.key.to_string(),
            None => self.full(source.key),
        }
    }

    pub(super) fn source_context<'a>(&'a self, source: &CopySource<'a>) -> Context<'a> {
        Context {
            key: source.key,
            bucket: source.bucket.unwrap_or(self.client.bucket()),
        }
    }

    /// [`ObjectStore::copy_object`] of the source's generation now.
    pub(super) async fn copy_generation(
        &self,
        request: &CopyObjectRequest,
    ) -> Result<PutOutput, StoreError> {
        let from = CopySource {
            bucket: request.source_bucket.as_deref(),
            key: &request.source_key,
        };
        let source = self
            .source_resource(&from)
            .await?
            .ok_or_else(|| StoreError::NoSuchKey {
                key: request.source_key.clone(),
            })?;
        // As S3's CopyObject: the content type, headers, metadata and
        // checksum travel; the placement is what the copy asks for. The
        // upload that made the source is not this object's.
        let head = source.meta(&request.source_key);
        let (_, own) = resource::split_metadata(
            source
                .metadata
                .iter()
                .flatten()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        let own: Vec<(&str, String)> = own
            .iter()
            .filter(|(name, _)| name.as_str() != UPLOAD_ENTRY)
            .map(|(name, value)| (name.as_str(), value.clone()))
            .collect();
        let settings = ObjectSettings {
            storage_class: request.placement.storage_class.clone(),
            acl: request.placement.acl.clone(),
            encryption: request.placement.encryption.clone(),
            ..head.settings
        };
        let fields = resource_fields(
            head.content_type.as_deref(),
            &head.metadata,
            &settings,
            &own,
        )?;
        let name = self.full(&request.key);
        let made = self
            .rewrite(&from, Some(source.generation()), &name, fields)
            .await?;
        Ok(PutOutput {
            etag: made.etag(),
            checksum: made.meta(&request.key).checksum,
        })
    }

    /// Rewrites the whole of `source_key` into `name`, server-side: one call,
    /// or several for a rewrite GCS does in steps, each going on from the
    /// token the last one gave. `pinned`: only from that generation of the
    /// source, else `PreconditionFailed`.
    async fn rewrite(
        &self,
        source: &CopySource<'_>,
        pinned: Option<u64>,
        name: &str,
        destination: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Resource, StoreError> {
        let source_name = self.source_name(source);
        let destination = serde_json::Value::Object(destination);
        let mut token: Option<String> = None;
        loop {
            let mut call = source
                .in_bucket(Call::new(
                    Method::POST,
                    Api::Objects,
                    Some(&source_name),
                    self.source_context(source),
                ))
                .rewrite_to(self.client.bucket(), name)
                // Each call a bounded step: GCS rewrites across locations or
                // classes in steps, and a call must answer within the stall
                // timeout (same-location rewrites end in one call anyway).
                .query("maxBytesRewrittenPerCall", REWRITE_STEP.to_string());
            if let Some(generation) = pinned {
                // GCS answers 412 to the precondition; fake-gcs-server
                // ignores it and answers 404 for a generation it lacks.
                call = call
                    .query("sourceGeneration", generation.to_string())
                    .query("ifSourceGenerationMatch", generation.to_string());
            }
            if let Some(token) = &token {
                call = call.query("rewriteToken", token.clone());
            }
            let answer = match self.client.send(call.json(&destination)).await {
                Ok(answer) => answer,
                Err(e) if pinned.is_some() && e.is_not_found() => {
                    return Err(self.pinned_source_missing(source, pinned).await)
                }
                Err(e) => return Err(e),
            };
            let answer: RewriteAnswer = self.client.json(answer).await?;
            match (answer.done, answer.resource, answer.rewrite_token) {
                (true, Some(made), _) => return Ok(made),
                (false, _, Some(next)) if !next.is_empty() => token = Some(next),
                _ => {
                    return Err(StoreError::Service {
                        status: 200,
                        code: "UnreadableAnswer".into(),
                        message: "a rewrite answered neither its object nor a token to go on"
                            .into(),
                    })
                }
            }
        }
    }

    /// What a rewrite pinned to a generation that answered 404 ran into: the
    /// source gone (`NoSuchKey`), replaced (`PreconditionFailed`), or, with
    /// that generation still there, the destination's bucket.
    async fn pinned_source_missing(
        &self,
        source: &CopySource<'_>,
        pinned: Option<u64>,
    ) -> StoreError {
        match self.source_resource(source).await {
            Ok(None) => StoreError::NoSuchKey {
                key: source.key.to_string(),
            },
            Ok(Some(now)) if Some(now.generation()) != pinned => StoreError::PreconditionFailed,
            Ok(Some(_)) => StoreError::NoSuchBucket {
                bucket: self.client.bucket().to_string(),
            },
            Err(e) => e,
        }
    }

    /// The copy of `source` as a part: a whole object is rewritten into the
    /// part's object; a range streams from a download into the part's upload.
    pub(super) async fn copy_part(
        &self,
        request: &CopyPartRequest,
    ) -> Result<Resource, StoreError> {
        let from = CopySource {
            bucket: request.source_bucket.as_deref(),
            key: &request.source_key,
        };
        // Copied only from this generation, when the caller pins one (an
        // ETag sluice did not make names none: it matches nothing).
        let pinned = match &request.source_if_match {
            Some(etag) => {
                Some(resource::generation_of(etag).ok_or(StoreError::PreconditionFailed)?)
            }
            None => None,
        };
        if request.source_range.is_none() {
            let mut fields = serde_json::Map::new();
            if let Some(class) = class_of(&request.upload_id) {
                fields.insert("storageClass".into(), class.into());
            }
            let name = self.part_name(&request.key, &request.upload_id, request.part_number);
            let (record, made) = tokio::join!(
                self.check_record(&request.key, &request.upload_id),
                self.rewrite(&from, pinned, &name, fields)
            );
            record?;
            return made;
        }
        let source = self.source_name(&from);
        let mut call = from
            .in_bucket(Call::new(
                Method::GET,
                Api::Download,
                Some(&source),
                self.source_context(&from),
            ))
            .header("accept-encoding", "gzip");
        if let Some(range) = model::copy_range(request.source_range)? {
            call = call.header("range", range);
        }
        let answer = self.client.send(call.if_generation(pinned)).await?;
        // Checked on the answer too: fake-gcs-server serves any generation.
        let served = header_text(&answer, "x-goog-generation").and_then(|g| g.parse().ok());
        if pinned.is_some() && served != pinned {
            return Err(StoreError::PreconditionFailed);
        }
        let (size, len) = sizes_of(&answer);
        model::past_the_end(request.source_range, size)?;
        // The part's upload frames the bytes by their length.
        if header_text(&answer, "content-length").is_none() {
            return Err(StoreError::Service {
                status: answer.status().as_u16(),
                code: "NoContentLength".into(),
                message: "a download for a part copy came without its length".into(),
            });
        }
        let sent = self
            .client
            .body_stream(answer)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .boxed();
        self.upload_part_object(
            &request.key,
            &request.upload_id,
            request.part_number,
            serde_json::Map::new(),
            (sent, len),
        )
        .await
    }
}

/// The object a copy reads: in the store (its key under the prefix), or in
/// another bucket of the service (its name as is, as S3 takes a copy
/// source's key).
pub(super) struct CopySource<'a> {
    pub bucket: Option<&'a str>,
    pub key: &'a str,
}

impl<'a> CopySource<'a> {
    /// `call` sent to the source's bucket.
    pub(super) fn in_bucket(&self, call: Call<'a>) -> Call<'a> {
        match self.bucket {
            Some(bucket) => call.in_bucket(bucket),
            None => call,
        }
    }
}
