//! Sessions for Uppy 6's `companionEndpoint` mode. Uppy then calls
//! `${companionEndpoint}/s3/…` with a plain `fetch`: no header can carry a
//! token, and a cookie reaches only a same-origin gateway. So a caller with a
//! token asks `POST /s3/session` for an endpoint of its own,
//! `/s3/session/SESSION`, whose last segment is its grant and expiry sealed
//! with an HMAC: the `/s3/…` routes under it act for that grant until then
//! (`direct.session_lifetime`, 12 h by default, and never beyond the token's
//! own `exp`: an upload that takes long keeps signing its parts, each
//! signature itself good for `direct.expires`).
//!
//! The sealing key is 32 random bytes kept in the bucket
//! (`_sluice/direct/session-key`, written create-only by the first gateway to
//! need it): every gateway on the bucket opens every session, whatever kind of
//! token keys it has.

use std::time::SystemTime;

use axum::extract::State;
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;
use sluice_store::{ObjectStore, PutRequest, StoreError, WriteCondition};

use super::{direct, CallerGrant, DirectResult};
use crate::auth::{Grant, Op};
use crate::error::ApiError;
use crate::AppState;

pub const SESSION_KEY: &str = sluice_store::reserved_key!("direct/session-key");

/// Where sessions' routes live: `{SESSIONS}{session}/s3/…`.
pub const SESSIONS: &str = "/s3/session/";

/// What a session carries: the grant of the token it was made from, until
/// `expires_at` (seconds since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sealed {
    grant: Grant,
    expires_at: u64,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn mac(key: &[u8], payload: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(b"sluice-direct-session-v1\n");
    mac.update(payload);
    mac
}

/// `grant` until `expires_at`, sealed: `PAYLOAD.MAC`, both base64url.
fn seal(key: &[u8], grant: &Grant, expires_at: u64) -> String {
    let payload = serde_json::to_vec(&Sealed {
        grant: grant.clone(),
        expires_at,
    })
    .expect("grants serialise");
    let tag = mac(key, &payload).finalize().into_bytes();
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&payload),
        URL_SAFE_NO_PAD.encode(tag)
    )
}

/// The grant a sealed session carries, if its seal holds and it has not expired.
fn open(key: &[u8], session: &str, now: u64) -> Result<Grant, ApiError> {
    let refused = || ApiError::Unauthenticated("the upload session is not valid");
    let (payload, tag) = session.split_once('.').ok_or_else(refused)?;
    let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| refused())?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| refused())?;
    mac(key, &payload)
        .verify_slice(&tag)
        .map_err(|_| refused())?;
    let sealed: Sealed = serde_json::from_slice(&payload).map_err(|_| refused())?;
    if sealed.expires_at <= now {
        return Err(ApiError::Unauthenticated(
            "the upload session has expired; ask POST /s3/session for another",
        ));
    }
    Ok(sealed.grant)
}

