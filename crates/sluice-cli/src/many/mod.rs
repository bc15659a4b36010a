//! Transfers of many files: `put DIR`, `get PREFIX/`, `cp` between prefixes and
//! `sync`. The jobs come from a directory walk or a store listing while it
//! goes (for `sync`, from both sides walked together in key order), a bounded
//! number ahead of the transfers ([`finish`]), so a million files never sit in
//! memory at once. [`run::run`] carries them out through one engine.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use futures::stream::BoxStream;
use futures::{SinkExt, Stream, StreamExt};
use sluice_store::{error_chain, ObjectStore, StoreError, StoreLocation};
use sluice_upload::{Engine, EngineConfig, SourceBucket};
use tokio_util::sync::CancellationToken;

use crate::args::{ManyArgs, StoreArgs, TransferArgs};
use crate::object::ObjectSpec;
use crate::target::Intent;
use crate::UsageError;
use filter::Filter;
use remote::Prefix;
use run::{Action, Job, Options, Output, Report};

/// Keys per batched delete.
const DELETE_BATCH: usize = 1000;
/// Batched deletes in flight.
const DELETES_IN_FLIGHT: usize = 4;
/// Local files a batch removes at once.
const FILE_REMOVALS_AT_ONCE: usize = 16;

/// One side of a transfer of many files.
pub enum Side {
    Directory(PathBuf),
    Store(Prefix),
}

impl Side {
    /// A command-line location as a directory or a prefix: `s3://bucket/p`
    /// is the prefix `p/`; a local path is a directory, or with `as_store` a
    /// prefix of the directory store it lies in (see
    /// [`crate::target::enclosing_store`]), opened for that intent.
    pub async fn open(
        location: &str,
        as_store: Option<Intent>,
        reach: &StoreArgs,
    ) -> anyhow::Result<Side> {
        match StoreLocation::parse(location).map_err(|e| UsageError(e.to_string()))? {
            StoreLocation::Bucket {
                service,
                bucket,
                rest,
            } => {
                let prefix = as_prefix(&rest);
                let store = crate::target::open_store(
                    StoreLocation::Bucket {
                        service,
                        bucket: bucket.clone(),
                        rest: String::new(),
                    },
                    reach,
                    Some(sluice_store::s3::S3Config::DEFAULT_STALL_TIMEOUT),
                )
                .await?;
                Ok(Side::Store(Prefix {
                    store,
                    service: Some(service),
                    display: format!("{}://{bucket}/{prefix}", service.scheme()),
                    bucket: Some(bucket),
                    prefix,
                }))
            }
            StoreLocation::Local(path) => {
                let Some(intent) = as_store else {
                    return Ok(Side::Directory(path));
                };
                let (root, prefix) = match crate::target::enclosing_store(&path)? {
                    Some((root, rest)) => (root, as_prefix(&rest)),
                    None => (path, String::new()),
                };
                if intent == Intent::Write {
                    crate::target::check_new_store(&root)?;
                }
                let store =
                    crate::target::open_store(StoreLocation::Local(root.clone()), reach, None)
                        .await?;
                Ok(Side::Store(Prefix {
                    store,
                    service: None,
                    bucket: None,
                    display: format!("{}/{prefix}", root.display()),
                    prefix,
                }))
            }
        }
    }
}

impl Side {
    /// A location as [`Side::open`] sees it without `as_store`, with the
    /// transfer flags' endpoint and region.
    pub async fn open_plain(location: &str, transfer: &TransferArgs) -> anyhow::Result<Side> {
        Side::open(location, None, &transfer.store).await
    }
}

