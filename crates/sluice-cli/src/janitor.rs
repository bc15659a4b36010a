//! `sluice janitor`: one janitor pass over a store (expired resumable uploads,
//! stale multipart uploads), printed as it went; optionally installs the bucket
//! lifecycle rule that makes S3 abort incomplete uploads by itself. An upload
//! it finishes is announced through the gateway's completion point: with
//! `--event-url`, its `upload.completed` event is in the store's outbox when
//! the pass ends (the gateways on the store deliver it), and the pass settles
//! the intents that runs killed midway left.

use std::time::SystemTime;

use anyhow::{anyhow, Context};
use sluice_resumable::Resumable;
use sluice_server::ServerConfig;
use sluice_upload::{Engine, EngineConfig};

use crate::args::JanitorArgs;

pub async fn run(args: JanitorArgs) -> anyhow::Result<()> {
    let store = args.store.open().await?;
    let description = store.describe();
    let engine = Engine::new(store.clone(), EngineConfig::default())?;
    // An upload this pass finishes is announced as the gateway announces one:
    // with --event-url its event is in the outbox when the pass ends.
    let announcing = crate::announcing::Announcing::through(&engine, &args.events)?;
    // Expiry is recorded in each upload; the gateway's defaults only shape how
    // it is swept.
    let resumable = Resumable::new(engine, ServerConfig::default().resumable_config());
    // The uploads of imports a gateway still carries on are not stale.
    let imports = sluice_server::imports::record::running_upload_ids(&store)
        .await
        .with_context(|| format!("reading the imports on {description}"))?;
    let report = sluice_resumable::janitor::run_once_sparing(
        &resumable,
        args.older_than,
        args.dry_run,
        SystemTime::now(),
        &imports,
    )
    .await
    .with_context(|| format!("janitor pass on {description}"))?;
    let verb = if args.dry_run {
        "would abort"
    } else {
        "aborted"
    };
    crate::output::out!(
        "sluice janitor: {description}{}",
        if args.dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        }
    );
    let r = &report.resumable;
    crate::output::out!(
        "  resumable uploads: {} seen, {} expired removed, {} finished retired, {} orphaned state removed, {} with every byte in finished, {} live",
        r.seen,
        r.expired,
        r.retired,
        r.orphans,
        r.finished.len(),
        r.live_multipart_ids.len()
    );
    let m = &report.multipart;
    crate::output::out!(
        "  multipart uploads: {} listed, {} {verb}, {} kept for live resumable uploads, {} younger than {}, {} failed",
        m.listed,
        m.aborted.len(),
        m.spared,
        m.too_young,
        humantime::format_duration(args.older_than),
        m.failed.len()
    );
    for upload in &m.aborted {
        let age = upload
            .age
            .map(|a| {
                humantime::format_duration(std::time::Duration::from_secs(a.as_secs())).to_string()
            })
            .unwrap_or_else(|| "age unknown".into());
        crate::output::out!(
            "  {verb} {} (upload {}, {age})",
            upload.key,
            upload.upload_id
        );
    }
    for upload in &m.failed {
        crate::output::out!(
            "  could not abort {} (upload {})",
            upload.key,
            upload.upload_id
        );
    }
    // Intents left by a run killed between an object and its event (this
    // command's, a gateway's, `sluice ingest`'s) become their events now.
    if !args.dry_run {
        if let Some(settled) = announcing.reconcile_now().await {
            crate::output::out!(
                "  intents: {} announced, {} dropped (never made), {} waiting",
                settled.confirmed,
                settled.dropped,
                settled.waiting
            );
        }
    }
    if let Some(days) = args.install_lifecycle {
        if args.dry_run {
            crate::output::out!(
                "  would install a lifecycle rule aborting incomplete uploads after {days} day(s)"
            );
        } else {
            store
                .install_abort_lifecycle(days)
                .await
                .with_context(|| format!("installing the lifecycle rule on {description}"))?;
            crate::output::out!("  lifecycle rule installed: the store aborts uploads left incomplete for {days} day(s)");
        }
    }
    for table in &args.tables {
        // A writer's file waits seconds for its commit; readers of recent
        // versions keep theirs: an hour at least, as `tables vacuum`.
        let retain = args.older_than.max(crate::tables::MIN_RETAIN);
        let table_args = crate::args::TableArgs {
            store: args.store.clone(),
            table: table.clone(),
        };
        let (found, place) = crate::tables::open(&table_args).await?;
        let vacuumed = found
            .vacuum(retain, args.dry_run)
            .await
            .with_context(|| format!("vacuuming {place}"))?;
        let deleted = if args.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        crate::output::out!(
            "  table {table}: {deleted} {} files no version reads (orphans included), kept {} it reads and {} younger than {}",
            vacuumed.deleted.len(),
            vacuumed.referenced,
            vacuumed.kept_young,
            humantime::format_duration(retain)
        );
        for key in &vacuumed.deleted {
            crate::output::out!("  {deleted} {key}");
        }
    }
    if !m.failed.is_empty() {
        return Err(anyhow!(
            "{} multipart upload(s) could not be aborted",
            m.failed.len()
        ));
    }
    Ok(())
}
