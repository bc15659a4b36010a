//! The Iceberg catalog sluice serves (over HTTP by `sluice serve`, see the
//! REST spec), kept as objects in the bucket with no database beside it:
//!
//! - a namespace is `_sluice/catalog/{scope}namespaces/{level}/…/_namespace.json`
//!   (its properties), made create-only and changed with `If-Match`;
//! - a table is an entry `…/{namespace levels}/_tables/{name}.json` naming its
//!   location; its current metadata is the newest `metadata/vN.metadata.json`
//!   there, and every commit (a client's through the catalog, a stream's) is
//!   the next version written create-only by the one commit loop
//!   ([`IcebergTable`]): the conditional write that lets exactly one of two
//!   writers, through two gateways, have each version, after the winner's
//!   requirements were checked on the metadata it was made on.
//!
//! `scope` is the caller's key prefix (a tenant's `tenant/`, or empty): a
//! tenant sees only its own namespaces, and its tables live under its prefix.
//! Level names are percent-encoded in keys (`/`, `%`, a leading `_`), so no
//! name can pass for the catalog's own `_tables` and `_namespace.json`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use sluice_store::{DirectoryEntry, ObjectStore, PutRequest, StoreError, WriteCondition};

use crate::metadata::TableMetadata;
use crate::updates::{Requirement, UpdateError};
use crate::{IcebergTable, TableError, TableLayout};

/// Why a catalog request failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("Namespace does not exist: {0}")]
    NoSuchNamespace(String),
    #[error("Namespace already exists: {0}")]
    NamespaceExists(String),
    #[error("Namespace is not empty: {0}")]
    NamespaceNotEmpty(String),
    #[error("Table does not exist: {0}")]
    NoSuchTable(String),
    #[error("Table already exists: {0}")]
    TableExists(String),
    #[error("Table already exists at location {0} (another table of the catalog lives there)")]
    LocationInUse(String),
    #[error("{0}")]
    BadRequest(String),
    /// One of the catalog's own objects does not read (500).
    #[error("{0}")]
    Corrupt(String),
    /// A requirement failed: the table moved (retry on top of it).
    #[error("{0}")]
    CommitFailed(String),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("the catalog's {key}: {source}")]
    Store {
        key: String,
        #[source]
        source: StoreError,
    },
}

/// A table as the catalog gives it: where its current metadata is, and what
/// it holds.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    /// None for a staged create (nothing written yet).
    pub metadata_location: Option<String>,
    pub metadata: TableMetadata,
}

pub use crate::create::CreateTable;

/// One of the catalog's objects as read.
struct Stored {
    value: Value,
    etag: String,
    modified: std::time::SystemTime,
}

/// How long a location's lock naming an entry not written yet is another
/// create's, still under way (a lock older than that was left by one that
/// stopped, and is taken over).
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// The catalog over one store.
pub struct Catalog {
    store: Arc<dyn ObjectStore>,
    /// The store's root as readers address it (`s3://bucket/prefix`).
    root_uri: String,
}

