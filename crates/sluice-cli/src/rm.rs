//! `sluice rm`: removes one object, or every object under a prefix that the
//! filters select, in batches (DeleteObjects on S3, 1,000 keys a request);
//! `--dry-run` lists them and removes nothing.

use std::sync::Arc;

use futures::StreamExt;

use sluice_store::{error_chain, ObjectStore, StoreLocation};
use sluice_upload::EngineConfig;

use crate::args::RmArgs;
use crate::many::filter::Filter;
use crate::many::run::{Action, Job, Options, Output, Roots};
use crate::many::{self, Feed, Listed, Side};
use crate::UsageError;

pub async fn run(mut args: RmArgs) -> anyhow::Result<()> {
    let wildcard = match args.raw {
        true => None,
        false => crate::wildcard::Wildcard::split(&args.location),
    };
    if let Some(wildcard) = &wildcard {
        args.location = wildcard.base.clone();
    }
    let location = StoreLocation::parse(&args.location).map_err(|e| UsageError(e.to_string()))?;
    let single_key = match &location {
        StoreLocation::Bucket { rest, .. } if !rest.is_empty() && !rest.ends_with('/') => {
            Some(rest.clone())
        }
        StoreLocation::Bucket {
            service, bucket, ..
        } if !args.location.ends_with('/') => {
            return Err(UsageError(format!(
                "{}: to remove every object in the {}, write {}://{bucket}/",
                args.location,
                service.bucket_word(),
                service.scheme()
            ))
            .into())
        }
        StoreLocation::Bucket { .. } => None,
        StoreLocation::Local(path) if !args.location.ends_with('/') => {
            return Err(UsageError(format!(
                "{}: a local location is a directory store and must end with / (use rm(1) for a file)",
                path.display()
            ))
            .into())
        }
        // Files are removed only from a directory store: a plain directory
        // (or a wildcard's base, `./`) is rm(1)'s to clear.
        StoreLocation::Local(path) if crate::target::enclosing_store(path)?.is_none() => {
            return Err(UsageError(format!(
                "{} is not in a directory store (no .sluice/ in it or above it): use rm(1) for plain files",
                path.display()
            ))
            .into())
        }
        StoreLocation::Local(_) => None,
    };
    if single_key.is_some() && (!args.include.is_empty() || !args.exclude.is_empty()) {
        return Err(UsageError(
            "--include and --exclude select under a prefix: end the location with /".into(),
        )
        .into());
    }
    // For one key, the side is the bucket and the key is taken whole.
    let side_location = match (&location, &single_key) {
        (
            StoreLocation::Bucket {
                service, bucket, ..
            },
            Some(_),
        ) => format!("{}://{bucket}/", service.scheme()),
        _ => args.location.clone(),
    };
    let prefix = Side::open_store(&side_location, crate::target::Intent::Read, &args.store).await?;
    let engine = crate::batch::engine(prefix.store.clone(), EngineConfig::default())?;
    let store = engine.retrying_store();
    let roots = Arc::new(Roots {
        source: String::new(),
        target: prefix.root(),
    });
    let removals: Feed = match single_key {
        None => {
            let filter = Filter::new(&args.include, &args.exclude)?.matching(wildcard.as_ref())?;
            let listing = many::listing(&prefix, &engine, filter).await?;
            listing
                .map(move |object| {
                    let object = object?;
                    Ok(Listed::Job(Job {
                        action: Action::RemoveKey { key: object.key },
                        size: object.size,
                        roots: roots.clone(),
                    }))
                })
                .boxed()
        }
        Some(key) => {
            let shown = prefix.show(&key);
            let meta = match store.head_object(&key).await {
                Ok(meta) => meta,
                Err(e) => {
                    let hint = match e {
                        sluice_store::StoreError::NoSuchKey { .. } => {
                            crate::prefix_hint(&store, &key, &args.location, "remove").await
                        }
                        _ => None,
                    };
                    let error = anyhow::anyhow!("{shown}: {}", error_chain(&e));
                    return Err(match hint {
                        Some(hint) => error.context(hint),
                        None => error,
                    });
                }
            };
            many::known(vec![Listed::Job(Job {
                action: Action::RemoveKey { key },
                size: meta.size,
                roots,
            })])
        }
    };
    let options = Options {
        jobs: 1,
        fail_fast: false,
        verbose: args.verbose,
        json: args.json,
        quiet: true,
        object: Default::default(),
        move_sources: false,
        no_clobber: false,
        dry_run: false,
    };
    if args.dry_run {
        let output = Output::new(&options);
        let mut removals = removals;
        let mut count = 0u64;
        while let Some(listed) = removals.next().await {
            if let Listed::Job(job) = listed? {
                output.finished(&job, None, true);
                count += 1;
            }
        }
        if !args.json {
            crate::output::out!(
                "dry run: {} would be deleted; nothing changed",
                crate::output::count(count, "object")
            );
        }
        return Ok(());
    }
    many::finish(
        &engine,
        "deleted",
        many::nothing(),
        Some(removals),
        &options,
        None,
    )
    .await
}
