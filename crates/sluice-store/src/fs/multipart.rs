//! Multipart uploads in the directory store. An upload is a directory
//! `ROOT/.sluice/uploads/ID/` holding `upload.json` (key, content type, metadata,
//! checksum algorithm) and one file per part, `NNNNN.part`, with a sidecar
//! `NNNNN.json` for its checksum. Parts are staged in the same directory and
//! renamed into place, so they may arrive in any order and in parallel. Completing
//! concatenates the parts into a staging file (with `copy_file_range`, no copy
//! through user space) and renames it into place; aborting removes the directory.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::refuse_bucket_only;
use super::sidecar::{self, Sidecar};
use super::{BodySource, Inner};
use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::error::StoreError;
use crate::limits::{self, MAX_PARTS, MIN_PART_SIZE};
use crate::types::*;

#[derive(Debug, Serialize, Deserialize)]
struct UploadRecord {
    key: String,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default, flatten)]
    settings: ObjectSettings,
    #[serde(default)]
    checksum_algorithm: Option<ChecksumAlgorithm>,
}

fn part_stem(part_number: u32) -> String {
    format!("{part_number:05}")
}

impl Inner {
    fn upload_dir(&self, upload_id: &str) -> Result<PathBuf, StoreError> {
        let valid = !upload_id.is_empty()
            && upload_id.len() <= 64
            && upload_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid {
            return Err(StoreError::NoSuchUpload {
                upload_id: upload_id.to_string(),
            });
        }
        Ok(self.uploads.join(upload_id))
    }

