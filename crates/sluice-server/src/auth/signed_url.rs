//! Signed URLs: a backend without a JWT library lets a client do one request on
//! one key until a time, by giving it a URL whose query carries the expiry and
//! an HMAC-SHA256 signature (docs/AUTH.md has the scheme and a Python example).
//!
//! The signed text is five lines joined by `\n`:
//! `sluice-v1`, the method (`GET` also allows `HEAD`), the URL's path exactly as
//! sent (percent-encoded), `expires` (Unix seconds), `tenant` and `max_size`
//! (each empty when not given). The query carries `expires`, `signature` (lower-
//! case hex), and `tenant` / `max_size` when given.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Percent-encodes a key for a URL path: `/` kept, everything but unreserved
/// characters escaped.
pub fn encode_key(key: &str) -> String {
    const ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(key, ESCAPED).to_string()
}

/// What a signed URL allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRequest {
    /// `PUT`, `GET` (and `HEAD`) or `DELETE`.
    pub method: String,
    /// The URL's path as sent, e.g. `/v1/objects/acme/photo%201.jpg`.
    pub path: String,
    /// Unix seconds after which the URL is refused.
    pub expires: u64,
    pub tenant: Option<String>,
    pub max_size: Option<u64>,
}

impl SignedRequest {
    fn text(&self) -> String {
        format!(
            "sluice-v1\n{}\n{}\n{}\n{}\n{}",
            self.method,
            self.path,
            self.expires,
            self.tenant.as_deref().unwrap_or(""),
            self.max_size.map(|n| n.to_string()).unwrap_or_default()
        )
    }

    /// The query string (without `?`) that signs this request with `secret`.
    pub fn query(&self, secret: &[u8]) -> String {
        let mut query = format!("expires={}", self.expires);
        if let Some(tenant) = &self.tenant {
            query.push_str(&format!("&tenant={}", encode_key(tenant)));
        }
        if let Some(max_size) = self.max_size {
            query.push_str(&format!("&max_size={max_size}"));
        }
        query.push_str(&format!(
            "&signature={}",
            hex::encode(mac(secret, &self.text()).finalize().into_bytes())
        ));
        query
    }
}

fn mac(secret: &[u8], text: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(text.as_bytes());
    mac
}

/// Why a signed URL is refused (each reason safe to send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignedUrlError {
    Malformed,
    Expired,
    BadSignature,
}

impl SignedUrlError {
    pub fn reason(self) -> &'static str {
        match self {
            SignedUrlError::Malformed => {
                "the signed URL lacks expires or signature, or has one twice"
            }
            SignedUrlError::Expired => "the signed URL has expired",
            SignedUrlError::BadSignature => "the URL's signature does not verify",
        }
    }
}

/// True when `query` carries a signature (then it must verify).
pub fn is_signed(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|pair| pair.starts_with("signature=")))
}

/// Checks the signed URL of a request (`method`, its path as sent, its query)
/// and returns what it allows. The signature is compared in constant time.
pub fn verify(
    secret: &[u8],
    method: &str,
    path: &str,
    query: &str,
) -> Result<SignedRequest, SignedUrlError> {
    let (mut expires, mut signature, mut tenant, mut max_size) = (None, None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| SignedUrlError::Malformed)?
            .into_owned();
        let slot = match name {
            "expires" => &mut expires,
            "signature" => &mut signature,
            "tenant" => &mut tenant,
            "max_size" => &mut max_size,
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Err(SignedUrlError::Malformed);
        }
    }
    let (Some(expires), Some(signature)) = (expires, signature) else {
        return Err(SignedUrlError::Malformed);
    };
    let signed_method = match method {
        "HEAD" => "GET",
        other => other,
    };
    let request = SignedRequest {
        method: signed_method.to_owned(),
        path: path.to_owned(),
        expires: expires.parse().map_err(|_| SignedUrlError::Malformed)?,
        tenant,
        max_size: max_size
            .map(|n| n.parse().map_err(|_| SignedUrlError::Malformed))
            .transpose()?,
    };
    let signature = hex::decode(signature).map_err(|_| SignedUrlError::BadSignature)?;
    mac(secret, &request.text())
        .verify_slice(&signature)
        .map_err(|_| SignedUrlError::BadSignature)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if now > request.expires {
        return Err(SignedUrlError::Expired);
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a secret of thirty-two bytes or more";

    fn signed(method: &str, path: &str, expires: u64) -> String {
        SignedRequest {
            method: method.into(),
            path: path.into(),
            expires,
            tenant: Some("acme".into()),
            max_size: Some(1000),
        }
        .query(SECRET)
    }

    #[test]
    fn verification_table() {
        let later = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600;
        let good = signed("PUT", "/v1/objects/acme/a%20b", later);
        let get = signed("GET", "/v1/objects/acme/a", later);
        let old = signed("PUT", "/v1/objects/acme/a", 1000);
        // (method, path, query, outcome)
        let cases: Vec<(&str, &str, String, Result<(), SignedUrlError>)> = vec![
            ("PUT", "/v1/objects/acme/a%20b", good.clone(), Ok(())),
            (
                "GET",
                "/v1/objects/acme/a%20b",
                good.clone(),
                Err(SignedUrlError::BadSignature),
            ),
            (
                "PUT",
                "/v1/objects/acme/other",
                good.clone(),
                Err(SignedUrlError::BadSignature),
            ),
            (
                "PUT",
                "/v1/objects/acme/a%20b",
                good.replace("tenant=acme", "tenant=globex"),
                Err(SignedUrlError::BadSignature),
            ),
            (
                "PUT",
                "/v1/objects/acme/a%20b",
                good.replace("max_size=1000", "max_size=9999"),
                Err(SignedUrlError::BadSignature),
            ),
            (
                "PUT",
                "/v1/objects/acme/a%20b",
                format!("{good}&expires=1"),
                Err(SignedUrlError::Malformed),
            ),
            (
                "PUT",
                "/v1/objects/acme/a%20b",
                good.replace("signature=", "signature=00"),
                Err(SignedUrlError::BadSignature),
            ),
            (
                "PUT",
                "/v1/objects/acme/a%20b",
                good.replace("signature=", "signature=zz"),
                Err(SignedUrlError::BadSignature),
            ),
            (
                "PUT",
                "/v1/objects/acme/a",
                old,
                Err(SignedUrlError::Expired),
            ),
            ("HEAD", "/v1/objects/acme/a", get.clone(), Ok(())),
            ("GET", "/v1/objects/acme/a", get, Ok(())),
            (
                "PUT",
                "/v1/objects/acme/a",
                format!("expires={later}"),
                Err(SignedUrlError::Malformed),
            ),
        ];
        for (method, path, query, outcome) in cases {
            let got = verify(SECRET, method, path, &query).map(|_| ());
            assert_eq!(got, outcome, "{method} {path}?{query}");
        }
    }

    #[test]
    fn keys_are_encoded_for_paths() {
        assert_eq!(encode_key("acme/a b/ü.txt"), "acme/a%20b/%C3%BC.txt");
        assert_eq!(encode_key("a?b#c&d"), "a%3Fb%23c%26d");
    }
}
