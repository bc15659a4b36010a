//! `sluice sync SRC DST`: makes DST hold what SRC holds, moving only what
//! differs. Directory to prefix, prefix to directory, or prefix to prefix.
//!
//! How a file and its counterpart are compared, without reading either when
//! possible:
//! 1. Missing on the destination, or of another size: copied.
//! 2. The destination changed at or after the source (a file's modification
//!    time, an object's Last-Modified): the same. A copy made by sync is always
//!    younger than its source, so a second sync moves nothing on a listing alone.
//! 3. Otherwise the object is read with HEAD: when its `mtime` metadata (written
//!    by every upload, restored by every download) is the other side's time, the
//!    same; else copied.
//!
//! With `--checksum`, step 2 and 3 give way to the stored full-object CRC
//! (HEAD) against the file's CRC (read and computed here) or the other
//! object's; objects without a full-object CRC fall back to the steps above.
//! `--delete` removes what the destination holds and the source does not,
//! within the filters; `--dry-run` prints every change and makes none.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use sluice_store::{Checksum, ChecksumAlgorithm, Hasher, ObjectMeta, ObjectStore};
use sluice_upload::{Engine, RetryingStore};

use super::filter::Filter;
use super::run::{Action, Job, Output, Roots};
use super::{mtime, Listed, Side};
use crate::args::SyncArgs;
use crate::UsageError;

/// A file or an object on one side, by its path relative to the side's root.
#[derive(Debug, Clone)]
struct Entry {
    relative: String,
    size: u64,
    /// Modification time of a file, Last-Modified of an object.
    changed: SystemTime,
    /// The file, on a directory side.
    path: Option<PathBuf>,
    /// The key, on a store side.
    key: Option<String>,
    /// The listing's ETag, on a store side.
    etag: String,
}

/// What a comparison needs from the sides.
struct Sides<'a> {
    /// The source's store, when it is one.
    source: Option<&'a RetryingStore>,
    dest: Option<&'a RetryingStore>,
    checksum: bool,
}

/// Whether the destination's entry already holds the source's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Same,
    Differs,
}

pub async fn run(args: SyncArgs) -> anyhow::Result<()> {
    let copy = &args.copy;
    let filter = Filter::new(&copy.many.include, &copy.many.exclude)?;
    let (source, dest) = (
        Side::open_plain(&copy.src, &copy.transfer).await?,
        Side::open_plain(&copy.dest, &copy.transfer).await?,
    );
    if let (Side::Directory(_), Side::Directory(_)) = (&source, &dest) {
        return Err(UsageError(format!(
            "{} and {} are both local: one side of a sync must be s3://",
            copy.src, copy.dest
        ))
        .into());
    }
    if let (Side::Store(from), Side::Store(to)) = (&source, &dest) {
        super::refuse_nested(from, to)?;
    }
    // An engine per store side; the copies run on the destination's, or on
    // the source's when the destination is a directory.
    let side_engine = |side: &Side| match side {
        Side::Store(prefix) => {
            super::engine(prefix.store.clone(), &copy.transfer, &copy.many).map(Some)
        }
        Side::Directory(_) => Ok(None),
    };
    let (source_engine, dest_engine) = (side_engine(&source)?, side_engine(&dest)?);
    let engine = dest_engine
        .clone()
        .or_else(|| source_engine.clone())
        .expect("one side is a store");
    let source_store = source_engine.as_ref().map(Engine::retrying_store);
    let dest_store = dest_engine.as_ref().map(Engine::retrying_store);
    let (source_entries, source_complete) =
        list(&source, source_store.as_ref(), &filter, true).await?;
    let (dest_entries, _) = list(&dest, dest_store.as_ref(), &filter, false).await?;
    let sides = Sides {
        source: source_store.as_ref(),
        dest: dest_store.as_ref(),
        checksum: args.checksum_compare,
    };
    let mut by_path: HashMap<&str, &Entry> = dest_entries
        .iter()
        .map(|e| (e.relative.as_str(), e))
        .collect();
    let pairs: Vec<(&Entry, Option<&Entry>)> = source_entries
        .iter()
        .map(|s| (s, by_path.remove(s.relative.as_str())))
        .collect();
    let verdicts: Vec<(usize, Result<Verdict, String>)> =
        futures::stream::iter(pairs.iter().enumerate())
            .map(|(i, (source, dest))| {
                let sides = &sides;
                async move {
                    let verdict = match dest {
                        None => Ok(Verdict::Differs),
                        Some(dest) => sides.compare(source, dest).await,
                    };
                    (i, verdict)
                }
            })
            .buffer_unordered(copy.many.jobs.max(1))
            .collect()
            .await;
    let roots = Arc::new(Roots {
        source: root(&source),
        target: root(&dest),
    });
    let mut jobs = Vec::new();
    let mut refused = Vec::new();
    let mut unchanged = 0;
    let mut verdicts = verdicts;
    verdicts.sort_by_key(|(i, _)| *i);
    for (i, verdict) in verdicts {
        let (entry, _) = pairs[i];
        match verdict {
            Ok(Verdict::Same) => unchanged += 1,
            Ok(Verdict::Differs) => match transfer_job(&source, &dest, entry, &roots) {
                Ok(job) => jobs.push(job),
                Err(reason) => refused.push((show(&source, entry), reason)),
            },
            Err(reason) => refused.push((show(&source, entry), reason)),
        }
    }
    if args.delete && !source_complete {
        // As rsync does: a source that could not be read whole must not make
        // the destination lose what the skipped files hold.
        eprintln!("sluice: some source files were skipped (above): nothing is deleted");
    }
    if args.delete && source_complete {
        let mut extra: Vec<&Entry> = by_path.into_values().collect();
        extra.sort_by(|a, b| a.relative.cmp(&b.relative));
        jobs.extend(
            extra
                .into_iter()
                .map(|entry| removal_job(&dest, entry, &roots)),
        );
    }
    let options = super::options(&copy.many, &copy.transfer, None);
    if args.dry_run {
        let output = Output::new(&super::run::Options {
            quiet: true,
            ..options.clone()
        });
        for job in &jobs {
            output.finished(job, None, true);
        }
        for (file, reason) in &refused {
            eprintln!("sluice: {file}: {reason}");
        }
        println!(
            "dry run: {} to copy ({}), {} to delete, {unchanged} unchanged; nothing changed",
            jobs.iter().filter(|j| !is_removal(j)).count(),
            sluice_upload::format_size(
                jobs.iter().filter(|j| !is_removal(j)).map(|j| j.size).sum()
            ),
            jobs.iter().filter(|j| is_removal(j)).count(),
        );
        return Ok(());
    }
    let (removals, transfers): (Vec<Job>, Vec<Job>) = jobs
        .into_iter()
        .partition(|job| matches!(job.action, Action::RemoveKey { .. }));
    let refused = refused
        .into_iter()
        .map(|(file, reason)| Listed::Refused { file, reason });
    let transfers = super::known(
        refused
            .chain(transfers.into_iter().map(Listed::Job))
            .collect(),
    );
    let removals = super::known(removals.into_iter().map(Listed::Job).collect());
    super::finish(
        &engine,
        "synced",
        transfers,
        removals,
        &options,
        Some(unchanged),
    )
    .await
}

