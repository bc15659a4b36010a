//! A Delta Lake table in an object store, committed to by sluice itself:
//! the log is read (from version 0, or from a checkpoint) into a
//! [`Snapshot`], and a commit is the next version's file written with
//! `If-None-Match: *`, the S3 conditional write that lets exactly one writer
//! have each version (no DynamoDB, no catalog). A writer that loses a version
//! reads what won and tries the next one, unless what won moved one of its
//! application transactions: then another owner has that data's place, and
//! this writer is [`TableError::Fenced`].
//!
//! Application transactions (`txn`) make commits exactly once: each commit
//! names, per transaction, the version the table must hold before it
//! (`after`) and the one it holds after (`version`). A Kafka partition's is
//! its next offset; a gateway's or `sluice ingest`'s is its own count of
//! commits. A commit whose answer was lost (or whose retry was refused by
//! its own precondition) is found by reading back the version it wrote: it
//! is this writer's only when that version holds exactly its bytes; the same
//! transactions moved by another commit are [`Committed::Already`].
//!
//! Only appends (and compaction's rewrite, which changes no data) are
//! written here; other writers' actions (removes, other transactions, schema
//! changes) are read and kept. Which tables sluice writes to at all is
//! [`features`]' answer; what the I/O-free parts are: [`log`] (actions),
//! [`features`] (the protocol checker), [`schema`], [`mapping`] (column
//! mapping), [`stats`], [`checkpoint`] (its file format), [`properties`].
//! Over the store: this module (reading the log into a [`Snapshot`]),
//! `commit` (the one commit loop), [`upkeep`] (compaction, vacuum, the log's
//! clean-up) and [`listener`] (who hears of a commit's files).

pub mod checkpoint;
mod commit;
pub mod features;
pub mod log;
pub mod mapping;
pub mod properties;
pub mod schema;
pub mod stats;
pub mod upkeep;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::BytesMut;
use futures::TryStreamExt;
use serde_json::{json, Value};
use sluice_store::{ObjectStore, PutRequest, StoreError};

use listener::CommitListener;
use log::{Action, Add, MetaData, Protocol, Remove, Txn};

pub use sluice_table::{
    is_key_txn, key_txn, listener, Committed, NewFile, TableLayout, Transaction,
    HIVE_DEFAULT_PARTITION, KEY_RETENTION, PARQUET_CONTENT_TYPE,
};

/// Why a table could not be read or committed to.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TableError {
    #[error("the Delta table at {root}: {source}")]
    Store {
        root: String,
        source: Arc<StoreError>,
    },
    #[error("the Delta log {key} does not read: {reason}")]
    Log { key: String, reason: String },
    #[error("the Delta table at {root} cannot be appended to: {reason}")]
    Protocol { root: String, reason: String },
    #[error("the Delta table at {root}: {reason}")]
    Schema { root: String, reason: String },
    /// Another writer committed this transaction's data: the files of this
    /// commit are not in the table, and must not be.
    #[error(
        "another writer committed transaction {app_id} first (the table holds {found:?}, \
         this writer expected {expected:?}); its files were left out"
    )]
    Fenced {
        app_id: String,
        expected: Option<i64>,
        found: Option<i64>,
    },
    /// The store carries out a create-only write as a plain one: two writers
    /// could both take one version of the log.
    #[error(
        "the store does not honour If-None-Match (a second create-only write of the same key \
         succeeded), so two writers could both take one version of the Delta log at {root}; \
         sluice does not commit to it"
    )]
    CreateOnlyIgnored { root: String },
    /// A retention shorter than the one the table's owner set.
    #[error("the Delta table at {root}: {reason}")]
    Retention { root: String, reason: String },
    /// The file was left out of the table on purpose.
    #[error("the file was not added to the table: {reason}")]
    Withdrawn { reason: String },
    #[error("{key} is not under the table's location {root}")]
    Outside { key: String, root: String },
}

/// The table as of one version.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// None: no commit yet (the table does not exist).
    pub version: Option<u64>,
    pub protocol: Option<Protocol>,
    pub metadata: Option<MetaData>,
    /// Application transactions: app id → latest version.
    pub txns: HashMap<String, i64>,
    /// When each transaction last moved (ms since the epoch), when known.
    pub txn_updated: HashMap<String, i64>,
    /// The data files (path as in the log → its add), when tracked.
    pub files: Option<BTreeMap<String, Add>>,
    /// Files removed (see [`log::file_id`] → its remove), tracked with the
    /// files: vacuum keeps them for the retention, checkpoints carry them.
    /// One path may be there more than once, with different deletion vectors.
    pub tombstones: Option<BTreeMap<String, Remove>>,
    /// The table's domains (`domainMetadata`), by name.
    pub domains: BTreeMap<String, log::DomainMetadata>,
    /// The latest version's `inCommitTimestamp`, when it has one.
    pub in_commit_timestamp: Option<i64>,
    /// The last log key read (the next listing starts after it).
    listed: Option<String>,
    /// A version's actions were being applied and did not all arrive (the
    /// read failed, or its future was dropped midway): read again whole.
    half_applied: bool,
}

