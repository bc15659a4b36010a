//! Transfers of many files: `put DIR`, `get PREFIX/`, `cp` between prefixes and
//! `sync`. Both sides are listed first (a directory walk, a store listing),
//! the jobs follow from them (for `sync`, from comparing them), and
//! [`run::run`] carries them out through one engine.
//!
//! A local side is a directory of plain files. A store side is a prefix of a
//! bucket, or of a directory store for `put DIR ./store/` and `get ./store/`.

pub mod filter;
pub mod local;
pub mod mtime;
pub mod remote;
pub mod run;
pub mod sync;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use sluice_store::{ObjectStore, StoreLocation};
use sluice_upload::{Engine, EngineConfig};

use crate::args::{ManyArgs, TransferArgs};
use crate::UsageError;
use filter::Filter;
use remote::Prefix;
use run::{Action, Job, Options, Output, Report};

/// Keys per batched delete.
const DELETE_BATCH: usize = 1000;
/// Batched deletes in flight.
const DELETES_IN_FLIGHT: usize = 4;

/// One side of a transfer of many files.
pub enum Side {
    Directory(PathBuf),
    Store(Prefix),
}

impl Side {
    /// A command-line location as a directory or a prefix: `s3://bucket/p`
    /// is the prefix `p/`; a local path is a directory, or with `as_store` a
    /// directory store.
    pub async fn open(
        location: &str,
        as_store: bool,
        endpoint: Option<String>,
        region: Option<String>,
    ) -> anyhow::Result<Side> {
        match StoreLocation::parse(location).map_err(|e| UsageError(e.to_string()))? {
            StoreLocation::S3 { bucket, rest } => {
                let prefix = as_prefix(&rest);
                let store = crate::target::connect_s3(
                    bucket.clone(),
                    String::new(),
                    endpoint,
                    region,
                    Some(sluice_store::s3::S3Config::DEFAULT_STALL_TIMEOUT),
                )
                .await;
                Ok(Side::Store(Prefix {
                    store: Arc::new(store),
                    display: format!("s3://{bucket}/{prefix}"),
                    bucket: Some(bucket),
                    prefix,
                }))
            }
            StoreLocation::Local(path) if as_store => {
                let store =
                    crate::target::open_store(StoreLocation::Local(path.clone()), None, None, None)
                        .await?;
                Ok(Side::Store(Prefix {
                    store,
                    bucket: None,
                    prefix: String::new(),
                    display: format!("{}/", path.display()),
                }))
            }
            StoreLocation::Local(path) => Ok(Side::Directory(path)),
        }
    }
}

impl Side {
    /// A location as [`Side::open`] sees it without `as_store`, with the
    /// transfer flags' endpoint and region.
    pub async fn open_plain(location: &str, transfer: &TransferArgs) -> anyhow::Result<Side> {
        Side::open(
            location,
            false,
            transfer.endpoint.clone(),
            transfer.region.clone(),
        )
        .await
    }
}

impl Side {
    /// A location as a prefix of a store: a bucket's, or a directory store's.
    pub async fn open_store(
        location: &str,
        endpoint: Option<String>,
        region: Option<String>,
    ) -> anyhow::Result<Prefix> {
        match Side::open(location, true, endpoint, region).await? {
            Side::Store(prefix) => Ok(prefix),
            Side::Directory(_) => unreachable!("as_store opens every location as a store"),
        }
    }
}

/// `rest` as a prefix: empty, or ending in `/`.
pub fn as_prefix(rest: &str) -> String {
    if rest.is_empty() || rest.ends_with('/') {
        rest.to_string()
    } else {
        format!("{rest}/")
    }
}

/// The engine for many files: the flags' settings, with store requests in
/// flight (listings and HEADs included) capped at the larger of `--jobs` and
/// the most transfers `--concurrency` allows.
pub fn engine(
    store: Arc<dyn ObjectStore>,
    transfer: &TransferArgs,
    many: &ManyArgs,
) -> anyhow::Result<Engine> {
    if many.jobs == 0 || many.jobs > 4096 {
        return Err(UsageError(format!("--jobs {} is outside 1..=4096", many.jobs)).into());
    }
    let config = EngineConfig {
        store_concurrency: Some(many.jobs.max(transfer.concurrency.tuning().max)),
        ..crate::engine_config(transfer)?
    };
    Ok(Engine::new(store, config)?)
}

pub fn options(many: &ManyArgs, transfer: &TransferArgs, content_type: Option<String>) -> Options {
    Options {
        jobs: many.jobs,
        fail_fast: many.fail_fast,
        verbose: many.verbose,
        json: many.json,
        quiet: transfer.quiet,
        content_type,
    }
}

