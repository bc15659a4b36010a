//! Opens stores, and resolves the locations on a command line into a store and a key: `s3://bucket/key`
//! opens the S3 backend; a local path opens the directory store it lies in
//! (the nearest directory at or above it holding `.sluice/`, as git finds its
//! repository), with the rest of the path as the key; a path in no store
//! opens its directory as one, made only where it adds no bookkeeping to a
//! directory of other files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_store::fs::{FsConfig, FsStore};
use sluice_store::s3::{S3Config, S3Store};
use sluice_store::{ObjectStore, Service, StoreLocation};

use crate::args::{StoreArgs, TransferArgs};
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
        StoreLocation::Bucket {
            service,
            bucket,
            rest,
        } => {
            let key = if rest.is_empty() || rest.ends_with('/') {
                format!("{rest}{}", file_name()?)
            } else {
                rest
            };
            bucket_target(service, bucket, key, &transfer.reach()).await
        }
        StoreLocation::Local(path) => {
            let names_dir = path.is_dir() || dest.ends_with('/');
            let (root, key) = match enclosing_store(&path)? {
                Some((root, rest)) if names_dir && rest.is_empty() => (root, file_name()?),
                Some((root, rest)) if names_dir => (root, format!("{rest}/{}", file_name()?)),
                Some((root, rest)) => (root, rest),
                None if names_dir => (path, file_name()?),
                None => split_local(&path)?,
            };
            local_target(root, key, Intent::Write).await
        }
    }
}

/// What a command does with a directory store it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Reads or removes: a plain directory of files opens as a store and
    /// stays as it was (the bookkeeping is made by the first write).
    Read,
    /// Writes: a directory that is no store becomes one only when it is new
    /// or empty, never by adding `.sluice/` beside files of other programs.
    Write,
}

/// The directory store a local path lies in: the nearest directory at or
/// above it (the path made absolute, `.` and `..` taken as written) holding
/// `.sluice/`, and the rest of the path, `/`-joined (empty for the root
/// itself). None when no directory above holds one.
pub fn enclosing_store(path: &Path) -> Result<Option<(PathBuf, String)>, UsageError> {
    use std::path::Component;
    let absolute =
        std::path::absolute(path).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    let mut base = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => base.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(part) => parts.push(part),
        }
    }
    for depth in (0..=parts.len()).rev() {
        let root: PathBuf = base.iter().chain(parts[..depth].iter().copied()).collect();
        if !is_store_root(&root) {
            continue;
        }
        let mut rest = String::new();
        for part in &parts[depth..] {
            let part = part.to_str().ok_or_else(|| {
                UsageError(format!(
                    "{} is not UTF-8: it cannot be a key",
                    path.display()
                ))
            })?;
            if !rest.is_empty() {
                rest.push('/');
            }
            rest.push_str(part);
        }
        // Found from where the user stands: `./store`, not `/home/me/store`.
        let shown = match path.is_absolute() {
            true => root,
            false => relative_to_cwd(&root).unwrap_or(root),
        };
        return Ok(Some((shown, rest)));
    }
    Ok(None)
}

/// Whether `dir` holds a store's bookkeeping that this user may trust: a
/// real `.sluice` directory (not a link to one) of the user's own, so that
/// another user's `/tmp/.sluice` does not make `/tmp/x` part of their store
/// (the trap git closed for its `.git`).
pub fn is_store_root(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(dir.join(sluice_store::fs::INTERNAL_DIR)) {
        Ok(meta) => meta.is_dir() && meta.uid() == rustix::process::getuid().as_raw(),
        Err(_) => false,
    }
}

/// `root` relative to the working directory when it lies within it.
fn relative_to_cwd(root: &Path) -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    let inner = root.strip_prefix(&cwd).ok()?;
    Some(match inner.as_os_str().is_empty() {
        true => PathBuf::from("."),
        false => Path::new(".").join(inner),
    })
}

/// Refuses to write into `root` as a new store when it already holds files
/// of its own: `sluice put f copy.txt` in a project directory must not leave
/// `./.sluice/` there.
pub fn check_new_store(root: &Path) -> Result<(), UsageError> {
    if is_store_root(root) {
        return Ok(());
    }
    let holds_files = match std::fs::read_dir(root) {
        Ok(mut entries) => entries.next().is_some(),
        Err(_) => false,
    };
    match holds_files {
        false => Ok(()),
        true => Err(UsageError(format!(
            "{dir} is not a directory store (no .sluice/ in it or above it) and holds other files: \
sluice keeps its bookkeeping in a store's .sluice/, so it writes only into a store or a new, empty directory \
(make one with `sluice mb {dir}`, or copy plain files with cp(1))",
            dir = root.display()
        ))),
    }
}

