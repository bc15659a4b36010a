//! Runs the jobs of a transfer of many files: up to `--jobs` files in flight
//! through one engine (one memory budget, one cap on store requests), a
//! progress line of totals, a line per file with `--verbose` or a JSON line per
//! file with `--json`, and the summary. A failed file does not stop the others
//! unless `--fail-fast`; then the files in flight are dropped (their multipart
//! uploads aborted) and no new one starts.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::{Stream, StreamExt};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice_store::{Metadata, ObjectMeta, ObjectSummary, StoreError, WriteCondition};
use sluice_upload::{
    format_size, CopyRequest, Engine, Progress, ProgressFn, SourceBucket, TransferError,
    UploadRequest, UploadSource,
};
use tokio_util::sync::CancellationToken;

use super::mtime;

/// What to do with one file or object.
#[derive(Debug, Clone)]
pub enum Action {
    /// A local file to a key, its modification time kept as metadata.
    Upload {
        path: PathBuf,
        key: String,
        modified: SystemTime,
    },
    /// An object to a local file, its modification time restored; the
    /// listing's entry spares small objects a HEAD.
    Download {
        listed: ObjectSummary,
        path: PathBuf,
    },
    /// An object copied inside the service, without its bytes passing here.
    Copy {
        source_bucket: Option<SourceBucket>,
        source_key: String,
        /// From the listing: a multipart copy copies only this version.
        source_etag: String,
        key: String,
    },
    /// A local file removed (`sync --delete` into a directory); run by
    /// [`super::remove`], not here.
    RemoveFile { path: PathBuf },
    /// A key removed; run in batches by [`super::remove`], not here.
    RemoveKey { key: String },
}

impl Action {
    /// The past tense, for lines and the summary.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Upload { .. } => "uploaded",
            Action::Download { .. } => "downloaded",
            Action::Copy { .. } => "copied",
            Action::RemoveFile { .. } | Action::RemoveKey { .. } => "deleted",
        }
    }

    /// A file or key removed: it moves no bytes.
    pub fn is_removal(&self) -> bool {
        matches!(self, Action::RemoveFile { .. } | Action::RemoveKey { .. })
    }

    /// The name in `--json` lines.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Upload { .. } => "upload",
            Action::Download { .. } => "download",
            Action::Copy { .. } => "copy",
            Action::RemoveFile { .. } | Action::RemoveKey { .. } => "delete",
        }
    }
}

/// One file's work. Up to 4,096 wait in a run at once: a job keeps only what
/// its action needs, and its names in lines and failures are made when shown.
#[derive(Debug, Clone)]
pub struct Job {
    pub action: Action,
    pub size: u64,
    /// Shared by the jobs of a run.
    pub roots: Arc<Roots>,
}

/// What a key is shown after, on each side: its store's root (`s3://bucket/`,
/// or a directory store's path and `/`); empty for a directory side, whose
/// files are shown by their paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roots {
    pub source: String,
    pub target: String,
}

impl Job {
    /// Where the bytes come from; empty for a removal.
    pub fn source(&self) -> String {
        match &self.action {
            Action::Upload { path, .. } => path.display().to_string(),
            Action::Download { listed, .. } => format!("{}{}", self.roots.source, listed.key),
            Action::Copy { source_key, .. } => format!("{}{source_key}", self.roots.source),
            Action::RemoveFile { .. } | Action::RemoveKey { .. } => String::new(),
        }
    }

    /// Where they go, or what is removed.
    pub fn target(&self) -> String {
        match &self.action {
            Action::Upload { key, .. } | Action::Copy { key, .. } | Action::RemoveKey { key } => {
                format!("{}{key}", self.roots.target)
            }
            Action::Download { path, .. } | Action::RemoveFile { path } => {
                path.display().to_string()
            }
        }
    }

    /// The file a failure is listed under: the source, or what a removal removes.
    pub fn subject(&self) -> String {
        match &self.action {
            Action::RemoveFile { .. } | Action::RemoveKey { .. } => self.target(),
            _ => self.source(),
        }
    }
}

