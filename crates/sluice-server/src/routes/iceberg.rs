//! `/iceberg/v1/…`: the Apache Iceberg REST catalog, served from the bucket
//! (sluice-iceberg's [`Catalog`]): config, namespaces (list, create, load,
//! exists, drop, properties), tables (list, create and staged create, load,
//! exists, commit with the spec's requirements and updates, drop and purge,
//! register, rename, metrics reports), and `/v1/transactions/commit` for a
//! transaction of one table. Views are not served (the config's endpoints
//! leave them out, so clients know). Clients point at `http://HOST/iceberg`.
//!
//! Callers are authorized as for objects: their grant's key prefix is their
//! catalog (a tenant sees only its own namespaces, and its tables live
//! under its prefix); reads need `get` (listings `list`), changes `put`,
//! drops `delete`. Errors are the spec's `ErrorModel`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use sluice_iceberg::catalog::{dotted, Catalog, CatalogError, CreateTable, LoadedTable};
use sluice_iceberg::updates::Requirement;

use crate::auth::{Grant, Op};
use crate::AppState;

/// The routes, to be nested under `/iceberg`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/config", get(config))
        .route(
            "/v1/namespaces",
            get(list_namespaces).post(create_namespace),
        )
        .route(
            "/v1/namespaces/{namespace}",
            get(load_namespace)
                .head(namespace_exists)
                .delete(drop_namespace),
        )
        .route(
            "/v1/namespaces/{namespace}/properties",
            post(update_properties),
        )
        .route(
            "/v1/namespaces/{namespace}/tables",
            get(list_tables).post(create_table),
        )
        .route(
            "/v1/namespaces/{namespace}/tables/{table}",
            get(load_table)
                .head(table_exists)
                .post(commit_table)
                .delete(drop_table),
        )
        .route(
            "/v1/namespaces/{namespace}/tables/{table}/metrics",
            post(metrics_report),
        )
        .route("/v1/namespaces/{namespace}/register", post(register_table))
        .route("/v1/tables/rename", post(rename_table))
        .route("/v1/transactions/commit", post(commit_transaction))
}

/// The endpoints served, as the config announces them.
const ENDPOINTS: [&str; 16] = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/transactions/commit",
];

/// An error as the REST spec's `ErrorModel`.
#[derive(Debug)]
pub struct IcebergError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl IcebergError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> IcebergError {
        IcebergError {
            status,
            kind,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> IcebergError {
        IcebergError::new(StatusCode::BAD_REQUEST, "BadRequestException", message)
    }
}

impl From<CatalogError> for IcebergError {
    fn from(error: CatalogError) -> IcebergError {
        use CatalogError as E;
        let message = error.to_string();
        let (status, kind) = match &error {
            E::NoSuchNamespace(_) => (StatusCode::NOT_FOUND, "NoSuchNamespaceException"),
            E::NoSuchTable(_) => (StatusCode::NOT_FOUND, "NoSuchTableException"),
            E::NamespaceExists(_) | E::TableExists(_) | E::LocationInUse(_) => {
                (StatusCode::CONFLICT, "AlreadyExistsException")
            }
            E::NamespaceNotEmpty(_) => (StatusCode::CONFLICT, "NamespaceNotEmptyException"),
            E::CommitFailed(_) => (StatusCode::CONFLICT, "CommitFailedException"),
            E::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequestException"),
            E::Corrupt(_) => (StatusCode::INTERNAL_SERVER_ERROR, "ServerErrorException"),
            E::Table(sluice_iceberg::TableError::Store { .. }) | E::Store { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableException",
            ),
            E::Table(_) => (StatusCode::INTERNAL_SERVER_ERROR, "ServerErrorException"),
        };
        if status.is_server_error() {
            tracing::warn!(error = %message, "an Iceberg catalog request failed");
        }
        IcebergError::new(status, kind, message)
    }
}

impl From<crate::error::ApiError> for IcebergError {
    fn from(error: crate::error::ApiError) -> IcebergError {
        let response = error.into_response();
        let status = response.status();
        let kind = match status {
            StatusCode::UNAUTHORIZED => "NotAuthorizedException",
            StatusCode::FORBIDDEN => "ForbiddenException",
            _ => "BadRequestException",
        };
        IcebergError::new(status, kind, format!("not allowed ({status})"))
    }
}

impl IntoResponse for IcebergError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(json!({"error": {
                "message": self.message,
                "type": self.kind,
                "code": self.status.as_u16(),
            }})),
        )
            .into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

type Answer = Result<Response, IcebergError>;

/// The caller's catalog (its key prefix), once it may do `op`.
fn scope(grant: &Grant, op: Op) -> Result<String, IcebergError> {
    grant.allows(op)?;
    grant.catalog_scope().map(str::to_owned).ok_or_else(|| {
        IcebergError::new(
            StatusCode::FORBIDDEN,
            "ForbiddenException",
            "the token is good for one key only, not for the catalog",
        )
    })
}