impl Snapshot {
    /// Whether `app_id` is an idempotency key committed more than
    /// [`KEY_RETENTION`] before `now`: checkpoints leave it out. Every other
    /// transaction (writers, Kafka partitions) is kept for good.
    fn key_expired(&self, app_id: &str, now: i64) -> bool {
        is_key_txn(app_id)
            && self
                .txn_updated
                .get(app_id)
                .is_some_and(|&at| at < now - KEY_RETENTION.as_millis() as i64)
    }

    /// Forgets the expired idempotency keys (a long-running writer's memory).
    fn forget_expired_keys(&mut self) {
        let now = now_ms();
        let expired: Vec<String> = self
            .txns
            .keys()
            .filter(|app_id| self.key_expired(app_id, now))
            .cloned()
            .collect();
        for app_id in expired {
            self.txns.remove(&app_id);
            self.txn_updated.remove(&app_id);
        }
    }

    /// Whether the table has held the data file stored at `key` (added, and
    /// still there or removed since), for a snapshot read with its files.
    pub fn has_held(&self, layout: &TableLayout, key: &str) -> bool {
        let Some(relative) = key.strip_prefix(&format!("{}/", layout.location)) else {
            return false;
        };
        let path = log::encode_path(relative);
        // Another writer may escape a path otherwise: compared decoded too.
        let names = |paths: Vec<&String>| {
            paths.iter().any(|p| **p == path)
                || paths.iter().any(|p| log::decode_path(p) == relative)
        };
        names(self.files.iter().flat_map(|f| f.keys()).collect())
            || names(
                self.tombstones
                    .iter()
                    .flat_map(|t| t.values().map(|r| &r.path))
                    .collect(),
            )
    }

    /// The versions between checkpoints the table asks for
    /// (`delta.checkpointInterval`).
    pub fn checkpoint_interval(&self) -> u64 {
        checkpoint::interval(self.configuration())
    }

    /// The table's properties (`metaData.configuration`; none before its
    /// first commit).
    pub fn configuration(&self) -> &BTreeMap<String, Option<String>> {
        static NONE: BTreeMap<String, Option<String>> = BTreeMap::new();
        self.metadata.as_ref().map_or(&NONE, |m| &m.configuration)
    }

    /// Which columns its files' statistics cover.
    pub fn stats_columns(&self) -> stats::StatsColumns {
        let columns = stats::StatsColumns::of(self.configuration());
        // Named by their logical names; the files' columns are physical.
        match (columns, self.column_mapping()) {
            (stats::StatsColumns::Named(names), Ok(Some(mapping))) => stats::StatsColumns::Named(
                names
                    .iter()
                    .map(|name| {
                        let path: Vec<&str> = name.split('.').collect();
                        mapping
                            .physical_path(&path)
                            .map_or_else(|| name.clone(), |p| p.join("."))
                    })
                    .collect(),
            ),
            (columns, _) => columns,
        }
    }

    /// Why sluice must not write to the table (see [`features::refusal`]);
    /// None before its first commit.
    pub fn refusal(&self) -> Option<String> {
        features::refusal(self.protocol.as_ref()?, self.metadata.as_ref())
    }

    /// The table's schema (a Delta struct type), if it has one.
    pub fn schema(&self) -> Option<Value> {
        let metadata = self.metadata.as_ref()?;
        serde_json::from_str(&metadata.schema_string).ok()
    }

    /// The column mapping of a table that maps its columns.
    pub fn column_mapping(&self) -> Result<Option<mapping::ColumnMapping>, String> {
        match &self.metadata {
            Some(metadata) => mapping::ColumnMapping::of(metadata),
            None => Ok(None),
        }
    }

    /// Whether table property `key` is `true`.
    pub fn property_is_true(&self, key: &str) -> bool {
        self.configuration()
            .get(key)
            .and_then(|v| v.as_deref())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// Whether the table asks for in-commit timestamps.
    pub fn in_commit_timestamps(&self) -> bool {
        self.property_is_true(properties::IN_COMMIT_TIMESTAMPS)
    }

    /// The highest row id given (`delta.rowTracking`'s high-water mark);
    /// None before any.
    pub fn row_id_high_water_mark(&self) -> Option<i64> {
        let domain = self.domains.get(ROW_TRACKING_DOMAIN)?;
        let configuration: Value = serde_json::from_str(&domain.configuration).ok()?;
        configuration.get("rowIdHighWaterMark")?.as_i64()
    }

    /// Applies one version's actions (a commit's, or a checkpoint's): see
    /// [`Applying`].
    fn apply(&mut self, version: u64, actions: Vec<Action>) {
        let mut applying = self.applying(version);
        for action in actions {
            applying.take(action);
        }
        applying.finish();
    }

    /// An empty snapshot of the same kind (tracking files or not), to be
    /// read again from the start.
    fn unread(&self) -> Snapshot {
        let tracking = self.files.is_some();
        Snapshot {
            files: tracking.then(BTreeMap::new),
            tombstones: tracking.then(BTreeMap::new),
            ..Snapshot::default()
        }
    }

    /// Starts applying version `version`'s actions one at a time.
    fn applying(&mut self, version: u64) -> Applying<'_> {
        self.version = Some(version);
        self.in_commit_timestamp = None;
        self.half_applied = true;
        Applying { snapshot: self }
    }
}