impl Side {
    /// A location as a prefix of a store: a bucket's, or a directory store's.
    pub async fn open_store(
        location: &str,
        intent: Intent,
        reach: &StoreArgs,
    ) -> anyhow::Result<Prefix> {
        match Side::open(location, Some(intent), reach).await? {
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
    Ok(crate::batch::engine(store, config)?)
}

pub fn options(many: &ManyArgs, transfer: &TransferArgs, object: ObjectSpec) -> Options {
    Options {
        jobs: many.jobs,
        fail_fast: many.fail_fast,
        verbose: many.verbose,
        json: many.json,
        quiet: transfer.quiet,
        object: Arc::new(object),
        move_sources: many.move_sources,
        no_clobber: many.no_clobber,
        dry_run: many.dry_run,
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
    object: ObjectSpec,
    many: &ManyArgs,
    transfer: &TransferArgs,
) -> anyhow::Result<()> {
    let filter = Filter::of(many)?;
    refuse_local_overlap(dir, dest)?;
    if let Ok(StoreLocation::Local(_)) = StoreLocation::parse(dest) {
        object.check_for_directory_store()?;
    }
    let prefix = Side::open_store(dest, Intent::Write, &transfer.store).await?;
    let walk = walk(dir, filter).await?;
    let engine = engine(prefix.store.clone(), transfer, many)?;
    let roots = Arc::new(run::Roots {
        source: String::new(),
        target: prefix.root(),
    });
    let jobs = walk.map(move |found| match found {
        local::Found::File(file) => Ok(upload_job(file, &prefix, &roots)),
        local::Found::Skipped(skipped) => Ok(Listed::Skipped {
            file: skipped.path.display().to_string(),
            reason: skipped.reason,
        }),
    });
    let options = options(many, transfer, object);
    finish(&engine, "uploaded", jobs.boxed(), None, &options, None).await
}

/// `sluice get PREFIX/ DIR`.
pub async fn get_prefix(
    src: &str,
    dir: &Path,
    many: &ManyArgs,
    transfer: &TransferArgs,
) -> anyhow::Result<()> {
    let filter = Filter::of(many)?;
    refuse_local_overlap(dir, src)?;
    let prefix = Side::open_store(src, Intent::Read, &transfer.store).await?;
    let engine = engine(prefix.store.clone(), transfer, many)?;
    let listing = listing(&prefix, &engine, filter).await?;
    let roots = Arc::new(run::Roots {
        source: prefix.root(),
        target: String::new(),
    });
    let dir = dir.to_path_buf();
    let jobs = listing.map(move |object| Ok(download_job(object?, &prefix, &dir, &roots)));
    let options = options(many, transfer, ObjectSpec::default());
    finish(&engine, "downloaded", jobs.boxed(), None, &options, None).await
}

/// `sluice cp s3://a/p/ s3://b/q/`: every object under one prefix copied under
/// another by the service itself.
pub async fn copy_prefix(
    src: &str,
    dest: &str,
    object: ObjectSpec,
    many: &ManyArgs,
    transfer: &TransferArgs,
) -> anyhow::Result<()> {
    let filter = Filter::of(many)?;
    let (source, target) = store_pair(src, dest, transfer).await?;
    let engine = engine(target.store.clone(), transfer, many)?;
    let source_engine = self::engine(source.store.clone(), transfer, many)?;
    let listing = listing(&source, &source_engine, filter).await?;
    let source_bucket = source.copy_source_for(&target);
    let roots = Arc::new(run::Roots {
        source: source.root(),
        target: target.root(),
    });
    let jobs = listing.map(move |object| {
        Ok(Listed::Job(copy_job(
            object?,
            source_bucket.clone(),
            &target,
            &roots,
        )))
    });
    let options = options(many, transfer, object);
    finish(&engine, "copied", jobs.boxed(), None, &options, None).await
}

/// Refuses a directory and a directory store of which one holds the other:
/// the walk or listing, read while the run writes, would meet the run's own
/// files and take them again, one level deeper each time.
fn refuse_local_overlap(dir: &Path, store_location: &str) -> Result<(), UsageError> {
    let Ok(StoreLocation::Local(store)) = StoreLocation::parse(store_location) else {
        return Ok(());
    };
    let full = |path: &Path| {
        std::fs::canonicalize(path)
            .or_else(|_| std::path::absolute(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let (dir_full, store_full) = (full(dir), full(&store));
    match dir_full.starts_with(&store_full) || store_full.starts_with(&dir_full) {
        true => Err(UsageError(format!(
            "{} and {} overlap: one is inside the other",
            dir.display(),
            store.display()
        ))),
        false => Ok(()),
    }
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
            refuse_pair(&source, &target)?;
            Ok((source, target))
        }
        _ => Err(UsageError(format!(
            "{src} and {dest} must both be bucket locations here (s3://, az:// or gs://)"
        ))
        .into()),
    }
}

/// Refuses copies between two store prefixes that cannot be copied server-side
/// or would never end: prefixes on different services (a server-side copy
/// stays inside one; the target's store would read a key of the source's
/// bucket as its own), and prefixes of one bucket where one holds the other
/// (every run would copy the copies again, one level deeper).
pub fn refuse_pair(source: &Prefix, target: &Prefix) -> Result<(), UsageError> {
    if source.service != target.service {
        return Err(UsageError(format!(
            "{} and {} are on different services: copy with get, then put",
            source.display, target.display
        )));
    }
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

/// What a listing hands the run, one file at a time.
pub enum Listed {
    Job(Job),
    /// A file refused before any request: a failure of the run.
    Refused {
        file: String,
        reason: String,
    },
    /// A file a walk did not take: reported, not a failure.
    Skipped {
        file: String,
        reason: String,
    },
}

/// The files of a run as a listing finds them. An error ends the listing:
/// the run finishes what it started and fails with it.
pub type Feed = BoxStream<'static, anyhow::Result<Listed>>;

/// A feed of no file.
pub fn nothing() -> Feed {
    futures::stream::empty().boxed()
}

/// A feed of files already known.
pub fn known(listed: Vec<Listed>) -> Feed {
    futures::stream::iter(listed.into_iter().map(Ok)).boxed()
}

/// Jobs found but not yet started that a run holds at most: the listing runs
/// this far ahead of the transfers, so that the totals are known early and a
/// listing page's wait overlaps them.
const LOOKAHEAD: usize = 4096;

/// Files a walk finds ahead of the run's own [`LOOKAHEAD`].
const WALK_AHEAD: usize = 1024;

/// Walks `dir` on a thread of its own, [`WALK_AHEAD`] files ahead of its reader;
/// a root that cannot be read is an error here.
async fn walk(
    dir: &Path,
    filter: Filter,
) -> anyhow::Result<impl Stream<Item = local::Found> + Send + 'static> {
    let root = dir.to_path_buf();
    let walker = tokio::task::spawn_blocking(move || local::Walker::new(&root, filter))
        .await?
        .with_context(|| format!("cannot read {}", dir.display()))?;
    let (tx, rx) = tokio::sync::mpsc::channel(WALK_AHEAD);
    tokio::task::spawn_blocking(move || {
        for found in walker {
            if tx.blocking_send(found).is_err() {
                // The run has stopped.
                break;
            }
        }
    });
    Ok(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|found| (found, rx))
    }))
}

/// The objects under `prefix`, listed through `engine`'s retries one page
/// ahead of their use; one that cannot be listed at all is an error here.
pub async fn listing(
    prefix: &Prefix,
    engine: &Engine,
    filter: Filter,
) -> anyhow::Result<impl Stream<Item = anyhow::Result<remote::RemoteObject>> + Send + 'static> {
    let display = prefix.display.clone();
    let cannot_list =
        move |e: StoreError| anyhow::anyhow!("cannot list {display}: {}", error_chain(&e));
    let listing = prefix
        .listing(Arc::new(engine.retrying_store()), filter)
        .await
        .map_err(&cannot_list)?;
    Ok(listing.map(move |object| object.map_err(&cannot_list)))
}