    fn load_upload(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<(PathBuf, UploadRecord), StoreError> {
        let dir = self.upload_dir(upload_id)?;
        let no_such = || StoreError::NoSuchUpload {
            upload_id: upload_id.to_string(),
        };
        let raw = fs::read(dir.join("upload.json")).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => no_such(),
            _ => StoreError::Io(e),
        })?;
        let record: UploadRecord = serde_json::from_slice(&raw).map_err(|_| no_such())?;
        if record.key != key {
            return Err(no_such());
        }
        Ok((dir, record))
    }

    pub(super) fn create_upload_blocking(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        // A key the tree cannot hold is refused now, not after its parts.
        self.tree.check_room(&request.key)?;
        refuse_bucket_only(&request.settings)?;
        self.make_bookkeeping()?;
        let upload_id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.uploads.join(&upload_id);
        fs::create_dir(&dir)?;
        super::tree::sync_dir_at(&self.uploads, self.fsync)?;
        let record = UploadRecord {
            key: request.key,
            content_type: request.content_type,
            metadata: request.metadata,
            settings: request.settings,
            checksum_algorithm: request.checksum_algorithm,
        };
        let json = serde_json::to_vec(&record).map_err(io::Error::other)?;
        sidecar::write_atomic(&dir, &dir.join("upload.json"), &json, self.fsync)?;
        Ok(upload_id)
    }

    pub(super) fn upload_part_blocking(
        &self,
        request: UploadPartRequest,
    ) -> Result<UploadedPart, StoreError> {
        let size = request.body.len();
        self.store_part(
            &request.key,
            &request.upload_id,
            request.part_number,
            BodySource::Body(&request.body),
            size,
            &request.checksum,
        )
    }

    /// Stages `source` (`size` bytes) as part `part_number` of an upload and
    /// renames it into place with its checksum's sidecar.
    fn store_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: u32,
        source: BodySource<'_>,
        size: u64,
        checksum: &PartChecksum,
    ) -> Result<UploadedPart, StoreError> {
        if !(1..=MAX_PARTS).contains(&part_number) {
            return Err(StoreError::InvalidPart(format!(
                "part number {part_number} is outside 1..=10000"
            )));
        }
        let (dir, record) = self.load_upload(key, upload_id)?;
        let staging = dir.join(format!("{}.staging", uuid::Uuid::new_v4().simple()));
        let algorithm = checksum.algorithm().or(record.checksum_algorithm);
        let computed = self.stage(&staging, source, checksum.known(), algorithm)?;
        let stem = part_stem(part_number);
        let mut part_sidecar = Sidecar::default();
        part_sidecar.set_checksum(computed);
        let etag = sidecar::commit_part(
            &dir,
            &staging,
            &dir.join(format!("{stem}.part")),
            &dir.join(format!("{stem}.json")),
            part_sidecar,
            self.fsync,
        )
        .map_err(|e| {
            let _ = fs::remove_file(&staging);
            match e.kind() {
                // The upload directory vanished: aborted meanwhile.
                io::ErrorKind::NotFound => StoreError::NoSuchUpload {
                    upload_id: upload_id.to_string(),
                },
                _ => StoreError::Io(e),
            }
        })?;
        Ok(UploadedPart {
            part_number,
            etag,
            size,
            checksum: computed,
        })
    }

    /// A part copied file to file from an object or a range of it: streamed through a small
    /// buffer, never held in memory.
    pub(super) fn copy_part_blocking(
        &self,
        request: CopyPartRequest,
    ) -> Result<UploadedPart, StoreError> {
        if request.source_bucket.is_some() {
            return Err(StoreError::Unsupported("copies from another bucket"));
        }
        let mut source = self.tree.open_object(&request.source_key)?;
        let stat = source.metadata()?;
        if let Some(expected) = &request.source_if_match {
            if !super::etag_eq(expected, &sidecar::etag_of(&stat)) {
                return Err(StoreError::PreconditionFailed);
            }
        }
        let whole = stat.len();
        let size = match request.source_range {
            None => whole,
            Some(range) => {
                let past_end = range.end.is_some_and(|end| end > whole);
                let (start, end) = range.resolve(whole).filter(|_| !past_end).ok_or_else(|| {
                    StoreError::InvalidPart(format!(
                        "copy range {range:?} is outside {} ({whole} bytes)",
                        request.source_key
                    ))
                })?;
                std::io::Seek::seek(&mut source, std::io::SeekFrom::Start(start))?;
                end - start
            }
        };
        if size > limits::MAX_PART_SIZE {
            return Err(StoreError::InvalidPart(format!(
                "{} is {size} bytes, over the 5 GiB part limit",
                request.source_key,
            )));
        }
        self.store_part(
            &request.key,
            &request.upload_id,
            request.part_number,
            BodySource::Open(source, size),
            size,
            &PartChecksum::None,
        )
    }

    fn stored_parts(&self, dir: &Path) -> Result<Vec<UploadedPart>, StoreError> {
        let mut parts = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(number) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".part"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = entry.metadata() else { continue };
            let etag = sidecar::etag_of(&stat);
            let part_sidecar =
                sidecar::read_at(&dir.join(format!("{}.json", part_stem(number))), &etag);
            parts.push(UploadedPart {
                part_number: number,
                etag,
                size: stat.len(),
                checksum: part_sidecar.checksum(),
            });
        }
        parts.sort_by_key(|p| p.part_number);
        Ok(parts)
    }

    pub(super) fn list_parts_blocking(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        let (dir, _) = self.load_upload(key, upload_id)?;
        self.stored_parts(&dir)
    }

    pub(super) fn complete_blocking(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        let (dir, record) = self.load_upload(&request.key, &request.upload_id)?;
        if request.parts.is_empty() {
            return Err(StoreError::InvalidPart(
                "a multipart upload needs at least one part".into(),
            ));
        }
        if request
            .parts
            .windows(2)
            .any(|w| w[0].part_number >= w[1].part_number)
        {
            return Err(StoreError::InvalidPart(
                "parts must be listed in ascending order of part number".into(),
            ));
        }
        let stored = self.stored_parts(&dir)?;
        let mut chosen = Vec::with_capacity(request.parts.len());
        for (index, wanted) in request.parts.iter().enumerate() {
            let found = stored
                .iter()
                .find(|p| {
                    p.part_number == wanted.part_number && super::etag_eq(&p.etag, &wanted.etag)
                })
                .ok_or_else(|| {
                    StoreError::InvalidPart(format!(
                        "part {} with ETag {} was not uploaded",
                        wanted.part_number, wanted.etag
                    ))
                })?;
            if index + 1 < request.parts.len() && found.size < MIN_PART_SIZE {
                return Err(StoreError::EntityTooSmall);
            }
            chosen.push(found.clone());
        }

        let object_checksum = match record.checksum_algorithm {
            None => None,
            Some(algorithm) => {
                if let Some(part) = chosen.iter().find(|p| p.checksum.is_none()) {
                    return Err(StoreError::InvalidPart(format!(
                        "part {} has no {algorithm} checksum",
                        part.part_number
                    )));
                }
                Checksum::combine_in_order(chosen.iter().map(|p| (p.checksum, p.size)))
            }
        };
        if let (Some(expected), Some(actual)) = (request.checksum, object_checksum) {
            if expected != actual {
                return Err(StoreError::ChecksumMismatch {
                    algorithm: expected.algorithm.name(),
                });
            }
        }

        let staging = self.new_staging_path()?;
        let assembled = (|| -> io::Result<()> {
            let mut out = File::create(&staging)?;
            for part in &chosen {
                let mut input =
                    File::open(dir.join(format!("{}.part", part_stem(part.part_number))))?;
                io::copy(&mut input, &mut out)?;
            }
            if self.fsync {
                out.sync_data()?;
            }
            Ok(())
        })();
        if let Err(e) = assembled {
            let _ = fs::remove_file(&staging);
            return Err(e.into());
        }
        let mut object_sidecar = Sidecar {
            content_type: record.content_type,
            metadata: record.metadata,
            settings: record.settings,
            ..Sidecar::default()
        };
        object_sidecar.set_checksum(object_checksum);
        // The condition is checked under the key's lock, as the object becomes visible.
        let etag = self.commit(
            &request.key,
            &staging,
            object_sidecar,
            request.condition.as_ref(),
        )?;
        let _ = fs::remove_dir_all(&dir);
        Ok(PutOutput {
            etag,
            checksum: object_checksum,
        })
    }

    pub(super) fn abort_blocking(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        let (dir, _) = self.load_upload(key, upload_id)?;
        // A part being staged concurrently can make one pass fail with ENOTEMPTY.
        let mut last = Ok(());
        for _ in 0..5 {
            last = fs::remove_dir_all(&dir);
            if last.is_ok() || !dir.exists() {
                return Ok(());
            }
        }
        last.map_err(StoreError::Io)
    }

    pub(super) fn list_uploads_blocking(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        let mut uploads = Vec::new();
        let entries = match fs::read_dir(&self.uploads) {
            Ok(entries) => entries,
            // A store nothing was written to has no uploads directory yet.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(uploads),
            Err(e) => return Err(e.into()),
        };
        for entry in entries {
            let entry = entry?;
            let Ok(raw) = fs::read(entry.path().join("upload.json")) else {
                continue;
            };
            let Ok(record) = serde_json::from_slice::<UploadRecord>(&raw) else {
                continue;
            };
            if !record.key.starts_with(prefix) {
                continue;
            }
            uploads.push(MultipartUploadInfo {
                key: record.key,
                upload_id: entry.file_name().to_string_lossy().into_owned(),
                initiated: entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .or(Some(SystemTime::now())),
            });
        }
        uploads.sort_by(|a, b| a.key.cmp(&b.key).then(a.upload_id.cmp(&b.upload_id)));
        Ok(uploads)
    }
}
