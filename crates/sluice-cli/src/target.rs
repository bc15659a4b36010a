//! Opens stores, and resolves the locations on a command line into a store and a key: `s3://bucket/key`
//! opens the S3 backend; a local path opens the directory store rooted at the
//! path's directory, with the file name as the key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_store::fs::{FsConfig, FsStore};
use sluice_store::s3::{S3Config, S3Store};
use sluice_store::{ObjectStore, StoreLocation};

use crate::args::TransferArgs;
use crate::UsageError;

/// A store and a key in it.
pub struct Target {
    pub store: Arc<dyn ObjectStore>,
    pub key: String,
    /// How to name it in messages.
    pub display: String,
}

/// The destination of `put`. A key ending in `/` (or a local directory) takes
/// the source file's name.
pub async fn for_put(
    dest: &str,
    src: &Path,
    transfer: &TransferArgs,
) -> Result<Target, anyhow::Error> {
    let file_name = || -> Result<String, UsageError> {
        if src.as_os_str() == "-" {
            return Err(UsageError(format!(
                "{dest:?} names no key; give a full key when uploading standard input"
            )));
        }
        src.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| {
                UsageError(format!(
                    "{} has no UTF-8 file name to use as the key",
                    src.display()
                ))
            })
    };
    match StoreLocation::parse(dest).map_err(|e| UsageError(e.to_string()))? {
        StoreLocation::S3 { bucket, rest } => {
            let key = if rest.is_empty() || rest.ends_with('/') {
                format!("{rest}{}", file_name()?)
            } else {
                rest
            };
            s3_target(bucket, key, transfer).await
        }
        StoreLocation::Local(path) => {
            let (root, key) = if path.is_dir() || dest.ends_with('/') {
                (path, file_name()?)
            } else {
                split_local(&path)?
            };
            local_target(root, key).await
        }
    }
}

/// The source of `get`.
pub async fn for_get(src: &str, transfer: &TransferArgs) -> Result<Target, anyhow::Error> {
    match StoreLocation::parse(src).map_err(|e| UsageError(e.to_string()))? {
        StoreLocation::S3 { bucket, rest } => {
            if rest.is_empty() || rest.ends_with('/') {
                return Err(UsageError(format!(
                    "{src:?} names no object (expected s3://bucket/key)"
                ))
                .into());
            }
            s3_target(bucket, rest, transfer).await
        }
        StoreLocation::Local(path) => {
            let (root, key) = split_local(&path)?;
            local_target(root, key).await
        }
    }
}

fn split_local(path: &Path) -> Result<(PathBuf, String), UsageError> {
    let key = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| UsageError(format!("{} has no UTF-8 file name", path.display())))?
        .to_string();
    let root = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((root, key))
}

/// Opens the store a location names: a bucket (with `prefix` before every key)
/// through the AWS chain, or a directory. Shared by the transfer commands and
/// `sluice serve`.
pub async fn open_store(
    location: StoreLocation,
    endpoint: Option<String>,
    region: Option<String>,
    stall_timeout: Option<std::time::Duration>,
) -> Result<Arc<dyn ObjectStore>, anyhow::Error> {
    match location {
        StoreLocation::S3 { bucket, rest } => Ok(Arc::new(
            connect_s3(bucket, rest, endpoint, region, stall_timeout).await,
        )),
        StoreLocation::Local(root) => {
            let store = FsStore::open(FsConfig::new(&root)).map_err(|e| {
                anyhow::anyhow!("cannot open the directory store at {}: {e}", root.display())
            })?;
            Ok(Arc::new(store))
        }
    }
}

/// A bucket (with `prefix` before every key) through the AWS chain.
pub async fn connect_s3(
    bucket: String,
    prefix: String,
    endpoint: Option<String>,
    region: Option<String>,
    stall_timeout: Option<std::time::Duration>,
) -> S3Store {
    let mut config = S3Config::new(bucket);
    config.prefix = prefix;
    config.endpoint = endpoint;
    config.region = region;
    config.stall_timeout = stall_timeout;
    S3Store::connect(config).await
}

async fn s3_target(
    bucket: String,
    key: String,
    transfer: &TransferArgs,
) -> Result<Target, anyhow::Error> {
    let location = StoreLocation::S3 {
        bucket: bucket.clone(),
        rest: String::new(),
    };
    let store = open_store(
        location,
        transfer.endpoint.clone(),
        transfer.region.clone(),
        Some(S3Config::DEFAULT_STALL_TIMEOUT),
    )
    .await?;
    Ok(Target {
        display: format!("s3://{bucket}/{key}"),
        store,
        key,
    })
}

async fn local_target(root: PathBuf, key: String) -> Result<Target, anyhow::Error> {
    let store = open_store(StoreLocation::Local(root.clone()), None, None, None).await?;
    Ok(Target {
        display: root.join(&key).display().to_string(),
        store,
        key,
    })
}