/// One version's actions applied to a snapshot as they are read (a commit of
/// many files is never in memory as text or actions beside the snapshot).
/// The protocol knows a file as `(path, deletion vector)`: a file that gains
/// a deletion vector is removed and added again under its path in one
/// commit (Spark writes the add first), and a checkpoint holds that file's
/// add and its old remove side by side. So a remove takes a file out only
/// when it names the file's vector too, in whatever order the two come.
struct Applying<'a> {
    snapshot: &'a mut Snapshot,
}

impl Applying<'_> {
    fn take(&mut self, action: Action) {
        let snapshot = &mut *self.snapshot;
        match action {
            Action::Add(add) => {
                if let Some(tombstones) = &mut snapshot.tombstones {
                    tombstones.remove(&log::file_id(&add.path, add.deletion_vector.as_deref()));
                }
                if let Some(files) = &mut snapshot.files {
                    files.insert(add.path.clone(), add);
                }
            }
            Action::Protocol(p) => snapshot.protocol = Some(p),
            Action::MetaData(m) => snapshot.metadata = Some(m),
            Action::Txn(t) => {
                match t.last_updated {
                    Some(at) => snapshot.txn_updated.insert(t.app_id.clone(), at),
                    None => snapshot.txn_updated.remove(&t.app_id),
                };
                snapshot.txns.insert(t.app_id, t.version);
            }
            Action::Remove(remove) => {
                // The file's identity (path and vector id), not every field
                // of the vector: a remove may leave out optional ones.
                let id = log::file_id(&remove.path, remove.deletion_vector.as_deref());
                if let Some(files) = &mut snapshot.files {
                    if files.get(&remove.path).is_some_and(|add| {
                        log::file_id(&add.path, add.deletion_vector.as_deref()) == id
                    }) {
                        files.remove(&remove.path);
                    }
                }
                if let Some(tombstones) = &mut snapshot.tombstones {
                    tombstones.insert(id, remove);
                }
            }
            Action::DomainMetadata(domain) => {
                if domain.removed {
                    snapshot.domains.remove(&domain.domain);
                } else {
                    snapshot.domains.insert(domain.domain.clone(), domain);
                }
            }
            Action::CommitInfo(info) => {
                snapshot.in_commit_timestamp =
                    info.get("inCommitTimestamp").and_then(Value::as_i64);
            }
            Action::CheckpointMetadata(_) | Action::Sidecar(_) => {}
        }
    }

    /// Every action of the version was taken.
    fn finish(self) {
        self.snapshot.half_applied = false;
    }
}

/// The domain that holds row tracking's high-water mark.
pub const ROW_TRACKING_DOMAIN: &str = "delta.rowTracking";

/// A stored file's add action: its path relative to the table, and the
/// partition values its directories name.
fn add_action(
    layout: &TableLayout,
    file: &NewFile,
    now_ms: i64,
    stats: &stats::StatsColumns,
) -> Result<Add, TableError> {
    let relative = layout
        .relative(&file.key)
        .ok_or_else(|| TableError::Outside {
            key: file.key.clone(),
            root: layout.location.clone(),
        })?;
    Ok(Add {
        path: log::encode_path(relative),
        partition_values: layout.partition_values(relative),
        size: file.size as i64,
        modification_time: now_ms,
        data_change: true,
        stats: Some(stats::file_stats(file.records, file.footer.as_deref(), stats).to_string()),
        ..Add::default()
    })
}

/// One Delta table, as one writer sees it.
pub struct DeltaTable {
    store: Arc<dyn ObjectStore>,
    layout: TableLayout,
    log_prefix: String,
    /// The latest snapshot read; commits take it in turn.
    snapshot: tokio::sync::Mutex<Snapshot>,
    /// Who hears of the files its commits add.
    listener: Option<Arc<dyn CommitListener>>,
    /// The table's checkpoint interval as last read (see [`Snapshot::checkpoint_interval`]).
    checkpoint_interval: std::sync::atomic::AtomicU64,
    /// Whether the store refuses a second create-only write of a key, found
    /// out before this writer's first commit (see `commit`).
    create_only_honoured: tokio::sync::OnceCell<bool>,
}

impl std::fmt::Debug for DeltaTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeltaTable({})", self.layout.location)
    }
}

fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// Where a V2 checkpoint's sidecars are, under the log.
pub(crate) const SIDECARS: &str = "_sidecars/";

/// The sidecars a V2 checkpoint's `actions` name, as their paths are given:
/// relative to `_delta_log/_sidecars/`, or a path of their own.
fn sidecar_names(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Sidecar(sidecar) => Some(sidecar.path.clone()),
            _ => None,
        })
        .collect()
}

/// A checkpoint's actions handed out a part at a time: each part is
/// collected (cloned from the snapshot) only when it is built.
struct Parts<I> {
    actions: I,
    total: usize,
    part_actions: usize,
}

impl<I: Iterator<Item = Action>> Parts<I> {
    fn new(actions: I, total: usize, part_actions: usize) -> Self {
        Parts {
            actions,
            total,
            part_actions: part_actions.max(1),
        }
    }

    /// How many parts (0 for no actions).
    fn count(&self) -> usize {
        self.total.div_ceil(self.part_actions)
    }

    /// The next part's actions.
    fn next_part(&mut self) -> Vec<Action> {
        self.actions.by_ref().take(self.part_actions).collect()
    }
}

