//! Companion's contract for Uppy's `@uppy/url`, served by imports:
//! `POST /url/meta {url}` answers `{name, type, size}` (the guard and the
//! origin asked, nothing stored), `POST /url/get {url, metadata, …}` starts an
//! import and answers `{token}` (the import's id), and the WebSocket
//! `/api/TOKEN` sends what Uppy listens for: `progress` (`{progress,
//! bytesUploaded, bytesTotal}`) as the record in the bucket moves, then
//! `success` (`{url, response: {status, responseText}}`) or `error`
//! (`{error: {message}}`). The socket reads the record, so any gateway on the
//! bucket serves it, and one that reconnects after a gateway died goes on.
//! The token is the import's id followed by a secret of its record
//! ([`record::ImportRecord::socket_token`]): the id alone, which the
//! import's event and `GET /v1/imports/ID` show, does not open the socket,
//! and the socket shows that import's progress and nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::record::{self, Phase};
use crate::auth::Grant;
use crate::error::ApiError;
use crate::AppState;

/// How often a socket reads its import's record.
const POLL: Duration = Duration::from_millis(500);

/// Progress is sent at least this often, moving or not (Uppy gives a silent
/// socket up).
const HEARTBEAT: Duration = Duration::from_secs(10);

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/url/meta", post(meta))
        .route("/url/get", post(start))
        .route("/api/{token}", get(socket))
}

#[derive(Debug, Deserialize)]
pub struct MetaBody {
    url: String,
}

/// `POST /url/meta {url}`: what Uppy shows before the upload.
async fn meta(
    State(state): State<AppState>,
    grant: Grant,
    Json(body): Json<MetaBody>,
) -> Result<Json<Value>, ApiError> {
    super::imports(&state)?;
    grant.allows(crate::auth::Op::Put)?;
    let probed = super::probe(&state, &body.url).await?;
    Ok(Json(json!({
        "name": super::filename_of(&probed.url),
        "type": probed.content_type,
        "size": probed.size,
    })))
}

#[derive(Debug, Deserialize)]
pub struct GetBody {
    url: String,
    #[serde(default)]
    metadata: BTreeMap<String, Value>,
}

/// `POST /url/get {url, metadata}`: the import starts; the answer's token
/// opens its progress socket.
async fn start(
    State(state): State<AppState>,
    grant: Grant,
    Json(body): Json<GetBody>,
) -> Result<Json<Value>, ApiError> {
    // Uppy's metadata holds the file's name (the key template's filename).
    let filename = body
        .metadata
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    // Checked and encoded once, by `begin`.
    let metadata = crate::client_metadata::json_metadata(body.metadata)
        .into_iter()
        .collect();
    let record = super::begin(&state, &grant, &body.url, filename, metadata).await?;
    Ok(Json(json!({ "token": record.socket_token() })))
}

/// `GET /api/TOKEN` (WebSocket): the import's progress until it ends.
async fn socket(
    State(state): State<AppState>,
    Path(token): Path<String>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    super::imports(&state)?;
    // 32 hex digits of id, then the secret.
    let Some(id) = token
        .get(..32)
        .filter(|id| id.bytes().all(|b| b.is_ascii_hexdigit()))
    else {
        return Err(ApiError::NotFound);
    };
    match record::read(&state.store, id)
        .await
        .map_err(ApiError::Store)?
    {
        Some((record, _)) if record.opens_socket(&token) => {
            let id = record.id;
            Ok(upgrade.on_upgrade(move |socket| follow(state, id, socket)))
        }
        _ => Err(ApiError::NotFound),
    }
}

async fn follow(state: AppState, id: String, mut socket: WebSocket) {
    let mut last = None;
    let mut sent_at = std::time::Instant::now();
    loop {
        let message = match record::read(&state.store, &id).await {
            Ok(Some((record, _))) => match record.phase {
                Phase::Running => {
                    let stored = record.stored();
                    if last == Some(stored) && sent_at.elapsed() < HEARTBEAT {
                        None
                    } else {
                        last = Some(stored);
                        let percent = match record.size {
                            0 => 0.0,
                            size => stored as f64 * 100.0 / size as f64,
                        };
                        Some(json!({ "action": "progress", "payload": {
                            "progress": format!("{percent:.2}"),
                            "bytesUploaded": stored,
                            "bytesTotal": record.size,
                        }}))
                    }
                }
                Phase::Completed => {
                    let body = json!({ "key": record.key, "location": record.key });
                    let _ = send(
                        &mut socket,
                        json!({ "action": "success", "payload": {
                            "url": record.key,
                            "response": { "status": 200, "responseText": body.to_string() },
                        }}),
                    )
                    .await;
                    return;
                }
                Phase::Failed => {
                    let _ = send(&mut socket, json!({ "action": "error", "payload": {
                        "error": { "message": record.error.unwrap_or_else(|| "the import failed".into()) },
                    }}))
                    .await;
                    return;
                }
            },
            Ok(None) => {
                let _ = send(
                    &mut socket,
                    json!({ "action": "error", "payload": {
                        "error": { "message": "no such import" },
                    }}),
                )
                .await;
                return;
            }
            // A store that does not answer now may later: keep the socket.
            Err(e) => {
                tracing::warn!(import = id, error = %e, "could not read an import for its socket");
                None
            }
        };
        if let Some(message) = message {
            if send(&mut socket, message).await.is_err() {
                return;
            }
            sent_at = std::time::Instant::now();
        }
        // Pause and resume messages from Uppy are read and let be: an import
        // goes on on its own.
        match tokio::time::timeout(POLL, socket.recv()).await {
            Ok(None) | Ok(Some(Err(_))) => return,
            Ok(Some(Ok(Message::Close(_)))) => return,
            _ => {}
        }
    }
}

async fn send(socket: &mut WebSocket, message: Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(message.to_string().into())).await
}