/// How the jobs are run and shown.
#[derive(Debug, Clone)]
pub struct Options {
    pub jobs: usize,
    pub fail_fast: bool,
    pub verbose: bool,
    pub json: bool,
    pub quiet: bool,
    /// What uploaded objects are stored with.
    pub object: Arc<crate::object::ObjectSpec>,
    /// `mv`: remove each source once its copy is complete.
    pub move_sources: bool,
    /// `--no-clobber`: a target that exists is left alone (and the source of `mv` too).
    pub no_clobber: bool,
    /// `--dry-run`: the jobs are shown, not run.
    pub dry_run: bool,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    /// Files transferred (uploaded, downloaded or copied).
    pub files: u64,
    pub bytes: u64,
    /// Objects or files removed (`rm`, `sync --delete`).
    pub removed: u64,
    /// Targets `--no-clobber` left as they were.
    pub kept: u64,
    /// (file, reason) of each failure, in the order they happened.
    pub failures: Vec<(String, String)>,
    /// After a failure with `--fail-fast`: files dropped in flight, and those
    /// found but not started (files not yet listed are not counted).
    pub cancelled: u64,
    pub elapsed: Duration,
}

/// What one job ended with.
enum Ended {
    Done,
    /// `--no-clobber` and the target exists: nothing was sent.
    Kept,
    Failed(String),
    Cancelled,
}

/// What a job that did not fail did.
enum Executed {
    Transferred,
    /// `--no-clobber` found the target there.
    Kept,
}

/// The lines a run writes: per file, then the summary.
pub struct Output {
    options: Options,
    bar: Option<ProgressBar>,
    /// Files found so far, refused ones included.
    files_total: AtomicU64,
    /// The listing has ended: the totals are final.
    listed_all: AtomicBool,
    files_done: AtomicU64,
}