/// The upload of a walk's file. A file whose key would fall under sluice's
/// own state (`_sluice/` at the bucket's root) is refused, as the gateway
/// refuses it.
pub fn upload_job(file: local::LocalFile, prefix: &Prefix, roots: &Arc<run::Roots>) -> Listed {
    let key = prefix.key(&file.relative);
    if sluice_store::is_reserved_key(&key) {
        return Listed::Refused {
            file: file.path.display().to_string(),
            reason: "the key is under _sluice/, which holds sluice's own state".to_string(),
        };
    }
    Listed::Job(Job {
        action: Action::Upload {
            path: file.path,
            key,
            modified: file.modified,
        },
        size: file.size,
        roots: roots.clone(),
    })
}

/// The download of a listed object into `dir`; refused when its key cannot
/// be a file there.
pub fn download_job(
    object: remote::RemoteObject,
    prefix: &Prefix,
    dir: &Path,
    roots: &Arc<run::Roots>,
) -> Listed {
    match local_path(dir, &object.relative) {
        Ok(path) => Listed::Job(Job {
            size: object.size,
            action: Action::Download {
                listed: object.into_summary(),
                path,
            },
            roots: roots.clone(),
        }),
        Err(reason) => Listed::Refused {
            file: prefix.show(&object.relative),
            reason,
        },
    }
}

