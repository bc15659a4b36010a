//! `GET /s3/sts`: temporary credentials for Uppy 6's `getCredentials` mode,
//! in the shape Companion answers (`{credentials: {AccessKeyId,
//! SecretAccessKey, SessionToken, Expiration}, bucket, region}`), plus where
//! to send requests (`endpoint`, Uppy's `s3Endpoint`) and the one prefix the
//! keys must start with (`prefix`, for Uppy's `generateObjectKey`).
//!
//! The store's STS makes them (`AssumeRole`) with a session policy that allows
//! uploads (PutObject and the multipart requests) under a prefix of their own
//! inside the caller's (`TENANT-PREFIX/UUID/`), or to the token's one key,
//! for `direct.expires` (at least 15 minutes, STS's least). The bucket cannot
//! limit an object's size by policy: every object under the prefix is looked
//! for ([`super::confirm`]) until the credentials expire, announced
//! (`direct_credentials`), and deleted without an event when larger than the
//! caller's limit. A store without STS is answered 501
//! `credentials_unavailable` with what it said.

use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};
use sluice_store::limits::MAX_OBJECT_SIZE;
use sluice_upload::UploadKind;

use super::confirm::{self, Pending, Watched};
use super::{direct, size_limit, CallerGrant, DirectResult};
use crate::auth::{Grant, Op};
use crate::error::ApiError;
use crate::AppState;

/// STS's shortest session.
const SHORTEST: Duration = Duration::from_secs(900);

/// Where the credentials may write: a prefix of their own under the caller's,
/// or the token's one key. (what the policy's resource names, is it a prefix)
/// A scope an IAM policy would read as a pattern (`*`, `?`, `${…}` in a
/// tenant, prefix or key) is refused: it could reach other tenants' keys.
fn scope(grant: &Grant) -> Result<(String, bool), ApiError> {
    let own = format!("{}/", uuid::Uuid::new_v4().simple());
    let scope = grant.generated_key(own.clone());
    let prefix = scope.ends_with(&own);
    if let Some(c) = scope.chars().find(|c| matches!(c, '*' | '?' | '$')) {
        return Err(ApiError::Forbidden(format!(
            "temporary credentials are not given for keys with {c:?} in them (an IAM policy reads it as a pattern)"
        )));
    }
    let example = if prefix {
        format!("{scope}x")
    } else {
        scope.clone()
    };
    crate::keys::validate_client_key(&example).map_err(ApiError::InvalidKey)?;
    Ok((scope, prefix))
}

/// The session policy: uploads under `resource` (an ARN's key part, with the
/// store's prefix) and nothing else.
fn policy(bucket: &str, resource: &str) -> String {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Action": [
                "s3:PutObject",
                "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts"
            ],
            "Resource": [format!("arn:aws:s3:::{bucket}/{resource}")]
        }]
    })
    .to_string()
}

pub async fn credentials(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
) -> DirectResult<Json<Value>> {
    let direct = direct(&state)?;
    let (scope, is_prefix) = scope(&grant)?;
    grant.check(Op::Put, &scope)?;
    let signer = &direct.signer;
    let store_prefix = signer.key_prefix();
    let resource = match is_prefix {
        true => format!("{store_prefix}{scope}*"),
        false => format!("{store_prefix}{scope}"),
    };
    let duration = direct.settings.expires.max(SHORTEST);
    let credentials = signer
        .temporary_credentials(
            &policy(signer.bucket(), &resource),
            &direct.settings.role_arn,
            duration,
        )
        .await
        .map_err(|e| match e {
            // Worth asking again (no answer, throttled, a 5xx): like any
            // store outage, 503 with Retry-After.
            e if e.is_transient() => ApiError::Store(e),
            // The store has no STS, or will not give these.
            e => ApiError::CredentialsUnavailable(e.to_string()),
        })?;
    // Recorded before they are handed out: every object they make is looked for.
    let watched = match is_prefix {
        true => Watched::Prefix(scope.clone()),
        false => Watched::Key(scope.clone()),
    };
    let pending = Pending::new(
        UploadKind::DirectCredentials,
        watched,
        grant.owner(),
        size_limit(&state, &grant, MAX_OBJECT_SIZE),
        credentials.expires_at.max(SystemTime::now()),
    );
    confirm::record(&state.store, &pending)
        .await
        .map_err(ApiError::Store)?;
    tracing::info!(tenant = %grant.tenant, scope, "temporary credentials handed out");
    Ok(Json(json!({
        "credentials": {
            "AccessKeyId": credentials.access_key_id,
            "SecretAccessKey": credentials.secret_access_key,
            "SessionToken": credentials.session_token,
            "Expiration": humantime::format_rfc3339_seconds(credentials.expires_at).to_string(),
        },
        "bucket": signer.bucket(),
        "region": signer.region(),
        "endpoint": signer.bucket_endpoint(),
        "prefix": format!("{store_prefix}{scope}"),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_that_a_policy_would_read_as_patterns_are_refused() {
        // (tenant, refused)
        let cases = [
            ("acme", false),
            ("a*", true),
            ("a?b", true),
            ("${aws:username}", true),
        ];
        for (tenant, refused) in cases {
            let got = scope(&Grant::for_tenant(tenant));
            assert_eq!(got.is_err(), refused, "{tenant}: {got:?}");
            if let Ok((scope, prefix)) = got {
                assert!(prefix && scope.ends_with('/'), "{scope}");
            }
        }
    }

    #[test]
    fn the_policy_allows_uploads_under_its_resource_only() {
        let policy: Value = serde_json::from_str(&policy("b", "p/acme/x/*")).unwrap();
        let statement = &policy["Statement"][0];
        assert_eq!(statement["Effect"], "Allow");
        assert_eq!(statement["Resource"], json!(["arn:aws:s3:::b/p/acme/x/*"]));
        let actions = statement["Action"].as_array().unwrap();
        assert!(actions
            .iter()
            .all(|a| a != "s3:GetObject" && a != "s3:DeleteObject"));
    }
}
