//! Imports from a URL: `POST /v1/imports {url}` makes the gateway fetch a
//! remote object straight into a multipart upload (ranged requests, the
//! engine's parts within the memory budget and the store's checksums, no temp
//! files), as an upload of its own: the key template, the tenant, the
//! pre-create hook and an `upload.completed` event (kind `import`). The state
//! lives in the bucket ([`record`]), so an import survives the gateway's death
//! and goes on from the parts it stored on any gateway ([`run`]);
//! `GET /v1/imports/ID` shows its progress. What may be fetched is the
//! guard's to say ([`guard`]): public addresses only unless an operator
//! allows more. Companion's `/url/` routes and progress socket serve Uppy's
//! `@uppy/url` ([`companion`]).

pub mod companion;
pub mod fetch;
pub mod guard;
pub mod record;
pub mod run;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sluice_store::limits::{MAX_OBJECT_SIZE, MAX_PARTS, MIN_PART_SIZE};
use sluice_store::StoreError;
use sluice_upload::{UploadKind, UploadRequest};

use crate::auth::{Grant, Op};
use crate::begin::{Asked, KeyFrom};
use crate::error::ApiError;
use crate::AppState;
use guard::{Allowed, ImportGuard, Resolve, SystemResolver};
use record::{now_ms, ImportRecord, Phase};

/// `[imports]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Imports from a URL")]
pub struct ImportSettings {
    /// Import objects from URLs (POST /v1/imports): the gateway fetches them
    /// itself, from public addresses only unless --import-allow says more. See
    /// docs/IMPORTS.md.
    #[arg(id = "imports.enabled", long = "imports", env = "SLUICE_IMPORTS", value_name = "BOOL", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::values::flag_bool())]
    pub enabled: bool,
    /// Networks (10.0.0.0/8, fd00::/8, 192.0.2.7) and host names imports may
    /// fetch from although they are not public (loopback, private, link-local,
    /// ...); repeat or separate with commas [default: none].
    #[arg(id = "imports.allow", long = "import-allow", env = "SLUICE_IMPORT_ALLOW", value_name = "NET|HOST", value_delimiter = ',', value_parser = allowed)]
    pub allow: Vec<String>,
    /// Imports one gateway carries on at once; more wait for a turn.
    #[arg(id = "imports.concurrency", long = "import-concurrency", env = "SLUICE_IMPORT_CONCURRENCY", value_name = "N", default_value = "4", value_parser = crate::values::at_least::<usize>(1))]
    pub concurrency: usize,
    /// How often each gateway looks for imports to carry on (a dead gateway's)
    /// and for finished ones to drop.
    #[arg(id = "imports.interval", long = "import-interval", env = "SLUICE_IMPORT_INTERVAL", value_name = "DURATION", default_value = "2s", value_parser = crate::values::duration_in(Duration::from_millis(10), Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long a finished import's record stays to be asked about.
    #[arg(id = "imports.keep", long = "import-keep", env = "SLUICE_IMPORT_KEEP", value_name = "DURATION", default_value = "24h", value_parser = crate::values::duration_in(Duration::from_secs(1), Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub keep: Duration,
}

impl Default for ImportSettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

fn allowed(text: &str) -> Result<String, String> {
    text.parse::<Allowed>().map(|_| text.trim().to_owned())
}

/// The guard, the resolver and the turns of one gateway, when imports are on.
#[derive(Clone)]
pub struct Imports {
    pub guard: ImportGuard,
    pub resolver: Arc<dyn Resolve>,
    pub settings: ImportSettings,
    /// One permit per import this gateway carries on.
    pub turns: Arc<tokio::sync::Semaphore>,
    /// Imports this gateway stopped carrying while it held them (the store
    /// would not answer), by id: the record's ETag as this gateway last wrote
    /// it, and the record as it knows it (with what it could not write: the
    /// bytes fetched, the attempts, parts stored since). A record still at
    /// that ETag is this gateway's to go on with at once, lease or not,
    /// instead of waiting out its own lease.
    pub left_here: Arc<std::sync::Mutex<HashMap<String, (String, ImportRecord)>>>,
    /// Imports a task of this gateway is carrying (or waiting to): one task
    /// per import.
    carrying: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Finished imports' records as last read (id: ETag, `updated_ms`), so
    /// that a look reads only the records that may have changed.
    finished: Arc<std::sync::Mutex<HashMap<String, (String, u64)>>>,
}

