//! Upkeep of a Delta table, so that one fed every second for a month stays
//! fast to read: compaction (small files of a partition bin-packed into
//! larger ones, committed as a rewrite that changes no data) and vacuum
//! (files no version within the retention reads, and orphans a writer stored
//! and never committed, deleted once older than the retention).
//!
//! Compaction reads the files through JSON into the union of their schemas
//! (arrow-json fills what a file lacks, nested fields included), so files
//! written under older, narrower schemas merge with newer ones. Its commit
//! removes and adds in one version, and is refused if another writer removed
//! one of the files meanwhile; the files it wrote are then orphans for vacuum.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::json;
use sluice_store::PutRequest;

use super::commit::Change;
use super::features;
use super::log::{self, Add};
use super::properties;
use super::stats::{file_stats, StatsColumns};
use super::{now_ms, Committed, DeltaTable, TableError, SIDECARS};

pub use sluice_table::upkeep::{CompactOptions, CompactReport, VacuumReport};

/// What a clean-up of the log removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogCleanReport {
    /// The checkpoint readers start from, at the earliest, from now on.
    pub kept_from: Option<u64>,
    /// Commits and checkpoints removed.
    pub deleted: usize,
}

impl DeltaTable {
    /// Bin-packs each partition's small files into files of about
    /// `options.target_bytes`, in one commit.
    pub async fn compact(&self, options: CompactOptions) -> Result<CompactReport, TableError> {
        let snapshot = self.read_with_files().await?;
        self.check_protocol(&snapshot)?;
        if features::has(snapshot.protocol.as_ref(), "rowTracking") {
            return Err(TableError::Protocol {
                root: self.layout.location.clone(),
                reason: "the table tracks row ids (feature `rowTracking`), and a rewrite would \
                         have to keep them; sluice does not compact such a table"
                    .into(),
            });
        }
        let files = snapshot.files.clone().unwrap_or_default();
        let mut report = CompactReport {
            files_before: files.len(),
            files_after: files.len(),
            ..CompactReport::default()
        };
        // Per partition, the small files, oldest first.
        let mut partitions: BTreeMap<String, Vec<Add>> = BTreeMap::new();
        // A file with deleted rows (a deletion vector) is left as it is.
        for add in files.values().filter(|add| add.deletion_vector.is_none()) {
            if (add.size as u64) < options.target_bytes {
                let key = serde_json::to_string(&add.partition_values).expect("serializes");
                partitions.entry(key).or_default().push(add.clone());
            }
        }
        let mut bins: Vec<Vec<Add>> = Vec::new();
        for (_, mut small) in partitions {
            small.sort_by_key(|a| (a.modification_time, a.path.clone()));
            bins.extend(sluice_table::upkeep::pack(
                small,
                |a| a.size as u64,
                &options,
            ));
        }
        if bins.is_empty() {
            return Ok(report);
        }
        let stats_columns = snapshot.stats_columns();
        let mut removed = Vec::new();
        let mut added = Vec::new();
        for bin in bins {
            let new = self.rewrite(&bin, &stats_columns).await?;
            removed.extend(bin);
            added.push(new);
        }
        let version = self.replace_files(&removed, &added).await?;
        report.removed = removed.len();
        report.added = added.len();
        report.files_after = report.files_before - removed.len() + added.len();
        report.version = Some(version);
        Ok(report)
    }

    /// Writes the rows of `bin` (files of one partition) as one new file.
    async fn rewrite(&self, bin: &[Add], stats_columns: &StatsColumns) -> Result<Add, TableError> {
        let root = format!("{}/", self.layout.location);
        let mut parts: Vec<Bytes> = Vec::with_capacity(bin.len());
        for add in bin {
            parts.push(
                self.read_object(&format!("{root}{}", log::decode_path(&add.path)))
                    .await?,
            );
        }
        let first = log::decode_path(&bin[0].path);
        let dir = first.rsplit_once('/').map_or("", |(dir, _)| dir);
        let relative = match dir {
            "" => format!("part-compacted-{}.parquet", uuid::Uuid::new_v4().simple()),
            dir => format!(
                "{dir}/part-compacted-{}.parquet",
                uuid::Uuid::new_v4().simple()
            ),
        };
        let key = format!("{root}{relative}");
        let merged =
            tokio::task::spawn_blocking(move || sluice_table::rewrite::merge_parquet(parts, None))
                .await
                .map_err(|e| e.to_string())
                .and_then(|merged| merged)
                .map_err(|reason| TableError::Log {
                    key: key.clone(),
                    reason: format!("compacting: {reason}"),
                })?;
        let size = merged.bytes.len() as i64;
        let mut put = PutRequest::new(key.clone(), merged.bytes);
        put.content_type = Some(crate::PARQUET_CONTENT_TYPE.into());
        self.store
            .put_object(put)
            .await
            .map_err(|e| self.store_error(e))?;
        Ok(Add {
            path: log::encode_path(&relative),
            partition_values: bin[0].partition_values.clone(),
            size,
            modification_time: now_ms(),
            data_change: false,
            stats: Some(
                file_stats(merged.records, Some(&merged.footer), stats_columns).to_string(),
            ),
            ..Add::default()
        })
    }