/// The source of `get`, `cat`, `stat`, `presign`: one object.
pub async fn for_get(src: &str, reach: &StoreArgs) -> Result<Target, anyhow::Error> {
    match StoreLocation::parse(src).map_err(|e| UsageError(e.to_string()))? {
        StoreLocation::Bucket {
            service,
            bucket,
            rest,
        } => {
            if rest.is_empty() || rest.ends_with('/') {
                return Err(UsageError(format!(
                    "{src:?} names no object (expected {}://{}/key)",
                    service.scheme(),
                    service.bucket_word()
                ))
                .into());
            }
            bucket_target(service, bucket, rest, reach).await
        }
        StoreLocation::Local(path) => {
            let (root, key) = match enclosing_store(&path)? {
                Some((root, rest)) if !rest.is_empty() => (root, rest),
                _ => split_local(&path)?,
            };
            local_target(root, key, Intent::Read).await
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
    reach: &StoreArgs,
    stall_timeout: Option<std::time::Duration>,
) -> Result<Arc<dyn ObjectStore>, anyhow::Error> {
    let store = open_store_itself(location, reach, stall_timeout).await?;
    Ok(with_faults(store))
}

/// `store`, with a crash test's fault when one is set
/// (`SLUICE_FAULT_EXIT_AFTER_STORE_WRITES=N`, see
/// `sluice_store::exit_fault`: the process ends right after its N-th store
/// write).
pub fn with_faults(store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    match std::env::var("SLUICE_FAULT_EXIT_AFTER_STORE_WRITES")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        Some(at) => Arc::new(sluice_store::exit_fault::ExitAfterWrites::new(store, at)),
        None => store,
    }
}

async fn open_store_itself(
    location: StoreLocation,
    reach: &StoreArgs,
    stall_timeout: Option<std::time::Duration>,
) -> Result<Arc<dyn ObjectStore>, anyhow::Error> {
    match location {
        StoreLocation::Bucket {
            service: Service::S3,
            bucket,
            rest,
        } => Ok(Arc::new(
            connect_s3(bucket, rest, reach, stall_timeout).await,
        )),
        StoreLocation::Bucket {
            service: Service::Azure,
            bucket,
            rest,
        } => Ok(Arc::new(crate::azure::connect(
            bucket,
            rest,
            reach,
            stall_timeout,
        )?)),
        StoreLocation::Bucket {
            service: Service::Gcs,
            bucket,
            rest,
        } => Ok(Arc::new(crate::gcs::connect(
            bucket,
            rest,
            reach,
            stall_timeout,
        )?)),
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
    reach: &StoreArgs,
    stall_timeout: Option<std::time::Duration>,
) -> S3Store {
    let mut config = S3Config::new(bucket);
    config.prefix = prefix;
    config.endpoint = reach.endpoint.clone();
    config.region = reach.region.clone();
    config.profile = reach.profile.clone();
    config.unsigned = reach.no_sign_request;
    config.stall_timeout = stall_timeout;
    S3Store::connect(config).await
}

async fn bucket_target(
    service: Service,
    bucket: String,
    key: String,
    reach: &StoreArgs,
) -> Result<Target, anyhow::Error> {
    let location = StoreLocation::Bucket {
        service,
        bucket: bucket.clone(),
        rest: String::new(),
    };
    let store = open_store(location, reach, Some(S3Config::DEFAULT_STALL_TIMEOUT)).await?;
    Ok(Target {
        display: format!("{}://{bucket}/{key}", service.scheme()),
        store,
        key,
    })
}

async fn local_target(root: PathBuf, key: String, intent: Intent) -> Result<Target, anyhow::Error> {
    if intent == Intent::Write {
        check_new_store(&root)?;
    }
    let store = open_store(
        StoreLocation::Local(root.clone()),
        &StoreArgs::default(),
        None,
    )
    .await?;
    Ok(Target {
        display: root.join(&key).display().to_string(),
        store,
        key,
    })
}

impl crate::args::OpenStoreArgs {
    /// The store, its requests stalled past S3's default stall timeout retried.
    pub async fn open(&self) -> anyhow::Result<std::sync::Arc<dyn sluice_store::ObjectStore>> {
        self.location.open(&self.reach).await
    }
}

impl crate::args::StoreFlag {
    /// The store, reached as `reach` says.
    pub async fn open(
        &self,
        reach: &StoreArgs,
    ) -> anyhow::Result<std::sync::Arc<dyn sluice_store::ObjectStore>> {
        let location = sluice_store::StoreLocation::parse(&self.location)
            .map_err(|e| crate::UsageError(e.to_string()))?;
        crate::target::open_store(
            location,
            reach,
            Some(sluice_store::s3::S3Config::DEFAULT_STALL_TIMEOUT),
        )
        .await
    }
}
