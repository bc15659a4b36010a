//! One request through the gateway's router without a socket, and its answer
//! read whole.

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use sluice_server::AppState;
use tower::ServiceExt;

#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    /// The stable code of the gateway's error body, or of a problem document.
    pub fn code(&self) -> String {
        let json = self.json();
        json["error"]["code"]
            .as_str()
            .or(json["code"].as_str())
            .unwrap_or_default()
            .to_owned()
    }
}

pub async fn send(state: &AppState, request: Request<Body>) -> Answer {
    let response = state.router().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}
