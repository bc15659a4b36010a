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

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use sluice_store::{Checksum, ChecksumAlgorithm, Hasher, ObjectMeta, ObjectStore};
use sluice_upload::{Engine, RetryingStore};

use super::filter::Filter;
use super::run::{Action, Job, Roots};
use super::{local, mtime, Listed, Side};
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
struct Sides {
    /// The source's store, when it is one.
    source: Option<RetryingStore>,
    dest: Option<RetryingStore>,
    checksum: bool,
}

/// Whether the destination's entry already holds the source's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Same,
    Differs,
}

/// A side's entries in key order, as its walk or listing finds them, with
/// what a walk skipped.
type Entries = BoxStream<'static, anyhow::Result<Seen>>;

/// One step of a side's walk or listing.
enum Seen {
    Entry(Entry),
    /// A file a walk did not take, and why.
    Skipped {
        file: String,
        reason: String,
    },
}

/// What the two sides hold under one relative path, or a skipped file.
enum Pair {
    Both(Entry, Entry),
    SourceOnly(Entry),
    DestOnly(Entry),
    Skipped { file: String, reason: String },
}

pub async fn run(mut args: SyncArgs) -> anyhow::Result<()> {
    if let Some(base) = args.copy.many.take_wildcard(&args.copy.src)? {
        args.copy.src = base;
    }
    let copy = &args.copy;
    let filter = Filter::of(&copy.many)?;
    let (source, dest) = (
        Side::open_plain(&copy.src, &copy.transfer).await?,
        Side::open_plain(&copy.dest, &copy.transfer).await?,
    );
    if let (Side::Directory(_), Side::Directory(_)) = (&source, &dest) {
        return Err(UsageError(format!(
            "{} and {} are both local: one side of a sync must be a bucket (s3://, az://, gs://)",
            copy.src, copy.dest
        ))
        .into());
    }
    if let (Side::Store(from), Side::Store(to)) = (&source, &dest) {
        super::refuse_pair(from, to)?;
    }
    let object = crate::object::ObjectSpec::from_args(&copy.object)?;
    if !matches!(source, Side::Directory(_)) {
        object.check_for_copy(matches!(dest, Side::Store(_)))?;
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
    // Set when the source's walk skips a file: nothing may then be deleted.
    let source_incomplete = Arc::new(AtomicBool::new(false));
    let source_entries = entries(
        &source,
        source_engine.as_ref(),
        &filter,
        Some(source_incomplete.clone()),
    )
    .await?;
    let dest_entries = entries(&dest, dest_engine.as_ref(), &filter, None).await?;
    let sides = Arc::new(Sides {
        source: source_engine.as_ref().map(Engine::retrying_store),
        dest: dest_engine.as_ref().map(Engine::retrying_store),
        checksum: args.checksum_compare,
    });
    let roots = Arc::new(Roots {
        source: root(&source),
        target: root(&dest),
    });
    let (source, dest) = (Arc::new(source), Arc::new(dest));
    let unchanged = Arc::new(AtomicU64::new(0));
    // The destination's extra entries, in key order: removed after the
    // transfers, when --delete asks and the source was read whole.
    let extra = Arc::new(Mutex::new(Vec::new()));
    let delete = args.delete;
    let transfers = {
        let (unchanged, extra, roots) = (unchanged.clone(), extra.clone(), roots.clone());
        let (source, dest) = (source.clone(), dest.clone());
        merge(source_entries, dest_entries)
            .map(move |pair| {
                let sides = sides.clone();
                async move {
                    Ok(match pair? {
                        Pair::Both(source, dest) => {
                            let verdict = sides.compare(&source, &dest).await;
                            Compared::Source(source, verdict)
                        }
                        Pair::SourceOnly(source) => Compared::Source(source, Ok(Verdict::Differs)),
                        Pair::DestOnly(dest) => Compared::Extra(dest),
                        Pair::Skipped { file, reason } => Compared::Skipped { file, reason },
                    })
                }
            })
            .buffered(copy.many.jobs.max(1))
            .filter_map(move |compared: anyhow::Result<Compared>| {
                let listed = match compared {
                    Err(error) => Some(Err(error)),
                    Ok(Compared::Source(_, Ok(Verdict::Same))) => {
                        unchanged.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    Ok(Compared::Source(entry, Ok(Verdict::Differs))) => {
                        Some(Ok(match transfer_job(&source, &dest, &entry, &roots) {
                            Ok(job) => Listed::Job(job),
                            Err(reason) => Listed::Refused {
                                file: show(&source, &entry),
                                reason,
                            },
                        }))
                    }
                    Ok(Compared::Source(entry, Err(reason))) => Some(Ok(Listed::Refused {
                        file: show(&source, &entry),
                        reason,
                    })),
                    Ok(Compared::Skipped { file, reason }) => {
                        Some(Ok(Listed::Skipped { file, reason }))
                    }
                    Ok(Compared::Extra(entry)) => {
                        if delete {
                            let job = removal_job(&dest, &entry, &roots);
                            extra.lock().expect("extra lock").push(job);
                        }
                        None
                    }
                };
                futures::future::ready(listed)
            })
            .boxed()
    };
    // Read once the transfers have all been listed.
    let removals = delete.then(|| {
        futures::stream::once(async move {
            let extra = std::mem::take(&mut *extra.lock().expect("extra lock"));
            if source_incomplete.load(Ordering::Relaxed) {
                // As rsync does: a source that could not be read whole must
                // not make the destination lose what the skipped files hold.
                eprintln!("sluice: some source files were skipped (above): nothing is deleted");
                return Vec::new();
            }
            extra
        })
        .flat_map(|jobs| futures::stream::iter(jobs.into_iter().map(|job| Ok(Listed::Job(job)))))
        .boxed()
    });
    let options = super::options(&copy.many, &copy.transfer, object);
    super::finish(
        &engine,
        "synced",
        transfers,
        removals,
        &options,
        Some(&unchanged),
    )
    .await
}

/// A source entry and how it compared, an extra entry of the destination,
/// or a skipped file.
enum Compared {
    Source(Entry, Result<Verdict, String>),
    Extra(Entry),
    Skipped { file: String, reason: String },
}

/// Pairs the entries of the two sides by relative path, walking both in key
/// order at once; a side whose keys come out of order is an error (the pairs
/// would be wrong).
fn merge(source: Entries, dest: Entries) -> impl Stream<Item = anyhow::Result<Pair>> {
    let sides = (
        Ordered::new(source, "the source"),
        Ordered::new(dest, "the destination"),
    );
    futures::stream::try_unfold(sides, |(mut source, mut dest)| async move {
        let skipped = match source.fill().await? {
            Some(skipped) => Some(skipped),
            None => dest.fill().await?,
        };
        if let Some((file, reason)) = skipped {
            return Ok(Some((Pair::Skipped { file, reason }, (source, dest))));
        }
        let pair = match (&source.head, &dest.head) {
            (None, None) => return Ok(None),
            (Some(_), None) => Pair::SourceOnly(source.take()),
            (None, Some(_)) => Pair::DestOnly(dest.take()),
            (Some(a), Some(b)) => match a.relative.cmp(&b.relative) {
                std::cmp::Ordering::Less => Pair::SourceOnly(source.take()),
                std::cmp::Ordering::Greater => Pair::DestOnly(dest.take()),
                std::cmp::Ordering::Equal => Pair::Both(source.take(), dest.take()),
            },
        };
        Ok(Some((pair, (source, dest))))
    })
}

/// One side's entries with the next one looked at.
struct Ordered {
    entries: Entries,
    name: &'static str,
    head: Option<Entry>,
    /// The relative path of the last entry read.
    last: Option<String>,
    ended: bool,
}

impl Ordered {
    fn new(entries: Entries, name: &'static str) -> Ordered {
        Ordered {
            entries,
            name,
            head: None,
            last: None,
            ended: false,
        }
    }

    /// Reads the next entry when none is waiting; a skipped file met on the
    /// way is handed back (the next call reads on).
    async fn fill(&mut self) -> anyhow::Result<Option<(String, String)>> {
        if self.head.is_some() || self.ended {
            return Ok(None);
        }
        match self.entries.next().await.transpose()? {
            None => self.ended = true,
            Some(Seen::Skipped { file, reason }) => return Ok(Some((file, reason))),
            Some(Seen::Entry(entry)) => {
                if let Some(last) = self.last.as_ref().filter(|last| **last >= entry.relative) {
                    anyhow::bail!(
                        "{} gave its names out of key order ({} after {last}): nothing can be compared",
                        self.name,
                        entry.relative
                    );
                }
                self.last = Some(entry.relative.clone());
                self.head = Some(entry);
            }
        }
        Ok(None)
    }

    fn take(&mut self) -> Entry {
        self.head.take().expect("filled")
    }
}

/// A side's entries in key order. A destination directory that does not
/// exist yet is empty. A source walk that skips a file says so in
/// `incomplete`.
async fn entries(
    side: &Side,
    engine: Option<&Engine>,
    filter: &Filter,
    incomplete: Option<Arc<AtomicBool>>,
) -> anyhow::Result<Entries> {
    match side {
        Side::Directory(dir) => {
            if incomplete.is_none() && !dir.exists() {
                return Ok(futures::stream::empty().boxed());
            }
            let walk = super::walk(dir, filter.clone()).await?;
            Ok(walk
                .map(move |found| {
                    let seen = match found {
                        local::Found::File(file) => Seen::Entry(Entry {
                            relative: file.relative,
                            size: file.size,
                            changed: file.modified,
                            path: Some(file.path),
                            key: None,
                            etag: String::new(),
                        }),
                        local::Found::Skipped(skipped) => {
                            if let Some(incomplete) = &incomplete {
                                incomplete.store(true, Ordering::Relaxed);
                            }
                            Seen::Skipped {
                                file: skipped.path.display().to_string(),
                                reason: skipped.reason,
                            }
                        }
                    };
                    Ok(seen)
                })
                .boxed())
        }
        Side::Store(prefix) => {
            let engine = engine.expect("a store side has an engine");
            let listing = super::listing(prefix, engine, filter.clone()).await?;
            Ok(listing
                .map(|object| {
                    let object = object?;
                    Ok(Seen::Entry(Entry {
                        relative: object.relative,
                        size: object.size,
                        changed: object.last_modified,
                        path: None,
                        key: Some(object.key),
                        etag: object.etag,
                    }))
                })
                .boxed())
        }
    }
}

impl Sides {
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
                    .meta(self.source.as_ref(), source)
                    .await?
                    .and_then(|m| m.checksum),
                heads
                    .1
                    .meta(self.dest.as_ref(), dest)
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
        let a = recorded(heads.0.meta(self.source.as_ref(), source).await?, source);
        let b = recorded(heads.1.meta(self.dest.as_ref(), dest).await?, dest);
        Ok(match (a, b) {
            (Some(a), Some(b)) if mtime::same(a, b) => Verdict::Same,
            _ => Verdict::Differs,
        })
    }
}

/// An entry's object as HEAD answered it, read on first use.
enum Looked {
    NotYet,
    /// `None` for a file entry (boxed: most entries are never looked at).
    Done(Option<Box<ObjectMeta>>),
}

impl Looked {
    async fn meta(
        &mut self,
        store: Option<&RetryingStore>,
        entry: &Entry,
    ) -> Result<Option<&ObjectMeta>, String> {
        if let Looked::NotYet = self {
            let meta = match (store, &entry.key) {
                (Some(store), Some(key)) => Some(Box::new(
                    store
                        .head_object(key)
                        .await
                        .map_err(|e| sluice_store::error_chain(&e))?,
                )),
                _ => None,
            };
            *self = Looked::Done(meta);
        }
        match self {
            Looked::Done(meta) => Ok(meta.as_deref()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries of these names; `!name` is a file the walk skipped.
    fn side(names: &[&str]) -> Entries {
        let entries: Vec<anyhow::Result<Seen>> = names
            .iter()
            .map(|name| {
                if let Some(file) = name.strip_prefix('!') {
                    return Ok(Seen::Skipped {
                        file: file.to_string(),
                        reason: "unreadable".into(),
                    });
                }
                Ok(Seen::Entry(Entry {
                    relative: name.to_string(),
                    size: 1,
                    changed: SystemTime::UNIX_EPOCH,
                    path: None,
                    key: None,
                    etag: String::new(),
                }))
            })
            .collect();
        futures::stream::iter(entries).boxed()
    }

    /// Pairs as `s:name`, `d:name` or `=name`; or the error.
    async fn pairs(source: &[&str], dest: &[&str]) -> Result<Vec<String>, String> {
        let pairs: Vec<anyhow::Result<Pair>> = merge(side(source), side(dest)).collect().await;
        pairs
            .into_iter()
            .map(|pair| match pair {
                Ok(Pair::Both(a, b)) => {
                    assert_eq!(a.relative, b.relative);
                    Ok(format!("={}", a.relative))
                }
                Ok(Pair::SourceOnly(a)) => Ok(format!("s:{}", a.relative)),
                Ok(Pair::DestOnly(b)) => Ok(format!("d:{}", b.relative)),
                Ok(Pair::Skipped { file, .. }) => Ok(format!("skipped:{file}")),
                Err(error) => Err(error.to_string()),
            })
            .collect()
    }

    #[tokio::test]
    async fn the_sides_pair_up_by_name_in_key_order() {
        let cases: [(&[&str], &[&str], &[&str]); 6] = [
            (&[], &[], &[]),
            (&["a", "b"], &[], &["s:a", "s:b"]),
            (&[], &["a"], &["d:a"]),
            (
                &["a-b", "a/x", "c"],
                &["a/x", "b", "c", "d"],
                &["s:a-b", "=a/x", "d:b", "=c", "d:d"],
            ),
            (&["x"], &["x"], &["=x"]),
            // A skipped file is passed on where the walk met it.
            (&["a", "!b", "c"], &["c"], &["s:a", "skipped:b", "=c"]),
        ];
        for (source, dest, expected) in cases {
            assert_eq!(
                pairs(source, dest).await.unwrap(),
                expected,
                "{source:?} / {dest:?}"
            );
        }
    }

    /// A side out of order would pair wrongly (and delete what it should
    /// not): the merge stops with an error naming it.
    #[tokio::test]
    async fn a_side_out_of_key_order_is_an_error() {
        for (source, dest, names) in [
            (&["b", "a"][..], &[][..], "the source"),
            (&["a"][..], &["a", "a"][..], "the destination"),
        ] {
            let error = pairs(source, dest).await.unwrap_err();
            assert!(
                error.contains(names) && error.contains("out of key order"),
                "{error}"
            );
        }
    }
}