impl Output {
    /// An output with no file found yet: [`Output::found`] counts them as the
    /// listing goes, so the totals grow until [`Output::listed_all`].
    pub fn new(options: &Options) -> Output {
        let bar = (!options.quiet
            && !options.json
            && std::io::stderr().is_terminal()
            && !crate::batch::active())
        .then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
                )
                .expect("valid template"),
            );
            bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        let output = Output {
            options: options.clone(),
            bar,
            files_total: AtomicU64::new(0),
            listed_all: AtomicBool::new(false),
            files_done: AtomicU64::new(0),
        };
        output.show_count();
        output
    }

    /// A file to do was found, of `bytes` to move (none for a removal).
    pub fn found(&self, bytes: u64) {
        self.files_total.fetch_add(1, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.inc_length(bytes);
        }
        self.show_count();
    }

    /// Every file to do has been found.
    pub fn listed_all(&self) {
        self.listed_all.store(true, Ordering::Relaxed);
        self.show_count();
    }

    fn show_count(&self) {
        if let Some(bar) = &self.bar {
            let done = self.files_done.load(Ordering::Relaxed);
            let total = self.files_total.load(Ordering::Relaxed);
            let more = if self.listed_all.load(Ordering::Relaxed) {
                ""
            } else {
                "+"
            };
            bar.set_message(format!("files {done}/{total}{more}"));
        }
    }

    /// A file the walk did not take (not a failure: it is not in the run).
    pub fn skipped(&self, file: &str, reason: &str) {
        self.line(&format!("sluice: skipped {file}: {reason}"), true);
    }

    /// Advances the byte total by `bytes`.
    fn advance(&self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// A line above the progress bar.
    fn line(&self, text: &str, to_stderr: bool) {
        let print = || {
            if to_stderr {
                eprintln!("{text}");
            } else {
                crate::output::out!("{text}");
            }
        };
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Records a finished file: its line (`--verbose`, `--json`, or a failure).
    /// A job `--no-clobber` did not run: its target exists.
    pub fn kept(&self, job: &Job) {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.show_count();
        if self.options.json {
            let line = serde_json::json!({
                "op": job.action.name(),
                "source": job.source(),
                "target": job.target(),
                "size": job.size,
                "ok": true,
                "kept": true,
            });
            self.line(&line.to_string(), false);
        } else if self.options.verbose {
            self.line(&format!("kept {} (it exists)", job.target()), false);
        }
    }

    pub fn finished(&self, job: &Job, error: Option<&str>, dry_run: bool) {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.show_count();
        if self.options.json {
            let mut line = serde_json::json!({
                "op": job.action.name(),
                "source": job.source(),
                "target": job.target(),
                "size": job.size,
                "ok": error.is_none(),
            });
            if let Some(error) = error {
                line["error"] = error.into();
            }
            if dry_run {
                line["dry_run"] = true.into();
            }
            self.line(&line.to_string(), false);
            return;
        }
        if error.is_none() && !dry_run && !self.options.verbose {
            return;
        }
        let (source, target) = (job.source(), job.target());
        let what = if source.is_empty() {
            target
        } else {
            format!("{source} -> {target}")
        };
        match error {
            Some(error) => self.line(&format!("failed: {what}: {error}"), true),
            None if dry_run => self.line(
                &format!(
                    "would be {}: {what} ({})",
                    job.action.verb(),
                    format_size(job.size)
                ),
                false,
            ),
            None if self.options.verbose => self.line(
                &format!("{} {what} ({})", job.action.verb(), format_size(job.size)),
                false,
            ),
            None => {}
        }
    }

    /// Records a file refused before any request (`op` "refused" in JSON).
    pub fn refused(&self, file: &str, reason: &str) {
        self.files_total.fetch_add(1, Ordering::Relaxed);
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.show_count();
        if self.options.json {
            let line = serde_json::json!({
                "op": "refused", "source": file, "ok": false, "error": reason,
            });
            self.line(&line.to_string(), false);
        } else {
            self.line(&format!("failed: {file}: {reason}"), true);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// The summary: a line of text, or a `{"summary": …}` line with `--json`.
    pub fn summary(&self, verb: &str, report: &Report, unchanged: Option<u64>) {
        let seconds = report.elapsed.as_secs_f64().max(1e-9);
        let failed = report.failures.len();
        if self.options.json {
            let mut line = serde_json::json!({"summary": {
                "op": verb,
                // `rm`'s files are those it removed.
                "files": if verb == "deleted" { report.removed } else { report.files },
                "bytes": report.bytes,
                "deleted": report.removed,
                "kept": report.kept,
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "failed": failed,
                "cancelled": report.cancelled,
            }});
            if let Some(unchanged) = unchanged {
                line["summary"]["unchanged"] = unchanged.into();
            }
            crate::output::out!("{line}");
            return;
        }
        // `rm` only removes; a transfer reports its files, then what it removed.
        let removing_only = verb == "deleted";
        let mut text = match removing_only {
            true => format!(
                "deleted {} in {seconds:.2} s",
                crate::output::count(report.removed, "object")
            ),
            false => format!(
                "{verb} {}, {} in {seconds:.2} s ({:.1} files/s, {:.1} MiB/s)",
                crate::output::count(report.files, "file"),
                format_size(report.bytes),
                report.files as f64 / seconds,
                report.bytes as f64 / (1024.0 * 1024.0) / seconds,
            ),
        };
        if report.removed > 0 && !removing_only {
            text += &format!(", {} deleted", report.removed);
        }
        if report.kept > 0 {
            text += &format!(", {} kept (--no-clobber)", report.kept);
        }
        if let Some(unchanged) = unchanged {
            text += &format!(", {unchanged} unchanged");
        }
        if failed > 0 {
            text += &format!(", {failed} failed");
        }
        if report.cancelled > 0 {
            text += &format!(", {} not done", report.cancelled);
        }
        crate::output::out!("{text}");
    }
}

/// Runs `jobs` (no removals: [`super::remove`] runs those) as they come and reports
/// on each. After a failure with `--fail-fast`, it cancels `stop` and takes
/// no more of them.
pub async fn run(
    engine: &Engine,
    jobs: impl Stream<Item = Job>,
    options: &Options,
    output: &Output,
    stop: &CancellationToken,
) -> Report {
    let started = Instant::now();
    let report = Mutex::new(Report::default());
    let results = jobs
        .take_until(stop.clone().cancelled_owned())
        .map(|job| {
            let stop = stop.clone();
            async move {
                if stop.is_cancelled() {
                    return (job, Ended::Cancelled);
                }
                let ended = tokio::select! {
                    biased;
                    _ = stop.cancelled() => Ended::Cancelled,
                    result = execute(engine, &job, options, output) => match result {
                        Ok(Executed::Transferred) => Ended::Done,
                        Ok(Executed::Kept) => Ended::Kept,
                        Err(error) => Ended::Failed(error),
                    },
                };
                (job, ended)
            }
        })
        .buffer_unordered(options.jobs.max(1));
    futures::pin_mut!(results);
    while let Some((job, ended)) = results.next().await {
        let mut report = report.lock().expect("report lock");
        match ended {
            Ended::Done => {
                report.files += 1;
                report.bytes += job.size;
                output.finished(&job, None, false);
            }
            Ended::Failed(error) => {
                output.finished(&job, Some(&error), false);
                report.failures.push((job.subject(), error));
                if options.fail_fast {
                    stop.cancel();
                }
            }
            Ended::Kept => {
                report.kept += 1;
                output.kept(&job);
            }
            Ended::Cancelled => report.cancelled += 1,
        }
    }
    let mut report = report.into_inner().expect("report lock");
    report.elapsed = started.elapsed();
    report
}

/// One job; the error is worded for the person who ran the command.
async fn execute(
    engine: &Engine,
    job: &Job,
    options: &Options,
    output: &Output,
) -> Result<Executed, String> {
    if options.no_clobber && target_exists(engine, &job.action).await? {
        return Ok(Executed::Kept);
    }
    let sent = Arc::new(AtomicU64::new(0));
    let result = match &job.action {
        Action::Upload {
            path,
            key,
            modified,
        } => {
            let mut stamp = Metadata::new();
            stamp.insert(mtime::KEY.to_string(), mtime::encode(*modified));
            let request = UploadRequest {
                key: key.clone(),
                content_type: options.object.content_type_for(key),
                metadata: options.object.metadata_with(stamp),
                settings: options.object.settings().clone(),
                progress: progress(output, &sent),
                // Checked above; the store checks again as the object is made.
                condition: options.no_clobber.then_some(WriteCondition::IfNoneMatch),
                ..UploadRequest::default()
            };
            match engine
                .upload(request, UploadSource::File(path.clone()))
                .await
            {
                Err(TransferError::Store {
                    source: StoreError::PreconditionFailed,
                    ..
                }) if options.no_clobber => return Ok(Executed::Kept),
                result => result.map(drop).map_err(|e| sluice_store::error_chain(&e)),
            }
        }
        Action::Download { listed, path } => {
            download(engine, listed, path, progress(output, &sent)).await
        }
        Action::Copy {
            source_bucket,
            source_key,
            source_etag,
            key,
        } => engine
            .copy(CopyRequest {
                placement: options.object.placement(),
                source_bucket: source_bucket.clone(),
                source_key: source_key.clone(),
                size: job.size,
                source_etag: (!source_etag.is_empty()).then(|| source_etag.clone()),
                key: key.clone(),
            })
            .await
            .map(drop)
            .map_err(|e| sluice_store::error_chain(&e)),
        Action::RemoveFile { .. } | Action::RemoveKey { .. } => {
            Err("a removal is run in batches".to_string())
        }
    };
    if result.is_ok() {
        output.advance(job.size.saturating_sub(sent.load(Ordering::Relaxed)));
    }
    match (result, options.move_sources) {
        (Ok(()), true) => remove_source(engine, &job.action, job.size)
            .await
            .map_err(|reason| format!("copied, but the source stays: {reason}")),
        (result, _) => result,
    }
    .map(|()| Executed::Transferred)
}

/// `--no-clobber`: whether the job's target is already there (an upload's
/// is checked again, atomically, by the store as the object is made).
async fn target_exists(engine: &Engine, action: &Action) -> Result<bool, String> {
    use sluice_store::ObjectStore;
    let key = match action {
        Action::Download { path, .. } => {
            return Ok(tokio::fs::symlink_metadata(path).await.is_ok())
        }
        Action::Upload { key, .. } | Action::Copy { key, .. } => key,
        Action::RemoveFile { .. } | Action::RemoveKey { .. } => return Ok(false),
    };
    match engine.retrying_store().head_object(key).await {
        Ok(_) => Ok(true),
        Err(StoreError::NoSuchKey { .. }) => Ok(false),
        Err(e) => Err(sluice_store::error_chain(&e)),
    }
}

/// `mv` of a local file: removed only when it is still what was uploaded
/// (its size and modification time), so that what was written to it since
/// (a log still growing) is not lost.
pub fn remove_uploaded_file(
    path: &std::path::Path,
    size: u64,
    modified: Option<SystemTime>,
) -> Result<(), String> {
    let now = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if now.len() != size || (modified.is_some() && now.modified().ok() != modified) {
        return Err("it changed after its upload and is kept".into());
    }
    std::fs::remove_file(path).map_err(|e| format!("it could not be removed: {e}"))
}

/// `mv`: the source of a completed transfer removed.
async fn remove_source(engine: &Engine, action: &Action, size: u64) -> Result<(), String> {
    use sluice_store::ObjectStore;
    let removed = match action {
        Action::Upload { path, modified, .. } => {
            let (path, modified) = (path.clone(), *modified);
            return tokio::task::spawn_blocking(move || {
                remove_uploaded_file(&path, size, Some(modified))
            })
            .await
            .map_err(|e| e.to_string())?;
        }
        Action::Download { listed, .. } => engine.retrying_store().delete_object(&listed.key).await,
        Action::Copy {
            source_bucket: Some(bucket),
            source_key,
            ..
        } => bucket.store.delete_object(source_key).await,
        Action::Copy { source_key, .. } => engine.retrying_store().delete_object(source_key).await,
        Action::RemoveFile { .. } | Action::RemoveKey { .. } => Ok(()),
    };
    removed.map_err(|e| sluice_store::error_chain(&e))
}

async fn download(
    engine: &Engine,
    listed: &ObjectSummary,
    path: &std::path::Path,
    progress: Option<ProgressFn>,
) -> Result<(), String> {
    // The time the object records, else its Last-Modified.
    let modified = |meta: &ObjectMeta| {
        let recorded = meta.metadata.get(mtime::KEY).and_then(|m| mtime::decode(m));
        Some(recorded.unwrap_or(meta.last_modified))
    };
    engine
        .download_listed_to_path(listed, path, progress, &modified)
        .await
        .map(drop)
        .map_err(|e| sluice_store::error_chain(&e))
}

/// The engine's progress reports of one file, as increments of the bar.
fn progress(output: &Output, sent: &Arc<AtomicU64>) -> Option<ProgressFn> {
    let bar = output.bar.clone()?;
    let sent = sent.clone();
    Some(Arc::new(move |p: Progress| {
        let before = sent.swap(p.bytes_done, Ordering::Relaxed);
        bar.inc(p.bytes_done.saturating_sub(before));
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mv` of a file that grew (or was rewritten) after its upload keeps it.
    #[test]
    fn a_file_changed_after_its_upload_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.log");
        std::fs::write(&path, b"line 1\n").unwrap();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        // (what happens after the upload, removed)
        let later = modified + Duration::from_secs(5);
        let cases: [(&dyn Fn(), bool); 3] = [
            (
                &|| std::fs::write(&path, b"line 1\nline 2\n").unwrap(),
                false,
            ),
            (
                &|| {
                    std::fs::write(&path, b"line 9\n").unwrap();
                    std::fs::File::options()
                        .write(true)
                        .open(&path)
                        .unwrap()
                        .set_modified(later)
                        .unwrap();
                },
                false,
            ),
            (&|| {}, true),
        ];
        for (index, (change, removed)) in cases.into_iter().enumerate() {
            std::fs::write(&path, b"line 1\n").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(modified)
                .unwrap();
            change();
            let result = remove_uploaded_file(&path, 7, Some(modified));
            assert_eq!(result.is_ok(), removed, "case {index}: {result:?}");
            assert_eq!(path.exists(), !removed, "case {index}");
        }
    }
}