fn is_removal(job: &Job) -> bool {
    matches!(
        job.action,
        Action::RemoveKey { .. } | Action::RemoveFile { .. }
    )
}

/// A side's entries, and whether they are all it holds (false when a walk
/// skipped a file or directory). A destination directory that does not exist
/// yet is empty.
async fn list(
    side: &Side,
    store: Option<&RetryingStore>,
    filter: &Filter,
    is_source: bool,
) -> anyhow::Result<(Vec<Entry>, bool)> {
    match side {
        Side::Directory(dir) => {
            if !is_source && !dir.exists() {
                return Ok((Vec::new(), true));
            }
            let walk = super::walk_all(dir, filter.clone()).await?;
            let complete = walk.skipped.is_empty();
            let entries = walk
                .files
                .into_iter()
                .map(|f| Entry {
                    relative: f.relative,
                    size: f.size,
                    changed: f.modified,
                    path: Some(f.path),
                    key: None,
                    etag: String::new(),
                })
                .collect();
            Ok((entries, complete))
        }
        Side::Store(prefix) => {
            let objects = prefix
                .list(store.expect("a store side has a store"), filter)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot list {}: {}",
                        prefix.display,
                        sluice_store::error_chain(&e)
                    )
                })?;
            let entries = objects
                .into_iter()
                .map(|o| Entry {
                    relative: o.relative,
                    size: o.size,
                    changed: o.last_modified,
                    path: None,
                    key: Some(o.key),
                    etag: o.etag,
                })
                .collect();
            Ok((entries, true))
        }
    }
}