/// The bucket's sealing key, made by the first gateway that needs it.
async fn load_key(store: &dyn ObjectStore) -> Result<Bytes, StoreError> {
    loop {
        match store.get_object(SESSION_KEY, None).await {
            Ok(output) => {
                let bytes: BytesMut = output.body.try_collect().await?;
                return Ok(bytes.freeze());
            }
            Err(StoreError::NoSuchKey { .. }) => {}
            Err(e) => return Err(e),
        }
        let fresh = [
            *uuid::Uuid::new_v4().as_bytes(),
            *uuid::Uuid::new_v4().as_bytes(),
        ]
        .concat();
        let mut request = PutRequest::new(SESSION_KEY, Bytes::copy_from_slice(&fresh));
        request.condition = Some(WriteCondition::IfNoneMatch);
        match store.put_object(request).await {
            Ok(_) => return Ok(Bytes::copy_from_slice(&fresh)),
            // Another gateway made it first: read theirs.
            Err(StoreError::PreconditionFailed) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The sealing key, read once per gateway.
async fn key(state: &AppState) -> Result<Bytes, ApiError> {
    let direct = state.direct.as_ref().ok_or(ApiError::DirectUploadsOff)?;
    direct
        .session_key
        .get_or_try_init(|| load_key(state.store.as_ref()))
        .await
        .cloned()
        .map_err(ApiError::Store)
}

/// The grant of a request under `/s3/session/SESSION/`.
pub async fn grant(state: &AppState, session: &str) -> Result<Grant, ApiError> {
    let key = key(state).await?;
    open(&key, session, now())
}

/// `POST /s3/session`: an endpoint for Uppy's `companionEndpoint` that acts
/// for the caller's token for `direct.session_lifetime`.
pub async fn create(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    headers: axum::http::HeaderMap,
) -> DirectResult<Json<Value>> {
    let lifetime = direct(&state)?.settings.session_lifetime;
    grant.allows(Op::Put)?;
    let key = key(&state).await?;
    let expires_at = session_end(now(), lifetime, grant.expires_at);
    let path = format!("{SESSIONS}{}", seal(&key, &grant, expires_at));
    Ok(Json(json!({
        "path": path,
        "companionEndpoint": origin(&state, &headers).map(|origin| format!("{origin}{path}")),
        "expires": expires_at.saturating_sub(now()),
    })))
}

/// When a session made at `now` ends: after `lifetime`, and never beyond the
/// token it was made from (`token_exp`).
fn session_end(now: u64, lifetime: std::time::Duration, token_exp: Option<u64>) -> u64 {
    token_exp
        .unwrap_or(u64::MAX)
        .min(now.saturating_add(lifetime.as_secs()))
}

/// The gateway's origin as the caller reached it (`Host`, and `https` with TLS
/// or behind a proxy saying `X-Forwarded-Proto: https`).
fn origin(state: &AppState, headers: &axum::http::HeaderMap) -> Option<String> {
    let host = headers.get(axum::http::header::HOST)?.to_str().ok()?;
    let forwarded_https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let scheme = match state.tls.is_some() || forwarded_https {
        true => "https",
        false => "http",
    };
    Some(format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_open_only_as_sealed_and_until_they_expire() {
        let key = [7u8; 32];
        let grant = Grant::anonymous("acme".into());
        let sealed = seal(&key, &grant, 1_000);
        let (payload, tag) = sealed.split_once('.').unwrap();
        let mut other_grant = Grant::anonymous("other".into());
        other_grant.max_size = Some(1);
        let forged_payload = URL_SAFE_NO_PAD.encode(
            serde_json::to_vec(&Sealed {
                grant: other_grant,
                expires_at: 1_000,
            })
            .unwrap(),
        );
        // (what, session, now, opens)
        let cases = [
            ("as sealed", sealed.clone(), 999, true),
            ("expired", sealed.clone(), 1_000, false),
            ("another key", seal(&[8u8; 32], &grant, 1_000), 999, false),
            (
                "another payload",
                format!("{forged_payload}.{tag}"),
                999,
                false,
            ),
            ("no tag", payload.to_string(), 999, false),
            ("garbage", "a.b".to_string(), 999, false),
            ("empty", String::new(), 999, false),
        ];
        for (what, session, now, opens) in cases {
            let opened = open(&key, &session, now);
            assert_eq!(opened.is_ok(), opens, "{what}: {opened:?}");
            if opens {
                assert_eq!(opened.unwrap(), grant, "{what}");
            }
        }
    }

    #[test]
    fn a_session_lasts_its_lifetime_and_never_beyond_its_token() {
        let hours = |h: u64| std::time::Duration::from_secs(h * 3600);
        // (lifetime, token exp, ends at), made at 1,000
        let cases = [
            (hours(12), None, 1_000 + 12 * 3600),
            (hours(12), Some(1_000 + 3600), 1_000 + 3600),
            (hours(1), Some(1_000 + 12 * 3600), 1_000 + 3600),
            (hours(12), Some(500), 500),
        ];
        for (lifetime, exp, want) in cases {
            assert_eq!(
                session_end(1_000, lifetime, exp),
                want,
                "{lifetime:?} {exp:?}"
            );
        }
    }
}
