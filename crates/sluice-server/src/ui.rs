//! The gateway's own pages, embedded in the binary (nothing is fetched from a
//! CDN): the upload page (`ui.upload_page_path`, `/` by default; Uppy's
//! Dashboard uploading with tus, or straight to the bucket when direct uploads
//! are on), the live dashboard (`/ui/dashboard`, wherever `/metrics` is served)
//! and `/ui/status`, the samples of `/metrics` as JSON, which the dashboard
//! polls (with the admin token, when one is configured: the page takes it from
//! its URL fragment, `/ui/dashboard#token=...`). The Uppy bundle in `assets/` is built by `scripts/build-ui.sh` from
//! pinned npm versions (`assets/UPPY-BUNDLE.md` lists them and their licenses).

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::AppState;

/// `[ui]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Pages")]
pub struct UiSettings {
    /// Serve the upload page (Uppy's Dashboard, at --upload-page-path);
    /// --upload-page=false turns it off.
    #[arg(id = "ui.upload_page", long = "upload-page", env = "SLUICE_UPLOAD_PAGE", value_name = "BOOL", num_args = 0..=1, default_value = "true", default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::values::flag_bool())]
    pub upload_page: bool,
    /// Where the upload page is served: a path of its own, not under /v1/, /s3/
    /// or /ui/.
    #[arg(id = "ui.upload_page_path", long = "upload-page-path", env = "SLUICE_UPLOAD_PAGE_PATH", value_name = "PATH", default_value = "/", value_parser = page_path)]
    pub upload_page_path: String,
    /// Serve the dashboard (/ui/dashboard) and its data (/ui/status) where
    /// /metrics is served.
    #[arg(id = "ui.dashboard", long = "dashboard", env = "SLUICE_DASHBOARD", value_name = "BOOL", num_args = 0..=1, default_value = "true", default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::values::flag_bool())]
    pub dashboard: bool,
}

impl Default for UiSettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

/// The upload page's path, as a value parser: a path of its own.
pub fn page_path(path: &str) -> Result<String, String> {
    let taken = ["/v1/", "/s3/", "/ui/", "/metrics", "/healthz", "/readyz"];
    if !path.starts_with('/')
        || path.contains(['?', '#', '{', '}', '*'])
        || taken.iter().any(|t| path.starts_with(t))
    {
        return Err(format!(
            "{path:?} must be a path starting with '/' outside {}",
            taken.join(", ")
        ));
    }
    Ok(path.to_owned())
}

const UPLOAD_HTML: &str = include_str!("../assets/upload.html");
const DASHBOARD_HTML: &str = include_str!("../assets/dashboard.html");

/// (name, content type, bytes) of every asset under `/ui/assets/`.
const ASSETS: [(&str, &str, &str); 5] = [
    (
        "uppy.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/uppy.js"),
    ),
    (
        "uppy.css",
        "text/css; charset=utf-8",
        include_str!("../assets/uppy.css"),
    ),
    (
        "upload.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/upload.js"),
    ),
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/dashboard.js"),
    ),
    (
        "ui.css",
        "text/css; charset=utf-8",
        include_str!("../assets/ui.css"),
    ),
];

/// The upload page and the assets, on the main address.
pub fn router(state: &AppState) -> Router<AppState> {
    let ui = &state.config.ui;
    let mut router = Router::new()
        .route("/ui/assets/{name}", get(asset))
        .route("/favicon.ico", get(favicon));
    if ui.upload_page {
        router = router.route(&ui.upload_page_path, get(upload_page));
    }
    router
}

/// The dashboard and its status, where `/metrics` is served (and the assets,
/// for an admin address of its own).
pub fn dashboard_router(state: &AppState, with_assets: bool) -> Router<AppState> {
    let mut router = Router::new();
    if state.config.ui.dashboard {
        router = router
            .route("/ui/dashboard", get(dashboard))
            .route("/ui/status", get(status));
    }
    if with_assets {
        router = router
            .route("/ui/assets/{name}", get(asset))
            .route("/favicon.ico", get(favicon));
    }
    router
}

async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    let (_, content_type, body) = ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or(ApiError::NoRoute)?;
    Ok((
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            ),
        ],
        *body,
    )
        .into_response())
}

/// What the upload page is told about the gateway.
fn page_config(state: &AppState) -> Value {
    let direct = state.direct.as_ref();
    json!({
        "mode": if direct.is_some() { "direct" } else { "tus" },
        "tusPath": "/v1/tus/",
        "auth": state.auth.enabled(),
        "maxSize": state.bodies.max_upload_size(),
        "keyPrefix": direct.map_or("", |d| d.signer.key_prefix()),
    })
}

async fn upload_page(State(state): State<AppState>) -> Html<String> {
    // `<` escaped: the JSON sits inside a <script> element.
    let config = page_config(&state).to_string().replace('<', "\\u003c");
    Html(UPLOAD_HTML.replace("__SLUICE_CONFIG__", &config))
}

/// A drop falling into a channel.
async fn favicon() -> Response {
    const ICON: &str = "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'>\
<path d='M8 1C6 5 4 7 4 10a4 4 0 0 0 8 0c0-3-2-5-4-9z' fill='#2563eb'/></svg>";
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("image/svg+xml"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=86400"),
            ),
        ],
        ICON,
    )
        .into_response()
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD_HTML)
}

/// `/ui/status`: `{time_ms, samples: [{name, labels, value}]}`, every sample
/// of the `/metrics` exposition at this moment.
async fn status(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    state.auth.check_admin(&headers)?;
    let text = state.metrics.render(&state.engine);
    let time_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut response =
        Json(json!({ "time_ms": time_ms, "samples": samples(&text) })).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    *response.status_mut() = StatusCode::OK;
    Ok(response)
}

/// The samples of a Prometheus text exposition (comments skipped).
pub fn samples(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, labels_of(rest.trim_end_matches('}'))),
            None => (series, Map::new()),
        };
        out.push(json!({ "name": name, "labels": labels, "value": value }));
    }
    out
}

/// `a="x",b="y"` (values with `\"`, `\\` and `\n` escapes).
fn labels_of(text: &str) -> Map<String, Value> {
    let mut labels = Map::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        labels.insert(
            name.trim_start_matches(',').trim().to_string(),
            Value::String(value),
        );
        rest = &after[end..];
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_of_an_exposition() {
        let text = "# HELP x y\n# TYPE x counter\nx_total 3\n\
                    s{operation=\"put_object\",status=\"ok\"} 12\n\
                    q{prefix=\"a\\\"b,c\"} 1.5\nbroken line\n";
        assert_eq!(
            samples(text),
            vec![
                json!({ "name": "x_total", "labels": {}, "value": 3.0 }),
                json!({ "name": "s", "labels": { "operation": "put_object", "status": "ok" }, "value": 12.0 }),
                json!({ "name": "q", "labels": { "prefix": "a\"b,c" }, "value": 1.5 }),
            ]
        );
    }

    #[test]
    fn upload_page_paths() {
        // (path, accepted)
        let cases = [
            ("/", true),
            ("/upload", true),
            ("upload", false),
            ("/v1/objects", false),
            ("/ui/x", false),
            ("/a/{b}", false),
        ];
        for (path, ok) in cases {
            assert_eq!(page_path(path).is_ok(), ok, "{path}");
        }
    }
}
