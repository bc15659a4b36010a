//! Who the Azure store is and how it proves it: the account, the blob
//! endpoint and the credential (an account key for Shared Key signing, a SAS
//! token, or none for public containers), read from a connection string or
//! given piece by piece; and the Shared Key signature of a request.
//!
//! Nothing here reads the environment: the binary resolves
//! `AZURE_STORAGE_*` and hands the pieces over.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{KeyInit, Mac};

/// The account and key Azurite (and the old storage emulator) serve.
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
/// Azurite's well-known account key (public, in Microsoft's documentation).
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// How requests are authorized.
#[derive(Clone)]
pub enum AzureCredential {
    /// Shared Key: every request signed with the account key (the decoded bytes).
    AccountKey(Vec<u8>),
    /// A shared access signature, the query string without its `?`.
    Sas(String),
    /// No credential: a container that allows anonymous access.
    Anonymous,
}

impl std::fmt::Debug for AzureCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret itself.
        f.write_str(match self {
            AzureCredential::AccountKey(_) => "AccountKey(..)",
            AzureCredential::Sas(_) => "Sas(..)",
            AzureCredential::Anonymous => "Anonymous",
        })
    }
}

/// An account, its blob endpoint and a credential.
#[derive(Debug, Clone)]
pub struct AzureAccount {
    pub name: String,
    /// The blob service's URL without a trailing `/`:
    /// `https://ACCOUNT.blob.core.windows.net`, or Azurite's path-style
    /// `http://127.0.0.1:10000/devstoreaccount1`.
    pub endpoint: String,
    pub credential: AzureCredential,
}

/// Why an account could not be made from what was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AzureAccountError {
    #[error("the connection string has no {0} (expected AccountName=…;AccountKey=… or a SharedAccessSignature and a BlobEndpoint)")]
    Missing(&'static str),
    #[error("the connection string's part {0:?} is not NAME=VALUE")]
    Malformed(String),
    #[error("the account key is not base64")]
    KeyNotBase64,
    #[error("the account name {0:?} is not valid (3-24 lower-case letters and digits)")]
    InvalidAccount(String),
    #[error("the blob endpoint {0:?} is not an http(s) URL")]
    InvalidEndpoint(String),
}

impl AzureAccount {
    /// An account by name with the public cloud's endpoint, or `endpoint` when given.
    pub fn new(
        name: &str,
        endpoint: Option<&str>,
        credential: AzureCredential,
    ) -> Result<AzureAccount, AzureAccountError> {
        let valid = (3..=24).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !valid {
            return Err(AzureAccountError::InvalidAccount(name.to_string()));
        }
        let endpoint = match endpoint {
            Some(url) => checked_endpoint(url)?,
            None => format!("https://{name}.blob.core.windows.net"),
        };
        Ok(AzureAccount {
            name: name.to_string(),
            endpoint,
            credential,
        })
    }

    /// An account key credential from its base64 text.
    pub fn key(text: &str) -> Result<AzureCredential, AzureAccountError> {
        BASE64
            .decode(text.trim())
            .map(AzureCredential::AccountKey)
            .map_err(|_| AzureAccountError::KeyNotBase64)
    }

    /// Reads an Azure Storage connection string: `AccountName`, `AccountKey`,
    /// `SharedAccessSignature`, `BlobEndpoint`, `DefaultEndpointsProtocol`,
    /// `EndpointSuffix`, and `UseDevelopmentStorage=true` (Azurite on its
    /// default port, `DevelopmentStorageProxyUri` moving it).
    pub fn from_connection_string(text: &str) -> Result<AzureAccount, AzureAccountError> {
        let mut parts = std::collections::HashMap::new();
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| AzureAccountError::Malformed(part.to_string()))?;
            parts.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
        let get = |name: &str| parts.get(name).map(String::as_str);
        if get("usedevelopmentstorage").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            let base = get("developmentstorageproxyuri").unwrap_or("http://127.0.0.1:10000");
            let endpoint = format!("{}/{EMULATOR_ACCOUNT}", base.trim_end_matches('/'));
            return AzureAccount::new(
                EMULATOR_ACCOUNT,
                Some(&endpoint),
                AzureAccount::key(EMULATOR_KEY)?,
            );
        }
        let credential = match (get("accountkey"), get("sharedaccesssignature")) {
            (Some(key), _) => AzureAccount::key(key)?,
            (None, Some(sas)) => AzureCredential::Sas(sas.trim_start_matches('?').to_string()),
            (None, None) => AzureCredential::Anonymous,
        };
        let endpoint = match (get("blobendpoint"), get("accountname")) {
            (Some(url), _) => checked_endpoint(url)?,
            (None, Some(name)) => format!(
                "{}://{name}.blob.{}",
                get("defaultendpointsprotocol").unwrap_or("https"),
                get("endpointsuffix").unwrap_or("core.windows.net")
            ),
            (None, None) => return Err(AzureAccountError::Missing("AccountName or BlobEndpoint")),
        };
        let name = match get("accountname") {
            Some(name) => name.to_string(),
            // A SAS connection string may name only the endpoint:
            // the account is its first host label.
            None => account_of(&endpoint).ok_or(AzureAccountError::Missing("AccountName"))?,
        };
        if matches!(credential, AzureCredential::AccountKey(_)) && get("accountname").is_none() {
            return Err(AzureAccountError::Missing("AccountName"));
        }
        AzureAccount::new(&name, Some(&endpoint), credential)
    }
}