/// The file a key relative to a prefix becomes under `root`. Keys that would
/// leave `root` or name no file (`..`, `.`, empty segments) are refused.
pub fn local_path(root: &Path, relative: &str) -> Result<PathBuf, String> {
    let mut path = root.to_path_buf();
    for segment in relative.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." || segment.contains('\0') {
            return Err(format!(
                "the key cannot be a file name under {}",
                root.display()
            ));
        }
        path.push(segment);
    }
    Ok(path)
}

/// `sluice put DIR DEST`.
pub async fn put_directory(
    dir: &Path,
    dest: &str,
    content_type: Option<String>,
    many: &ManyArgs,
    transfer: &TransferArgs,
) -> anyhow::Result<()> {
    let filter = Filter::new(&many.include, &many.exclude)?;
    let prefix = Side::open_store(dest, transfer.endpoint.clone(), transfer.region.clone()).await?;
    let walk = walk(dir, filter).await?;
    let (jobs, refused) = upload_jobs(walk.files, &prefix);
    let engine = engine(prefix.store.clone(), transfer, many)?;
    let options = options(many, transfer, content_type);
    finish(&engine, "uploaded", jobs, refused, &options, None).await
}

/// `sluice get PREFIX/ DIR`.
pub async fn get_prefix(
    src: &str,
    dir: &Path,
    many: &ManyArgs,
    transfer: &TransferArgs,
) -> anyhow::Result<()> {
    let filter = Filter::new(&many.include, &many.exclude)?;
    let prefix = Side::open_store(src, transfer.endpoint.clone(), transfer.region.clone()).await?;
    let engine = engine(prefix.store.clone(), transfer, many)?;
    let objects = prefix
        .list(&engine.retrying_store(), &filter)
        .await
        .with_context(|| format!("cannot list {}", prefix.display))?;
    let (jobs, refused) = download_jobs(objects, &prefix, dir);
    let options = options(many, transfer, None);
    finish(&engine, "downloaded", jobs, refused, &options, None).await
}

/// `sluice cp s3://a/p/ s3://b/q/`: every object under one prefix copied under
/// another by the service itself.
pub async fn copy_prefix(
    src: &str,
    dest: &str,
    many: &ManyArgs,
    transfer: &TransferArgs,
) -> anyhow::Result<()> {
    let filter = Filter::new(&many.include, &many.exclude)?;
    let (source, target) = store_pair(src, dest, transfer).await?;
    let engine = engine(target.store.clone(), transfer, many)?;
    let source_engine = self::engine(source.store.clone(), transfer, many)?;
    let objects = source
        .list(&source_engine.retrying_store(), &filter)
        .await
        .with_context(|| format!("cannot list {}", source.display))?;
    let jobs = copy_jobs(objects, &source, &target);
    let options = options(many, transfer, None);
    finish(&engine, "copied", jobs, Vec::new(), &options, None).await
}

/// Both sides of a bucket-to-bucket command.
pub async fn store_pair(
    src: &str,
    dest: &str,
    transfer: &TransferArgs,
) -> anyhow::Result<(Prefix, Prefix)> {
    let (source, target) = (
        Side::open_plain(src, transfer).await?,
        Side::open_plain(dest, transfer).await?,
    );
    match (source, target) {
        (Side::Store(source), Side::Store(target)) => {
            refuse_nested(&source, &target)?;
            Ok((source, target))
        }
        _ => Err(UsageError(format!(
            "{src} and {dest} must both be s3:// locations here"
        ))
        .into()),
    }
}

/// Refuses a copy between prefixes of one bucket where one holds the other:
/// every run would copy the copies again, one level deeper.
pub fn refuse_nested(source: &Prefix, target: &Prefix) -> Result<(), UsageError> {
    let nested = source.bucket == target.bucket
        && (target.prefix.starts_with(&source.prefix) || source.prefix.starts_with(&target.prefix));
    match nested {
        true => Err(UsageError(format!(
            "{} and {} overlap: one is inside the other",
            source.display, target.display
        ))),
        false => Ok(()),
    }
}

async fn walk(dir: &Path, filter: Filter) -> anyhow::Result<local::Walk> {
    let root = dir.to_path_buf();
    let walk = tokio::task::spawn_blocking(move || local::walk(&root, &filter))
        .await?
        .with_context(|| format!("cannot read {}", dir.display()))?;
    for skipped in &walk.skipped {
        eprintln!(
            "sluice: skipped {}: {}",
            skipped.path.display(),
            skipped.reason
        );
    }
    Ok(walk)
}

