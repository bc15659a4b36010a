//! Metadata kept beside a data file (content type, user metadata, checksum), and
//! the atomic commit of a staged data file together with its sidecar.
//!
//! A data file's ETag is derived from its identity (inode, modification time and
//! size), which a rename keeps and any rewrite changes. Its sidecar records the
//! ETag it describes, so a reader that finds a sidecar of another generation (a
//! crash or a concurrent overwrite between the two renames) ignores it.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::types::Metadata;

/// What the sidecar file holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sidecar {
    pub etag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

impl Sidecar {
    pub fn checksum(&self) -> Option<Checksum> {
        Checksum::from_base64(self.checksum_algorithm?, self.checksum.as_deref()?)
    }

    pub fn set_checksum(&mut self, checksum: Option<Checksum>) {
        self.checksum_algorithm = checksum.map(|c| c.algorithm);
        self.checksum = checksum.map(|c| c.to_base64());
    }
}

/// The ETag of a data file: its identity, quoted as S3 quotes ETags.
pub fn etag_of(meta: &fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("\"{:x}-{:x}-{:x}\"", meta.ino(), mtime, meta.len())
}

/// Reads the sidecar of a data file whose ETag is `etag`; a missing, unreadable
/// or stale sidecar reads as empty metadata.
pub fn read(sidecar_path: &Path, etag: &str) -> Sidecar {
    let parsed = fs::read(sidecar_path)
        .ok()
        .and_then(|raw| serde_json::from_slice::<Sidecar>(&raw).ok());
    match parsed {
        Some(sidecar) if sidecar.etag == etag => sidecar,
        _ => Sidecar {
            etag: etag.to_string(),
            ..Sidecar::default()
        },
    }
}

/// Writes `contents` to `path` atomically (staging file in `staging_dir`, then rename).
pub fn write_atomic(staging_dir: &Path, path: &Path, contents: &[u8]) -> io::Result<()> {
    let staging = staging_dir.join(format!("{}.json", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = File::create(&staging)?;
        file.write_all(contents)?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::rename(&staging, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&staging);
    }
    result
}

/// Makes a staged data file visible at `data_path` with its sidecar: the sidecar
/// first (tagged with the staged file's ETag), then the data, each by rename.
/// Returns the ETag.
pub fn commit(
    staging_dir: &Path,
    staged: &Path,
    data_path: &Path,
    sidecar_path: &Path,
    mut sidecar: Sidecar,
) -> io::Result<String> {
    let etag = etag_of(&fs::metadata(staged)?);
    sidecar.etag = etag.clone();
    let json = serde_json::to_vec(&sidecar).map_err(io::Error::other)?;
    write_atomic(staging_dir, sidecar_path, &json)?;
    if let Some(parent) = data_path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::rename(staged, data_path)?;
    Ok(etag)
}