fn checked_endpoint(url: &str) -> Result<String, AzureAccountError> {
    let trimmed = url.trim().trim_end_matches('/');
    let scheme_ok = trimmed.starts_with("https://") || trimmed.starts_with("http://");
    let host = trimmed.split("://").nth(1).unwrap_or("");
    if !scheme_ok || host.is_empty() || host.contains(['?', '#', ' ']) {
        return Err(AzureAccountError::InvalidEndpoint(url.to_string()));
    }
    Ok(trimmed.to_string())
}

/// `ACCOUNT` of `https://ACCOUNT.blob.core.windows.net`.
fn account_of(endpoint: &str) -> Option<String> {
    let host = endpoint.split("://").nth(1)?.split(['/', ':']).next()?;
    let (first, rest) = host.split_once('.')?;
    rest.starts_with("blob.").then(|| first.to_string())
}

/// The Shared Key signature of a request, as the `Authorization` header's
/// value: `SharedKey ACCOUNT:BASE64(HMAC-SHA256(key, string to sign))`.
///
/// `path` is the URL's path as sent (percent-encoded); `query` its
/// parameters decoded; `headers` every header the request will carry
/// (names lower case), `content-length` included when there is a body.
pub(crate) fn shared_key(
    account: &str,
    key: &[u8],
    method: &str,
    path: &str,
    query: &[(String, String)],
    headers: &[(String, String)],
) -> String {
    let text = string_to_sign(account, method, path, query, headers);
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(text.as_bytes());
    let signature = BASE64.encode(mac.finalize().into_bytes());
    format!("SharedKey {account}:{signature}")
}

fn string_to_sign(
    account: &str,
    method: &str,
    path: &str,
    query: &[(String, String)],
    headers: &[(String, String)],
) -> String {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let length = match header("content-length") {
        "0" => "",
        other => other,
    };
    let mut text = String::with_capacity(256);
    for field in [
        method,
        header("content-encoding"),
        header("content-language"),
        length,
        header("content-md5"),
        header("content-type"),
        header("date"),
        header("if-modified-since"),
        header("if-match"),
        header("if-none-match"),
        header("if-unmodified-since"),
        header("range"),
    ] {
        text.push_str(field);
        text.push('\n');
    }
    let mut ms: Vec<&(String, String)> = headers
        .iter()
        .filter(|(n, _)| n.starts_with("x-ms-"))
        .collect();
    ms.sort_by(|(a, _), (b, _)| header_order(a, b));
    for (name, value) in ms {
        text.push_str(name);
        text.push(':');
        text.push_str(value.trim());
        text.push('\n');
    }
    text.push('/');
    text.push_str(account);
    text.push_str(if path.is_empty() { "/" } else { path });
    let mut params: Vec<(String, &str)> = query
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.as_str()))
        .collect();
    params.sort();
    // Repeated parameters are joined with commas under one name.
    let mut i = 0;
    while i < params.len() {
        let name = params[i].0.clone();
        let mut values = vec![params[i].1];
        while i + 1 < params.len() && params[i + 1].0 == name {
            i += 1;
            values.push(params[i].1);
        }
        text.push('\n');
        text.push_str(&name);
        text.push(':');
        text.push_str(&values.join(","));
        i += 1;
    }
    text
}

