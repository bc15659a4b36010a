//! An Apache Iceberg table (format version 2) in an object store, committed
//! to by sluice itself, with no catalog service: the table's metadata
//! versions are `metadata/v1.metadata.json`, `v2…`, and a commit is the next
//! version written with `If-None-Match: *`, the conditional write that lets
//! exactly one writer have each version (as the Delta log's commits; the
//! file-system catalog's naming, so that readers given the table's directory
//! or a metadata file find it; `metadata/version-hint.text` names the latest
//! for them, written after each commit and never trusted by sluice).
//!
//! Application transactions make commits exactly once, as for Delta (see
//! sluice-table's [`Transaction`]): each snapshot sluice makes carries, in its
//! summary's `sluice.transactions`, the versions of every transaction sluice
//! has committed to the table (and in `sluice.keys`, the idempotency keys of
//! requests committed within [`KEY_RETENTION`], with their commit times); a
//! commit reads them from the newest such snapshot of the main branch's
//! history (another engine's appends in between carry none and change none;
//! snapshot expiry keeps that snapshot and the history after it). A commit whose transactions are at
//! their new versions already is [`Committed::Already`]; one whose `after`
//! does not match is [`TableError::Fenced`]. A commit whose answer was lost
//! is this writer's when the version holds exactly its bytes.
//!
//! I/O-free parts: [`schema`] (field ids, merging a stream's columns),
//! [`metadata`] (the JSON), [`manifest`] (Avro manifests and lists),
//! [`partition`] (identity partitions from the key template's `NAME=`
//! directories; a table partitioned otherwise is refused, naming why).

pub mod catalog;
pub mod compact;
mod create;
pub mod manifest;
pub mod metadata;
pub mod partition;
pub mod schema;
pub mod updates;
pub mod upkeep;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::Schema as ArrowSchema;
use sluice_store::{ObjectStore, PutRequest, StoreError, WriteCondition};

pub use sluice_table::{
    is_key_txn, key_txn, listener, Committed, NewFile, TableLayout, Transaction, KEY_RETENTION,
};

use listener::CommitListener;

use manifest::{DataFile, ManifestFile};
use metadata::{Snapshot, TableMetadata};

/// The snapshot summary key that holds sluice's transactions (a JSON object
/// of application id → version).
pub const TRANSACTIONS: &str = "sluice.transactions";

/// The snapshot summary key that holds the idempotency keys of requests
/// committed within [`KEY_RETENTION`] (a JSON object of key transaction →
/// commit time in ms), apart from [`TRANSACTIONS`] so that they can go.
pub const KEYS: &str = "sluice.keys";

const VERSION_HINT: &str = "version-hint.text";

/// The table property that bounds the metadata log, and its default (as
/// Iceberg's own writers have them).
const PREVIOUS_VERSIONS_MAX: &str = "write.metadata.previous-versions-max";
const DEFAULT_PREVIOUS_VERSIONS: usize = 100;

/// What sluice keeps in the summaries of the snapshots it makes.
#[derive(Debug, Default)]
struct SluiceState {
    /// Application transaction → version ([`TRANSACTIONS`]).
    transactions: BTreeMap<String, i64>,
    /// Request idempotency key → commit time in ms ([`KEYS`]).
    keys: BTreeMap<String, i64>,
}

/// A commit attempt whose end its answer did not tell.
struct Attempt {
    version: u64,
    body: Vec<u8>,
    /// The manifest and manifest list it stored.
    written: Vec<String>,
    /// What the write of its version answered.
    error: StoreError,
    /// The metadata it was made from (None: no table yet).
    before: Option<Arc<TableMetadata>>,
}

/// A metadata version this writer knows.
#[derive(Clone)]
struct Known {
    version: u64,
    metadata: Arc<TableMetadata>,
    /// This writer wrote it, and no commit since found another on top:
    /// the next commit is made on it while the store confirms it is still
    /// the newest (see [`IcebergTable::commit`]).
    written_here: bool,
}

/// What a commit changes.
pub(crate) enum Change<'a> {
    /// A snapshot that adds `files`, with `transactions`, in `columns`.
    Append {
        files: &'a [DataFile],
        transactions: &'a [Transaction],
        columns: &'a ArrowSchema,
    },
    /// Snapshots older than `older_than_ms` dropped, but the newest
    /// `keep_last` of the main branch and every ref's (see [`upkeep`]).
    Expire {
        older_than_ms: i64,
        keep_last: usize,
    },
    /// A compaction: the live data files `removed` replaced by `added`,
    /// their rows the same, the table's data manifests merged (see
    /// [`compact`]).
    Rewrite {
        removed: &'a std::collections::HashSet<String>,
        added: &'a [DataFile],
    },
    /// A REST catalog commit: `requirements` checked, then `updates`
    /// applied (see [`updates`]); with `assert-create`, on no table.
    Updates {
        requirements: &'a [updates::Requirement],
        updates: &'a [serde_json::Value],
    },
}

/// What a change made of the latest metadata.
enum Next {
    /// The next version, and the files stored for it.
    Write(Box<TableMetadata>, Vec<String>),
    /// Nothing to write.
    Done(Committed),
}

/// How a commit ended, and the metadata it was made from (None: no table).
pub(crate) struct Outcome {
    pub(crate) committed: Committed,
    pub(crate) before: Option<Arc<TableMetadata>>,
    /// The metadata this commit wrote (when it took a version).
    pub(crate) after: Option<Arc<TableMetadata>>,
}

/// Why a table could not be read or committed to.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TableError {
    #[error("the Iceberg table at {root}: {source}")]
    Store {
        root: String,
        #[source]
        source: Arc<StoreError>,
    },
    #[error("the Iceberg table's {key} does not read: {reason}")]
    Malformed { key: String, reason: String },
    #[error(
        "transaction {app_id} of the Iceberg table at {root} is at {found:?}, not {expected:?}: \
         another writer has this data's place"
    )]
    Fenced {
        root: String,
        app_id: String,
        expected: Option<i64>,
        found: Option<i64>,
    },
    #[error("the Iceberg table at {root}: {source}")]
    Schema {
        root: String,
        #[source]
        source: schema::SchemaError,
    },
    /// The table's partitioning is not what the key template makes.
    #[error("the Iceberg table at {root}: {reason}")]
    Partitioned { root: String, reason: String },
    #[error("the Iceberg table at {root} is of format version {version}; sluice writes version 2")]
    FormatVersion { root: String, version: i64 },
    #[error("{key} is not below the Iceberg table's root {root}")]
    Outside { key: String, root: String },
    /// Upkeep (compaction, orphan-file removal) that cannot be done.
    #[error("the Iceberg table at {root}: {reason}")]
    Upkeep { root: String, reason: String },
    /// A catalog commit's requirement failed, or an update cannot apply.
    #[error("the Iceberg table at {root}: {source}")]
    Update {
        root: String,
        #[source]
        source: updates::UpdateError,
    },
}

