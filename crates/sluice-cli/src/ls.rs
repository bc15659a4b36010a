//! `sluice ls`: the objects under a prefix of a bucket or a directory store, one
//! level or all of them with `--recursive`, in aws s3 ls's form: a line per
//! object (time, size in bytes or with `-H` in KiB/MiB/GiB, name relative to
//! the listed directory; the whole key with `--recursive`), `PRE name/` per
//! sub-prefix, totals with `--summarize`; or one JSON object per line.

use anyhow::Context;
use sluice_store::{is_reserved_key, DirectoryEntry, ObjectStore, ObjectSummary, StoreLocation};
use sluice_upload::format_size;

use crate::args::LsArgs;
use crate::UsageError;

/// Entries per listing request.
const PAGE: usize = 1000;

pub async fn run(args: LsArgs) -> anyhow::Result<()> {
    let location = match args.location.as_deref() {
        None | Some("s3://") => return crate::buckets::list(&args.store, args.json).await,
        Some(location) => location,
    };
    // `ls 's3://b/logs/2026-*/*.gz'`: every object under the base the
    // pattern matches, by its whole key.
    let wildcard = crate::wildcard::Wildcard::split(location);
    let matcher = wildcard.as_ref().map(|w| w.matcher()).transpose()?;
    let location = wildcard.as_ref().map_or(location, |w| w.base.as_str());
    let recursive = args.recursive || wildcard.is_some();
    let (store, prefix, display) =
        match StoreLocation::parse(location).map_err(|e| UsageError(e.to_string()))? {
            StoreLocation::Bucket {
                service,
                bucket,
                rest,
            } => {
                let store = crate::target::open_store(
                    StoreLocation::Bucket {
                        service,
                        bucket: bucket.clone(),
                        rest: String::new(),
                    },
                    &args.store,
                    Some(sluice_store::s3::S3Config::DEFAULT_STALL_TIMEOUT),
                )
                .await?;
                (store, rest, format!("{}://{bucket}/", service.scheme()))
            }
            StoreLocation::Local(path) => {
                let (root, rest) = match crate::target::enclosing_store(&path)? {
                    Some(found) => found,
                    None if path.is_dir() => (path.clone(), String::new()),
                    None => {
                        return Err(UsageError(format!(
                            "{} is neither a directory nor in a directory store",
                            path.display()
                        ))
                        .into())
                    }
                };
                // `./store/photos` lists the prefix photos/ as a bucket's
                // `s3://b/photos/` would; a plain directory lists its files.
                let rest = match path.is_dir() || location.ends_with('/') {
                    true => crate::many::as_prefix(&rest),
                    false => rest,
                };
                let store = crate::target::open_store(
                    StoreLocation::Local(root.clone()),
                    &Default::default(),
                    None,
                )
                .await?;
                (store, rest, format!("{}/", root.display()))
            }
        };
    // Names are shown after the listed "directory": `s3://b/photos/20`
    // lists `2026/` and `2025.jpg` under `photos/`.
    let shown_after = match prefix.rfind('/') {
        Some(end) if !recursive => prefix[..=end].len(),
        _ => 0,
    };
    let lister = Lister {
        store: store.as_ref(),
        human: args.human_readable,
        json: args.json,
        shown_after,
        totals: std::cell::Cell::new((0, 0)),
        matcher,
    };
    let shown = if recursive {
        lister.recursive(&prefix).await
    } else {
        lister.one_level(&prefix).await
    }
    .with_context(|| format!("cannot list {display}{prefix}"))?;
    if shown == 0 && !args.json && !crate::output::closed(None) {
        eprintln!("sluice: nothing under {display}{prefix}");
    }
    if args.summarize && !args.json {
        let (objects, bytes) = lister.totals.get();
        let size = match args.human_readable {
            true => format_size(bytes),
            false => format!("{bytes}"),
        };
        crate::output::out!("\nTotal Objects: {objects}\n   Total Size: {size}");
    }
    Ok(())
}

struct Lister<'a> {
    store: &'a dyn ObjectStore,
    human: bool,
    json: bool,
    /// How many leading bytes of a key the text form leaves out.
    shown_after: usize,
    /// Objects and bytes shown so far (for --summarize).
    totals: std::cell::Cell<(u64, u64)>,
    /// A location's wildcard, matched against keys relative to the prefix.
    matcher: Option<globset::GlobMatcher>,
}

impl Lister<'_> {
    async fn recursive(&self, prefix: &str) -> Result<u64, sluice_store::StoreError> {
        let mut cursor: Option<String> = None;
        let mut shown = 0;
        loop {
            let page = self
                .store
                .list_objects(prefix, cursor.as_deref(), PAGE)
                .await?;
            for object in &page.objects {
                let relative = object.key.strip_prefix(prefix).unwrap_or(&object.key);
                let matched = self.matcher.as_ref().is_none_or(|m| m.is_match(relative));
                if matched && !hidden(prefix, &object.key) {
                    if !self.object(object) {
                        return Ok(shown); // the reader went away
                    }
                    shown += 1;
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(shown),
            }
        }
    }

    async fn one_level(&self, prefix: &str) -> Result<u64, sluice_store::StoreError> {
        let mut cursor: Option<String> = None;
        let mut shown = 0;
        loop {
            let page = self
                .store
                .list_directory(prefix, cursor.as_deref(), PAGE)
                .await?;
            for entry in &page.entries {
                if hidden(prefix, entry.name()) {
                    continue;
                }
                let written = match entry {
                    DirectoryEntry::Object(object) => self.object(object),
                    DirectoryEntry::Prefix(sub) => self.prefix(sub),
                };
                if !written {
                    return Ok(shown); // the reader went away
                }
                shown += 1;
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(shown),
            }
        }
    }

    /// One object's line; false once standard output's reader went away.
    fn object(&self, object: &ObjectSummary) -> bool {
        let (objects, bytes) = self.totals.get();
        self.totals.set((objects + 1, bytes + object.size));
        if self.json {
            let line = serde_json::json!({
                "key": object.key,
                "size": object.size,
                "etag": object.etag,
                "last_modified": crate::output::rfc3339(object.last_modified),
            });
            return crate::output::out!("{line}");
        }
        let size = match self.human {
            true => format_size(object.size),
            false => object.size.to_string(),
        };
        crate::output::out!(
            "{} {size:>10} {}",
            crate::output::listing_time(object.last_modified),
            self.name(&object.key)
        )
    }

    /// A key as the text form shows it.
    fn name<'k>(&self, key: &'k str) -> &'k str {
        key.get(self.shown_after..).unwrap_or(key)
    }

    fn prefix(&self, prefix: &str) -> bool {
        if self.json {
            crate::output::out!("{}", serde_json::json!({ "prefix": prefix }))
        } else {
            crate::output::out!("{:>30} {}", "PRE", self.name(prefix))
        }
    }
}

/// sluice's own state (`_sluice/`) is left out of a listing of a whole bucket.
fn hidden(prefix: &str, name: &str) -> bool {
    prefix.is_empty() && is_reserved_key(name)
}
