//! Presigned URLs for Azure Blob Storage: a service SAS for one blob
//! (`sr=b`), signed with the account key (HMAC-SHA256 over the string to sign
//! of versions 2020-12-06 and later), allowing one kind of request until it
//! expires. `sluice presign az://…` prints them; the store signs read ones for
//! the sources of its part copies (`copy`), which Azure reads by URL.
//!
//! A SAS made from a SAS is not possible (the signature needs the key), and
//! handing out the account's own SAS token would give away its rights and
//! lifetime: both are refused, as is an anonymous account.

use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use percent_encoding::utf8_percent_encode;

use super::auth::{AzureAccount, AzureCredential};
use crate::presign::PresignedMethod;
use crate::StoreError;

/// The SAS permissions a request needs: read; create and write (a new blob
/// or a replaced one); delete.
fn permissions(method: PresignedMethod) -> &'static str {
    match method {
        PresignedMethod::Get => "r",
        PresignedMethod::Put => "cw",
        PresignedMethod::Delete => "d",
    }
}

/// The query string (without `?`) of a service SAS for blob `blob` of
/// `container`, allowing `method` until `expires_at`, with `version` as the
/// signed version.
pub(crate) fn blob_sas(
    account: &AzureAccount,
    container: &str,
    blob: &str,
    method: PresignedMethod,
    expires_at: SystemTime,
    version: &str,
) -> Result<String, StoreError> {
    let key = match &account.credential {
        AzureCredential::AccountKey(key) => key,
        AzureCredential::Sas(_) => {
            return Err(StoreError::Unsupported(
                "presigned URLs on Azure (a SAS is signed with the account key; this account has only a SAS token)",
            ))
        }
        AzureCredential::Anonymous => {
            return Err(StoreError::Unsupported(
                "presigned URLs on Azure without an account key",
            ))
        }
    };
    let permissions = permissions(method);
    // Whole seconds, rounded up: the URL lasts at least as long as asked.
    let expiry = humantime::format_rfc3339_seconds(expires_at + Duration::from_nanos(999_999_999))
        .to_string();
    let text = string_to_sign(
        permissions,
        &expiry,
        &format!("/blob/{}/{container}/{blob}", account.name),
        version,
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(text.as_bytes());
    let signature = BASE64.encode(mac.finalize().into_bytes());
    let pairs = [
        ("sv", version),
        ("se", expiry.as_str()),
        ("sr", "b"),
        ("sp", permissions),
        ("sig", signature.as_str()),
    ];
    Ok(pairs
        .iter()
        .map(|(name, value)| {
            format!(
                "{name}={}",
                utf8_percent_encode(value, crate::rest::UNRESERVED)
            )
        })
        .collect::<Vec<_>>()
        .join("&"))
}

/// The string a service SAS signs (version 2020-12-06 and later): sixteen
/// fields, one per line; those sluice does not set (start, identifier, IP
/// range, protocol, snapshot, encryption scope, the five response headers)
/// are empty.
fn string_to_sign(permissions: &str, expiry: &str, resource: &str, version: &str) -> String {
    [
        permissions,
        "", // signed start: valid from now
        expiry,
        resource,
        "", // stored access policy
        "", // IP range
        "", // protocol: http and https
        version,
        "b", // a blob
        "",  // snapshot time
        "",  // encryption scope
        "",  // rscc
        "",  // rscd
        "",  // rsce
        "",  // rscl
        "",  // rsct
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::az::auth::{EMULATOR_ACCOUNT, EMULATOR_KEY};

    fn emulator() -> AzureAccount {
        AzureAccount::new(
            EMULATOR_ACCOUNT,
            Some("http://127.0.0.1:10000/devstoreaccount1"),
            AzureAccount::key(EMULATOR_KEY).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_string_to_sign_has_sixteen_fields_in_azure_s_order() {
        let text = string_to_sign("r", "2026-12-01T00:00:00Z", "/blob/a/c/k", "2026-02-06");
        assert_eq!(
            text,
            "r\n\n2026-12-01T00:00:00Z\n/blob/a/c/k\n\n\n\n2026-02-06\nb\n\n\n\n\n\n\n"
        );
        assert_eq!(text.split('\n').count(), 16);
    }

    #[test]
    fn each_method_gets_only_the_permissions_it_needs() {
        let expires = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        for (method, sp) in [
            (PresignedMethod::Get, "sp=r&"),
            (PresignedMethod::Put, "sp=cw&"),
            (PresignedMethod::Delete, "sp=d&"),
        ] {
            let query = blob_sas(&emulator(), "c", "a b/ü", method, expires, "2026-02-06").unwrap();
            assert!(query.contains(sp), "{method:?}: {query}");
            assert!(
                query.starts_with("sv=2026-02-06&se=2026-12-01T00%3A00%3A00Z&sr=b&"),
                "{query}"
            );
        }
    }

    #[test]
    fn the_signature_is_the_one_python_s_hmac_gives_for_the_same_string() {
        // base64(HMAC-SHA256(emulator key, string to sign)), percent-encoded,
        // computed apart from this code with Python's hmac and hashlib.
        let expires = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        let query = blob_sas(
            &emulator(),
            "c",
            "k",
            PresignedMethod::Get,
            expires,
            "2026-02-06",
        )
        .unwrap();
        assert!(
            query.ends_with("&sig=tiyt3I9WEexG%2B6%2FRjRnPx4ONEMwFrHDPGq%2F%2BowL4s38%3D"),
            "{query}"
        );
    }

    #[test]
    fn accounts_without_a_key_are_refused() {
        for credential in [
            AzureCredential::Sas("sv=x&sig=y".into()),
            AzureCredential::Anonymous,
        ] {
            let account = AzureAccount::new("acme", None, credential).unwrap();
            let err = blob_sas(
                &account,
                "c",
                "k",
                PresignedMethod::Get,
                SystemTime::now(),
                "2026-02-06",
            )
            .unwrap_err();
            assert!(matches!(err, StoreError::Unsupported(_)), "{err:?}");
        }
    }
}