/// A sidecar's name under the log (a path with a `/` is left as it is).
fn sidecar_key(sidecar: &str) -> String {
    match sidecar.contains('/') {
        true => sidecar.to_owned(),
        false => format!("{SIDECARS}{sidecar}"),
    }
}

impl DeltaTable {
    /// The table at `layout.location` in `store` (not read yet).
    pub fn new(store: Arc<dyn ObjectStore>, layout: TableLayout) -> DeltaTable {
        let log_prefix = format!("{}/_delta_log/", layout.location);
        DeltaTable {
            store,
            layout,
            log_prefix,
            snapshot: tokio::sync::Mutex::new(Snapshot::default()),
            listener: None,
            checkpoint_interval: checkpoint::DEFAULT_INTERVAL.into(),
            create_only_honoured: tokio::sync::OnceCell::new(),
        }
    }

    /// The same table, its commits heard by `listener`.
    pub fn listened_by(mut self, listener: Arc<dyn CommitListener>) -> DeltaTable {
        self.listener = Some(listener);
        self
    }

    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }

    fn store_error(&self, source: StoreError) -> TableError {
        TableError::Store {
            root: self.layout.location.clone(),
            source: Arc::new(source),
        }
    }

    /// The table as it is now (read from where the last read stopped).
    pub async fn snapshot(&self) -> Result<Snapshot, TableError> {
        let mut snapshot = self.snapshot.lock().await;
        self.refresh(&mut snapshot).await?;
        Ok(snapshot.clone())
    }

    /// The whole table, its data files included, read afresh.
    pub async fn read_with_files(&self) -> Result<Snapshot, TableError> {
        let mut snapshot = Snapshot {
            files: Some(BTreeMap::new()),
            tombstones: Some(BTreeMap::new()),
            ..Snapshot::default()
        };
        self.refresh(&mut snapshot).await?;
        Ok(snapshot)
    }

    /// Reads the commits after `snapshot`'s into it (a snapshot not read
    /// yet starts at the latest checkpoint).
    async fn refresh(&self, snapshot: &mut Snapshot) -> Result<(), TableError> {
        if snapshot.half_applied {
            // A read of it was dropped midway (a cancelled future).
            *snapshot = snapshot.unread();
        }
        if snapshot.version.is_none() && snapshot.listed.is_none() {
            self.start_at_checkpoint(snapshot).await?;
        }
        // Started again from the latest checkpoint once: the commits after
        // this snapshot's version were cleaned up behind a newer checkpoint
        // (a reader idle longer than the log's retention).
        let mut started_again = false;
        'listing: loop {
            let page = self
                .store
                .list_objects(&self.log_prefix, snapshot.listed.as_deref(), 1000)
                .await
                .map_err(|e| self.store_error(e))?;
            let last_page = page.next_cursor.is_none();
            for object in page.objects {
                let name = &object.key[self.log_prefix.len()..];
                let expected = snapshot.version.map_or(0, |v| v + 1);
                match log::version_of(name) {
                    Some((version, true)) if version == expected => {
                        let mut applying = snapshot.applying(version);
                        let read = self
                            .read_commit_each(&object.key, |action| applying.take(action))
                            .await;
                        if let Err(error) = read {
                            // Half applied: this snapshot is read again whole.
                            *snapshot = snapshot.unread();
                            return Err(error);
                        }
                        applying.finish();
                    }
                    Some((version, true)) if version > expected && !started_again => {
                        started_again = true;
                        tracing::info!(
                            from = expected,
                            table = %self.layout.location,
                            "the commits after this reader's version were cleaned up; reading again from the latest checkpoint"
                        );
                        *snapshot = snapshot.unread();
                        self.start_at_checkpoint(snapshot).await?;
                        continue 'listing;
                    }
                    Some((version, true)) if version > expected => {
                        return Err(TableError::Log {
                            key: object.key.clone(),
                            reason: format!(
                                "version {expected} is missing, and no checkpoint after it \
                                 (a log cleaned up past its checkpoints)"
                            ),
                        });
                    }
                    _ => {}
                }
                // Only past what was read (a commit that failed to read is
                // listed again next time), and only past the log's versions:
                // `_last_checkpoint` and the like sort after every commit,
                // and a listing that went on after them would never see
                // another commit.
                if log::version_of(name).is_some() {
                    snapshot.listed = Some(object.key.clone());
                }
            }
            if last_page {
                self.checkpoint_interval.store(
                    snapshot.checkpoint_interval(),
                    std::sync::atomic::Ordering::Relaxed,
                );
                return Ok(());
            }
        }
    }

    /// A commit's actions.
    async fn read_commit(&self, key: &str) -> Result<Vec<Action>, TableError> {
        let mut actions = Vec::new();
        self.read_commit_each(key, |action| actions.push(action))
            .await?;
        Ok(actions)
    }

    /// Hands each of a commit's actions to `each`, parsed a line at a time as
    /// its body arrives (a commit of many files is never in memory whole).
    async fn read_commit_each(
        &self,
        key: &str,
        mut each: impl FnMut(Action),
    ) -> Result<(), TableError> {
        let output = self
            .store
            .get_object(key, None)
            .await
            .map_err(|e| self.store_error(e))?;
        let malformed = |reason| TableError::Log {
            key: key.to_string(),
            reason,
        };
        let mut line_actions = Vec::new();
        let mut pending = BytesMut::new();
        let mut number = 0;
        let mut body = output.body;
        loop {
            let chunk = body.try_next().await.map_err(|e| self.store_error(e))?;
            let ended = chunk.is_none();
            pending.extend_from_slice(&chunk.unwrap_or_default());
            while let Some(line) = match pending.iter().position(|&b| b == b'\n') {
                Some(end) => Some(pending.split_to(end + 1)),
                None if ended && !pending.is_empty() => Some(pending.split()),
                None => None,
            } {
                number += 1;
                log::parse_line(&line, number, &mut line_actions).map_err(malformed)?;
                line_actions.drain(..).for_each(&mut each);
            }
            if ended {
                return Ok(());
            }
        }
    }

    /// Whether log version `version` is exactly `body` (a commit this writer
    /// wrote); false when it is another's or does not exist.
    async fn log_holds(&self, version: u64, body: &[u8]) -> Result<bool, TableError> {
        let key = format!("{}{}", self.log_prefix, log::commit_name(version));
        match self.read_object(&key).await {
            Ok(found) => Ok(found == body),
            Err(TableError::Store { source, .. }) if source.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A whole (small) object of the table.
    async fn read_object(&self, key: &str) -> Result<bytes::Bytes, TableError> {
        let output = self
            .store
            .get_object(key, None)
            .await
            .map_err(|e| self.store_error(e))?;
        output.bytes().await.map_err(|e| self.store_error(e))
    }

    /// Loads the latest checkpoint, if the table has one, into `snapshot`:
    /// a classic one (one file or parts), or a V2 one (named by a UUID,
    /// its files' actions in sidecars under `_delta_log/_sidecars/`).
    async fn start_at_checkpoint(&self, snapshot: &mut Snapshot) -> Result<(), TableError> {
        let last_key = format!("{}_last_checkpoint", self.log_prefix);
        let last = match self.read_object(&last_key).await {
            Ok(bytes) => bytes,
            Err(TableError::Store { source, .. }) if source.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let last: checkpoint::LastCheckpoint =
            serde_json::from_slice(&last).map_err(|e| TableError::Log {
                key: last_key.clone(),
                reason: e.to_string(),
            })?;
        // A part (or sidecar) at a time into the snapshot; a failure midway
        // leaves it to be read again whole.
        let files = self.checkpoint_files(&last).await?;
        let mut applying = snapshot.applying(last.version);
        let read: Result<(), TableError> = async {
            let mut sidecars = Vec::new();
            for part in files {
                let actions = self.read_checkpoint_file(&part).await?;
                sidecars.extend(sidecar_names(&actions));
                actions.into_iter().for_each(|a| applying.take(a));
            }
            for sidecar in sidecars {
                let actions = self.read_checkpoint_file(&sidecar_key(&sidecar)).await?;
                actions.into_iter().for_each(|a| applying.take(a));
            }
            Ok(())
        }
        .await;
        if let Err(error) = read {
            *snapshot = snapshot.unread();
            return Err(error);
        }
        applying.finish();
        if snapshot.in_commit_timestamps() {
            // The checkpoint has no commitInfo: the version's commit does.
            // (kept with the checkpoint by every log clean-up).
            let key = format!("{}{}", self.log_prefix, log::commit_name(last.version));
            let commit = self.read_commit(&key).await?;
            snapshot.in_commit_timestamp = commit.iter().find_map(|a| match a {
                Action::CommitInfo(info) => info.get("inCommitTimestamp")?.as_i64(),
                _ => None,
            });
        }
        snapshot.listed = Some(format!(
            "{}{}",
            self.log_prefix,
            log::commit_name(last.version)
        ));
        tracing::debug!(version = last.version, "table read from its checkpoint");
        Ok(())
    }

    /// The files (names under the log) of the checkpoint `last` names: a V2
    /// one (UUID-named) when there is one at that version, else the classic
    /// file or parts.
    async fn checkpoint_files(
        &self,
        last: &checkpoint::LastCheckpoint,
    ) -> Result<Vec<String>, TableError> {
        if let Some(v2) = &last.v2_checkpoint {
            return Ok(vec![v2.path.clone()]);
        }
        let prefix = format!("{}{:020}.checkpoint.", self.log_prefix, last.version);
        let page = self
            .store
            .list_objects(&prefix, None, 1000)
            .await
            .map_err(|e| self.store_error(e))?;
        let mut uuid_named: Vec<String> = page
            .objects
            .iter()
            .map(|o| o.key[self.log_prefix.len()..].to_string())
            .filter(|name| checkpoint::is_uuid_named(name))
            .collect();
        uuid_named.sort();
        match uuid_named.pop() {
            Some(name) => Ok(vec![name]),
            None => Ok(checkpoint::part_names(last.version, last.parts)),
        }
    }

    /// The file names of the sidecars V2 checkpoint `name` (under the log)
    /// reads (a path given in full counts by its last segment too).
    pub(crate) async fn sidecars_of(&self, name: &str) -> Result<Vec<String>, TableError> {
        let actions = self.read_checkpoint_file(name).await?;
        Ok(sidecar_names(&actions)
            .iter()
            .map(|path| path.rsplit('/').next().unwrap_or(path).to_owned())
            .collect())
    }

    /// The actions of one checkpoint file or sidecar, `name` under the log.
    async fn read_checkpoint_file(&self, name: &str) -> Result<Vec<Action>, TableError> {
        let key = format!("{}{name}", self.log_prefix);
        let bytes = self.read_object(&key).await?;
        let name = name.to_string();
        let read =
            tokio::task::spawn_blocking(move || checkpoint::read_checkpoint_file(&name, bytes))
                .await
                .map_err(|e| TableError::Log {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
        read.map_err(|reason| TableError::Log { key, reason })
    }

    /// Writes a checkpoint of the table as it is now; its version.
    pub async fn checkpoint(&self) -> Result<u64, TableError> {
        self.checkpoint_in_parts_of(checkpoint::PART_ACTIONS).await
    }

    /// [`DeltaTable::checkpoint`], a part (or sidecar) per `part_actions`
    /// actions.
    pub async fn checkpoint_in_parts_of(&self, part_actions: usize) -> Result<u64, TableError> {
        let part_actions = part_actions.max(1);
        let snapshot = self.read_with_files().await?;
        self.check_protocol(&snapshot)?;
        let Some(version) = snapshot.version else {
            return Err(TableError::Log {
                key: self.log_prefix.clone(),
                reason: "the table has no commit yet".into(),
            });
        };
        // The table's own actions (few), then its files' (one per file):
        // those are cloned from the snapshot a part at a time, so that the
        // snapshot is the only whole copy of the table in memory.
        let mut head: Vec<Action> = Vec::new();
        head.extend(snapshot.protocol.clone().map(Action::Protocol));
        head.extend(snapshot.metadata.clone().map(Action::MetaData));
        let now = now_ms();
        let mut txns: Vec<(&String, &i64)> = snapshot
            .txns
            .iter()
            .filter(|(app_id, _)| !snapshot.key_expired(app_id, now))
            .collect();
        txns.sort();
        head.extend(txns.into_iter().map(|(app_id, version)| {
            Action::Txn(Txn {
                app_id: app_id.clone(),
                version: *version,
                last_updated: snapshot.txn_updated.get(app_id).copied(),
            })
        }));
        head.extend(
            snapshot
                .domains
                .values()
                .map(|d| Action::DomainMetadata(d.clone())),
        );
        // The tombstones within the table's deleted-file retention: vacuum
        // (ours and other engines') must know what readers of versions that
        // recent still read; older ones expire, as Delta has it.
        let kept_since = now
            - properties::duration(snapshot.configuration(), properties::DELETED_FILE_RETENTION)
                .unwrap_or(properties::DEFAULT_DELETED_FILE_RETENTION)
                .as_millis() as i64;
        let kept = |r: &Remove| r.deletion_timestamp.is_none_or(|at| at >= kept_since);
        let adds = snapshot.files.iter().flatten().map(|(_, add)| add);
        let removes = snapshot
            .tombstones
            .iter()
            .flatten()
            .map(|(_, r)| r)
            .filter(|r| kept(r));
        let file_count = adds.clone().count() + removes.clone().count();
        let file_actions = adds
            .map(|add| Action::Add(add.clone()))
            .chain(removes.map(|r| Action::Remove(r.clone())));
        // V2 where the table's policy asks for it (a table dropping the
        // feature says `classic` first; classic checkpoints are always valid).
        let v2 = features::has(snapshot.protocol.as_ref(), "v2Checkpoint")
            && snapshot
                .configuration()
                .get(properties::CHECKPOINT_POLICY)
                .and_then(|v| v.as_deref())
                .is_some_and(|v| v.trim() == "v2");
        let size = (head.len() + file_count) as u64;
        let last = match v2 {
            true => {
                let files = Parts::new(file_actions, file_count, part_actions);
                self.write_v2_checkpoint(version, head, files, now).await?
            }
            false => {
                let total = head.len() + file_count;
                let all = Parts::new(head.into_iter().chain(file_actions), total, part_actions);
                self.write_classic_checkpoint(version, all).await?
            }
        };
        let last = checkpoint::LastCheckpoint { size, ..last };
        let last = serde_json::to_vec(&last).expect("serializes");
        self.put_log_file("_last_checkpoint", last).await?;
        Ok(version)
    }

    /// A classic checkpoint at `version` of the actions `parts` hands out:
    /// one Parquet file, or one per part, each built and stored in turn.
    /// What `_last_checkpoint` says of it (its size left to fill).
    async fn write_classic_checkpoint(
        &self,
        version: u64,
        mut parts: Parts<impl Iterator<Item = Action>>,
    ) -> Result<checkpoint::LastCheckpoint, TableError> {
        let count = parts.count().max(1);
        for name in checkpoint::part_names(version, Some(count as u64)) {
            let of = parts.next_part();
            let file = self
                .build(&name, move || checkpoint::write_checkpoint(&of))
                .await?;
            self.put_log_file(&name, file).await?;
        }
        Ok(checkpoint::LastCheckpoint {
            version,
            size: 0,
            parts: (count > 1).then_some(count as u64),
            v2_checkpoint: None,
        })
    }

    /// A V2 checkpoint at `version` (feature `v2Checkpoint`): the files'
    /// adds and removes (`files`) in Parquet sidecars, one per part
    /// (`_delta_log/_sidecars/`), stored first; then the checkpoint itself,
    /// JSON named by a UUID, with the table's own actions (`top`), the
    /// sidecars and its `checkpointMetadata`.
    async fn write_v2_checkpoint(
        &self,
        version: u64,
        mut top: Vec<Action>,
        mut files: Parts<impl Iterator<Item = Action>>,
        now: i64,
    ) -> Result<checkpoint::LastCheckpoint, TableError> {
        let count = files.count();
        for part in 0..count {
            let name = checkpoint::sidecar_name(version, part + 1, count);
            let of = files.next_part();
            let file = self
                .build(&name, move || checkpoint::write_sidecar(&of))
                .await?;
            let size_in_bytes = file.len() as i64;
            self.put_log_file(&format!("{SIDECARS}{name}"), file)
                .await?;
            top.push(Action::Sidecar(log::Sidecar {
                path: name,
                size_in_bytes,
                modification_time: now,
                tags: None,
            }));
        }
        top.push(Action::CheckpointMetadata(log::CheckpointMetadata {
            version: version as i64,
            tags: None,
        }));
        let name = checkpoint::v2_checkpoint_name(version);
        let file = log::write_commit(&top);
        let size_in_bytes = file.len() as i64;
        self.put_log_file(&name, file).await?;
        Ok(checkpoint::LastCheckpoint {
            version,
            size: 0,
            parts: None,
            v2_checkpoint: Some(checkpoint::V2Checkpoint {
                path: name,
                size_in_bytes,
                modification_time: now,
            }),
        })
    }

    /// Stores `body` as `name` under the log (a plain write: checkpoints and
    /// `_last_checkpoint`, never a commit).
    async fn put_log_file(&self, name: &str, body: Vec<u8>) -> Result<(), TableError> {
        self.store
            .put_object(PutRequest::new(format!("{}{name}", self.log_prefix), body))
            .await
            .map(|_| ())
            .map_err(|e| self.store_error(e))
    }

    /// Builds checkpoint file `name` with `make` off the async threads.
    async fn build(
        &self,
        name: &str,
        make: impl FnOnce() -> Result<Vec<u8>, String> + Send + 'static,
    ) -> Result<Vec<u8>, TableError> {
        tokio::task::spawn_blocking(make)
            .await
            .map_err(|e| e.to_string())
            .and_then(|built| built)
            .map_err(|reason| TableError::Log {
                key: format!("{}{name}", self.log_prefix),
                reason,
            })
    }

    /// After this writer made `version`: a checkpoint every
    /// `delta.checkpointInterval` versions, off the commit's way.
    pub fn after_commit(self: &Arc<Self>, version: u64) {
        let interval = self
            .checkpoint_interval
            .load(std::sync::atomic::Ordering::Relaxed);
        if version == 0 || version % interval != 0 {
            return;
        }
        let table = self.clone();
        tokio::spawn(async move {
            table.snapshot.lock().await.forget_expired_keys();
            match table.checkpoint().await {
                Ok(version) => {
                    tracing::info!(version, table = %table.layout.location, "checkpoint written");
                    match table.clean_log(std::time::SystemTime::now()).await {
                        Ok(cleaned) if cleaned.deleted > 0 => tracing::info!(
                            deleted = cleaned.deleted,
                            kept_from = cleaned.kept_from,
                            table = %table.layout.location,
                            "log files past the retention removed"
                        ),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "the log was not cleaned up (the next checkpoint will)")
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "checkpoint not written (the next one will be)")
                }
            }
        });
    }

    /// The latest version of application transaction `app_id` (the table
    /// read up to now), without copying the snapshot.
    pub async fn txn_version(&self, app_id: &str) -> Result<Option<i64>, TableError> {
        let mut snapshot = self.snapshot.lock().await;
        self.refresh(&mut snapshot).await?;
        Ok(snapshot.txns.get(app_id).copied())
    }

    /// Adds `files` to the table in one commit with `transactions`, widening
    /// the table's schema with `schema` (a Delta struct type of the files'
    /// columns) where the files bring new ones. The table's listener hears
    /// of it before and after (see [`listener`]).
    pub async fn commit(
        &self,
        files: &[NewFile],
        transactions: &[Transaction],
        schema: &Value,
    ) -> Result<Committed, TableError> {
        listener::heard(
            self.listener.as_ref(),
            &self.layout.location,
            files,
            |e| self.store_error(e),
            // Whether it landed, nobody can tell yet.
            |e| matches!(e, TableError::Store { .. } | TableError::Log { .. }),
            self.commit_to_log(files, transactions, schema),
        )
        .await
    }

    /// The commit itself: the next version of the log, written only when
    /// absent, through [`DeltaTable::commit_change`] on this writer's snapshot.
    async fn commit_to_log(
        &self,
        files: &[NewFile],
        transactions: &[Transaction],
        schema: &Value,
    ) -> Result<Committed, TableError> {
        if let Some(t) = transactions
            .iter()
            .find(|t| t.after.is_some_and(|after| t.version <= after))
        {
            return Err(TableError::Log {
                key: t.app_id.clone(),
                reason: format!(
                    "a transaction must move forward (from {:?} to {})",
                    t.after, t.version
                ),
            });
        }
        let mut snapshot = self.snapshot.lock().await;
        let change = commit::Change {
            operation: json!({
                "operation": "STREAMING UPDATE",
                "operationParameters": {"outputMode": "Append"},
                "isBlindAppend": true,
            }),
            files,
            transactions,
            schema: Some(schema),
            ..commit::Change::default()
        };
        self.commit_change(&mut snapshot, &change).await
    }

    /// Refuses a table whose protocol sluice must not write to (features it
    /// does not know: deletion vectors, column mapping, …).
    pub fn check_protocol(&self, snapshot: &Snapshot) -> Result<(), TableError> {
        match snapshot.refusal() {
            Some(reason) => Err(TableError::Protocol {
                root: self.layout.location.clone(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// A new table's protocol and metadata, or the metadata widened by
    /// `schema`, or nothing.
    fn metadata_actions(
        &self,
        snapshot: &Snapshot,
        schema: &Value,
        now: i64,
    ) -> Result<Vec<Action>, TableError> {
        let schema_error = |reason: String| TableError::Schema {
            root: self.layout.location.clone(),
            reason,
        };
        let partition_fields = || {
            let fields = self
                .layout
                .partition_columns
                .iter()
                .map(|c| schema::field(c, json!("string")))
                .collect::<Vec<_>>();
            json!({"type": "struct", "fields": fields})
        };
        let Some(metadata) = &snapshot.metadata else {
            let mut first = schema::empty_struct();
            schema::merge_into(&mut first, schema, "").map_err(schema_error)?;
            schema::merge_into(&mut first, &partition_fields(), "").map_err(schema_error)?;
            return Ok(vec![
                Action::Protocol(Protocol::written()),
                Action::MetaData(MetaData {
                    created_time: Some(now),
                    ..MetaData::new(first.to_string(), self.layout.partition_columns.clone())
                }),
            ]);
        };
        if metadata.partition_columns != self.layout.partition_columns {
            return Err(schema_error(format!(
                "its partition columns are {:?}; the stream's key template makes {:?}",
                metadata.partition_columns, self.layout.partition_columns
            )));
        }
        let mut table: Value = serde_json::from_str(&metadata.schema_string)
            .map_err(|e| schema_error(format!("its schema does not read: {e}")))?;
        if !schema::merge_into(&mut table, schema, "").map_err(schema_error)? {
            return Ok(Vec::new());
        }
        // The table maps its columns and another writer renamed or dropped
        // one since this stream opened: a column sluice would add has no
        // physical name or id.
        if let Ok(Some(mapping)) = snapshot.column_mapping() {
            return Err(schema_error(format!(
                "the table maps its columns (delta.columnMapping.mode = {}) and its columns \
                 changed since this stream opened; sluice adds none to such a table (reopen \
                 the stream)",
                mapping.mode()
            )));
        }
        let mut widened = metadata.clone();
        widened.schema_string = table.to_string();
        Ok(vec![Action::MetaData(widened)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spark's DELETE on a table with deletion vectors: one commit removes
    /// the file and adds it again, its deleted rows in the vector (as Spark
    /// 4.2 writes it, add first). Read as written, the file left the table,
    /// and a checkpoint sluice wrote then lost Spark's rows. Either order
    /// leaves the file in, with its vector.
    #[test]
    fn a_file_given_a_deletion_vector_stays_in_the_table() {
        let add = r#"{"add":{"path":"S8/part-00000.snappy.parquet","partitionValues":{},"size":2813,"modificationTime":1,"dataChange":true,"stats":"{\"numRecords\":4}","deletionVector":{"storageType":"u","pathOrInlineDv":"ab^-aqEH.-t@S}K{vb[*k^","offset":1,"sizeInBytes":36,"cardinality":2},"baseRowId":0,"defaultRowCommitVersion":1}}"#;
        let remove = r#"{"remove":{"path":"S8/part-00000.snappy.parquet","deletionTimestamp":2,"dataChange":true,"extendedFileMetadata":true,"partitionValues":{},"size":2813,"baseRowId":0,"defaultRowCommitVersion":1}}"#;
        for (case, first, second) in [("add first", add, remove), ("remove first", remove, add)] {
            let commit =
                format!("{{\"commitInfo\":{{\"operation\":\"DELETE\"}}}}\n{first}\n{second}\n");
            let commit = commit.as_bytes();
            let mut snapshot = Snapshot {
                files: Some(BTreeMap::new()),
                tombstones: Some(BTreeMap::new()),
                ..Snapshot::default()
            };
            snapshot.apply(2, log::parse_commit(commit).unwrap());
            let files = snapshot.files.unwrap();
            let file = files.get("S8/part-00000.snappy.parquet").expect(case);
            assert_eq!(file.deletion_vector.as_ref().unwrap().cardinality, 2);
            assert_eq!(file.base_row_id, Some(0));
            // The file as it was (no vector) is a tombstone: a checkpoint keeps
            // it for readers of the older version.
            let tombstones = snapshot.tombstones.unwrap();
            assert_eq!(tombstones.len(), 1, "{case}");
            assert_eq!(
                tombstones.values().next().unwrap().path,
                "S8/part-00000.snappy.parquet"
            );
        }
    }
}