/// The server-side copy of a listed object under `target`.
pub fn copy_job(
    object: remote::RemoteObject,
    source_bucket: Option<SourceBucket>,
    target: &Prefix,
    roots: &Arc<run::Roots>,
) -> Job {
    Job {
        action: Action::Copy {
            source_bucket,
            key: target.key(&object.relative),
            source_key: object.key,
            source_etag: object.etag,
        },
        size: object.size,
        roots: roots.clone(),
    }
}

/// What a run took from its feed besides the jobs.
#[derive(Default)]
struct Taken {
    /// Jobs handed to the run.
    jobs: u64,
    refused: Vec<(String, String)>,
    /// The error that ended the listing early.
    error: Option<anyhow::Error>,
}

/// Runs `consume` on the jobs of `feed`, which is read up to [`LOOKAHEAD`]
/// jobs ahead of it: refusals and skips are shown as they come, every job is
/// counted into the totals when found. Once `stop` is cancelled (a failure
/// with `--fail-fast`), the feed is read no further. `last`: no feed follows,
/// so the totals are final when this one ends.
async fn fed<Run, Ran>(
    mut feed: Feed,
    output: &Output,
    stop: &CancellationToken,
    last: bool,
    consume: Run,
) -> (Taken, Report)
where
    Run: FnOnce(futures::channel::mpsc::Receiver<Job>) -> Ran,
    Ran: std::future::Future<Output = Report>,
{
    let (mut jobs, to_run) = futures::channel::mpsc::channel(LOOKAHEAD);
    let take = async move {
        let mut taken = Taken::default();
        loop {
            let listed = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                listed = feed.next() => listed,
            };
            match listed {
                None => break,
                Some(Ok(Listed::Job(job))) => {
                    output.found(if job.action.is_removal() { 0 } else { job.size });
                    taken.jobs += 1;
                    if jobs.send(job).await.is_err() {
                        // The run has ended.
                        break;
                    }
                }
                Some(Ok(Listed::Refused { file, reason })) => {
                    output.refused(&file, &reason);
                    taken.refused.push((file, reason));
                }
                Some(Ok(Listed::Skipped { file, reason })) => output.skipped(&file, &reason),
                Some(Err(error)) => {
                    taken.error = Some(error);
                    break;
                }
            }
        }
        if last {
            output.listed_all();
        }
        taken
    };
    let (taken, mut report) = futures::join!(take, consume(to_run));
    // Jobs found but never started: only after a failure with --fail-fast.
    let started = report.files + report.failures.len() as u64 + report.cancelled;
    report.cancelled += taken.jobs.saturating_sub(started);
    (taken, report)
}

/// Runs the jobs of `transfers` (no removals), then the removals of
/// `removals` in batches, prints the summary and the failures (refused files
/// among them), and fails when any file failed or a listing broke off.
pub async fn finish(
    engine: &Engine,
    verb: &str,
    transfers: Feed,
    removals: Option<Feed>,
    options: &Options,
    unchanged: Option<&AtomicU64>,
) -> anyhow::Result<()> {
    if options.dry_run {
        return dry_run(verb, transfers, removals, options, unchanged).await;
    }
    let output = Output::new(options);
    let started = std::time::Instant::now();
    let stop = CancellationToken::new();
    let work = async {
        let (mut taken, mut report) = fed(transfers, &output, &stop, removals.is_none(), |jobs| {
            run::run(engine, jobs, options, &output, &stop)
        })
        .await;
        let Some(removals) = removals else {
            return (taken, report);
        };
        if taken.error.is_some() || stop.is_cancelled() {
            // Nothing more after a failure, deletions included.
            return (taken, report);
        }
        let (deleting, deleted) = fed(removals, &output, &stop, true, |jobs| {
            remove(engine, jobs, &output)
        })
        .await;
        report.removed += deleted.files;
        report.failures.extend(deleted.failures);
        taken.refused.extend(deleting.refused);
        taken.error = deleting.error;
        (taken, report)
    };
    let interrupted = "interrupted: the files finished before are stored; \
        those in flight were abandoned (their multipart uploads aborted)";
    let (taken, mut report) = crate::interruptible_saying(engine, work, interrupted).await?;
    report.elapsed = started.elapsed();
    output.finish();
    report.failures.splice(0..0, taken.refused);
    let unchanged = unchanged.map(|count| count.load(Ordering::Relaxed));
    output.summary(verb, &report, unchanged);
    engine.finish_background().await;
    match taken.error {
        Some(error) => {
            Err(error
                .context("the run stopped part way: the files not listed by then were not done"))
        }
        None => failures(&report),
    }
}

