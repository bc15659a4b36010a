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
    #[error("{0}")]
    BadRequest(String),
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

/// What a client asks a new table to be (the REST spec's
/// `CreateTableRequest`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateTable {
    pub name: String,
    #[serde(default)]
    pub location: Option<String>,
    pub schema: Value,
    #[serde(default)]
    pub partition_spec: Option<Value>,
    #[serde(default)]
    pub write_order: Option<Value>,
    #[serde(default)]
    pub stage_create: bool,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

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
        CatalogError::Store {
            key: key.to_owned(),
            source,
        }
    }

    /// A small object and its ETag; None when absent.
    async fn read(&self, key: &str) -> Result<Option<(Value, String)>, CatalogError> {
        let output = match self.store.get_object(key, None).await {
            Ok(output) => output,
            Err(error) if error.is_not_found() => return Ok(None),
            Err(error) => return Err(Self::store_error(key, error)),
        };
        let etag = output.meta.etag.clone();
        let bytes = output
            .bytes()
            .await
            .map_err(|e| Self::store_error(key, e))?;
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            CatalogError::BadRequest(format!("the catalog's {key} does not read: {e}"))
        })?;
        Ok(Some((value, etag)))
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
        let location = entry["location"].as_str().unwrap_or_default();
        Ok(Some(self.table_at(location)?))
    }

    fn table_at(&self, location: &str) -> Result<IcebergTable, CatalogError> {
        let key = location
            .strip_prefix(&self.root_uri)
            .map(|k| k.trim_matches('/'))
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                CatalogError::BadRequest(format!(
                    "the location {location} is not under this catalog's store {}",
                    self.root_uri
                ))
            })?;
        let layout = TableLayout {
            location: key.to_owned(),
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
        let missing = || CatalogError::NoSuchTable(Self::identifier(namespace, name));
        let Some(table) = self.table(scope, namespace, name).await? else {
            self.load_namespace(scope, namespace).await?;
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

    /// Where a new table `name` of `namespace` goes: under the scope,
    /// `{namespace levels}/{name}`, or beside it with a suffix when a table
    /// dropped without its files is still there.
    async fn default_location(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
    ) -> Result<String, CatalogError> {
        let mut path = String::from(scope);
        for level in namespace {
            path.push_str(&encode(level));
            path.push('/');
        }
        path.push_str(&encode(name));
        let location = format!("{}/{path}", self.root_uri);
        if self.table_at(&location)?.latest().await?.is_none() {
            return Ok(location);
        }
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        Ok(format!("{location}-{}", &suffix[..8]))
    }

    /// Makes the entry of `name` name `location`, unless an entry names a
    /// table that exists.
    async fn claim_entry(
        &self,
        scope: &str,
        namespace: &[String],
        name: &str,
        location: &str,
    ) -> Result<(), CatalogError> {
        let key = Self::entry_key(scope, namespace, name);
        let body = serde_json::json!({"location": location});
        loop {
            match self
                .write(&key, &body, Some(WriteCondition::IfNoneMatch))
                .await
            {
                Ok(()) => return Ok(()),
                Err(StoreError::PreconditionFailed) => {}
                Err(error) => return Err(Self::store_error(&key, error)),
            }
            let Some((entry, etag)) = self.read(&key).await? else {
                continue;
            };
            let theirs = entry["location"].as_str().unwrap_or_default();
            if theirs == location {
                return Ok(());
            }
            if self.table_at(theirs)?.latest().await?.is_some() {
                return Err(CatalogError::TableExists(Self::identifier(namespace, name)));
            }
            // An entry left by a create that stopped before its table:
            // taken over.
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
                self.table_at(location)?;
                location.trim_end_matches('/').to_owned()
            }
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
        self.claim_entry(scope, namespace, &request.name, &location)
            .await?;
        self.commit_at(
            &location,
            namespace,
            &request.name,
            &[Requirement::AssertCreate],
            &updates,
        )
        .await
    }

    /// A commit through the one commit loop at `location`.
    async fn commit_at(
        &self,
        location: &str,
        namespace: &[String],
        name: &str,
        requirements: &[Requirement],
        updates: &[Value],
    ) -> Result<LoadedTable, CatalogError> {
        let table = self.table_at(location)?;
        match table.commit_updates(requirements, updates).await {
            Ok((version, metadata)) => Ok(LoadedTable {
                metadata_location: Some(table.metadata_location(version)),
                metadata,
            }),
            Err(TableError::Update {
                source: UpdateError::Requirement(reason),
                ..
            }) if requirements.contains(&Requirement::AssertCreate)
                && reason.contains("already exists") =>
            {
                Err(CatalogError::TableExists(Self::identifier(namespace, name)))
            }
            Err(TableError::Update {
                source: UpdateError::Requirement(reason),
                ..
            }) => Err(CatalogError::CommitFailed(reason)),
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
        let location = match self.table(scope, namespace, name).await? {
            Some(table) => table.location(),
            None if requirements.contains(&Requirement::AssertCreate) => {
                self.load_namespace(scope, namespace).await?;
                let location = match updates
                    .iter()
                    .find(|u| u["action"] == "set-location")
                    .and_then(|u| u["location"].as_str())
                {
                    Some(location) => location.trim_end_matches('/').to_owned(),
                    None => self.default_location(scope, namespace, name).await?,
                };
                self.claim_entry(scope, namespace, name, &location).await?;
                location
            }
            None => {
                self.load_namespace(scope, namespace).await?;
                return Err(CatalogError::NoSuchTable(Self::identifier(namespace, name)));
            }
        };
        if !requirements.contains(&Requirement::AssertCreate)
            && self.table_at(&location)?.latest().await?.is_none()
        {
            return Err(CatalogError::NoSuchTable(Self::identifier(namespace, name)));
        }
        self.commit_at(&location, namespace, name, requirements, updates)
            .await
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
        let Some(table) = self.table(scope, namespace, name).await? else {
            self.load_namespace(scope, namespace).await?;
            return Err(CatalogError::NoSuchTable(Self::identifier(namespace, name)));
        };
        let key = Self::entry_key(scope, namespace, name);
        self.store
            .delete_object(&key)
            .await
            .map_err(|e| Self::store_error(&key, e))?;
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
        let Some(table) = self.table(scope, from.0, from.1).await? else {
            self.load_namespace(scope, from.0).await?;
            return Err(CatalogError::NoSuchTable(Self::identifier(from.0, from.1)));
        };
        self.load_namespace(scope, to.0).await?;
        let target = Self::entry_key(scope, to.0, to.1);
        let body = serde_json::json!({"location": table.location()});
        match self
            .write(&target, &body, Some(WriteCondition::IfNoneMatch))
            .await
        {
            Ok(()) => {}
            Err(StoreError::PreconditionFailed) => {
                return Err(CatalogError::TableExists(Self::identifier(to.0, to.1)))
            }
            Err(error) => return Err(Self::store_error(&target, error)),
        }
        let source = Self::entry_key(scope, from.0, from.1);
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
        let metadata_key = metadata_location
            .strip_prefix(&self.root_uri)
            .map(|k| k.trim_start_matches('/').to_owned())
            .ok_or_else(|| {
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
        if let Some(table) = self.table(scope, namespace, name).await? {
            if table.latest().await?.is_some() {
                return Err(CatalogError::TableExists(Self::identifier(namespace, name)));
            }
        }
        let table = self.table_at(&metadata.location)?;
        let version = match table.latest().await? {
            // Already one of the table's versions: nothing to write.
            Some((version, latest))
                if table.metadata_location(version) == metadata_location || *latest == metadata =>
            {
                version
            }
            _ => table.adopt(&metadata).await?,
        };
        self.claim_entry(scope, namespace, name, &metadata.location)
            .await?;
        Ok(LoadedTable {
            metadata_location: Some(table.metadata_location(version)),
            metadata,
        })
    }
}
