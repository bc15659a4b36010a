//! `sluice tables compact|vacuum|checkpoint`: upkeep of a stream's Delta Lake
//! table, run from anywhere that reaches its store (a cron job, a janitor's
//! schedule); every step is a commit or a delete that readers and writers of
//! the table may run beside.

use std::sync::Arc;

use anyhow::Context;
use sluice_streams::table::delta::upkeep::CompactOptions;
use sluice_streams::table::delta::{DeltaTable, TableLayout};
use sluice_upload::{Engine, EngineConfig};

use crate::args::{TableArgs, TablesCommand};
use crate::UsageError;

/// The shortest vacuum retention: a writer's stored file waits for its
/// commit at most seconds, and a reader's query rarely runs an hour.
pub(crate) const MIN_RETAIN: std::time::Duration = std::time::Duration::from_secs(3600);

pub async fn run(command: TablesCommand) -> anyhow::Result<()> {
    match command {
        TablesCommand::Compact(args) => {
            let (table, place) = open(&args.table).await?;
            if args.target_size == 0 || args.min_files < 2 {
                return Err(UsageError(
                    "--target-size must be above 0 and --min-files at least 2".into(),
                )
                .into());
            }
            let report = table
                .compact(CompactOptions {
                    target_bytes: args.target_size,
                    min_files: args.min_files,
                })
                .await
                .with_context(|| format!("compacting {place}"))?;
            match report.version {
                Some(version) => crate::output::out!(
                    "sluice tables compact: {place}: {} files rewritten as {} (version {version}); {} files before, {} after",
                    report.removed,
                    report.added,
                    report.files_before,
                    report.files_after
                ),
                None => crate::output::out!(
                    "sluice tables compact: {place}: nothing to compact ({} files)",
                    report.files_before
                ),
            };
        }
        TablesCommand::Vacuum(args) => {
            if args.retain < MIN_RETAIN {
                return Err(UsageError(
                    "--retain must be at least 1h: a shorter one may delete a file a writer is about to commit, or one a reader of a recent version is reading".into(),
                )
                .into());
            }
            let (table, place) = open(&args.table).await?;
            let report = table
                .vacuum(args.retain, args.dry_run)
                .await
                .with_context(|| format!("vacuuming {place}"))?;
            let verb = if args.dry_run {
                "would delete"
            } else {
                "deleted"
            };
            for key in &report.deleted {
                crate::output::out!("{verb} {key}");
            }
            crate::output::out!(
                "sluice tables vacuum: {place}: {verb} {} files; kept {} the table reads and {} younger than {}",
                report.deleted.len(),
                report.referenced,
                report.kept_young,
                humantime::format_duration(args.retain)
            );
        }
        TablesCommand::Checkpoint(args) => {
            let (table, place) = open(&args.table).await?;
            let version = table
                .checkpoint_in_parts_of(args.part_actions as usize)
                .await
                .with_context(|| format!("checkpointing {place}"))?;
            crate::output::out!(
                "sluice tables checkpoint: {place}: checkpoint at version {version}"
            );
        }
    }
    Ok(())
}

/// The table, through an engine's retrying store.
pub(crate) async fn open(args: &TableArgs) -> anyhow::Result<(Arc<DeltaTable>, String)> {
    let store = args.store.open().await?;
    let place = format!("{}/{}", store.describe().trim_end_matches('/'), args.table);
    let table_location = args.table.trim_matches('/').to_string();
    if table_location.is_empty() || table_location.contains('{') {
        return Err(UsageError(format!("{:?} is not a table's root key", args.table)).into());
    }
    let engine = Engine::new(store, EngineConfig::default())?;
    let layout = TableLayout {
        location: table_location,
        partition_columns: Vec::new(),
    };
    let table = Arc::new(DeltaTable::new(Arc::new(engine.retrying_store()), layout));
    Ok((table, place))
}