/// Upload jobs, made from the walk's files as they go (a job takes its
/// file's path over). A file whose key would fall under sluice's own state
/// (`_sluice/` at the bucket's root) is refused, as the gateway refuses it.
pub fn upload_jobs(
    files: Vec<local::LocalFile>,
    prefix: &Prefix,
) -> (Vec<Job>, Vec<(String, String)>) {
    let roots = Arc::new(run::Roots {
        source: String::new(),
        target: prefix.root(),
    });
    let mut jobs = Vec::with_capacity(files.len());
    let mut refused = Vec::new();
    for file in files {
        let key = prefix.key(&file.relative);
        if sluice_store::is_reserved_key(&key) {
            let reason = "the key is under _sluice/, which holds sluice's own state".to_string();
            refused.push((file.path.display().to_string(), reason));
            continue;
        }
        jobs.push(Job {
            action: Action::Upload {
                path: file.path,
                key,
                modified: file.modified,
            },
            size: file.size,
            roots: roots.clone(),
        });
    }
    (jobs, refused)
}

/// Download jobs, made from the listing as they go, and the objects whose
/// keys cannot be files under `dir` (reported as failures).
pub fn download_jobs(
    objects: Vec<remote::RemoteObject>,
    prefix: &Prefix,
    dir: &Path,
) -> (Vec<Job>, Vec<(String, String)>) {
    let roots = Arc::new(run::Roots {
        source: prefix.root(),
        target: String::new(),
    });
    let mut jobs = Vec::with_capacity(objects.len());
    let mut refused = Vec::new();
    for object in objects {
        match local_path(dir, &object.relative) {
            Ok(path) => jobs.push(Job {
                size: object.size,
                action: Action::Download {
                    listed: object.into_summary(),
                    path,
                },
                roots: roots.clone(),
            }),
            Err(reason) => refused.push((prefix.show(&object.relative), reason)),
        }
    }
    (jobs, refused)
}

pub fn copy_jobs(objects: Vec<remote::RemoteObject>, source: &Prefix, target: &Prefix) -> Vec<Job> {
    let source_bucket = source.copy_source_for(target);
    let roots = Arc::new(run::Roots {
        source: source.root(),
        target: target.root(),
    });
    objects
        .into_iter()
        .map(|object| Job {
            action: Action::Copy {
                source_bucket: source_bucket.clone(),
                key: target.key(&object.relative),
                source_key: object.key,
                source_etag: object.etag,
            },
            size: object.size,
            roots: roots.clone(),
        })
        .collect()
}

/// Runs `jobs`, prints the summary and the failures (with `refused`, files
/// refused before any request), and fails when any file failed.
pub async fn finish(
    engine: &Engine,
    verb: &str,
    jobs: Vec<Job>,
    refused: Vec<(String, String)>,
    options: &Options,
    unchanged: Option<u64>,
) -> anyhow::Result<()> {
    let (removals, transfers): (Vec<Job>, Vec<Job>) = jobs
        .into_iter()
        .partition(|job| matches!(job.action, Action::RemoveKey { .. }));
    let files = (transfers.len() + removals.len() + refused.len()) as u64;
    let bytes = transfers.iter().map(|j| j.size).sum();
    let output = Output::new(options, files, bytes);
    for (file, reason) in &refused {
        output.refused(file, reason);
    }
    let work = async {
        let mut report = run::run(engine, transfers, options, &output).await;
        if options.fail_fast && !report.failures.is_empty() {
            // Nothing more after a failure, deletions included.
            report.cancelled += removals.len() as u64;
            return report;
        }
        let deleted = delete_keys(engine, removals, &output).await;
        report.files += deleted.files;
        report.failures.extend(deleted.failures);
        report
    };
    let interrupted = "interrupted: the files finished before are stored; \
        those in flight were abandoned (their multipart uploads aborted)";
    let mut report = crate::interruptible_saying(engine, work, interrupted).await?;
    output.finish();
    report.failures.splice(0..0, refused);
    output.summary(verb, &report, unchanged);
    engine.finish_background().await;
    failures(&report)
}

/// An error listing the failed files, when there are any.
pub fn failures(report: &Report) -> anyhow::Result<()> {
    if report.failures.is_empty() {
        return Ok(());
    }
    let shown = 20;
    let mut message = format!(
        "{} file{} failed:",
        report.failures.len(),
        if report.failures.len() == 1 { "" } else { "s" }
    );
    for (file, reason) in report.failures.iter().take(shown) {
        message += &format!("\n  {file}: {reason}");
    }
    if report.failures.len() > shown {
        message += &format!("\n  … and {} more", report.failures.len() - shown);
    }
    Err(anyhow::anyhow!(message))
}