/// One Iceberg table, as one writer sees it.
pub struct IcebergTable {
    store: Arc<dyn ObjectStore>,
    layout: TableLayout,
    listener: Option<Arc<dyn CommitListener>>,
    /// The table's first version: those below are an earlier table's at the
    /// same location (dropped from the catalog without its files).
    floor: u64,
    /// The latest metadata this writer read or wrote: the next read starts
    /// there (one round trip of HEADs when nothing changed).
    latest: std::sync::Mutex<Option<Known>>,
    /// The manifest list this writer wrote last, by its location: the next
    /// commit on top of that snapshot reads no list.
    last_list: std::sync::Mutex<Option<(String, Arc<Vec<ManifestFile>>)>>,
    /// The store's root as readers address it (`s3://bucket`,
    /// `file:///srv/data`): the table's location and its files' paths are
    /// absolute, as Iceberg has them.
    root_uri: String,
    metadata_prefix: String,
    /// The partitions the key template declares (identity on the layout's
    /// partition columns, unless told otherwise).
    partitioning: Vec<partition::DeclaredPartition>,
    /// Milliseconds since the epoch: snapshots' and metadata's times, and
    /// the age expiry measures (the system's clock, but in tests).
    clock: fn() -> i64,
}

impl IcebergTable {
    /// The table at `layout.location` in `store`, whose root readers reach as
    /// `root_uri`.
    pub fn new(store: Arc<dyn ObjectStore>, layout: TableLayout, root_uri: &str) -> IcebergTable {
        let metadata_prefix = format!("{}/metadata/", layout.location);
        let partitioning = layout
            .partition_columns
            .iter()
            .map(|c| partition::DeclaredPartition::identity(c))
            .collect();
        IcebergTable {
            partitioning,
            store,
            layout,
            listener: None,
            floor: 1,
            latest: std::sync::Mutex::new(None),
            last_list: std::sync::Mutex::new(None),
            root_uri: root_uri.trim_end_matches('/').to_owned(),
            metadata_prefix,
            clock: now_ms,
        }
    }

    /// The same table, its times read from `clock` (ms since the epoch): a
    /// test's hour of commits made in a minute.
    pub fn with_clock(mut self, clock: fn() -> i64) -> IcebergTable {
        self.clock = clock;
        self
    }

    /// The same table, partitioned as `partitioning` says: one partition
    /// per `NAME=` directory of the layout, in order (see [`partition`]).
    pub fn with_partitioning(
        mut self,
        partitioning: Vec<partition::DeclaredPartition>,
    ) -> IcebergTable {
        self.partitioning = partitioning;
        self
    }

    pub(crate) fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// The same table, starting at version `floor` (see
    /// [`IcebergTable::newest`]).
    pub fn with_floor(mut self, floor: u64) -> IcebergTable {
        self.floor = floor.max(1);
        self
    }