impl std::fmt::Debug for Imports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Imports")
            .field("guard", &self.guard)
            .finish()
    }
}

impl Imports {
    /// From the settings; None when imports are off.
    pub fn from_settings(settings: &ImportSettings) -> Result<Option<Imports>, String> {
        if !settings.enabled {
            return Ok(None);
        }
        let allow = settings
            .allow
            .iter()
            .map(|a| a.parse::<Allowed>())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Imports {
            guard: ImportGuard::new(allow),
            resolver: Arc::new(SystemResolver),
            settings: settings.clone(),
            turns: Arc::new(tokio::sync::Semaphore::new(settings.concurrency)),
            left_here: Arc::default(),
            finished: Arc::default(),
            carrying: Arc::default(),
        }))
    }

    /// Whether the record of import `id` at `etag` is one this gateway left
    /// while holding it (and no one has written since); one written since
    /// is forgotten.
    pub fn left_here(&self, id: &str, etag: &str) -> bool {
        let mut left_here = self.left_here.lock().unwrap();
        match left_here.get(id) {
            Some((left, _)) if left == etag => true,
            Some(_) => {
                left_here.remove(id);
                false
            }
            None => false,
        }
    }

    /// The record this gateway left import `id` at, when the stored one is
    /// still at `etag` (forgotten either way).
    pub fn take_left(&self, id: &str, etag: &str) -> Option<ImportRecord> {
        let (left, record) = self.left_here.lock().unwrap().remove(id)?;
        (left == etag).then_some(record)
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/imports", post(create))
        .route("/v1/imports/{id}", get(show))
        .merge(companion::router())
}

pub(crate) fn imports(state: &AppState) -> Result<&Imports, ApiError> {
    state.imports.as_ref().ok_or(ApiError::ImportsOff)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    url: String,
    /// The file's name for the key template [default: the URL's last segment].
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

/// The URL path's last segment, decoded, as a file name.
pub(crate) fn filename_of(url: &url::Url) -> String {
    let last = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or_default();
    let decoded = percent_encoding::percent_decode_str(last).decode_utf8_lossy();
    match decoded.trim() {
        "" => "download".to_owned(),
        name => name.to_owned(),
    }
}

/// The part size of an object of `size`: 8 MiB, or larger when 10,000 parts
/// of that would not hold it.
fn part_size(size: u64) -> u64 {
    (8 * MIN_PART_SIZE / 5)
        .max(size.div_ceil(MAX_PARTS as u64))
        .max(MIN_PART_SIZE)
}

/// `POST /v1/imports {url, filename, metadata}`: 202 with the import's id;
/// the fetch goes on after the answer.
async fn create(
    State(state): State<AppState>,
    grant: Grant,
    body: axum::body::Bytes,
) -> Result<
    (
        StatusCode,
        [(axum::http::HeaderName, String); 1],
        Json<Value>,
    ),
    ApiError,
> {
    let request: CreateBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body must be JSON {{url, filename, metadata}}: {e}"
        ))
    })?;
    let record = begin(
        &state,
        &grant,
        &request.url,
        request.filename,
        request.metadata,
    )
    .await?;
    let location = format!("/v1/imports/{}", record.id);
    Ok((
        StatusCode::ACCEPTED,
        [(axum::http::header::LOCATION, location)],
        Json(record.view()),
    ))
}

/// What the origin says of an object: (size, whether it serves ranges, its
/// validator, its content type), before anything is stored.
pub struct Probed {
    pub url: url::Url,
    pub size: u64,
    pub ranges: bool,
    pub validator: Option<String>,
    pub content_type: Option<String>,
}

/// Checks `url` with the guard and asks the origin for its first byte.
pub async fn probe(state: &AppState, url: &str) -> Result<Probed, ApiError> {
    let imports = imports(state)?;
    let url = imports.guard.parse(url).map_err(refused)?;
    let answer = fetch::get(
        &imports.guard,
        imports.resolver.as_ref(),
        url.as_str(),
        0,
        true,
        None,
    )
    .await
    .map_err(|e| match e {
        fetch::FetchError::Refused(refusal) => refused(refusal),
        // The URL names nothing to import (404, 403, 410, 416 ...).
        fetch::FetchError::Status { status }
            if (400..500).contains(&status) && !e.is_transient() =>
        {
            ApiError::Unprocessable(format!("the origin answered {status} for this URL"))
        }
        other => ApiError::BadGateway(format!("the origin: {other}")),
    })?;
    let size = answer.object_size().ok_or_else(|| {
        ApiError::BadGateway(
            "the origin does not say how large the object is (no Content-Length or Content-Range)"
                .into(),
        )
    })?;
    Ok(Probed {
        url,
        size,
        ranges: answer.status == 206,
        validator: answer.validator(),
        content_type: answer.content_type(),
    })
}