impl Sides<'_> {
    async fn compare(&self, source: &Entry, dest: &Entry) -> Result<Verdict, String> {
        if source.size != dest.size {
            return Ok(Verdict::Differs);
        }
        // Each object side is read with HEAD at most once, and only when needed.
        let mut heads = (Looked::NotYet, Looked::NotYet);
        if self.checksum {
            let (a, b) = (
                heads
                    .0
                    .meta(self.source, source)
                    .await?
                    .and_then(|m| m.checksum),
                heads
                    .1
                    .meta(self.dest, dest)
                    .await?
                    .and_then(|m| m.checksum),
            );
            // The CRC of the file side, in the algorithm the object side has.
            let algorithm = a.or(b).map(|c| c.algorithm);
            let a = match (a, &source.path, algorithm) {
                (None, Some(path), Some(algorithm)) => Some(file_checksum(path, algorithm).await?),
                (a, ..) => a,
            };
            let b = match (b, &dest.path, algorithm) {
                (None, Some(path), Some(algorithm)) => Some(file_checksum(path, algorithm).await?),
                (b, ..) => b,
            };
            if let (Some(a), Some(b)) = (a, b) {
                return Ok(if a == b {
                    Verdict::Same
                } else {
                    Verdict::Differs
                });
            }
        }
        if dest.changed >= source.changed {
            return Ok(Verdict::Same);
        }
        // An object's recorded mtime (a file's own time) on each side.
        let recorded = |meta: Option<&ObjectMeta>, entry: &Entry| match meta {
            Some(meta) => meta.metadata.get(mtime::KEY).and_then(|m| mtime::decode(m)),
            None => entry.path.as_ref().map(|_| entry.changed),
        };
        let a = recorded(heads.0.meta(self.source, source).await?, source);
        let b = recorded(heads.1.meta(self.dest, dest).await?, dest);
        Ok(match (a, b) {
            (Some(a), Some(b)) if mtime::same(a, b) => Verdict::Same,
            _ => Verdict::Differs,
        })
    }
}

/// An entry's object as HEAD answered it, read on first use.
enum Looked {
    NotYet,
    /// `None` for a file entry.
    Done(Option<ObjectMeta>),
}

impl Looked {
    async fn meta(
        &mut self,
        store: Option<&RetryingStore>,
        entry: &Entry,
    ) -> Result<Option<&ObjectMeta>, String> {
        if let Looked::NotYet = self {
            let meta = match (store, &entry.key) {
                (Some(store), Some(key)) => Some(
                    store
                        .head_object(key)
                        .await
                        .map_err(|e| sluice_store::error_chain(&e))?,
                ),
                _ => None,
            };
            *self = Looked::Done(meta);
        }
        match self {
            Looked::Done(meta) => Ok(meta.as_ref()),
            Looked::NotYet => unreachable!("looked at just above"),
        }
    }
}

/// A file's full CRC, read off the async runtime.
async fn file_checksum(
    path: &std::path::Path,
    algorithm: ChecksumAlgorithm,
) -> Result<Checksum, String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = std::fs::File::open(&path)?;
        let mut hasher = Hasher::new(algorithm);
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                return Ok::<_, std::io::Error>(hasher.finish());
            }
            hasher.update(&buffer[..n]);
        }
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot read it: {e}"))
}

fn show(side: &Side, entry: &Entry) -> String {
    match side {
        Side::Directory(_) => entry
            .path
            .as_ref()
            .map_or_else(|| entry.relative.clone(), |p| p.display().to_string()),
        Side::Store(prefix) => prefix.show(&entry.relative),
    }
}

/// What a side's keys are shown after ([`Roots`]).
fn root(side: &Side) -> String {
    match side {
        Side::Directory(_) => String::new(),
        Side::Store(prefix) => prefix.root(),
    }
}

fn transfer_job(
    source: &Side,
    dest: &Side,
    entry: &Entry,
    roots: &Arc<Roots>,
) -> Result<Job, String> {
    let action = match (source, dest) {
        (Side::Directory(_), Side::Store(target))
            if sluice_store::is_reserved_key(&target.key(&entry.relative)) =>
        {
            return Err("the key is under _sluice/, which holds sluice's own state".into())
        }
        (Side::Directory(_), Side::Store(target)) => Action::Upload {
            path: entry.path.clone().expect("a file entry"),
            key: target.key(&entry.relative),
            modified: entry.changed,
        },
        (Side::Store(_), Side::Directory(dir)) => Action::Download {
            listed: sluice_store::ObjectSummary {
                key: entry.key.clone().expect("an object entry"),
                size: entry.size,
                etag: entry.etag.clone(),
                last_modified: entry.changed,
            },
            path: super::local_path(dir, &entry.relative)?,
        },
        (Side::Store(from), Side::Store(to)) => Action::Copy {
            source_bucket: from.copy_source_for(to),
            source_key: entry.key.clone().expect("an object entry"),
            source_etag: entry.etag.clone(),
            key: to.key(&entry.relative),
        },
        (Side::Directory(_), Side::Directory(_)) => unreachable!("refused before listing"),
    };
    Ok(Job {
        action,
        size: entry.size,
        roots: roots.clone(),
    })
}

fn removal_job(dest: &Side, entry: &Entry, roots: &Arc<Roots>) -> Job {
    let action = match dest {
        Side::Directory(_) => Action::RemoveFile {
            path: entry.path.clone().expect("a file entry"),
        },
        Side::Store(_) => Action::RemoveKey {
            key: entry.key.clone().expect("an object entry"),
        },
    };
    Job {
        action,
        size: entry.size,
        roots: roots.clone(),
    }
}