/// Removes the keys of [`Action::RemoveKey`] jobs in batches (DeleteObjects on
/// S3), reporting each key.
pub async fn delete_keys(engine: &Engine, jobs: Vec<Job>, output: &Output) -> Report {
    use futures::StreamExt;
    let started = std::time::Instant::now();
    let store = engine.retrying_store();
    let batches: Vec<Vec<Job>> = jobs.chunks(DELETE_BATCH).map(<[Job]>::to_vec).collect();
    let mut report = Report::default();
    let results = futures::stream::iter(batches)
        .map(|batch| {
            let store = &store;
            async move {
                let keys: Vec<String> = batch
                    .iter()
                    .filter_map(|job| match &job.action {
                        Action::RemoveKey { key } => Some(key.clone()),
                        _ => None,
                    })
                    .collect();
                let result = store.delete_objects(&keys).await;
                (batch, keys, result)
            }
        })
        .buffer_unordered(DELETES_IN_FLIGHT);
    futures::pin_mut!(results);
    while let Some((batch, keys, result)) = results.next().await {
        for (job, key) in batch.iter().zip(&keys) {
            let error = match &result {
                Err(error) => Some(sluice_store::error_chain(error)),
                Ok(failed) => failed
                    .iter()
                    .find(|f| &f.key == key)
                    .map(|f| f.reason.clone()),
            };
            output.finished(job, error.as_deref(), false);
            match error {
                Some(error) => report.failures.push((job.subject(), error)),
                None => report.files += 1,
            }
        }
    }
    report.elapsed = started.elapsed();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_paths_under_the_root_only() {
        let root = Path::new("/dest");
        let cases = [
            ("a.txt", Ok("/dest/a.txt")),
            ("a/b/c.txt", Ok("/dest/a/b/c.txt")),
            ("x y+z", Ok("/dest/x y+z")),
            ("../evil", Err(())),
            ("a/../../evil", Err(())),
            ("a//b", Err(())),
            ("/abs", Err(())),
            ("./a", Err(())),
            ("a/", Err(())),
        ];
        for (relative, expected) in cases {
            let got = local_path(root, relative)
                .map(|p| p.display().to_string())
                .map_err(drop);
            assert_eq!(got, expected.map(str::to_string), "{relative}");
        }
    }

    /// Jobs name their ends from the run's roots as the prefixes name them.
    #[test]
    fn jobs_name_their_ends_as_their_prefixes_do() {
        let prefix = |display: &str, prefix: &str| Prefix {
            store: Arc::new(sluice_testkit::MemoryStore::new()),
            bucket: None,
            prefix: prefix.to_string(),
            display: display.to_string(),
        };
        let (bucket, nested, local) = (
            prefix("s3://b/", ""),
            prefix("s3://b/p/q/", "p/q/"),
            prefix("/srv/store/", ""),
        );
        let file = |relative: &str| local::LocalFile {
            relative: relative.to_string(),
            path: Path::new("/src").join(relative),
            size: 1,
            modified: std::time::SystemTime::UNIX_EPOCH,
        };
        let object = |side: &Prefix, relative: &str| remote::RemoteObject {
            relative: relative.to_string(),
            key: side.key(relative),
            size: 1,
            etag: "e".into(),
            last_modified: std::time::SystemTime::UNIX_EPOCH,
        };
        for side in [&bucket, &nested, &local] {
            let (up, refused) = upload_jobs(vec![file("a/x y.txt")], side);
            assert!(refused.is_empty());
            assert_eq!(up[0].source(), "/src/a/x y.txt");
            assert_eq!(up[0].target(), side.show("a/x y.txt"));
            let (down, _) = download_jobs(vec![object(side, "a/b")], side, Path::new("/dst"));
            assert_eq!(down[0].source(), side.show("a/b"));
            assert_eq!(down[0].target(), "/dst/a/b");
            assert_eq!(down[0].subject(), side.show("a/b"));
            let copies = copy_jobs(vec![object(side, "c")], side, &nested);
            assert_eq!(copies[0].source(), side.show("c"));
            assert_eq!(copies[0].target(), nested.show("c"));
        }
        let removal = Job {
            action: Action::RemoveKey {
                key: "p/q/gone".into(),
            },
            size: 0,
            roots: Arc::new(run::Roots {
                source: String::new(),
                target: nested.root(),
            }),
        };
        assert_eq!(removal.source(), "");
        assert_eq!(removal.subject(), "s3://b/p/q/gone");
    }

    #[test]
    fn locations_become_prefixes() {
        for (rest, prefix) in [("", ""), ("p", "p/"), ("p/", "p/"), ("a/b", "a/b/")] {
            assert_eq!(as_prefix(rest), prefix);
        }
    }
}