/// Starts importing `url` for `grant`: checked, probed, begun (key template,
/// hook), its multipart upload created and its record written; carried on in
/// the background.
pub async fn begin(
    state: &AppState,
    grant: &Grant,
    url: &str,
    filename: Option<String>,
    metadata: BTreeMap<String, String>,
) -> Result<ImportRecord, ApiError> {
    imports(state)?;
    grant.allows(Op::Put)?;
    // Checked before the origin is asked: bad metadata is a 400 at once.
    let metadata = crate::client_metadata::object_metadata(metadata)?;
    let probed = probe(state, url).await?;
    let (url, size) = (probed.url, probed.size);
    let limit = state
        .bodies
        .size_limit(grant)
        .map_or(MAX_OBJECT_SIZE, |l| l.min(MAX_OBJECT_SIZE));
    if size > limit {
        return Err(ApiError::TooLarge { limit });
    }
    let filename = filename.unwrap_or_else(|| filename_of(&url));
    let id = uuid::Uuid::new_v4().simple().to_string();
    let begun = state
        .begin
        .begin(
            grant,
            Asked {
                kind: UploadKind::Import,
                key: KeyFrom::Template {
                    filename: filename.clone(),
                    id: uuid::Uuid::new_v4(),
                },
                size: Some(size),
                content_type: probed.content_type,
                metadata,
                filename: Some(filename),
                ask_hook: true,
            },
        )
        .await?;
    // Admitted like every upload: an overloaded or draining gateway answers
    // 503 with Retry-After before anything is stored.
    drop(state.admission.admit(&begun.party()).await?);
    let upload_id = state
        .engine
        .create_multipart(&UploadRequest {
            key: begun.key.clone(),
            content_type: begun.content_type.clone(),
            metadata: begun.metadata.clone().into_iter().collect(),
            ..UploadRequest::default()
        })
        .await?;
    let now = now_ms();
    let record = ImportRecord {
        id: id.clone(),
        url: url.to_string(),
        owner: grant.owner(),
        key: begun.key.clone(),
        content_type: begun.content_type.clone(),
        metadata: begun.metadata.clone(),
        size,
        validator: probed.validator,
        ranges: probed.ranges,
        upload_id,
        part_size: part_size(size),
        parts: Vec::new(),
        bytes_fetched: 0,
        phase: Phase::Running,
        error: None,
        attempts: 0,
        lease_until_ms: 0,
        created_ms: now,
        updated_ms: now,
        socket_secret: uuid::Uuid::new_v4().simple().to_string(),
    };
    record::create(&state.store, &record)
        .await
        .map_err(ApiError::Store)?;
    tracing::info!(import = id, url = %url, key = record.key, size, tenant = %grant.tenant, "import started");
    start(state, id);
    Ok(record)
}

/// Carries import `id` on in the background when this gateway has a turn free
/// (otherwise a later look takes it).
pub fn start(state: &AppState, id: String) {
    let Some(imports) = &state.imports else {
        return;
    };
    let Ok(turn) = imports.turns.clone().try_acquire_owned() else {
        return;
    };
    if !imports.carrying.lock().unwrap().insert(id.clone()) {
        return;
    }
    let (state, carrying) = (state.clone(), imports.carrying.clone());
    tokio::spawn(async move {
        run::carry_on(state, id.clone()).await;
        carrying.lock().unwrap().remove(&id);
        drop(turn);
    });
}

/// `GET /v1/imports/ID`: the import's progress; another tenant's is not found.
async fn show(
    State(state): State<AppState>,
    grant: Grant,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    imports(&state)?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::NotFound);
    }
    let Some((record, _)) = record::read(&state.store, &id)
        .await
        .map_err(ApiError::Store)?
    else {
        return Err(ApiError::NotFound);
    };
    if !grant.owns(record.owner.as_deref()) {
        return Err(ApiError::NotFound);
    }
    Ok(Json(record.view()))
}

