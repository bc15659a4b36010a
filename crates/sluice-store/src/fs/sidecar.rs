//! Metadata kept for a data file (content type, user metadata, the headers
//! of its settings, checksum).
//!
//! A data file's ETag is derived from its identity (inode, modification time and
//! size), which a rename keeps and any rewrite changes, and its sidecar is named
//! by that identity under `.sluice/sidecars/`. A new generation's sidecar is
//! written (durably) before its data file is renamed into place, so the file
//! visible at a key always selects its own sidecar: data and metadata change
//! together, and a crash at any point leaves at most an unused sidecar.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::tree::sync_dir_at;
use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::types::{Metadata, ObjectSettings};

/// What the sidecar file holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sidecar {
    pub etag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
    /// The headers of [`ObjectSettings`] (a directory store keeps no others).
    #[serde(default, flatten)]
    pub settings: ObjectSettings,
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

/// Where the sidecar of the data file with `etag` lives: named by the file's
/// identity, not by its key, so no key can collide with a sidecar, and writing a
/// new generation's sidecar never touches the one of the file still visible.
pub fn path_for(sidecars: &Path, etag: &str) -> PathBuf {
    let identity = etag.trim_matches('"');
    // Spread over 256 directories by the inode's last hex digits.
    let inode = identity.split('-').next().unwrap_or("0");
    let shard = &inode[inode.len().saturating_sub(2)..];
    sidecars.join(shard).join(format!("{identity}.json"))
}

/// Reads the sidecar of a data file whose ETag is `etag` (falling back to
/// `legacy`, where stores written before sidecars were named by identity kept
/// them); a missing, unreadable or stale sidecar reads as empty metadata.
pub fn read(sidecars: &Path, legacy: Option<&Path>, etag: &str) -> Sidecar {
    parse_at(&path_for(sidecars, etag), etag)
        .or_else(|| legacy.and_then(|path| parse_at(path, etag)))
        .unwrap_or_else(|| empty(etag))
}

/// Reads the sidecar at a fixed `path` (a part's), as [`read`] does.
pub fn read_at(path: &Path, etag: &str) -> Sidecar {
    parse_at(path, etag).unwrap_or_else(|| empty(etag))
}

fn parse_at(path: &Path, etag: &str) -> Option<Sidecar> {
    fs::read(path)
        .ok()
        .and_then(|raw| serde_json::from_slice::<Sidecar>(&raw).ok())
        .filter(|sidecar| sidecar.etag == etag)
}

fn empty(etag: &str) -> Sidecar {
    Sidecar {
        etag: etag.to_string(),
        ..Sidecar::default()
    }
}

/// Writes `contents` to `path` atomically: a staging file in `staging_dir`
/// (synced when `sync`), renamed into place, then the directory synced.
pub fn write_atomic(
    staging_dir: &Path,
    path: &Path,
    contents: &[u8],
    sync: bool,
) -> io::Result<()> {
    let staging = staging_dir.join(format!("{}.json", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = File::create(&staging)?;
        file.write_all(contents)?;
        if sync {
            file.sync_data()?;
        }
        let parent = path.parent().unwrap_or(staging_dir);
        fs::create_dir_all(parent)?;
        fs::rename(&staging, path)?;
        sync_dir_at(parent, sync)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&staging);
    }
    result
}

/// Writes the sidecar for the staged file `staged` (its ETag filled in) and
/// returns that ETag and the sidecar's path. The data file is renamed into place
/// after this, so a crash in between leaves the visible object with its own,
/// untouched sidecar.
pub fn write_for(
    staging_dir: &Path,
    sidecars: &Path,
    staged: &Path,
    mut sidecar: Sidecar,
    sync: bool,
) -> io::Result<(String, PathBuf)> {
    let etag = etag_of(&fs::metadata(staged)?);
    sidecar.etag = etag.clone();
    let json = serde_json::to_vec(&sidecar).map_err(io::Error::other)?;
    let path = path_for(sidecars, &etag);
    write_atomic(staging_dir, &path, &json, sync)?;
    Ok((etag, path))
}

/// Removes the sidecar of a data file that is gone (best effort: a leftover is
/// never read, as no live file has its identity).
pub fn remove_for(sidecars: &Path, etag: &str) {
    let _ = fs::remove_file(path_for(sidecars, etag));
}

/// Commits a staged part of a multipart upload with its sidecar, both at fixed
/// names in the upload's own directory: the sidecar first (tagged with the staged
/// file's ETag, so a stale one is ignored), then the data, each by rename.
pub fn commit_part(
    staging_dir: &Path,
    staged: &Path,
    part_path: &Path,
    sidecar_path: &Path,
    mut sidecar: Sidecar,
    sync: bool,
) -> io::Result<String> {
    let etag = etag_of(&fs::metadata(staged)?);
    sidecar.etag = etag.clone();
    let json = serde_json::to_vec(&sidecar).map_err(io::Error::other)?;
    write_atomic(staging_dir, sidecar_path, &json, sync)?;
    fs::rename(staged, part_path)?;
    sync_dir_at(staging_dir, sync)?;
    Ok(etag)
}