/// The order Azure (and Azurite, with `localeCompare`) sorts header names
/// in for the signature: culture order, not byte order. For the characters
/// header names hold, `_` comes first, then `-`, digits, letters: so
/// `x-ms-meta-file_name` goes before `x-ms-meta-file1`, where bytes would
/// put it after.
fn header_order(a: &str, b: &str) -> std::cmp::Ordering {
    let weight = |c: u8| -> u16 {
        match c {
            b'_' => 0,
            b'-' => 1,
            b'0'..=b'9' => 2 + u16::from(c - b'0'),
            b'a'..=b'z' => 12 + u16::from(c - b'a'),
            b'A'..=b'Z' => 12 + u16::from(c - b'A'),
            other => 100 + u16::from(other),
        }
    };
    a.bytes().map(weight).cmp(b.bytes().map(weight))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings() {
        // (text, account, endpoint, credential kind) or the error's words
        type Want = Result<(&'static str, &'static str, &'static str), &'static str>;
        let cases: [(&str, Want); 8] = [
            (
                "UseDevelopmentStorage=true",
                Ok((EMULATOR_ACCOUNT, "http://127.0.0.1:10000/devstoreaccount1", "AccountKey(..)")),
            ),
            (
                "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:4711/devstoreaccount1;",
                Ok((EMULATOR_ACCOUNT, "http://127.0.0.1:4711/devstoreaccount1", "AccountKey(..)")),
            ),
            (
                "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=a2V5;EndpointSuffix=core.windows.net",
                Ok(("acme", "https://acme.blob.core.windows.net", "AccountKey(..)")),
            ),
            (
                "BlobEndpoint=https://acme.blob.core.windows.net/;SharedAccessSignature=sv=2024-01-01&sig=x",
                Ok(("acme", "https://acme.blob.core.windows.net", "Sas(..)")),
            ),
            ("AccountName=acme;AccountKey=not base64!", Err("not base64")),
            ("AccountKey=a2V5", Err("no AccountName")),
            ("AccountName=Acme_1;AccountKey=a2V5", Err("not valid")),
            ("AccountName", Err("not NAME=VALUE")),
        ];
        for (text, want) in cases {
            match (AzureAccount::from_connection_string(text), want) {
                (Ok(account), Ok((name, endpoint, credential))) => {
                    assert_eq!(account.name, name, "{text}");
                    assert_eq!(account.endpoint, endpoint, "{text}");
                    assert_eq!(format!("{:?}", account.credential), credential, "{text}");
                }
                (Err(e), Err(words)) => assert!(e.to_string().contains(words), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_string_to_sign_follows_the_documented_order() {
        let headers = [
            ("content-length".to_string(), "0".to_string()),
            ("if-none-match".to_string(), "*".to_string()),
            ("x-ms-version".to_string(), "2026-02-06".to_string()),
            (
                "x-ms-date".to_string(),
                "Sun, 29 Nov 2026 22:00:00 GMT".to_string(),
            ),
            ("x-ms-blob-type".to_string(), "BlockBlob".to_string()),
        ];
        let query = [
            ("comp".to_string(), "block".to_string()),
            ("blockid".to_string(), "QUJD".to_string()),
        ];
        let text = string_to_sign(
            "devstoreaccount1",
            "PUT",
            "/devstoreaccount1/c/a%20b",
            &query,
            &headers,
        );
        assert_eq!(
            text,
            "PUT\n\n\n\n\n\n\n\n\n*\n\n\n\
             x-ms-blob-type:BlockBlob\n\
             x-ms-date:Sun, 29 Nov 2026 22:00:00 GMT\n\
             x-ms-version:2026-02-06\n\
             /devstoreaccount1/devstoreaccount1/c/a%20b\n\
             blockid:QUJD\n\
             comp:block"
        );
    }

    #[test]
    fn headers_sort_as_azure_sorts_them() {
        // (a, b): a is signed before b
        let cases = [
            ("x-ms-meta-file_name", "x-ms-meta-file1"),
            ("x-ms-meta-sluice__u_x_2Dy", "x-ms-meta-sluice__u_x1_2D"),
            ("x-ms-blob-type", "x-ms-content-crc64"),
            ("x-ms-date", "x-ms-version"),
            ("x-ms-meta-a", "x-ms-meta-ab"),
        ];
        for (a, b) in cases {
            assert_eq!(header_order(a, b), std::cmp::Ordering::Less, "{a} {b}");
            assert_eq!(header_order(b, a), std::cmp::Ordering::Greater, "{b} {a}");
        }
    }

    #[test]
    fn the_debug_form_hides_secrets() {
        let account = AzureAccount::new("acme", None, AzureAccount::key("a2V5").unwrap()).unwrap();
        assert!(!format!("{account:?}").contains("a2V5"));
    }
}