/// A refused address is forbidden; a URL that is no URL to fetch is a bad request.
fn refused(refusal: guard::Refusal) -> ApiError {
    match refusal {
        guard::Refusal::Address { .. } => ApiError::ImportRefused(refusal.to_string()),
        other => ApiError::BadRequest(other.to_string()),
    }
}

/// One look at every import record: those running that nobody holds are
/// taken on (as turns allow), finished ones older than `keep` dropped. A
/// finished record read once is not read again while its ETag stays.
pub async fn look(state: &AppState) -> Result<(), StoreError> {
    let Some(imports) = &state.imports else {
        return Ok(());
    };
    let keep = imports.settings.keep.as_millis() as u64;
    let mut seen = std::collections::HashSet::new();
    let mut cursor = None;
    loop {
        let page = state
            .store
            .list_objects(record::IMPORTS, cursor.as_deref(), 1000)
            .await?;
        for entry in &page.objects {
            let Some(id) = entry
                .key
                .strip_prefix(record::IMPORTS)
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            seen.insert(id.to_owned());
            let known = imports.finished.lock().unwrap().get(id).cloned();
            let finished_at = match known {
                Some((etag, updated_ms)) if etag == entry.etag => updated_ms,
                _ => {
                    let Some((record, etag)) = record::read(&state.store, id).await? else {
                        continue;
                    };
                    let mine = imports.left_here(id, &etag);
                    if record.phase == Phase::Running {
                        if record.lease_until_ms <= now_ms() || mine {
                            start(state, id.to_owned());
                        }
                        continue;
                    }
                    imports
                        .finished
                        .lock()
                        .unwrap()
                        .insert(id.to_owned(), (etag, record.updated_ms));
                    record.updated_ms
                }
            };
            if now_ms().saturating_sub(finished_at) > keep {
                state.store.delete_object(&entry.key).await?;
                imports.finished.lock().unwrap().remove(id);
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    // Records gone (dropped by another gateway) are forgotten.
    imports
        .finished
        .lock()
        .unwrap()
        .retain(|id, _| seen.contains(id));
    imports
        .left_here
        .lock()
        .unwrap()
        .retain(|id, _| seen.contains(id));
    Ok(())
}

/// Looks for imports to carry on every `imports.interval`.
pub fn spawn(state: AppState) -> Option<tokio::task::JoinHandle<()>> {
    let interval = state.imports.as_ref()?.settings.interval;
    Some(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(e) = look(&state).await {
                tracing::warn!(error = %e, "could not look for imports to carry on");
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_and_part_sizes() {
        let cases = [
            ("https://a.example/dir/photo%20one.jpg?x=1", "photo one.jpg"),
            ("https://a.example/", "download"),
            ("https://a.example", "download"),
        ];
        for (url, name) in cases {
            assert_eq!(filename_of(&url::Url::parse(url).unwrap()), name, "{url}");
        }
        assert_eq!(part_size(1), 8 * 1024 * 1024);
        let big = 5 * 1024 * 1024 * 1024 * 1024u64;
        assert!(part_size(big) * MAX_PARTS as u64 >= big);
    }

    #[test]
    fn an_import_left_here_is_taken_back_only_at_the_etag_it_was_left_at() {
        let imports = Imports::from_settings(&ImportSettings {
            enabled: true,
            ..ImportSettings::default()
        })
        .unwrap()
        .unwrap();
        let record: ImportRecord = serde_json::from_value(serde_json::json!({
            "id": "a", "url": "https://files.example/a", "owner": null, "key": "a",
            "content_type": null, "size": 1, "ranges": true, "upload_id": "u",
            "part_size": 8, "phase": "running", "created_ms": 0, "updated_ms": 0,
            "bytes_fetched": 7
        }))
        .unwrap();
        let leave = || {
            imports
                .left_here
                .lock()
                .unwrap()
                .insert("a".into(), ("\"1\"".into(), record.clone()));
        };
        // (stored ETag, left here, taken back)
        let cases = [("\"1\"", true, true), ("\"2\"", false, false)];
        for (etag, here, taken) in cases {
            leave();
            assert_eq!(imports.left_here("a", etag), here, "{etag}");
            let back = imports.take_left("a", etag);
            assert_eq!(back.is_some(), taken, "{etag}");
            assert_eq!(back.map(|r| r.bytes_fetched), taken.then_some(7));
            // Forgotten either way.
            assert!(!imports.left_here("a", "\"1\""));
        }
    }
}