    /// Commits `removed` out and `added` in as one version that changes no
    /// data; refused if another writer removed one of `removed` first.
    async fn replace_files(&self, removed: &[Add], added: &[Add]) -> Result<u64, TableError> {
        let mut snapshot = self.read_with_files().await?;
        let change = Change {
            operation: json!({
                "operation": "OPTIMIZE",
                "operationParameters": {"targetSize": added.iter().map(|a| a.size).max()},
            }),
            adds: added,
            removes: removed,
            ..Change::default()
        };
        match self.commit_change(&mut snapshot, &change).await? {
            Committed::Version(version) => Ok(version),
            Committed::Already => unreachable!("a change without transactions is never found in"),
        }
    }

    /// Removes the log's commits and checkpoints that no reader needs: older
    /// than the table's `delta.logRetentionDuration` (30 days without it) at
    /// `now`, and before the newest checkpoint that is itself that old (a
    /// reader starts there or later; time travel reaches back as far as the
    /// retention). Nothing when the table sets `delta.enableExpiredLogCleanup`
    /// to false, and nothing before `delta.requireCheckpointProtectionBeforeVersion`
    /// in a table with feature `checkpointProtection`.
    pub async fn clean_log(&self, now: SystemTime) -> Result<LogCleanReport, TableError> {
        let snapshot = self.snapshot().await?;
        let configuration = snapshot.configuration();
        let mut report = LogCleanReport::default();
        if !properties::expired_log_cleanup(configuration) {
            return Ok(report);
        }
        let retention = properties::duration(configuration, properties::LOG_RETENTION)
            .unwrap_or(properties::DEFAULT_LOG_RETENTION);
        let Some(cutoff) = now.checked_sub(retention) else {
            return Ok(report);
        };
        // Every log file: its version, whether it is a checkpoint, its time;
        // and the V2 checkpoints' sidecars.
        let mut listed: Vec<(String, u64, bool, SystemTime)> = Vec::new();
        let mut sidecars: Vec<(String, SystemTime)> = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .store
                .list_objects(&self.log_prefix, cursor.as_deref(), 1000)
                .await
                .map_err(|e| self.store_error(e))?;
            for object in page.objects {
                let name = &object.key[self.log_prefix.len()..];
                if name.starts_with(SIDECARS) {
                    sidecars.push((object.key, object.last_modified));
                    continue;
                }
                let kind = match log::version_of(name) {
                    Some((version, commit)) => Some((version, !commit)),
                    // A commit's checksum file (`000…N.crc`).
                    None => name
                        .strip_suffix(".crc")
                        .filter(|digits| digits.len() == 20)
                        .and_then(|digits| digits.parse().ok())
                        .map(|version| (version, false)),
                };
                if let Some((version, checkpoint)) = kind {
                    listed.push((object.key, version, checkpoint, object.last_modified));
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        // Checkpoints whole and old enough: a multi-part one counts once
        // every part is there (another engine's may have stopped midway).
        let mut parts: BTreeMap<u64, (usize, usize, bool)> = BTreeMap::new();
        for (key, version, checkpoint, at) in &listed {
            if !checkpoint {
                continue;
            }
            let name = &key[self.log_prefix.len()..];
            let total = checkpoint_parts(name);
            let entry = parts.entry(*version).or_insert((0, total, true));
            entry.0 += 1;
            entry.2 &= *at <= cutoff;
        }
        report.kept_from = parts
            .iter()
            .filter(|(_, (seen, total, old))| *old && seen >= total)
            .map(|(version, _)| *version)
            .max();
        let Some(kept_from) = report.kept_from else {
            return Ok(report);
        };
        // Feature `checkpointProtection`: what is before its version stays.
        let protected_before =
            match features::has(snapshot.protocol.as_ref(), "checkpointProtection") {
                true => properties::protected_before(configuration).unwrap_or(u64::MAX),
                false => 0,
            };
        // What goes: older than the retention, before the checkpoint kept,
        // and not protected.
        let goes = |version: u64, at: SystemTime| {
            version < kept_from && version >= protected_before && at <= cutoff
        };
        for (key, version, _, at) in &listed {
            if goes(*version, *at) {
                self.store
                    .delete_object(key)
                    .await
                    .map_err(|e| self.store_error(e))?;
                report.deleted += 1;
            }
        }
        // Sidecars no remaining checkpoint reads, once as old as the
        // retention (a checkpoint being written stores its sidecars first).
        // Any single-file checkpoint may be a V2 one with sidecars: the
        // UUID-named ones, and those under the classic name.
        if sidecars.iter().any(|(_, at)| *at <= cutoff) {
            let mut named = std::collections::BTreeSet::new();
            for (key, version, checkpoint, at) in &listed {
                let name = &key[self.log_prefix.len()..];
                if *checkpoint && !goes(*version, *at) && checkpoint_parts(name) <= 1 {
                    named.extend(self.sidecars_of(name).await?);
                }
            }
            for (key, at) in &sidecars {
                let name = &key[self.log_prefix.len() + SIDECARS.len()..];
                if *at <= cutoff && !named.contains(name) {
                    self.store
                        .delete_object(key)
                        .await
                        .map_err(|e| self.store_error(e))?;
                    report.deleted += 1;
                }
            }
        }
        Ok(report)
    }

    /// Deletes the data files (Parquet) under the table's root that no version within
    /// `retain` reads and that are older than `retain` (nothing in a dry run).
    pub async fn vacuum(
        &self,
        retain: Duration,
        dry_run: bool,
    ) -> Result<VacuumReport, TableError> {
        let snapshot = self.read_with_files().await?;
        self.check_protocol(&snapshot)?;
        // The owner's retention of removed files (Spark's own minimum too).
        if let Some(kept) =
            properties::duration(snapshot.configuration(), properties::DELETED_FILE_RETENTION)
        {
            if retain < kept {
                return Err(TableError::Retention {
                    root: self.layout.location.clone(),
                    reason: format!(
                        "a retention of {} is shorter than the table's {} ({}); \
                         readers of older versions may still read those files",
                        humantime::format_duration(retain),
                        properties::DELETED_FILE_RETENTION,
                        humantime::format_duration(kept)
                    ),
                });
            }
        }
        let absolute = |path: &String| path.contains("://");
        if let Some(path) = snapshot
            .files
            .iter()
            .flatten()
            .map(|(path, _)| path)
            .chain(snapshot.tombstones.iter().flatten().map(|(_, r)| &r.path))
            .find(|path| absolute(path))
        {
            return Err(TableError::Log {
                key: path.clone(),
                reason: "the table names files by absolute URI; vacuum only knows paths \
                         relative to the table"
                    .into(),
            });
        }
        let since_ms = now_ms() - retain.as_millis() as i64;
        let root = format!("{}/", self.layout.location);
        let mut referenced: HashSet<String> = snapshot
            .files
            .iter()
            .flatten()
            .map(|(path, _)| format!("{root}{}", log::decode_path(path)))
            .collect();
        referenced.extend(
            snapshot
                .tombstones
                .iter()
                .flatten()
                .filter(|(_, r)| r.deletion_timestamp.unwrap_or(i64::MAX) >= since_ms)
                .map(|(_, r)| format!("{root}{}", log::decode_path(&r.path))),
        );
        let cutoff = SystemTime::now() - retain;
        let mut report = VacuumReport::default();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .store
                .list_objects(&root, cursor.as_deref(), 1000)
                .await
                .map_err(|e| self.store_error(e))?;
            for object in page.objects {
                let rest = &object.key[root.len()..];
                // The log, hidden files (`_`/`.` first, as Delta has it), and
                // anything that is not a data file (a dead letter, notes):
                // not the table's to delete.
                if rest.starts_with("_delta_log/")
                    || rest
                        .split('/')
                        .any(|s| s.starts_with('_') || s.starts_with('.'))
                    || !rest.ends_with(".parquet")
                {
                    report.not_data += usize::from(!rest.starts_with("_delta_log/"));
                    continue;
                }
                if referenced.contains(&object.key) {
                    report.referenced += 1;
                } else if object.last_modified > cutoff {
                    report.kept_young += 1;
                } else {
                    report.deleted.push(object.key);
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if !dry_run {
            for key in &report.deleted {
                self.store
                    .delete_object(key)
                    .await
                    .map_err(|e| self.store_error(e))?;
            }
        }
        Ok(report)
    }
}

/// How many files checkpoint file `name` says its checkpoint has:
/// `N.checkpoint.P.T.parquet` is part P of T; any other is whole.
fn checkpoint_parts(name: &str) -> usize {
    let middle = name
        .get(20..)
        .and_then(|rest| rest.strip_prefix(".checkpoint."))
        .and_then(|rest| rest.strip_suffix(".parquet"));
    match middle.and_then(|m| m.split_once('.')) {
        Some((part, total)) if part.len() == 10 && total.len() == 10 => total.parse().unwrap_or(1),
        _ => 1,
    }
}