/// A namespace level or table name as a key segment.
fn encode(level: &str) -> String {
    let mut out = String::with_capacity(level.len());
    for (i, c) in level.chars().enumerate() {
        match c {
            '/' | '%' | '\\' => out.push_str(&format!("%{:02X}", c as u32)),
            '_' if i == 0 => out.push_str("%5F"),
            c if c.is_control() => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn decode(segment: &str) -> String {
    sluice_table::percent_decode(segment)
}

/// A namespace for messages: its levels joined by `.`.
pub fn dotted(namespace: &[String]) -> String {
    namespace.join(".")
}

fn valid_name(name: &str, what: &str) -> Result<(), CatalogError> {
    if name.is_empty() || name.len() > 255 || name == "." || name == ".." {
        return Err(CatalogError::BadRequest(format!(
            "Invalid {what} name: {name:?}"
        )));
    }
    Ok(())
}

impl Catalog {
    pub fn new(store: Arc<dyn ObjectStore>) -> Catalog {
        let root_uri = store.describe().trim_end_matches('/').to_owned();
        Catalog { store, root_uri }
    }

    fn base(scope: &str) -> String {
        format!("_sluice/catalog/{scope}namespaces/")
    }

    fn namespace_dir(scope: &str, namespace: &[String]) -> String {
        let mut key = Self::base(scope);
        for level in namespace {
            key.push_str(&encode(level));
            key.push('/');
        }
        key
    }

    fn namespace_key(scope: &str, namespace: &[String]) -> String {
        format!("{}_namespace.json", Self::namespace_dir(scope, namespace))
    }

    fn entry_key(scope: &str, namespace: &[String], name: &str) -> String {
        format!(
            "{}_tables/{}.json",
            Self::namespace_dir(scope, namespace),
            encode(name)
        )
    }

    fn store_error(key: &str, source: StoreError) -> CatalogError {
        if matches!(source, StoreError::InvalidKey { .. }) {
            return CatalogError::BadRequest(format!("{key}: {source}"));
        }
        CatalogError::Store {
            key: key.to_owned(),
            source,
        }
    }

    /// A small object and its ETag; None when absent.
    async fn read(&self, key: &str) -> Result<Option<(Value, String)>, CatalogError> {
        Ok(self.read_stored(key).await?.map(|s| (s.value, s.etag)))
    }

    async fn read_stored(&self, key: &str) -> Result<Option<Stored>, CatalogError> {
        let output = match self.store.get_object(key, None).await {
            Ok(output) => output,
            Err(error) if error.is_not_found() => return Ok(None),
            Err(error) => return Err(Self::store_error(key, error)),
        };
        let etag = output.meta.etag.clone();
        let modified = output.meta.last_modified;
        let bytes = output
            .bytes()
            .await
            .map_err(|e| Self::store_error(key, e))?;
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            CatalogError::Corrupt(format!("the catalog's {key} does not read: {e}"))
        })?;
        Ok(Some(Stored {
            value,
            etag,
            modified,
        }))
    }

    async fn write(
        &self,
        key: &str,
        value: &Value,
        condition: Option<WriteCondition>,
    ) -> Result<(), StoreError> {
        let mut request = PutRequest::new(key, serde_json::to_vec(value).expect("serializes"));
        request.content_type = Some("application/json".into());
        request.condition = condition;
        self.store.put_object(request).await.map(|_| ())
    }

    // ---- namespaces ----

    /// The namespaces directly under `parent` (the top level for none).
    pub async fn list_namespaces(
        &self,
        scope: &str,
        parent: &[String],
    ) -> Result<Vec<Vec<String>>, CatalogError> {
        if !parent.is_empty() {
            self.load_namespace(scope, parent).await?;
        }
        let dir = Self::namespace_dir(scope, parent);
        let mut found = Vec::new();
        for entry in self.list_dir(&dir).await? {
            let DirectoryEntry::Prefix(prefix) = entry else {
                continue;
            };
            let segment = prefix[dir.len()..].trim_end_matches('/');
            if segment.starts_with('_') {
                continue;
            }
            let mut namespace = parent.to_vec();
            namespace.push(decode(segment));
            // A level whose namespace was dropped keeps only its children.
            if self
                .read(&Self::namespace_key(scope, &namespace))
                .await?
                .is_some()
            {
                found.push(namespace);
            }
        }
        Ok(found)
    }

    async fn list_dir(&self, dir: &str) -> Result<Vec<DirectoryEntry>, CatalogError> {
        let mut entries = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .store
                .list_directory(dir, cursor.as_deref(), 1000)
                .await
                .map_err(|e| Self::store_error(dir, e))?;
            entries.extend(page.entries);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(entries),
            }
        }
    }

    pub async fn create_namespace(
        &self,
        scope: &str,
        namespace: &[String],
        properties: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, CatalogError> {
        if namespace.is_empty() {
            return Err(CatalogError::BadRequest(
                "Invalid namespace: the empty namespace".into(),
            ));
        }
        for level in namespace {
            valid_name(level, "namespace")?;
        }
        let key = Self::namespace_key(scope, namespace);
        let body = serde_json::json!({"namespace": namespace, "properties": properties});
        match self
            .write(&key, &body, Some(WriteCondition::IfNoneMatch))
            .await
        {
            Ok(()) => Ok(properties),
            Err(StoreError::PreconditionFailed) => {
                Err(CatalogError::NamespaceExists(dotted(namespace)))
            }
            Err(error) => Err(Self::store_error(&key, error)),
        }
    }

    /// A namespace's properties.
    pub async fn load_namespace(
        &self,
        scope: &str,
        namespace: &[String],
    ) -> Result<BTreeMap<String, String>, CatalogError> {
        Ok(self.namespace_with_etag(scope, namespace).await?.0)
    }

    async fn namespace_with_etag(
        &self,
        scope: &str,
        namespace: &[String],
    ) -> Result<(BTreeMap<String, String>, String), CatalogError> {
        if namespace.is_empty() {
            return Err(CatalogError::NoSuchNamespace(String::new()));
        }
        let key = Self::namespace_key(scope, namespace);
        let Some((value, etag)) = self.read(&key).await? else {
            return Err(CatalogError::NoSuchNamespace(dotted(namespace)));
        };
        let properties = serde_json::from_value(value["properties"].clone()).unwrap_or_default();
        Ok((properties, etag))
    }

    /// Drops an empty namespace (no table, no namespace under it).
    pub async fn drop_namespace(
        &self,
        scope: &str,
        namespace: &[String],
    ) -> Result<(), CatalogError> {
        self.load_namespace(scope, namespace).await?;
        if !self.list_tables(scope, namespace).await?.is_empty()
            || !self.list_namespaces(scope, namespace).await?.is_empty()
        {
            return Err(CatalogError::NamespaceNotEmpty(dotted(namespace)));
        }
        let key = Self::namespace_key(scope, namespace);
        self.store
            .delete_object(&key)
            .await
            .map_err(|e| Self::store_error(&key, e))
    }

    /// Sets `updates` and removes `removals` (one key in both is refused);
    /// the keys updated, removed, and asked to be removed but missing.
    pub async fn update_namespace_properties(
        &self,
        scope: &str,
        namespace: &[String],
        removals: &[String],
        updates: &BTreeMap<String, String>,
    ) -> Result<(Vec<String>, Vec<String>, Vec<String>), CatalogError> {
        if let Some(both) = removals.iter().find(|k| updates.contains_key(*k)) {
            return Err(CatalogError::BadRequest(format!(
                "Cannot remove and update the same property: {both}"
            )));
        }
        let key = Self::namespace_key(scope, namespace);
        loop {
            let (mut properties, etag) = self.namespace_with_etag(scope, namespace).await?;
            let mut removed = Vec::new();
            let mut missing = Vec::new();
            for k in removals {
                match properties.remove(k) {
                    Some(_) => removed.push(k.clone()),
                    None => missing.push(k.clone()),
                }
            }
            for (k, v) in updates {
                properties.insert(k.clone(), v.clone());
            }
            let body = serde_json::json!({"namespace": namespace, "properties": properties});
            match self
                .write(&key, &body, Some(WriteCondition::IfMatch(etag)))
                .await
            {
                Ok(()) => return Ok((updates.keys().cloned().collect(), removed, missing)),
                // Another change landed in between: made again on top of it.
                Err(StoreError::PreconditionFailed) => continue,
                Err(error) => return Err(Self::store_error(&key, error)),
            }
        }
    }

    // ---- tables ----

    pub async fn list_tables(
        &self,
        scope: &str,
        namespace: &[String],
    ) -> Result<Vec<String>, CatalogError> {
        self.load_namespace(scope, namespace).await?;
        let dir = format!("{}_tables/", Self::namespace_dir(scope, namespace));
        let mut names = Vec::new();
        for entry in self.list_dir(&dir).await? {
            if let DirectoryEntry::Object(object) = entry {
                if let Some(name) = object.key[dir.len()..].strip_suffix(".json") {
                    names.push(decode(name));
                }
            }
        }
        Ok(names)
    }

    /// The table a catalog entry names; None when there is no entry.
    async fn table(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
    ) -> Result<Option<IcebergTable>, CatalogError> {
        let key = Self::entry_key(scope, namespace, name);
        let Some((entry, _)) = self.read(&key).await? else {
            return Ok(None);
        };
        Ok(Some(self.entry_table(&entry)?))
    }

    /// The table an entry's JSON names: its location, from its first version.
    fn entry_table(&self, entry: &Value) -> Result<IcebergTable, CatalogError> {
        let location = entry["location"].as_str().unwrap_or_default();
        let first = entry["first-version"].as_u64().unwrap_or(1);
        Ok(self.table_at(location)?.with_floor(first))
    }

    /// The table at a location a client gave: under the caller's scope,
    /// outside sluice's own state, with no `.` or `..` in its path.
    fn table_in(&self, scope: &str, location: &str) -> Result<IcebergTable, CatalogError> {
        let table = self.table_at(location)?;
        let key = &table.layout().location;
        let fine = key.starts_with(scope)
            && !key.starts_with("_sluice/")
            && key != "_sluice"
            && key
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != "..");
        if !fine {
            let within = if scope.is_empty() {
                format!("{} (outside _sluice/)", self.root_uri)
            } else {
                format!("{}/{scope}", self.root_uri)
            };
            return Err(CatalogError::BadRequest(format!(
                "the location {location} is not one this caller may put a table at: tables go under {within}"
            )));
        }
        Ok(table)
    }

    fn table_at(&self, location: &str) -> Result<IcebergTable, CatalogError> {
        let key = crate::key_under(&self.root_uri, location)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                CatalogError::BadRequest(format!(
                    "the location {location} is not under this catalog's store {}",
                    self.root_uri
                ))
            })?;
        let layout = TableLayout {
            location: key,
            partition_columns: Vec::new(),
        };
        Ok(IcebergTable::new(
            self.store.clone(),
            layout,
            &self.root_uri,
        ))
    }

    fn identifier(namespace: &[String], name: &str) -> String {
        format!("{}.{name}", dotted(namespace))
    }

    /// The table's current metadata.
    pub async fn load_table(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
    ) -> Result<LoadedTable, CatalogError> {
        // A table of a namespace that does not exist does not exist either
        // (clients then try a metadata table: `ns.t.files`).
        let missing = || CatalogError::NoSuchTable(Self::identifier(namespace, name));
        let Some(table) = self.table(scope, namespace, name).await? else {
            return Err(missing());
        };
        let Some((version, metadata)) = table.latest().await? else {
            return Err(missing());
        };
        Ok(LoadedTable {
            metadata_location: Some(table.metadata_location(version)),
            metadata: TableMetadata::clone(&metadata),
        })
    }

    /// The key of the lock that says which entry a location is the table of.
    fn lock_key(scope: &str, location_key: &str) -> String {
        format!(
            "_sluice/catalog/{scope}locations/{}.json",
            encode(location_key)
        )
    }

    /// Makes `location` the table of entry `entry_key`, unless another
    /// entry's table lives there (a lock left by a drop that stopped, or
    /// naming an entry now elsewhere, is taken over; so is one of entry
    /// `renamed_from`, whose table this is).
    async fn claim_location(
        &self,
        scope: &str,
        location: &str,
        entry_key: &str,
        renamed_from: Option<&str>,
    ) -> Result<(), CatalogError> {
        let table = self.table_at(location)?;
        let key = Self::lock_key(scope, &table.layout().location);
        let body = serde_json::json!({"entry": entry_key});
        loop {
            match self
                .write(&key, &body, Some(WriteCondition::IfNoneMatch))
                .await
            {
                Ok(()) => return Ok(()),
                Err(StoreError::PreconditionFailed) => {}
                Err(error) => return Err(Self::store_error(&key, error)),
            }
            let Some(lock) = self.read_stored(&key).await? else {
                continue;
            };
            let etag = lock.etag;
            let holder = lock.value["entry"].as_str().unwrap_or_default().to_owned();
            if holder == entry_key {
                return Ok(());
            }
            let theirs = match renamed_from {
                Some(from) if from == holder => None,
                _ => self.read(&holder).await?,
            };
            match theirs {
                Some((entry, _)) => {
                    let same = entry["location"]
                        .as_str()
                        .and_then(|l| crate::key_under(&self.root_uri, l))
                        == Some(table.layout().location.clone());
                    if same {
                        return Err(CatalogError::LocationInUse(location.to_owned()));
                    }
                }
                // Another create that has its lock and not yet its entry.
                None if renamed_from.is_none()
                    && lock.modified.elapsed().unwrap_or_default() < LOCK_GRACE =>
                {
                    return Err(CatalogError::LocationInUse(location.to_owned()));
                }
                None => {}
            }
            match self
                .write(&key, &body, Some(WriteCondition::IfMatch(etag)))
                .await
            {
                Ok(()) => return Ok(()),
                Err(StoreError::PreconditionFailed) => continue,
                Err(error) => return Err(Self::store_error(&key, error)),
            }
        }
    }

    /// Gives `location` up, when entry `entry_key` holds it.
    async fn release_location(&self, scope: &str, location: &str, entry_key: &str) {
        let Ok(table) = self.table_at(location) else {
            return;
        };
        let key = Self::lock_key(scope, &table.layout().location);
        if let Ok(Some((lock, _))) = self.read(&key).await {
            if lock["entry"].as_str() == Some(entry_key) {
                if let Err(error) = self.store.delete_object(&key).await {
                    tracing::debug!(%key, %error, "a location's lock stays (the next claim takes it over)");
                }
            }
        }
    }

    /// Where a new table `name` of `namespace` goes: `{scope}{levels}/{name}`
    /// in the bucket, or beside it with a suffix when another table lives
    /// there (one renamed away from that name).
    async fn default_location(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
    ) -> Result<String, CatalogError> {
        let location = self.plain_location(scope, namespace, name);
        let entry_key = Self::entry_key(scope, namespace, name);
        match self
            .claim_location(scope, &location, &entry_key, None)
            .await
        {
            Ok(()) => Ok(location),
            Err(CatalogError::LocationInUse(_)) => {
                let suffix = uuid::Uuid::new_v4().simple().to_string();
                Ok(format!("{location}-{}", &suffix[..8]))
            }
            Err(error) => Err(error),
        }
    }

    /// `{scope}{levels}/{name}` as a location in the bucket.
    fn plain_location(&self, scope: &str, namespace: &[String], name: &str) -> String {
        let mut path = String::from(scope);
        for level in namespace {
            path.push_str(&encode(level));
            path.push('/');
        }
        path.push_str(&encode(name));
        format!("{}/{path}", self.root_uri)
    }

    /// Makes the entry of `name` the table at `location` from its next
    /// version on (versions there before are a dropped table's), unless an
    /// entry names a table that exists; the table, to be created.
    async fn claim_entry(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
        location: &str,
    ) -> Result<IcebergTable, CatalogError> {
        let key = Self::entry_key(scope, namespace, name);
        self.claim_location(scope, location, &key, None).await?;
        let first = self
            .table_at(location)?
            .newest()
            .await?
            .map_or(1, |(version, _)| version + 1);
        let body = serde_json::json!({"location": location, "first-version": first});
        loop {
            match self
                .write(&key, &body, Some(WriteCondition::IfNoneMatch))
                .await
            {
                Ok(()) => return self.entry_table(&body),
                Err(StoreError::PreconditionFailed) => {}
                Err(error) => return Err(Self::store_error(&key, error)),
            }
            let Some((entry, etag)) = self.read(&key).await? else {
                continue;
            };
            let theirs = self.entry_table(&entry)?;
            if theirs.latest().await?.is_some() {
                return Err(CatalogError::TableExists(Self::identifier(namespace, name)));
            }
            if entry["location"] == body["location"] {
                // Another create of the same name, not made yet: the two
                // race for its first version.
                return Ok(theirs);
            }
            // An entry left by a create that stopped before its table:
            // taken over.
            match self
                .write(&key, &body, Some(WriteCondition::IfMatch(etag)))
                .await
            {
                Ok(()) => return self.entry_table(&body),
                Err(StoreError::PreconditionFailed) => continue,
                Err(error) => return Err(Self::store_error(&key, error)),
            }
        }
    }

    /// Creates table `request.name` (or stages it: nothing written).
    pub async fn create_table(
        &self,
        scope: &str,
        namespace: &[String],
        request: CreateTable,
    ) -> Result<LoadedTable, CatalogError> {
        valid_name(&request.name, "table")?;
        self.load_namespace(scope, namespace).await?;
        if let Some(table) = self.table(scope, namespace, &request.name).await? {
            if table.latest().await?.is_some() {
                return Err(CatalogError::TableExists(Self::identifier(
                    namespace,
                    &request.name,
                )));
            }
        }
        let location = match &request.location {
            Some(location) => {
                self.table_in(scope, location)?;
                location.trim_end_matches('/').to_owned()
            }
            // A staged create claims no location yet: its commit will.
            None if request.stage_create => self.plain_location(scope, namespace, &request.name),
            None => {
                self.default_location(scope, namespace, &request.name)
                    .await?
            }
        };
        let updates =
            crate::create::updates(&request, &location).map_err(CatalogError::BadRequest)?;
        if request.stage_create {
            let mut metadata = crate::updates::empty_metadata(&location, crate::now_ms());
            crate::updates::apply(&mut metadata, &updates, crate::now_ms())
                .map_err(|e| CatalogError::BadRequest(e.to_string()))?;
            return Ok(LoadedTable {
                metadata_location: None,
                metadata,
            });
        }
        let table = self
            .claim_entry(scope, namespace, &request.name, &location)
            .await?;
        match Self::commit_to(&table, &[Requirement::AssertCreate], &updates).await {
            // Another creator's first version landed first.
            Err(CatalogError::CommitFailed(_)) => Err(CatalogError::TableExists(Self::identifier(
                namespace,
                &request.name,
            ))),
            Err(error) => {
                self.forget_unmade(scope, namespace, &request.name, &location)
                    .await;
                Err(error)
            }
            made => made,
        }
    }

    /// Removes the entry of a create that failed, when it still names
    /// `location` and no table is there from its first version (an entry
    /// naming no table would otherwise hold the name).
    async fn forget_unmade(&self, scope: &str, namespace: &[String], name: &str, location: &str) {
        let key = Self::entry_key(scope, namespace, name);
        let Ok(Some((entry, _))) = self.read(&key).await else {
            return;
        };
        if entry["location"].as_str() != Some(location) {
            return;
        }
        if let Ok(table) = self.entry_table(&entry) {
            if let Ok(None) = table.latest().await {
                let _ = self.store.delete_object(&key).await;
                self.release_location(scope, location, &key).await;
            }
        }
    }

    /// A commit through the one commit loop.
    async fn commit_to(
        table: &IcebergTable,
        requirements: &[Requirement],
        updates: &[Value],
    ) -> Result<LoadedTable, CatalogError> {
        match table.commit_updates(requirements, updates).await {
            Ok((version, metadata)) => Ok(LoadedTable {
                metadata_location: Some(table.metadata_location(version)),
                metadata,
            }),
            Err(TableError::Update {
                source: source @ UpdateError::Requirement(_),
                ..
            }) => Err(CatalogError::CommitFailed(source.to_string())),
            Err(TableError::Update {
                source: UpdateError::Invalid(reason),
                ..
            }) => Err(CatalogError::BadRequest(reason)),
            Err(error) => Err(error.into()),
        }
    }

    /// Commits `updates` to table `name` once `requirements` hold (a staged
    /// create's commit, with `assert-create`, makes the table).
    pub async fn commit_table(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
        requirements: &[Requirement],
        updates: &[Value],
    ) -> Result<LoadedTable, CatalogError> {
        let creates = requirements.contains(&Requirement::AssertCreate);
        for update in updates.iter().filter(|u| u["action"] == "set-location") {
            let location = update["location"].as_str().unwrap_or_default();
            self.table_in(scope, location)?;
        }
        let table = match self.table(scope, namespace, name).await? {
            Some(table) if !creates || table.latest().await?.is_some() => table,
            _ if creates => {
                self.load_namespace(scope, namespace).await?;
                let location = match updates
                    .iter()
                    .find(|u| u["action"] == "set-location")
                    .and_then(|u| u["location"].as_str())
                {
                    Some(location) => location.trim_end_matches('/').to_owned(),
                    None => self.default_location(scope, namespace, name).await?,
                };
                match self.claim_entry(scope, namespace, name, &location).await {
                    Err(CatalogError::TableExists(_)) => {
                        return Err(CatalogError::CommitFailed(
                            UpdateError::Requirement("table already exists".into()).to_string(),
                        ))
                    }
                    other => other?,
                }
            }
            _ => return Err(CatalogError::NoSuchTable(Self::identifier(namespace, name))),
        };
        if !creates && table.latest().await?.is_none() {
            return Err(CatalogError::NoSuchTable(Self::identifier(namespace, name)));
        }
        Self::commit_to(&table, requirements, updates).await
    }

    /// Drops the table's entry; with `purge`, every object under its
    /// location too.
    pub async fn drop_table(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
        purge: bool,
    ) -> Result<(), CatalogError> {
        let key = Self::entry_key(scope, namespace, name);
        let Some((entry, _)) = self.read(&key).await? else {
            return Err(CatalogError::NoSuchTable(Self::identifier(namespace, name)));
        };
        let table = self.entry_table(&entry)?;
        self.store
            .delete_object(&key)
            .await
            .map_err(|e| Self::store_error(&key, e))?;
        let location = entry["location"].as_str().unwrap_or_default();
        if purge {
            let prefix = format!("{}/", table.layout().location);
            let mut cursor: Option<String> = None;
            loop {
                let page = self
                    .store
                    .list_objects(&prefix, cursor.as_deref(), 1000)
                    .await
                    .map_err(|e| Self::store_error(&prefix, e))?;
                let keys: Vec<String> = page.objects.into_iter().map(|o| o.key).collect();
                if !keys.is_empty() {
                    self.store
                        .delete_objects(&keys)
                        .await
                        .map_err(|e| Self::store_error(&prefix, e))?;
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        self.release_location(scope, location, &key).await;
        Ok(())
    }

    /// Renames a table: the entry moves (its location stays).
    pub async fn rename_table(
        &self,
        scope: &str,
        from: (&[String], &str),
        to: (&[String], &str),
    ) -> Result<(), CatalogError> {
        valid_name(to.1, "table")?;
        let source = Self::entry_key(scope, from.0, from.1);
        let Some((entry, _)) = self.read(&source).await? else {
            return Err(CatalogError::NoSuchTable(Self::identifier(from.0, from.1)));
        };
        self.load_namespace(scope, to.0).await?;
        let target = Self::entry_key(scope, to.0, to.1);
        match self
            .write(&target, &entry, Some(WriteCondition::IfNoneMatch))
            .await
        {
            Ok(()) => {}
            Err(StoreError::PreconditionFailed) => {
                return Err(CatalogError::TableExists(Self::identifier(to.0, to.1)))
            }
            Err(error) => return Err(Self::store_error(&target, error)),
        }
        let location = entry["location"].as_str().unwrap_or_default();
        // The location is the new entry's (the old one is gone or going).
        if let Err(error) = self
            .claim_location(scope, location, &target, Some(&source))
            .await
        {
            let _ = self.store.delete_object(&target).await;
            return Err(error);
        }
        self.store
            .delete_object(&source)
            .await
            .map_err(|e| Self::store_error(&source, e))
    }

    /// Registers the table whose metadata file is `metadata_location` as
    /// `name`: that metadata becomes the next version at its location.
    pub async fn register_table(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
        metadata_location: &str,
    ) -> Result<LoadedTable, CatalogError> {
        valid_name(name, "table")?;
        self.load_namespace(scope, namespace).await?;
        let metadata_key =
            crate::key_under(&self.root_uri, metadata_location).ok_or_else(|| {
                CatalogError::BadRequest(format!(
                    "the metadata {metadata_location} is not under this catalog's store {}",
                    self.root_uri
                ))
            })?;
        let Some((metadata, _)) = self.read(&metadata_key).await? else {
            return Err(CatalogError::BadRequest(format!(
                "no metadata at {metadata_location}"
            )));
        };
        let metadata: TableMetadata = serde_json::from_value(metadata)
            .map_err(|e| CatalogError::BadRequest(format!("{metadata_location}: {e}")))?;
        let at = self.table_in(scope, &metadata.location)?;
        if let Some(table) = self.table(scope, namespace, name).await? {
            if table.latest().await?.is_some() {
                return Err(CatalogError::TableExists(Self::identifier(namespace, name)));
            }
        }
        // One of the location's own versions (a table sluice or the
        // file-system catalog made there): the table is that history as it
        // is, its newest version current. Another catalog's metadata file
        // becomes the first version of a location with none; over a
        // history, it would roll the table back, and is refused.
        let own_version = metadata_key
            .strip_prefix(&format!("{}/metadata/v", at.layout().location))
            .and_then(|v| v.strip_suffix(".metadata.json"))
            .and_then(|v| v.parse::<u64>().ok());
        let newest = at.newest().await?;
        let adopt = match (own_version, &newest) {
            (Some(_), _) => false,
            (None, None) => true,
            (None, Some((version, _))) => {
                return Err(CatalogError::BadRequest(format!(
                    "{metadata_location} is not one of the versions at its location, which has \
                     {version} already: registering it would roll that table back; register \
                     {} instead",
                    at.metadata_location(*version)
                )))
            }
        };
        let entry_key = Self::entry_key(scope, namespace, name);
        self.claim_location(scope, &metadata.location, &entry_key, None)
            .await?;
        let body = serde_json::json!({"location": metadata.location, "first-version": 1});
        match self
            .write(&entry_key, &body, Some(WriteCondition::IfNoneMatch))
            .await
        {
            Ok(()) => {}
            Err(StoreError::PreconditionFailed) => {
                return Err(CatalogError::TableExists(Self::identifier(namespace, name)))
            }
            Err(error) => return Err(Self::store_error(&entry_key, error)),
        }
        if adopt {
            at.adopt(&metadata).await?;
        }
        let table = self.entry_table(&body)?;
        let Some((version, current)) = table.latest().await? else {
            return Err(CatalogError::NoSuchTable(Self::identifier(namespace, name)));
        };
        Ok(LoadedTable {
            metadata_location: Some(table.metadata_location(version)),
            metadata: TableMetadata::clone(&current),
        })
    }
}
