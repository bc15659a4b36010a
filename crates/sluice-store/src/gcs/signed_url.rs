//! V4 signed URLs for Google Cloud Storage (`GOOG4-RSA-SHA256`): one GET, PUT
//! or DELETE of an object through the XML API (`ORIGIN/BUCKET/OBJECT`),
//! signed with a service account's RSA key, good for a lifetime of at most 7
//! days. `sluice presign gs://…` prints them.
//!
//! Only a service account's key can sign here: a user's refresh token would
//! need the IAM `signBlob` API, and an emulator's anonymous access nothing.

use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use percent_encoding::utf8_percent_encode;
use sha2::Digest;

use super::auth::ServiceAccountKey;
use crate::presign::PresignedMethod;
use crate::StoreError;

use crate::rest::{UNRESERVED, UNRESERVED_AND_SLASH as PATH};

/// The URL that allows `method` on `object` of `bucket` for `expires` from
/// `now`, at `origin` (`https://storage.googleapis.com`, or an emulator's).
pub(crate) fn v4_signed_url(
    key: &ServiceAccountKey,
    origin: &str,
    bucket: &str,
    object: &str,
    method: PresignedMethod,
    expires: Duration,
    now: SystemTime,
) -> Result<String, StoreError> {
    let origin = origin.trim_end_matches('/');
    let host = origin.split("://").nth(1).unwrap_or(origin);
    let host = host.split('/').next().unwrap_or(host);
    // 2026-11-30T12:00:00Z as 20261130T120000Z, and its date.
    let timestamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let scope = format!("{}/auto/storage/goog4_request", &timestamp[..8]);
    let resource = format!("/{bucket}/{}", utf8_percent_encode(object, PATH));
    let expires = expires.as_secs().to_string();
    let credential = format!("{}/{scope}", key.client_email);
    let mut query = [
        ("X-Goog-Algorithm", "GOOG4-RSA-SHA256"),
        ("X-Goog-Credential", credential.as_str()),
        ("X-Goog-Date", timestamp.as_str()),
        ("X-Goog-Expires", expires.as_str()),
        ("X-Goog-SignedHeaders", "host"),
    ]
    .iter()
    .map(|(name, value)| format!("{name}={}", utf8_percent_encode(value, UNRESERVED)))
    .collect::<Vec<_>>();
    query.sort();
    let query = query.join("&");
    let verb = match method {
        PresignedMethod::Get => "GET",
        PresignedMethod::Put => "PUT",
        PresignedMethod::Delete => "DELETE",
    };
    let canonical_request =
        format!("{verb}\n{resource}\n{query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD");
    let string_to_sign = format!(
        "GOOG4-RSA-SHA256\n{timestamp}\n{scope}\n{}",
        hex(&sha2::Sha256::digest(canonical_request.as_bytes()))
    );
    let signing = jsonwebtoken::EncodingKey::from_rsa_pem(key.private_key.as_bytes())
        .map_err(|e| StoreError::InvalidCredentials(format!("the service account's key: {e}")))?;
    let signature = jsonwebtoken::crypto::sign(
        string_to_sign.as_bytes(),
        &signing,
        jsonwebtoken::Algorithm::RS256,
    )
    .map_err(|e| StoreError::InvalidCredentials(format!("signing the URL: {e}")))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .expect("jsonwebtoken signs in unpadded base64url");
    Ok(format!(
        "{origin}{resource}?{query}&X-Goog-Signature={}",
        hex(&signature)
    ))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