/// The caller's catalog and the namespace of the path, once it may do `op`.
fn scoped(grant: &Grant, op: Op, segment: &str) -> Result<(String, Vec<String>), IcebergError> {
    Ok((scope(grant, op)?, namespace(segment)?))
}

/// A namespace from its path segment: levels joined by the unit separator
/// (`%1F`).
fn namespace(segment: &str) -> Result<Vec<String>, IcebergError> {
    let levels: Vec<String> = segment.split('\u{1f}').map(str::to_owned).collect();
    for level in &levels {
        checked_name(level, "namespace")?;
    }
    Ok(levels)
}

/// A namespace level or table name: 1 to 255 bytes, not `.` or `..`.
fn checked_name<'a>(name: &'a str, what: &str) -> Result<&'a str, IcebergError> {
    if name.is_empty() || name.len() > 255 || name == "." || name == ".." {
        return Err(IcebergError::bad_request(format!(
            "Invalid {what} name: {name:?}"
        )));
    }
    Ok(name)
}

/// A table identifier of a request body, checked as a path's would be.
fn identifier(identifier: &Identifier) -> Result<(Vec<String>, &str), IcebergError> {
    for level in &identifier.namespace {
        checked_name(level, "namespace")?;
    }
    Ok((
        identifier.namespace.clone(),
        checked_name(&identifier.name, "table")?,
    ))
}

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, IcebergError> {
    serde_json::from_slice(body)
        .map_err(|e| IcebergError::bad_request(format!("Malformed request: {e}")))
}

fn loaded(table: LoadedTable) -> Response {
    Json(json!({
        "metadata-location": table.metadata_location,
        "metadata": table.metadata,
        "config": {},
    }))
    .into_response()
}

fn catalog(state: &AppState) -> Catalog {
    Catalog::new(state.store.clone())
}

async fn config() -> Json<Value> {
    Json(json!({"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS}))
}

#[derive(Deserialize)]
struct Parent {
    parent: Option<String>,
}

async fn list_namespaces(
    State(state): State<AppState>,
    grant: Grant,
    Query(query): Query<Parent>,
) -> Answer {
    let scope = scope(&grant, Op::List)?;
    let parent = match query.parent.as_deref() {
        Some(parent) if !parent.is_empty() => namespace(parent)?,
        _ => Vec::new(),
    };
    let found = catalog(&state).list_namespaces(&scope, &parent).await?;
    Ok(Json(json!({"namespaces": found, "next-page-token": null})).into_response())
}

#[derive(Deserialize)]
struct CreateNamespace {
    namespace: Vec<String>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

async fn create_namespace(State(state): State<AppState>, grant: Grant, body: Bytes) -> Answer {
    let scope = scope(&grant, Op::Put)?;
    let request: CreateNamespace = parse(&body)?;
    let properties = catalog(&state)
        .create_namespace(&scope, &request.namespace, request.properties)
        .await?;
    Ok(Json(json!({"namespace": request.namespace, "properties": properties})).into_response())
}

async fn load_namespace(
    State(state): State<AppState>,
    grant: Grant,
    Path(segment): Path<String>,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Get, &segment)?;
    let properties = catalog(&state).load_namespace(&scope, &namespace).await?;
    Ok(Json(json!({"namespace": namespace, "properties": properties})).into_response())
}

async fn namespace_exists(
    State(state): State<AppState>,
    grant: Grant,
    Path(segment): Path<String>,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Get, &segment)?;
    catalog(&state).load_namespace(&scope, &namespace).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn drop_namespace(
    State(state): State<AppState>,
    grant: Grant,
    Path(segment): Path<String>,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Delete, &segment)?;
    catalog(&state).drop_namespace(&scope, &namespace).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct PropertiesChange {
    #[serde(default)]
    removals: Vec<String>,
    #[serde(default)]
    updates: BTreeMap<String, String>,
}

async fn update_properties(
    State(state): State<AppState>,
    grant: Grant,
    Path(segment): Path<String>,
    body: Bytes,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Put, &segment)?;
    let change: PropertiesChange = parse(&body)?;
    let (updated, removed, missing) = catalog(&state)
        .update_namespace_properties(&scope, &namespace, &change.removals, &change.updates)
        .await?;
    Ok(Json(json!({"updated": updated, "removed": removed, "missing": missing})).into_response())
}

async fn list_tables(
    State(state): State<AppState>,
    grant: Grant,
    Path(segment): Path<String>,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::List, &segment)?;
    let names = catalog(&state).list_tables(&scope, &namespace).await?;
    let identifiers: Vec<Value> = names
        .iter()
        .map(|name| json!({"namespace": namespace, "name": name}))
        .collect();
    Ok(Json(json!({"identifiers": identifiers, "next-page-token": null})).into_response())
}

async fn create_table(
    State(state): State<AppState>,
    grant: Grant,
    Path(segment): Path<String>,
    body: Bytes,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Put, &segment)?;
    let request: CreateTable = parse(&body)?;
    let table = catalog(&state)
        .create_table(&scope, &namespace, request)
        .await?;
    Ok(loaded(table))
}