    /// The same table, its commits heard by `listener`.
    pub fn listened_by(mut self, listener: Arc<dyn CommitListener>) -> IcebergTable {
        self.listener = Some(listener);
        self
    }

    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }

    /// The table's location as its metadata gives it.
    pub fn location(&self) -> String {
        format!("{}/{}", self.root_uri, self.layout.location)
    }

    fn store_error(&self, source: StoreError) -> TableError {
        TableError::Store {
            root: self.layout.location.clone(),
            source: Arc::new(source),
        }
    }

    fn malformed(&self, key: &str, reason: impl ToString) -> TableError {
        TableError::Malformed {
            key: key.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// `metadata`'s current schema.
    pub(crate) fn schema_of(&self, metadata: &TableMetadata) -> Result<schema::Schema, TableError> {
        metadata
            .current_schema()
            .map_err(|source| TableError::Schema {
                root: self.layout.location.clone(),
                source,
            })
    }

    fn metadata_key(&self, version: u64) -> String {
        format!("{}v{version}.metadata.json", self.metadata_prefix)
    }

    /// The latest metadata version and what it holds; None for no table.
    /// It starts from the version hint, when there is one, and steps on
    /// while the next version exists (the hint is written after a commit,
    /// so it is never ahead, and may lag); without one, it lists.
    pub async fn load(&self) -> Result<Option<(u64, TableMetadata)>, TableError> {
        Ok(self
            .latest()
            .await?
            .map(|(version, metadata)| (version, TableMetadata::clone(&metadata))))
    }

    /// [`IcebergTable::load`], shared: from the version this writer read
    /// last, when it still exists, stepping on while the next one does.
    pub async fn latest(&self) -> Result<Option<(u64, Arc<TableMetadata>)>, TableError> {
        Ok(self
            .newest()
            .await?
            .filter(|(version, _)| *version >= self.floor))
    }

    /// The newest metadata version at the table's location, whichever table
    /// it belongs to (one dropped from a catalog leaves its versions below
    /// the next table's floor).
    pub async fn newest(&self) -> Result<Option<(u64, Arc<TableMetadata>)>, TableError> {
        if let Some(Known {
            version, metadata, ..
        }) = self.cached()
        {
            // Both at once: a commit's first round trip.
            let (this, next) = tokio::join!(self.exists(version), self.exists(version + 1));
            if this? {
                if !next? {
                    return Ok(Some((version, metadata)));
                }
                let mut latest = version + 1;
                while self.exists(latest + 1).await? {
                    latest += 1;
                }
                return self.read_version(latest).await.map(Some);
            }
        }
        let hinted = match self
            .read(&format!("{}{VERSION_HINT}", self.metadata_prefix))
            .await
        {
            Ok(hint) => std::str::from_utf8(&hint)
                .ok()
                .and_then(|h| h.trim().parse::<u64>().ok()),
            Err(TableError::Store { source, .. }) if source.is_not_found() => None,
            Err(error) => return Err(error),
        };
        let mut latest = match hinted {
            Some(hint) if self.exists(hint).await? => Some(hint),
            _ => self.listed_latest().await?,
        };
        while let Some(version) = latest {
            if !self.exists(version + 1).await? {
                break;
            }
            latest = Some(version + 1);
        }
        let Some(version) = latest else {
            return Ok(None);
        };
        self.read_version(version).await.map(Some)
    }

    /// Metadata version `version`, remembered as the latest read.
    async fn read_version(&self, version: u64) -> Result<(u64, Arc<TableMetadata>), TableError> {
        let key = self.metadata_key(version);
        let bytes = self.read(&key).await?;
        let metadata: Arc<TableMetadata> =
            Arc::new(serde_json::from_slice(&bytes).map_err(|e| self.malformed(&key, e))?);
        self.remember(version, metadata.clone(), false);
        Ok((version, metadata))
    }

    /// Version `version` is `metadata` (`written_here`: this writer's own
    /// commit).
    fn remember(&self, version: u64, metadata: Arc<TableMetadata>, written_here: bool) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if latest.as_ref().is_none_or(|known| known.version <= version) {
            *latest = Some(Known {
                version,
                metadata,
                written_here,
            });
        }
    }

    /// The version this writer wrote last, when no commit since found
    /// another on top of it.
    fn written_here(&self) -> Option<(u64, Arc<TableMetadata>)> {
        self.cached()
            .filter(|known| known.written_here && known.version >= self.floor)
            .map(|known| (known.version, known.metadata))
    }

    /// Whether `version` is still the table's newest: it exists and the
    /// next does not (both asked at once). When not, the next commit reads
    /// the table first.
    async fn still_newest(&self, version: u64) -> Result<bool, TableError> {
        let (this, next) = tokio::join!(self.exists(version), self.exists(version + 1));
        let newest = this? && !next?;
        if !newest {
            self.forget_written_here(version);
        }
        Ok(newest)
    }

    /// The next commit reads the table before it makes its change on
    /// `version`.
    fn forget_written_here(&self, version: u64) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = latest.as_mut().filter(|k| k.version == version) {
            known.written_here = false;
        }
    }

    /// Removes what a commit that will not be made stored for it (its
    /// manifests, its manifest list): nobody's.
    async fn forget_written(&self, written: &[String]) {
        for key in written {
            if let Err(error) = self.store.delete_object(key).await {
                tracing::debug!(%key, error = %sluice_store::error_chain(&error), "could not remove a file of a commit not made; orphan-file removal will");
            }
        }
    }

    /// The manifests of the manifest list at `location`: the one this
    /// writer wrote last without reading it back, or read.
    async fn manifest_list(&self, location: &str) -> Result<Vec<ManifestFile>, TableError> {
        if let Some((written, manifests)) = self
            .last_list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            if written == location {
                return Ok(manifests.to_vec());
            }
        }
        let key = self.key_of(location)?;
        let list = self.read(&key).await?;
        manifest::read_manifest_list(&list).map_err(|e| self.malformed(&key, e))
    }

    fn cached(&self) -> Option<Known> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    async fn exists(&self, version: u64) -> Result<bool, TableError> {
        match self.store.head_object(&self.metadata_key(version)).await {
            Ok(_) => Ok(true),
            Err(error) if error.is_not_found() => Ok(false),
            Err(error) => Err(self.store_error(error)),
        }
    }

    /// The highest metadata version the listing of `metadata/` shows.
    async fn listed_latest(&self) -> Result<Option<u64>, TableError> {
        let mut latest: Option<u64> = None;
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .store
                .list_objects(&self.metadata_prefix, cursor.as_deref(), 1000)
                .await
                .map_err(|e| self.store_error(e))?;
            for object in &page.objects {
                let name = &object.key[self.metadata_prefix.len()..];
                let version = name
                    .strip_prefix('v')
                    .and_then(|n| n.strip_suffix(".metadata.json"))
                    .and_then(|n| n.parse::<u64>().ok());
                if let Some(version) = version {
                    latest = latest.max(Some(version));
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(latest),
            }
        }
    }

    /// A whole (small) object of the table: metadata, a manifest.
    async fn read(&self, key: &str) -> Result<bytes::Bytes, TableError> {
        let output = self
            .store
            .get_object(key, None)
            .await
            .map_err(|e| self.store_error(e))?;
        output.bytes().await.map_err(|e| self.store_error(e))
    }

    async fn put(&self, key: &str, body: Vec<u8>, create_only: bool) -> Result<(), StoreError> {
        let mut request = PutRequest::new(key, body);
        if create_only {
            request.condition = Some(WriteCondition::IfNoneMatch);
        }
        self.store.put_object(request).await.map(|_| ())
    }

    /// The transactions sluice committed to the table, as of `metadata`'s
    /// current snapshot.
    pub fn transactions(
        &self,
        metadata: &TableMetadata,
    ) -> Result<BTreeMap<String, i64>, TableError> {
        let SluiceState {
            mut transactions,
            keys,
        } = self.sluice_state(metadata)?;
        transactions.extend(keys.into_keys().map(|key| (key, 1)));
        Ok(transactions)
    }

    /// The transactions and the keys (with their commit times) of the newest
    /// snapshot of the main branch's history that sluice made.
    fn sluice_state(&self, metadata: &TableMetadata) -> Result<SluiceState, TableError> {
        let Some(snapshot) = metadata
            .ancestry()
            .find(|s| s.summary.contains_key(TRANSACTIONS))
        else {
            return Ok(Default::default());
        };
        let read = |name: &str| -> Result<BTreeMap<String, i64>, TableError> {
            match snapshot.summary.get(name) {
                Some(text) => serde_json::from_str(text).map_err(|e| {
                    self.malformed(
                        &format!("snapshot {}'s summary {name}", snapshot.snapshot_id),
                        e,
                    )
                }),
                None => Ok(BTreeMap::new()),
            }
        };
        Ok(SluiceState {
            transactions: read(TRANSACTIONS)?,
            keys: read(KEYS)?,
        })
    }

    /// The latest version of application transaction `app_id`.
    pub async fn txn_version(&self, app_id: &str) -> Result<Option<i64>, TableError> {
        Ok(self.txn_versions().await?.remove(app_id))
    }

    /// Every application transaction's latest version (keys' included).
    pub async fn txn_versions(&self) -> Result<BTreeMap<String, i64>, TableError> {
        match self.latest().await? {
            Some((_, metadata)) => self.transactions(&metadata),
            None => Ok(BTreeMap::new()),
        }
    }

    /// Appends `files` (stored under the table's root, in the columns of
    /// `columns`) in one snapshot, with `transactions`; the table is made by
    /// the first commit when there is none.
    pub async fn append(
        &self,
        files: &[NewFile],
        transactions: &[Transaction],
        columns: &ArrowSchema,
    ) -> Result<Committed, TableError> {
        let data_files = files
            .iter()
            .map(|f| {
                self.layout
                    .relative(&f.key)
                    .ok_or_else(|| TableError::Outside {
                        key: f.key.clone(),
                        root: self.layout.location.clone(),
                    })?;
                Ok(DataFile {
                    path: format!("{}/{}", self.root_uri, f.key),
                    records: f.records as i64,
                    size: f.size as i64,
                    // Filled in as the commit is made, by the table's spec.
                    partition: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>, TableError>>()?;
        let change = Change::Append {
            files: &data_files,
            transactions,
            columns,
        };
        listener::heard(
            self.listener.as_ref(),
            &self.layout.location,
            files,
            |e| self.store_error(e),
            // Whether it landed, nobody can tell yet.
            |e| matches!(e, TableError::Store { .. }),
            async { Ok(self.commit(change).await?.committed) },
        )
        .await
    }

    /// The one commit loop: `change` made on the latest metadata and written
    /// as the next version, create-only, until a version is this writer's
    /// (or the change finds nothing to do).
    pub(crate) async fn commit(&self, change: Change<'_>) -> Result<Outcome, TableError> {
        // Versions this writer tried whose answer did not say it lost them:
        // a refusal (412) can be its own write landing, retried after a lost
        // answer; a failure can follow a write that landed. Before anything
        // else, each is read back: holding exactly these bytes, it is ours.
        let mut unsure: Vec<Attempt> = Vec::new();
        loop {
            if let Some(attempt) = self.landed(&mut unsure).await? {
                self.hint(attempt.version).await;
                return Ok(Outcome {
                    committed: Committed::Version(attempt.version),
                    after: serde_json::from_slice(&attempt.body).ok().map(Arc::new),
                    before: attempt.before,
                });
            }
            // On top of this writer's own last version, the change is made
            // while the store confirms that version is still the newest (one
            // round trip fewer: a single writer's commit is its writes
            // alone); on any other, after reading the newest.
            let optimistic = self.written_here();
            let found = match &optimistic {
                Some(known) => Some(known.clone()),
                None => self.latest().await?,
            };
            let (version, metadata) = match found {
                Some((version, metadata)) => (version, Some(metadata)),
                None => match &change {
                    Change::Append { columns, .. } => {
                        self.create(columns).await?;
                        continue;
                    }
                    Change::Expire { .. } | Change::Rewrite { .. } => {
                        return Ok(Outcome {
                            committed: Committed::Already,
                            before: None,
                            after: None,
                        })
                    }
                    // Its requirements say whether it may create the table.
                    Change::Updates { .. } => (self.floor - 1, None),
                },
            };
            let before = metadata.clone();
            let metadata = metadata.map(|m| TableMetadata::clone(&m));
            let made = if optimistic.is_some() {
                let (made, newest) = tokio::join!(
                    self.make(&change, metadata, version),
                    self.still_newest(version)
                );
                match newest {
                    Ok(true) => made?,
                    stale_or_unknown => {
                        // Made on a version that is not the newest (or may
                        // not be): nothing of it stands, whatever it found.
                        if let Ok(Next::Write(_, written)) = &made {
                            self.forget_written(written).await;
                        }
                        stale_or_unknown?;
                        continue;
                    }
                }
            } else {
                self.make(&change, metadata, version).await?
            };
            let (next, written) = match made {
                Next::Write(next, written) => (*next, written),
                Next::Done(committed) => {
                    return Ok(Outcome {
                        committed,
                        before,
                        after: None,
                    })
                }
            };
            let body = serde_json::to_vec(&next).expect("metadata serializes");
            let key = self.metadata_key(version + 1);
            match self.put(&key, body.clone(), true).await {
                Ok(()) => {
                    self.hint(version + 1).await;
                    // The next commit starts from it without reading it.
                    let next = Arc::new(next);
                    self.remember(version + 1, next.clone(), true);
                    return Ok(Outcome {
                        committed: Committed::Version(version + 1),
                        before,
                        after: Some(next),
                    });
                }
                Err(error) => {
                    tracing::debug!(table = %self.layout.location, version = version + 1, error = %sluice_store::error_chain(&error), "the version was not taken; reading it back");
                    // Whoever took it, the next attempt reads the table
                    // first (review finding: it was made on `version`
                    // again, its files written and removed).
                    self.forget_written_here(version);
                    unsure.push(Attempt {
                        version: version + 1,
                        body,
                        written,
                        error,
                        before,
                    });
                }
            }
        }
    }

    /// What `change` makes of `metadata` (version `version`; None: no
    /// table, version 0).
    async fn make(
        &self,
        change: &Change<'_>,
        metadata: Option<TableMetadata>,
        version: u64,
    ) -> Result<Next, TableError> {
        if let Change::Updates {
            requirements,
            updates,
        } = change
        {
            for requirement in requirements.iter() {
                requirement
                    .check(metadata.as_ref())
                    .map_err(|source| self.update_error(source))?;
            }
            let now = self.now_ms();
            let previous = metadata.as_ref().map(|m| m.last_updated_ms);
            let mut next =
                metadata.unwrap_or_else(|| updates::empty_metadata(&self.location(), now));
            updates::apply(&mut next, updates, now).map_err(|source| self.update_error(source))?;
            // Logged under the properties this commit leaves.
            if let Some(updated_ms) = previous {
                self.log_previous(&mut next, version, updated_ms);
            }
            return Ok(Next::Write(Box::new(next), Vec::new()));
        }
        let metadata = metadata.expect("only a catalog's commit is made on no table");
        let before_updated_ms = metadata.last_updated_ms;
        match change {
            Change::Updates { .. } => unreachable!("made above"),
            Change::Append {
                files,
                transactions,
                columns,
            } => {
                self.check(&metadata)?;
                let sluice = self.sluice_state(&metadata)?;
                let mut state = sluice.transactions.clone();
                state.extend(sluice.keys.keys().map(|key| (key.clone(), 1)));
                if !transactions.is_empty()
                    && transactions
                        .iter()
                        .all(|t| state.get(&t.app_id) == Some(&t.version))
                {
                    return Ok(Next::Done(Committed::Already));
                }
                for t in transactions.iter() {
                    let found = state.get(&t.app_id).copied();
                    if found != t.after {
                        return Err(TableError::Fenced {
                            root: self.layout.location.clone(),
                            app_id: t.app_id.clone(),
                            expected: t.after,
                            found,
                        });
                    }
                }
                let (next, written) = self
                    .next_metadata(metadata, files, sluice, transactions, columns, version)
                    .await?;
                Ok(Next::Write(Box::new(next), written))
            }
            Change::Expire {
                older_than_ms,
                keep_last,
            } => match upkeep::expired(metadata, *older_than_ms, *keep_last, self.now_ms()) {
                Some(mut next) => {
                    // Logged as every other version is (`expired` set the
                    // time of this one).
                    let updated_ms = before_updated_ms;
                    self.log_previous(&mut next, version, updated_ms);
                    Ok(Next::Write(Box::new(next), Vec::new()))
                }
                None => Ok(Next::Done(Committed::Already)),
            },
            Change::Rewrite { removed, added } => {
                self.check_upkeep(&metadata)?;
                match self.rewritten(metadata, removed, added, version).await? {
                    Some((next, written)) => Ok(Next::Write(Box::new(next), written)),
                    None => Ok(Next::Done(Committed::Already)),
                }
            }
        }
    }

    /// The one of `attempts` that took its version, if one holds exactly its
    /// bytes; the others are forgotten, the files they wrote removed. An
    /// attempt whose version does not read leaves the commit failed with its
    /// error.
    async fn landed(&self, attempts: &mut Vec<Attempt>) -> Result<Option<Attempt>, TableError> {
        for attempt in std::mem::take(attempts) {
            match self.read(&self.metadata_key(attempt.version)).await {
                Ok(found) if found[..] == attempt.body[..] => return Ok(Some(attempt)),
                // Another writer's: what this attempt wrote is nobody's.
                Ok(_) => self.forget_written(&attempt.written).await,
                Err(TableError::Store { source, .. }) if source.is_not_found() => {
                    return Err(self.store_error(attempt.error));
                }
                Err(error) => return Err(error),
            }
        }
        Ok(None)
    }

    /// Refuses a table sluice cannot append to as it is.
    pub fn check(&self, metadata: &TableMetadata) -> Result<(), TableError> {
        if metadata.format_version != metadata::FORMAT_VERSION {
            return Err(TableError::FormatVersion {
                root: self.layout.location.clone(),
                version: metadata.format_version,
            });
        }
        self.partition_spec(metadata).map(|_| ())
    }

    /// `metadata`'s default partition spec, which must be the partitions
    /// the key template's `NAME=` directories declare.
    pub(crate) fn partition_spec(
        &self,
        metadata: &TableMetadata,
    ) -> Result<partition::PartitionSpec, TableError> {
        self.spec_of(metadata, Some(&self.partitioning))
    }

    /// `metadata`'s default partition spec: `declared` when given, any
    /// that sluice writes when not (upkeep, which keeps each file's
    /// partition as it is).
    pub(crate) fn spec_of(
        &self,
        metadata: &TableMetadata,
        declared: Option<&[partition::DeclaredPartition]>,
    ) -> Result<partition::PartitionSpec, TableError> {
        partition::PartitionSpec::of_table(metadata, declared).map_err(|reason| {
            TableError::Partitioned {
                root: self.layout.location.clone(),
                reason,
            }
        })
    }

    /// `files` with the partition tuples their directories name under
    /// `spec`.
    pub(crate) fn with_partitions(
        &self,
        files: &[DataFile],
        spec: &partition::PartitionSpec,
    ) -> Result<Vec<DataFile>, TableError> {
        files
            .iter()
            .map(|file| {
                let key = self.key_of(&file.path)?;
                let relative = self.layout.relative(&key).unwrap_or(&key);
                let values = self.layout.partition_values(relative);
                let partition = spec
                    .tuple(&values)
                    .map_err(|reason| TableError::Partitioned {
                        root: self.layout.location.clone(),
                        reason,
                    })?;
                Ok(DataFile {
                    partition,
                    ..file.clone()
                })
            })
            .collect()
    }

    /// Version 1 of a new table of `columns`, written create-only (another
    /// writer's version 1 is as good).
    async fn create(&self, columns: &ArrowSchema) -> Result<(), TableError> {
        let (schema, last) =
            schema::Schema::from_arrow(columns).map_err(|source| TableError::Schema {
                root: self.layout.location.clone(),
                source,
            })?;
        let spec =
            partition::PartitionSpec::declared(&self.partitioning, &schema).map_err(|reason| {
                TableError::Partitioned {
                    root: self.layout.location.clone(),
                    reason,
                }
            })?;
        let mut metadata = TableMetadata::new(&self.location(), &schema, last, self.now_ms());
        spec.install(&mut metadata);
        let body = serde_json::to_vec(&metadata).expect("metadata serializes");
        match self.put(&self.metadata_key(1), body, true).await {
            Ok(()) | Err(StoreError::PreconditionFailed) => {
                self.hint(1).await;
                Ok(())
            }
            Err(error) => Err(self.store_error(error)),
        }
    }

    /// `metadata.version-hint.text` names `version` (readers given the
    /// table's directory start there; sluice lists instead).
    /// Off the commit's way: hints of two commits may land in either order,
    /// which leaves the hint behind, never ahead.
    async fn hint(&self, version: u64) {
        let key = format!("{}{VERSION_HINT}", self.metadata_prefix);
        let store = self.store.clone();
        let table = self.layout.location.clone();
        let write = async move {
            let request = PutRequest::new(&key, version.to_string().into_bytes());
            if let Err(error) = store.put_object(request).await {
                tracing::warn!(%table, version, error = %sluice_store::error_chain(&error), "could not update the version hint");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(write);
            }
            Err(_) => write.await,
        }
    }

    /// The metadata after `metadata` (version `version`) with a snapshot that
    /// adds `files`: its manifest and manifest list stored first.
    async fn next_metadata(
        &self,
        mut metadata: TableMetadata,
        files: &[DataFile],
        sluice: SluiceState,
        transactions: &[Transaction],
        columns: &ArrowSchema,
        version: u64,
    ) -> Result<(TableMetadata, Vec<String>), TableError> {
        let schema_error = |source| TableError::Schema {
            root: self.layout.location.clone(),
            source,
        };
        let mut schema = metadata.current_schema().map_err(schema_error)?;
        let mut last_column_id = metadata.last_column_id.max(schema.highest_id());
        if let Some(merged) = schema
            .merged(columns, &mut last_column_id)
            .map_err(schema_error)?
        {
            let highest = metadata
                .schemas
                .iter()
                .filter_map(|s| s["schema-id"].as_i64())
                .max()
                .unwrap_or(0);
            schema = schema::Schema {
                schema_id: highest as i32 + 1,
                ..merged
            };
            metadata.schemas.push(schema.to_json());
            metadata.current_schema_id = schema.schema_id;
            metadata.last_column_id = last_column_id;
            map_names(&mut metadata, &schema);
        } else if !metadata.properties.contains_key(schema::NAME_MAPPING) {
            // Another engine's table, whose files carry field ids: sluice's
            // do not, and readers find their columns by this mapping.
            map_names(&mut metadata, &schema);
        }
        let now = self.now_ms();
        let snapshot_id = new_snapshot_id();
        let sequence_number = metadata.last_sequence_number + 1;
        let parent = metadata.current_snapshot().cloned();

        let spec = self.partition_spec(&metadata)?;
        let files = &self.with_partitions(files, &spec)?;
        let manifest = manifest::write_manifest(files, snapshot_id, &schema, &spec)
            .map_err(|e| self.malformed("a new manifest", e))?;
        let manifest_name = format!("{}-m0.avro", uuid::Uuid::new_v4());
        let manifest_length = manifest.len() as i64;
        let manifest_key = format!("{}{manifest_name}", self.metadata_prefix);
        // Stored with the manifest list below, at once.
        let manifest_put = self.put(&manifest_key, manifest, false);
        let added_rows: i64 = files.iter().map(|f| f.records).sum();
        let mut manifests = vec![ManifestFile {
            path: format!("{}/metadata/{manifest_name}", self.location()),
            length: manifest_length,
            partition_spec_id: metadata.default_spec_id,
            content: 0,
            sequence_number,
            min_sequence_number: sequence_number,
            added_snapshot_id: snapshot_id,
            added_files: files.len() as i32,
            existing_files: 0,
            deleted_files: 0,
            added_rows,
            existing_rows: 0,
            deleted_rows: 0,
            partitions: None,
            key_metadata: None,
        }];
        let mut written = vec![manifest_key.clone()];
        if let Some(parent) = &parent {
            let kept = live_manifests(self.manifest_list(&parent.manifest_list).await?);
            let (kept, merged) = self
                .merge_manifests(kept, &metadata, snapshot_id, sequence_number)
                .await?;
            manifests.extend(kept);
            written.extend(merged);
        }
        let list = manifest::write_manifest_list(
            &manifests,
            snapshot_id,
            parent.as_ref().map(|p| p.snapshot_id),
            sequence_number,
        )
        .map_err(|e| self.malformed("a new manifest list", e))?;
        let list_name = format!("snap-{snapshot_id}-1-{}.avro", uuid::Uuid::new_v4());
        let list_key = format!("{}{list_name}", self.metadata_prefix);
        let (manifest_put, list_put) = tokio::join!(manifest_put, self.put(&list_key, list, false));
        manifest_put.map_err(|e| self.store_error(e))?;
        list_put.map_err(|e| self.store_error(e))?;
        *self.last_list.lock().unwrap_or_else(|e| e.into_inner()) = Some((
            format!("{}/metadata/{list_name}", self.location()),
            Arc::new(manifests.clone()),
        ));

        let SluiceState {
            transactions: mut state,
            mut keys,
        } = sluice;
        for t in transactions {
            if is_key_txn(&t.app_id) {
                keys.insert(t.app_id.clone(), now);
            } else {
                state.insert(t.app_id.clone(), t.version);
            }
        }
        forget_old_keys(&mut keys, now);
        let added_size: i64 = files.iter().map(|f| f.size).sum();
        let mut summary = summary(
            "append",
            parent.as_ref(),
            Totals {
                added_files: files.len() as i64,
                added_rows,
                added_size,
                ..Totals::default()
            },
        );
        summary.insert(
            TRANSACTIONS.to_owned(),
            serde_json::to_string(&state).expect("serializes"),
        );
        if !keys.is_empty() {
            summary.insert(
                KEYS.to_owned(),
                serde_json::to_string(&keys).expect("serializes"),
            );
        }
        written.push(list_key);
        let snapshot = Snapshot {
            snapshot_id,
            parent_snapshot_id: parent.as_ref().map(|p| p.snapshot_id),
            sequence_number,
            timestamp_ms: now,
            manifest_list: format!("{}/metadata/{list_name}", self.location()),
            summary,
            schema_id: Some(schema.schema_id),
            other: Default::default(),
        };
        self.push_snapshot(&mut metadata, snapshot, version);
        Ok((metadata, written))
    }

    /// `metadata` (version `version`) with `snapshot` as the main branch's
    /// current one, logged.
    pub(crate) fn push_snapshot(
        &self,
        metadata: &mut TableMetadata,
        snapshot: Snapshot,
        version: u64,
    ) {
        let (snapshot_id, now) = (snapshot.snapshot_id, snapshot.timestamp_ms);
        metadata.last_sequence_number = snapshot.sequence_number;
        metadata.snapshots.push(snapshot);
        metadata.current_snapshot_id = Some(snapshot_id);
        // The main branch moves; what else its ref says (retention) stays.
        let main = metadata
            .refs
            .entry(metadata::MAIN.to_owned())
            .or_insert_with(|| serde_json::json!({"type": "branch"}));
        main["snapshot-id"] = serde_json::json!(snapshot_id);
        metadata
            .snapshot_log
            .push(serde_json::json!({"timestamp-ms": now, "snapshot-id": snapshot_id}));
        let updated_ms = metadata.last_updated_ms;
        self.log_previous(metadata, version, updated_ms);
        metadata.last_updated_ms = now;
    }

    /// The parent's `manifests`, with the small ones of one kind merged into
    /// one once the table has `commit.manifest.min-count-to-merge` (100)
    /// manifests, as Iceberg's own appends do (`commit.manifest-merge.enabled`
    /// turns it off): a streaming table's one manifest per commit would
    /// otherwise make every reader open thousands. Merged: data manifests of
    /// the default spec, smaller than
    /// `commit.manifest.target-size-bytes` (8 MiB), written with one Avro
    /// schema (sluice's own, mostly). The key of the manifest it wrote.
    async fn merge_manifests(
        &self,
        manifests: Vec<ManifestFile>,
        metadata: &TableMetadata,
        snapshot_id: i64,
        sequence_number: i64,
    ) -> Result<(Vec<ManifestFile>, Option<String>), TableError> {
        let property = |name: &str, default: i64| {
            metadata
                .properties
                .get(name)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(default)
        };
        let enabled = metadata
            .properties
            .get("commit.manifest-merge.enabled")
            .is_none_or(|v| v != "false");
        let min_count = property("commit.manifest.min-count-to-merge", 100).max(2) as usize;
        let target = property("commit.manifest.target-size-bytes", 8 << 20);
        // With the new manifest, the table would have min_count.
        if !enabled || manifests.len() + 1 < min_count {
            return Ok((manifests, None));
        }
        let mut groups: BTreeMap<String, Vec<(ManifestFile, Vec<u8>)>> = BTreeMap::new();
        let mut kept = Vec::new();
        for m in manifests {
            // Partitioned ones too: one Avro schema means one partition type.
            let mergeable = m.content == 0
                && m.partition_spec_id == metadata.default_spec_id
                && m.length < target;
            if !mergeable {
                kept.push(m);
                continue;
            }
            let key = self.key_of(&m.path)?;
            let bytes = self.read(&key).await?;
            let schema = manifest::writer_schema(&bytes).map_err(|e| self.malformed(&key, e))?;
            groups.entry(schema).or_default().push((m, bytes.to_vec()));
        }
        let Some(largest) = groups.values().map(Vec::len).max().filter(|n| *n >= 2) else {
            kept.extend(groups.into_values().flatten().map(|(m, _)| m));
            return Ok((kept, None));
        };
        let mut merged_key = None;
        for (_, mut group) in groups {
            if group.len() != largest || merged_key.is_some() {
                kept.extend(group.into_iter().map(|(m, _)| m));
                continue;
            }
            group.sort_by_key(|(m, _)| m.sequence_number);
            let merged = manifest::merge_manifests(&group, None)
                .map_err(|e| self.malformed("a merged manifest", e))?;
            let name = format!("{}-m1.avro", uuid::Uuid::new_v4());
            let key = format!("{}{name}", self.metadata_prefix);
            let length = merged.bytes.len() as i64;
            self.put(&key, merged.bytes, false)
                .await
                .map_err(|e| self.store_error(e))?;
            tracing::debug!(table = %self.layout.location, manifests = group.len(), files = merged.files, "manifests merged");
            kept.push(ManifestFile {
                path: format!("{}/metadata/{name}", self.location()),
                length,
                partition_spec_id: metadata.default_spec_id,
                content: 0,
                sequence_number,
                min_sequence_number: merged.min_sequence_number,
                added_snapshot_id: snapshot_id,
                added_files: 0,
                existing_files: merged.files,
                deleted_files: 0,
                added_rows: 0,
                existing_rows: merged.rows,
                deleted_rows: 0,
                partitions: None,
                key_metadata: None,
            });
            merged_key = Some(key);
        }
        Ok((kept, merged_key))
    }

    /// `metadata` (made from version `version`, last updated at
    /// `updated_ms`) logs that version as its previous one, the log bounded by the table's
    /// `write.metadata.previous-versions-max`.
    fn log_previous(&self, metadata: &mut TableMetadata, version: u64, updated_ms: i64) {
        metadata.metadata_log.push(serde_json::json!({
            "timestamp-ms": updated_ms,
            "metadata-file": self.metadata_location(version),
        }));
        let kept = metadata
            .properties
            .get(PREVIOUS_VERSIONS_MAX)
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(DEFAULT_PREVIOUS_VERSIONS);
        let excess = metadata.metadata_log.len().saturating_sub(kept);
        metadata.metadata_log.drain(..excess);
    }

    /// Where readers find metadata version `version`.
    pub fn metadata_location(&self, version: u64) -> String {
        format!("{}/metadata/v{version}.metadata.json", self.location())
    }

    fn update_error(&self, source: updates::UpdateError) -> TableError {
        TableError::Update {
            root: self.layout.location.clone(),
            source,
        }
    }

    /// Writes `metadata` (another catalog's, being registered) as the table's
    /// next version; the version it took.
    pub async fn adopt(&self, metadata: &TableMetadata) -> Result<u64, TableError> {
        let body = serde_json::to_vec(metadata).expect("metadata serializes");
        loop {
            let next = self.latest().await?.map_or(1, |(version, _)| version + 1);
            match self.put(&self.metadata_key(next), body.clone(), true).await {
                Ok(()) => {
                    self.hint(next).await;
                    return Ok(next);
                }
                Err(StoreError::PreconditionFailed) => continue,
                Err(error) => return Err(self.store_error(error)),
            }
        }
    }

    /// Applies a REST catalog commit (`requirements`, then `updates`; see
    /// [`updates`]) through the one commit loop; the version it wrote and
    /// its metadata.
    pub async fn commit_updates(
        &self,
        requirements: &[updates::Requirement],
        updates: &[serde_json::Value],
    ) -> Result<(u64, TableMetadata), TableError> {
        let outcome = self
            .commit(Change::Updates {
                requirements,
                updates,
            })
            .await?;
        match (outcome.committed, outcome.after) {
            (Committed::Version(version), Some(after)) => {
                Ok((version, TableMetadata::clone(&after)))
            }
            _ => unreachable!("a catalog commit always writes a version"),
        }
    }

    /// The store key of a file the metadata names by its full location.
    fn key_of(&self, location: &str) -> Result<String, TableError> {
        key_under(&self.root_uri, location)
            .ok_or_else(|| self.malformed(location, format!("it is not under {}", self.root_uri)))
    }

    /// The manifests a manifest list (by location) names; none when it is
    /// gone already (an expiry that stopped midway).
    pub(crate) async fn manifests_of(
        &self,
        list: &str,
    ) -> Result<Vec<manifest::ManifestFile>, TableError> {
        let key = self.key_of(list)?;
        match self.read(&key).await {
            Ok(bytes) => manifest::read_manifest_list(&bytes).map_err(|e| self.malformed(&key, e)),
            Err(TableError::Store { source, .. }) if source.is_not_found() => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// The data files a manifest (by location) names as live.
    pub(crate) async fn files_of(&self, manifest: &str) -> Result<Vec<String>, TableError> {
        let key = self.key_of(manifest)?;
        match self.read(&key).await {
            Ok(bytes) => manifest::read_manifest_paths(&bytes).map_err(|e| self.malformed(&key, e)),
            Err(TableError::Store { source, .. }) if source.is_not_found() => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// The store keys of the data files any snapshot the table still has
    /// holds (a file added, and maybe removed since): whether a commit that
    /// could not tell its end added a file. Empty for no table.
    pub async fn held_keys(&self) -> Result<std::collections::BTreeSet<String>, TableError> {
        let mut held = std::collections::BTreeSet::new();
        let Some((_, metadata)) = self.latest().await? else {
            return Ok(held);
        };
        let mut manifests = std::collections::BTreeSet::new();
        for snapshot in &metadata.snapshots {
            for m in self.manifests_of(&snapshot.manifest_list).await? {
                if m.content == 0 && manifests.insert(m.path.clone()) {
                    for file in self.files_of(&m.path).await? {
                        // A file elsewhere (another writer's) is none of
                        // sluice's.
                        if let Ok(key) = self.key_of(&file) {
                            held.insert(key);
                        }
                    }
                }
            }
        }
        Ok(held)
    }

    /// The data files the current snapshot holds (full locations).
    pub async fn data_files(&self) -> Result<Vec<String>, TableError> {
        let Some((_, metadata)) = self.load().await? else {
            return Ok(Vec::new());
        };
        let Some(snapshot) = metadata.current_snapshot() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for m in self.manifests_of(&snapshot.manifest_list).await? {
            if m.content == 0 {
                out.extend(self.files_of(&m.path).await?);
            }
        }
        Ok(out)
    }
}

/// `metadata`'s name mapping (`schema.name-mapping.default`) extended to
/// `schema`'s columns: how readers find the columns of files written
/// without field ids, as the stream's are.
fn map_names(metadata: &mut TableMetadata, schema: &schema::Schema) {
    let mapping = schema.name_mapping(
        metadata
            .properties
            .get(schema::NAME_MAPPING)
            .map(String::as_str),
    );
    metadata
        .properties
        .insert(schema::NAME_MAPPING.to_owned(), mapping.to_string());
}

/// The store key of `location` (a file or directory a table names) under
/// the store's `root_uri`; None when it is elsewhere. `file:/x` (as Hadoop
/// writes local paths) is `file:///x`.
pub fn key_under(root_uri: &str, location: &str) -> Option<String> {
    let location = match location.strip_prefix("file:") {
        Some(path) if !path.starts_with("//") => format!("file://{path}"),
        _ => location.to_owned(),
    };
    let rest = location.strip_prefix(root_uri.trim_end_matches('/'))?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    Some(rest.trim_matches('/').to_owned())
}

/// `manifests` (a parent snapshot's) without the data manifests that list
/// only deleted files (a compaction's record of the files it removed:
/// history the next snapshot does not need, as Iceberg's own writers drop
/// it). One that gives no counts at all (format version 1 made them
/// optional) is kept: it may list live files.
pub(crate) fn live_manifests(mut manifests: Vec<ManifestFile>) -> Vec<ManifestFile> {
    manifests.retain(|m| {
        m.content != 0 || m.added_files > 0 || m.existing_files > 0 || m.deleted_files == 0
    });
    manifests
}

/// What a snapshot adds and deletes, for its summary.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) added_files: i64,
    pub(crate) added_rows: i64,
    pub(crate) added_size: i64,
    pub(crate) deleted_files: i64,
    pub(crate) deleted_rows: i64,
    pub(crate) deleted_size: i64,
}

/// A snapshot summary of `operation` after `parent`: what it adds and
/// deletes, and the table's totals (the parent's, moved by them).
pub(crate) fn summary(
    operation: &str,
    parent: Option<&Snapshot>,
    totals: Totals,
) -> BTreeMap<String, String> {
    // A total the parent does not give is left out (unknown), as Iceberg's
    // own writers leave it; a first snapshot's start at zero.
    let total = |key: &str| -> Option<i64> {
        match parent {
            Some(p) => p.summary.get(key).and_then(|v| v.parse().ok()),
            None => Some(0),
        }
    };
    let mut summary = BTreeMap::from([("operation".to_owned(), operation.to_owned())]);
    let moved = [
        (
            "total-data-files",
            totals.added_files - totals.deleted_files,
        ),
        ("total-records", totals.added_rows - totals.deleted_rows),
        ("total-files-size", totals.added_size - totals.deleted_size),
        ("total-delete-files", 0),
        ("total-position-deletes", 0),
        ("total-equality-deletes", 0),
    ];
    for (key, by) in moved {
        if let Some(total) = total(key) {
            summary.insert(key.to_owned(), (total + by).to_string());
        }
    }
    let counts = [
        ("added-data-files", totals.added_files),
        ("added-records", totals.added_rows),
        ("added-files-size", totals.added_size),
        ("deleted-data-files", totals.deleted_files),
        ("deleted-records", totals.deleted_rows),
        ("removed-files-size", totals.deleted_size),
    ];
    for (key, n) in counts {
        if n > 0 || key.starts_with("added") && operation == "append" {
            summary.insert(key.to_owned(), n.to_string());
        }
    }
    summary
}

/// Keys committed longer than [`KEY_RETENTION`] before `now_ms` go: a retry
/// after that long is a new request.
fn forget_old_keys(keys: &mut BTreeMap<String, i64>, now_ms: i64) {
    let kept_since = now_ms - KEY_RETENTION.as_millis() as i64;
    keys.retain(|_, at| *at >= kept_since);
}

/// A snapshot id: random and positive, as Iceberg's own writers make them.
fn new_snapshot_id() -> i64 {
    let bits = uuid::Uuid::new_v4().as_u64_pair();
    ((bits.0 ^ bits.1) & (i64::MAX as u64)) as i64
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (case, content, added, existing, deleted files, kept)
    #[test]
    fn only_manifests_of_deleted_files_alone_are_dropped() {
        let cases = [
            ("added files", 0, 2, 0, 0, true),
            ("existing and deleted files", 0, 0, 3, 1, true),
            ("deleted files only", 0, 0, 0, 4, false),
            ("no counts (format version 1)", 0, 0, 0, 0, true),
            ("delete files", 1, 0, 0, 4, true),
        ];
        for (case, content, added, existing, deleted, kept) in cases {
            let manifest = ManifestFile {
                path: "memory://t/metadata/m.avro".into(),
                length: 1,
                partition_spec_id: 0,
                content,
                sequence_number: 1,
                min_sequence_number: 1,
                added_snapshot_id: 1,
                added_files: added,
                existing_files: existing,
                deleted_files: deleted,
                added_rows: 0,
                existing_rows: 0,
                deleted_rows: 0,
                partitions: None,
                key_metadata: None,
            };
            assert_eq!(live_manifests(vec![manifest]).len() == 1, kept, "{case}");
        }
    }

    #[test]
    fn keys_are_kept_for_their_retention_only() {
        let day = 86_400_000i64;
        let now = 100 * day;
        let mut keys = BTreeMap::from([
            ("sluice/key/s/old".to_owned(), now - 8 * day),
            ("sluice/key/s/edge".to_owned(), now - 7 * day),
            ("sluice/key/s/new".to_owned(), now - day),
        ]);
        forget_old_keys(&mut keys, now);
        let kept: Vec<&str> = keys.keys().map(String::as_str).collect();
        assert_eq!(kept, ["sluice/key/s/edge", "sluice/key/s/new"]);
    }
}
