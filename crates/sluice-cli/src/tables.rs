//! `sluice tables compact|vacuum|expire|checkpoint`: upkeep of a stream's
//! Delta Lake or Iceberg table (which one, the table's root says), run from
//! anywhere that reaches its store (a cron job, a janitor's schedule); every
//! step is a commit or a delete that readers and writers of the table may
//! run beside.

use std::sync::Arc;

use anyhow::Context;
use sluice_streams::table::delta::upkeep::{CompactOptions, CompactReport, VacuumReport};
use sluice_streams::table::delta::{DeltaTable, TableLayout};
use sluice_streams::table::iceberg::IcebergTable;
use sluice_upload::{Engine, EngineConfig};

use crate::args::{TableArgs, TablesCommand};
use crate::UsageError;

/// The shortest vacuum retention: a writer's stored file waits for its
/// commit at most seconds, and a reader's query rarely runs an hour.
pub(crate) const MIN_RETAIN: std::time::Duration = std::time::Duration::from_secs(3600);

/// The table at a root, of whichever format it is.
pub(crate) enum Table {
    Delta(Arc<DeltaTable>),
    Iceberg(Arc<IcebergTable>),
}

impl Table {
    /// Deletes the files no version within `retain` reads (Delta's vacuum,
    /// Iceberg's orphan-file removal), once older than `retain`.
    pub(crate) async fn vacuum(
        &self,
        retain: std::time::Duration,
        dry_run: bool,
    ) -> anyhow::Result<VacuumReport> {
        Ok(match self {
            Table::Delta(table) => table.vacuum(retain, dry_run).await?,
            Table::Iceberg(table) => table.remove_orphans(retain, dry_run).await?,
        })
    }
}

pub async fn run(command: TablesCommand) -> anyhow::Result<()> {
    match command {
        TablesCommand::Compact(args) => {
            if args.target_size == 0 || args.min_files < 2 {
                return Err(UsageError(
                    "--target-size must be above 0 and --min-files at least 2".into(),
                )
                .into());
            }
            let (table, place) = open(&args.table).await?;
            let options = CompactOptions {
                target_bytes: args.target_size,
                min_files: args.min_files,
            };
            let report = match table {
                Table::Delta(table) => table.compact(options).await.map_err(anyhow::Error::from),
                Table::Iceberg(table) => table.compact(options).await.map_err(Into::into),
            }
            .with_context(|| format!("compacting {place}"))?;
            print_compaction(&place, &report);
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
            let Table::Delta(table) = table else {
                return Err(UsageError(format!(
                    "{place} is an Iceberg table, which has no checkpoints (its manifests are merged as it is committed to, and by `sluice tables compact`)"
                ))
                .into());
            };
            let version = table
                .checkpoint_in_parts_of(args.part_actions as usize)
                .await
                .with_context(|| format!("checkpointing {place}"))?;
            crate::output::out!(
                "sluice tables checkpoint: {place}: checkpoint at version {version}"
            );
        }
        TablesCommand::Expire(args) => {
            let (table, place) = open(&args.table).await?;
            let Table::Iceberg(table) = table else {
                return Err(UsageError(format!(
                    "{place} is a Delta Lake table, whose history is kept by its delta.logRetentionDuration (writers clean the log as they checkpoint); `sluice tables vacuum` deletes the files no version reads"
                ))
                .into());
            };
            let report = table
                .expire(args.retain, args.keep.map(|k| k as usize))
                .await
                .with_context(|| format!("expiring snapshots of {place}"))?;
            match report.version {
                Some(version) => crate::output::out!(
                    "sluice tables expire: {place}: {} snapshots dropped (version {version}), {} files deleted",
                    report.snapshots_dropped,
                    report.files_deleted
                ),
                None => crate::output::out!("sluice tables expire: {place}: no snapshot to drop"),
            };
        }
    }
    Ok(())
}

fn print_compaction(place: &str, report: &CompactReport) {
    let manifests = match report.manifests {
        Some((before, after)) if before != after => {
            format!("; {before} manifests merged into {after}")
        }
        _ => String::new(),
    };
    match report.version {
        Some(version) => crate::output::out!(
            "sluice tables compact: {place}: {} files rewritten as {} (version {version}); {} files before, {} after{manifests}",
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

/// The table at `args`' root, through an engine's retrying store: a Delta
/// table when it has a `_delta_log/`, an Iceberg one when it has metadata
/// versions.
pub(crate) async fn open(args: &TableArgs) -> anyhow::Result<(Table, String)> {
    let store = args.store.open().await?;
    let place = format!("{}/{}", store.describe().trim_end_matches('/'), args.table);
    let table_location = args.table.trim_matches('/').to_string();
    if table_location.is_empty() || table_location.contains('{') {
        return Err(UsageError(format!("{:?} is not a table's root key", args.table)).into());
    }
    let root_uri = store.describe();
    let engine = Engine::new(store, EngineConfig::default())?;
    let store: Arc<dyn sluice_store::ObjectStore> = Arc::new(engine.retrying_store());
    let layout = TableLayout {
        location: table_location.clone(),
        partition_columns: Vec::new(),
    };
    let delta_log = store
        .list_objects(&format!("{table_location}/_delta_log/"), None, 1)
        .await
        .with_context(|| format!("listing {place}"))?;
    if !delta_log.objects.is_empty() {
        return Ok((
            Table::Delta(Arc::new(DeltaTable::new(store, layout))),
            place,
        ));
    }
    let iceberg = IcebergTable::new(store, layout, &root_uri);
    if iceberg
        .latest()
        .await
        .with_context(|| format!("reading {place}"))?
        .is_some()
    {
        return Ok((Table::Iceberg(Arc::new(iceberg)), place));
    }
    Err(UsageError(format!(
        "there is no table at {place}: neither a Delta Lake log (_delta_log/) nor Iceberg metadata (metadata/vN.metadata.json)"
    ))
    .into())
}