async fn load_table(
    State(state): State<AppState>,
    grant: Grant,
    Path((segment, name)): Path<(String, String)>,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Get, &segment)?;
    checked_name(&name, "table")?;
    let table = catalog(&state)
        .load_table(&scope, &namespace, &name)
        .await?;
    Ok(loaded(table))
}

async fn table_exists(
    State(state): State<AppState>,
    grant: Grant,
    Path((segment, name)): Path<(String, String)>,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Get, &segment)?;
    checked_name(&name, "table")?;
    catalog(&state)
        .load_table(&scope, &namespace, &name)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A commit's requirements and updates (`CommitTableRequest`).
#[derive(Deserialize)]
struct TableChange {
    #[serde(default)]
    identifier: Option<Identifier>,
    #[serde(default)]
    requirements: Vec<Requirement>,
    #[serde(default)]
    updates: Vec<Value>,
}

#[derive(Deserialize)]
struct Identifier {
    namespace: Vec<String>,
    name: String,
}

async fn commit_table(
    State(state): State<AppState>,
    grant: Grant,
    Path((segment, name)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Put, &segment)?;
    checked_name(&name, "table")?;
    let change: TableChange = parse(&body)?;
    let table = catalog(&state)
        .commit_table(
            &scope,
            &namespace,
            &name,
            &change.requirements,
            &change.updates,
        )
        .await?;
    Ok(Json(json!({
        "metadata-location": table.metadata_location,
        "metadata": table.metadata,
    }))
    .into_response())
}

#[derive(Deserialize)]
struct Purge {
    #[serde(rename = "purgeRequested", default)]
    purge_requested: bool,
}

async fn drop_table(
    State(state): State<AppState>,
    grant: Grant,
    Path((segment, name)): Path<(String, String)>,
    Query(purge): Query<Purge>,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Delete, &segment)?;
    checked_name(&name, "table")?;
    catalog(&state)
        .drop_table(&scope, &namespace, &name, purge.purge_requested)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A client's scan and commit reports: taken, not kept.
async fn metrics_report(grant: Grant) -> Answer {
    grant.allows(Op::Get)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Register {
    name: String,
    metadata_location: String,
    #[serde(default)]
    overwrite: bool,
}

async fn register_table(
    State(state): State<AppState>,
    grant: Grant,
    Path(segment): Path<String>,
    body: Bytes,
) -> Answer {
    let (scope, namespace) = scoped(&grant, Op::Put, &segment)?;
    let request: Register = parse(&body)?;
    if request.overwrite {
        return Err(IcebergError::bad_request(
            "sluice's catalog does not register over an existing table (overwrite)",
        ));
    }
    let table = catalog(&state)
        .register_table(
            &scope,
            &namespace,
            &request.name,
            &request.metadata_location,
        )
        .await?;
    Ok(loaded(table))
}

#[derive(Deserialize)]
struct Rename {
    source: Identifier,
    destination: Identifier,
}

async fn rename_table(State(state): State<AppState>, grant: Grant, body: Bytes) -> Answer {
    let scope = scope(&grant, Op::Put)?;
    grant.allows(Op::Delete)?;
    let rename: Rename = parse(&body)?;
    let (from, to) = (
        identifier(&rename.source)?,
        identifier(&rename.destination)?,
    );
    catalog(&state)
        .rename_table(&scope, (&from.0, from.1), (&to.0, to.1))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Transaction {
    table_changes: Vec<TableChange>,
}

/// A transaction of one table's changes; of several, refused (sluice
/// commits one table atomically, not several).
async fn commit_transaction(State(state): State<AppState>, grant: Grant, body: Bytes) -> Answer {
    let scope = scope(&grant, Op::Put)?;
    let transaction: Transaction = parse(&body)?;
    let [change] = transaction.table_changes.as_slice() else {
        return Err(IcebergError::new(
            StatusCode::NOT_ACCEPTABLE,
            "UnsupportedOperationException",
            "sluice's catalog commits a transaction of one table only",
        ));
    };
    let Some(table) = &change.identifier else {
        return Err(IcebergError::bad_request(
            "a transaction's table change needs its identifier",
        ));
    };
    let (namespace, name) = identifier(table)?;
    catalog(&state)
        .commit_table(
            &scope,
            &namespace,
            name,
            &change.requirements,
            &change.updates,
        )
        .await?;
    tracing::info!(table = %format!("{}.{name}", dotted(&namespace)), "transaction committed");
    Ok(StatusCode::NO_CONTENT.into_response())
}