/// Prints every change a run would make (a line each, and a count), and
/// makes none.
async fn dry_run(
    verb: &str,
    mut transfers: Feed,
    removals: Option<Feed>,
    options: &Options,
    unchanged: Option<&AtomicU64>,
) -> anyhow::Result<()> {
    let output = Output::new(&Options {
        quiet: true,
        ..options.clone()
    });
    let (mut files, mut bytes, mut deletes) = (0u64, 0u64, 0u64);
    while let Some(listed) = transfers.next().await {
        match listed? {
            Listed::Job(job) => {
                output.finished(&job, None, true);
                files += 1;
                bytes += job.size;
            }
            Listed::Refused { file, reason } => eprintln!("sluice: {file}: {reason}"),
            Listed::Skipped { file, reason } => output.skipped(&file, &reason),
        }
    }
    let removing = removals.is_some();
    let mut removals = removals.unwrap_or_else(nothing);
    while let Some(listed) = removals.next().await {
        if let Listed::Job(job) = listed? {
            output.finished(&job, None, true);
            deletes += 1;
        }
    }
    let action = match verb {
        "uploaded" => "upload",
        "downloaded" => "download",
        _ => "copy",
    };
    let mut text = format!(
        "dry run: {files} to {action} ({})",
        sluice_upload::format_size(bytes)
    );
    if options.move_sources {
        text += ", each source then removed";
    }
    if removing {
        text += &format!(", {deletes} to delete");
    }
    if let Some(unchanged) = unchanged {
        text += &format!(", {} unchanged", unchanged.load(Ordering::Relaxed));
    }
    crate::output::out!("{text}; nothing changed");
    Ok(())
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

/// Carries out removals as they come, in batches: the keys of
/// [`Action::RemoveKey`] jobs with one request a batch (DeleteObjects on S3),
/// the files of [`Action::RemoveFile`] jobs one by one; reports each.
pub async fn remove(engine: &Engine, jobs: impl Stream<Item = Job>, output: &Output) -> Report {
    let started = std::time::Instant::now();
    let store = engine.retrying_store();
    let mut report = Report::default();
    let results = jobs
        .chunks(DELETE_BATCH)
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
                let removed = match keys.is_empty() {
                    true => Ok(Vec::new()),
                    false => store.delete_objects(&keys).await,
                };
                let removed = &removed;
                let errors: Vec<Option<String>> = futures::stream::iter(&batch)
                    .map(|job| async move {
                        match (&job.action, removed) {
                            (Action::RemoveKey { .. }, Err(error)) => Some(error_chain(error)),
                            (Action::RemoveKey { key }, Ok(failed)) => failed
                                .iter()
                                .find(|f| &f.key == key)
                                .map(|f| f.reason.clone()),
                            (Action::RemoveFile { path }, _) => tokio::fs::remove_file(path)
                                .await
                                .err()
                                .map(|e| format!("cannot remove it: {e}")),
                            _ => Some("not a removal".to_string()),
                        }
                    })
                    .buffered(FILE_REMOVALS_AT_ONCE)
                    .collect()
                    .await;
                (batch, errors)
            }
        })
        .buffer_unordered(DELETES_IN_FLIGHT);
    futures::pin_mut!(results);
    while let Some((batch, errors)) = results.next().await {
        for (job, error) in batch.iter().zip(errors) {
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

    /// Store-to-store copies stay inside one service and never copy into
    /// themselves.
    #[test]
    fn a_copy_between_services_or_into_itself_is_refused() {
        use sluice_store::Service::{Azure, Gcs, S3};
        let prefix = |service, bucket: &str, prefix: &str| Prefix {
            store: Arc::new(sluice_testkit::MemoryStore::new()),
            service: Some(service),
            bucket: Some(bucket.to_string()),
            prefix: prefix.to_string(),
            display: format!("{}://{bucket}/{prefix}", service.scheme()),
        };
        // (source, target, refused with)
        let cases = [
            (prefix(S3, "a", "x/"), prefix(S3, "a", "y/"), None),
            (prefix(S3, "a", "x/"), prefix(S3, "b", "x/"), None),
            (prefix(Gcs, "a", ""), prefix(Gcs, "b", ""), None),
            (
                prefix(S3, "a", "x/"),
                prefix(S3, "a", "x/y/"),
                Some("overlap"),
            ),
            (
                prefix(Azure, "a", "x/"),
                prefix(Azure, "a", ""),
                Some("overlap"),
            ),
            (
                prefix(S3, "data", "x/"),
                prefix(Gcs, "data", "y/"),
                Some("different services"),
            ),
            (
                prefix(S3, "a", ""),
                prefix(Azure, "c", ""),
                Some("different services"),
            ),
        ];
        for (source, target, refused) in cases {
            let said = refuse_pair(&source, &target).err().map(|e| e.0);
            match (refused, &said) {
                (None, None) => {}
                (Some(why), Some(said)) => assert!(said.contains(why), "{said}"),
                _ => panic!("{} -> {}: {said:?}", source.display, target.display),
            }
        }
    }

    /// Jobs name their ends from the run's roots as the prefixes name them.
    #[test]
    fn jobs_name_their_ends_as_their_prefixes_do() {
        let prefix = |display: &str, prefix: &str| Prefix {
            store: Arc::new(sluice_testkit::MemoryStore::new()),
            service: None,
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
        let job = |listed: Listed| match listed {
            Listed::Job(job) => job,
            _ => panic!("refused"),
        };
        for side in [&bucket, &nested, &local] {
            let up_roots = Arc::new(run::Roots {
                source: String::new(),
                target: side.root(),
            });
            let up = job(upload_job(file("a/x y.txt"), side, &up_roots));
            assert_eq!(up.source(), "/src/a/x y.txt");
            assert_eq!(up.target(), side.show("a/x y.txt"));
            let down_roots = Arc::new(run::Roots {
                source: side.root(),
                target: String::new(),
            });
            let down = job(download_job(
                object(side, "a/b"),
                side,
                Path::new("/dst"),
                &down_roots,
            ));
            assert_eq!(down.source(), side.show("a/b"));
            assert_eq!(down.target(), "/dst/a/b");
            assert_eq!(down.subject(), side.show("a/b"));
            let copy_roots = Arc::new(run::Roots {
                source: side.root(),
                target: nested.root(),
            });
            let copy = copy_job(object(side, "c"), None, &nested, &copy_roots);
            assert_eq!(copy.source(), side.show("c"));
            assert_eq!(copy.target(), nested.show("c"));
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

    /// Four files at once, no output but failures.
    fn quiet_options(fail_fast: bool) -> Options {
        Options {
            jobs: 4,
            fail_fast,
            verbose: false,
            json: false,
            quiet: true,
            object: Default::default(),
            move_sources: false,
            no_clobber: false,
            dry_run: false,
        }
    }

    /// The upload job of the file `name` under `dir` (written first when it
    /// `exists`, left missing otherwise).
    fn upload_of(prefix: &Prefix, dir: &std::path::Path, name: &str, exists: bool) -> Listed {
        let path = dir.join(name);
        if exists {
            std::fs::write(&path, name).unwrap();
        }
        let file = local::LocalFile {
            relative: name.to_string(),
            path,
            size: name.len() as u64,
            modified: std::time::SystemTime::now(),
        };
        upload_job(file, prefix, &Arc::new(run::Roots::default()))
    }

    /// A memory store holding `count` one-byte objects `p/00000`, ...
    async fn store_of_keys(count: usize) -> Arc<sluice_testkit::MemoryStore> {
        let store = Arc::new(sluice_testkit::MemoryStore::new());
        for i in 0..count {
            let put = sluice_store::PutRequest::new(format!("p/{i:05}"), b"x".to_vec());
            store.put_object(put).await.unwrap();
        }
        store
    }

    fn memory_prefix(store: &Arc<sluice_testkit::MemoryStore>, prefix: &str) -> Prefix {
        Prefix {
            store: store.clone(),
            service: None,
            bucket: None,
            prefix: prefix.to_string(),
            display: format!("mem/{prefix}"),
        }
    }

    /// A listing reads one page ahead of the one being used, never more,
    /// and gives the keys in order, without folder markers or other prefixes.
    #[tokio::test]
    async fn a_listing_reads_one_page_ahead() {
        let store = Arc::new(sluice_testkit::MemoryStore::new());
        let mut keys: Vec<String> = (0..3500).map(|i| format!("p/{i:05}")).collect();
        keys.extend(["p/dir/".to_string(), "q/other".to_string()]);
        for key in &keys {
            let put = sluice_store::PutRequest::new(key.clone(), b"x".to_vec());
            store.put_object(put).await.unwrap();
        }
        let prefix = memory_prefix(&store, "p/");
        let mut listing = prefix.listing(store.clone(), Filter::all()).await.unwrap();
        // The reader task runs when this one waits; once it has read what it
        // may, it waits for a page to be taken up, however long this one does.
        let lists_settled_at = |expected: u64| {
            let store = store.clone();
            async move {
                for _ in 0..1000 {
                    tokio::task::yield_now().await;
                }
                assert_eq!(store.calls("list"), expected);
            }
        };
        lists_settled_at(2).await;
        let mut seen = Vec::new();
        // (keys taken, pages read once the reader has caught up): a page is
        // taken up with its first key; the fourth page is the last.
        for (count, pages) in [(1000, 2), (1, 3), (999, 3), (1, 4), (1499, 4)] {
            for _ in 0..count {
                seen.push(listing.next().await.unwrap().unwrap().key);
            }
            lists_settled_at(pages).await;
        }
        assert!(listing.next().await.is_none());
        assert_eq!(seen, keys[..3500]);
    }

    /// A listing dropped part way reads no more pages: its reader stops
    /// waiting for a slot, and a request under way is dropped with it.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_listing_reads_no_more_pages() {
        use sluice_testkit::{Fault, FaultyStore, Op};
        let memory = store_of_keys(5000).await;
        let prefix = memory_prefix(&memory, "p/");
        let settle = || async {
            for _ in 0..1000 {
                tokio::task::yield_now().await;
            }
        };
        // Dropped while the reader waits for a slot.
        let listing = prefix.listing(memory.clone(), Filter::all()).await.unwrap();
        settle().await;
        assert_eq!(memory.calls("list"), 2);
        drop(listing);
        settle().await;
        assert_eq!(memory.calls("list"), 2, "a page read after the drop");

        // Dropped while the reader's request hangs: the third page's, for an
        // hour (paused time: it ends once nothing else can run, unless it
        // was dropped).
        let faulty = FaultyStore::new(memory.clone());
        faulty.inject_nth(
            Op::List,
            3,
            Fault::Delay(std::time::Duration::from_secs(3600)),
        );
        let mut listing = prefix
            .listing(Arc::new(faulty), Filter::all())
            .await
            .unwrap();
        for _ in 0..1001 {
            listing.next().await.unwrap().unwrap();
        }
        settle().await;
        assert_eq!(memory.calls("list"), 4, "two pages of each listing");
        drop(listing);
        tokio::time::sleep(std::time::Duration::from_secs(7200)).await;
        assert_eq!(
            memory.calls("list"),
            4,
            "the hanging request went on after the drop"
        );
    }

    /// A panic in the listing's reader (a bug in a store's parser, say) goes
    /// on in whoever reads the listing: it never looks like its end.
    #[tokio::test]
    async fn a_panic_while_listing_is_not_the_listings_end() {
        let memory = store_of_keys(2500).await;
        let faulty = sluice_testkit::FaultyStore::new(memory.clone());
        faulty.inject_nth(sluice_testkit::Op::List, 2, sluice_testkit::Fault::Panics);
        let prefix = memory_prefix(&memory, "p/");
        let listing = prefix
            .listing(Arc::new(faulty), Filter::all())
            .await
            .unwrap();
        let read =
            futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(listing.count())).await;
        let panic = read.expect_err("the listing ended as if complete");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("injected"), "{message}");
    }

    /// A listing that breaks off: the files found before it are done, the run
    /// fails saying so, and nothing after the break is started.
    #[tokio::test]
    async fn a_listing_that_breaks_off_fails_the_run_after_what_it_found() {
        let store = Arc::new(sluice_testkit::MemoryStore::new());
        let prefix = memory_prefix(&store, "up/");
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| upload_of(&prefix, dir.path(), name, true);
        let feed = futures::stream::iter(vec![
            Ok(file("a")),
            Ok(file("b")),
            Err(anyhow::anyhow!("cannot list mem/up/: page 2 refused")),
            Ok(file("c")),
        ])
        .boxed();
        let engine = Engine::new(store.clone(), EngineConfig::default()).unwrap();
        let options = quiet_options(false);
        let error = finish(&engine, "uploaded", feed, None, &options, None)
            .await
            .unwrap_err();
        let error = format!("{error:#}");
        assert!(
            error.contains("stopped part way") && error.contains("page 2 refused"),
            "{error}"
        );
        assert_eq!(store.object("up/a").as_deref(), Some(&b"a"[..]));
        assert_eq!(store.object("up/b").as_deref(), Some(&b"b"[..]));
        assert_eq!(store.object("up/c"), None);
    }

    /// After a failure with --fail-fast, the feed is read no further: a walk
    /// or listing with more to give (here, one that never ends) does not
    /// keep the run going.
    #[tokio::test]
    async fn fail_fast_stops_reading_the_feed() {
        let store = Arc::new(sluice_testkit::MemoryStore::new());
        let prefix = memory_prefix(&store, "up/");
        let first = upload_of(
            &prefix,
            std::path::Path::new("/nonexistent/sluice"),
            "gone",
            false,
        );
        let feed = futures::stream::iter(vec![Ok(first)])
            .chain(futures::stream::pending())
            .boxed();
        let engine = Engine::new(store.clone(), EngineConfig::default()).unwrap();
        let options = quiet_options(true);
        let finished = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            finish(&engine, "uploaded", feed, None, &options, None),
        )
        .await
        .expect("the run must end once a file failed");
        let error = format!("{:#}", finished.unwrap_err());
        assert!(error.contains("1 file failed"), "{error}");
    }

    /// After a failure with --fail-fast, the files found and not done are
    /// counted as such (the feed here is known at once: all four are found
    /// before the first job runs).
    #[tokio::test]
    async fn fail_fast_counts_the_files_found_and_not_done() {
        let store = Arc::new(sluice_testkit::MemoryStore::new());
        let prefix = memory_prefix(&store, "up/");
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, exists: bool| upload_of(&prefix, dir.path(), name, exists);
        let feed = known(vec![
            file("gone", false),
            file("b", true),
            file("c", true),
            file("d", true),
        ]);
        let engine = Engine::new(store.clone(), EngineConfig::default()).unwrap();
        let options = Options {
            jobs: 1,
            ..quiet_options(true)
        };
        let (output, stop) = (Output::new(&options), CancellationToken::new());
        let (taken, report) = fed(feed, &output, &stop, true, |jobs| {
            run::run(&engine, jobs, &options, &output, &stop)
        })
        .await;
        assert_eq!(taken.jobs, 4);
        assert_eq!(
            (report.files, report.failures.len(), report.cancelled),
            (0, 1, 3)
        );
        assert_eq!(store.calls("put"), 0);
    }

    #[test]
    fn locations_become_prefixes() {
        for (rest, prefix) in [("", ""), ("p", "p/"), ("p/", "p/"), ("a/b", "a/b/")] {
            assert_eq!(as_prefix(rest), prefix);
        }
    }
}
