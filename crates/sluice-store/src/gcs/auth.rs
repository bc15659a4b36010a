//! Who the GCS store is and how it proves it: a credential read from the
//! JSON files Google's tools write (a service account's key, or the
//! `authorized_user` file `gcloud auth application-default login` leaves),
//! or none (an emulator, a public bucket); and the OAuth 2.0 access token
//! each request carries, fetched from the credential's token endpoint and
//! kept until five minutes before it expires.
//!
//! Nothing here reads the environment: the binary resolves
//! `GOOGLE_APPLICATION_CREDENTIALS` and `STORAGE_EMULATOR_HOST` and hands
//! the pieces over.

use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::error::StoreError;

/// The scope sluice asks tokens for: read and write objects.
pub const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
/// Google's token endpoint, where a credential file names none.
pub const TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// A token is fetched again this long before it expires.
const EARLY: Duration = Duration::from_secs(300);

/// How requests are authorized.
#[derive(Clone)]
pub enum GcsCredential {
    /// A service account's key: a token for a JWT signed with it.
    ServiceAccount(ServiceAccountKey),
    /// A user's refresh token (`gcloud auth application-default login`).
    AuthorizedUser(AuthorizedUser),
    /// No credential: an emulator, or a bucket anyone may read.
    Anonymous,
}

impl std::fmt::Debug for GcsCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret itself.
        match self {
            GcsCredential::ServiceAccount(key) => {
                write!(f, "ServiceAccount({})", key.client_email)
            }
            GcsCredential::AuthorizedUser(_) => f.write_str("AuthorizedUser(..)"),
            GcsCredential::Anonymous => f.write_str("Anonymous"),
        }
    }
}

/// The parts of a service account's key file sluice uses.
#[derive(Clone, Deserialize)]
pub struct ServiceAccountKey {
    pub client_email: String,
    pub private_key: String,
    #[serde(default)]
    pub private_key_id: Option<String>,
    #[serde(default)]
    pub token_uri: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
}

/// The parts of an `authorized_user` file sluice uses.
#[derive(Clone, Deserialize)]
pub struct AuthorizedUser {
    pub client_id: String,
    pub client_secret: String,
    pub refresh_token: String,
    #[serde(default)]
    pub token_uri: Option<String>,
    #[serde(default)]
    pub quota_project_id: Option<String>,
}

/// Why a credential file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GcsCredentialError {
    #[error("the credential file is not JSON with a \"type\": {0}")]
    NotJson(String),
    #[error("the credential file's {kind} lacks a field: {message}")]
    Incomplete { kind: &'static str, message: String },
    #[error("credential type {0:?} is not supported (sluice reads \"service_account\" keys and \"authorized_user\" files)")]
    Unsupported(String),
    #[error("the service account's private_key is not an RSA key in PEM: {0}")]
    BadKey(String),
}

impl GcsCredential {
    /// A credential file's contents.
    pub fn from_json(text: &str) -> Result<GcsCredential, GcsCredentialError> {
        #[derive(Deserialize)]
        struct Kind {
            #[serde(rename = "type")]
            kind: String,
        }
        let kind: Kind =
            serde_json::from_str(text).map_err(|e| GcsCredentialError::NotJson(e.to_string()))?;
        match kind.kind.as_str() {
            "service_account" => {
                let key: ServiceAccountKey =
                    serde_json::from_str(text).map_err(|e| GcsCredentialError::Incomplete {
                        kind: "service account key",
                        message: e.to_string(),
                    })?;
                jsonwebtoken::EncodingKey::from_rsa_pem(key.private_key.as_bytes())
                    .map_err(|e| GcsCredentialError::BadKey(e.to_string()))?;
                Ok(GcsCredential::ServiceAccount(key))
            }
            "authorized_user" => serde_json::from_str(text)
                .map(GcsCredential::AuthorizedUser)
                .map_err(|e| GcsCredentialError::Incomplete {
                    kind: "authorized_user file",
                    message: e.to_string(),
                }),
            other => Err(GcsCredentialError::Unsupported(other.to_string())),
        }
    }

    /// The project the credential belongs to, where it says (for `sluice mb`).
    pub fn project(&self) -> Option<&str> {
        match self {
            GcsCredential::ServiceAccount(key) => key.project_id.as_deref(),
            GcsCredential::AuthorizedUser(user) => user.quota_project_id.as_deref(),
            GcsCredential::Anonymous => None,
        }
    }
}

/// Access tokens for one credential, fetched when needed and kept while
/// they last.
pub(crate) struct Tokens {
    credential: GcsCredential,
    /// The token and when to fetch the next one.
    held: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself (a Mutex's Debug would print it).
        f.debug_struct("Tokens")
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

/// A token endpoint's answer.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl Tokens {
    pub fn new(credential: GcsCredential) -> Tokens {
        Tokens {
            credential,
            held: tokio::sync::Mutex::new(None),
        }
    }

    /// The `Authorization` header's value, or `None` for anonymous requests.
    pub async fn authorization(
        &self,
        http: &crate::rest::watch::Http,
    ) -> Result<Option<String>, StoreError> {
        if matches!(self.credential, GcsCredential::Anonymous) {
            return Ok(None);
        }
        // One fetch at a time: requests that find the token expiring wait
        // for the one fetch rather than each making its own.
        let mut held = self.held.lock().await;
        if let Some((token, renew_at)) = held.as_ref() {
            if Instant::now() < *renew_at {
                return Ok(Some(format!("Bearer {token}")));
            }
        }
        let (token, lifetime) = self.fetch(http).await?;
        let bearer = format!("Bearer {token}");
        // Five minutes early, or a quarter of a short lifetime early.
        let early = EARLY.min(lifetime / 4);
        *held = Some((token, Instant::now() + lifetime - early));
        Ok(Some(bearer))
    }

    /// Drops the token held (the service refused it: revoked, or its
    /// credential's rights changed), so that the next request fetches one.
    pub async fn forget(&self) {
        *self.held.lock().await = None;
    }

    /// A new token from the credential's endpoint, and how long it lasts.
    async fn fetch(
        &self,
        http: &crate::rest::watch::Http,
    ) -> Result<(String, Duration), StoreError> {
        let (uri, form) = match &self.credential {
            GcsCredential::ServiceAccount(key) => {
                let uri = key.token_uri.clone().unwrap_or_else(|| TOKEN_URI.into());
                let assertion = signed_assertion(key, &uri, SystemTime::now())?;
                (
                    uri,
                    form(&[
                        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                        ("assertion", &assertion),
                    ]),
                )
            }
            GcsCredential::AuthorizedUser(user) => (
                user.token_uri.clone().unwrap_or_else(|| TOKEN_URI.into()),
                form(&[
                    ("grant_type", "refresh_token"),
                    ("client_id", &user.client_id),
                    ("client_secret", &user.client_secret),
                    ("refresh_token", &user.refresh_token),
                ]),
            ),
            GcsCredential::Anonymous => unreachable!("anonymous requests fetch no token"),
        };
        let request = http
            .request(reqwest::Method::POST, &uri)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("content-length", form.len().to_string());
        let body = crate::rest::body::in_memory(form.into());
        let answer = http.send(request, Some(body)).await?;
        let status = answer.status();
        let text = http.text(answer).await?;
        if !status.is_success() {
            // The endpoint's own words ({"error": ..., "error_description": ...}).
            let said = text.lines().next().unwrap_or("").chars().take(300);
            let said: String = said.collect();
            return Err(match status.as_u16() {
                400 | 401 | 403 => StoreError::InvalidCredentials(format!(
                    "the token endpoint {uri} refused the credential ({status}): {said}"
                )),
                429 | 500..=599 => StoreError::Throttled { retry_after: None },
                _ => StoreError::Service {
                    status: status.as_u16(),
                    code: "TokenRefused".into(),
                    message: said,
                },
            });
        }
        let answer: TokenAnswer = serde_json::from_str(&text).map_err(|e| StoreError::Service {
            status: status.as_u16(),
            code: "UnreadableToken".into(),
            message: e.to_string(),
        })?;
        Ok((
            answer.access_token,
            Duration::from_secs(answer.expires_in.unwrap_or(3600)),
        ))
    }
}

/// The JWT a service account trades for a token (RFC 7523), valid one hour
/// from `now`.
pub(crate) fn signed_assertion(
    key: &ServiceAccountKey,
    audience: &str,
    now: SystemTime,
) -> Result<String, StoreError> {
    #[derive(serde::Serialize)]
    struct Claims<'a> {
        iss: &'a str,
        scope: &'a str,
        aud: &'a str,
        iat: u64,
        exp: u64,
    }
    let iat = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = key.private_key_id.clone();
    let signing = jsonwebtoken::EncodingKey::from_rsa_pem(key.private_key.as_bytes())
        .map_err(|e| StoreError::InvalidCredentials(format!("the service account's key: {e}")))?;
    jsonwebtoken::encode(
        &header,
        &Claims {
            iss: &key.client_email,
            scope: SCOPE,
            aud: audience,
            iat,
            exp: iat + 3600,
        },
        &signing,
    )
    .map_err(|e| StoreError::InvalidCredentials(format!("signing the token request: {e}")))
}

/// An `application/x-www-form-urlencoded` body.
fn form(pairs: &[(&str, &str)]) -> String {
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", utf8_percent_encode(value, NON_ALPHANUMERIC)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn credential_files_are_read_or_refused_by_name() {
        // (file, what comes of it)
        let cases = [
            (r#"{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}"#, "AuthorizedUser(..)"),
            (r#"{"type": "external_account", "audience": "x"}"#, "credential type \"external_account\" is not supported (sluice reads \"service_account\" keys and \"authorized_user\" files)"),
            (r#"{"type": "service_account", "client_email": "a@b", "private_key": "not a key"}"#, "the service account's private_key is not an RSA key in PEM"),
            (r#"{"type": "authorized_user", "client_id": "c"}"#, "the credential file's authorized_user file lacks a field"),
            ("[]", "the credential file is not JSON with a \"type\""),
        ];
        for (file, want) in cases {
            let got = match GcsCredential::from_json(file) {
                Ok(credential) => format!("{credential:?}"),
                Err(error) => error.to_string(),
            };
            assert!(got.starts_with(want), "{file}: {got}");
        }
    }

    /// A token endpoint on loopback: answers each POST with `answer`
    /// (status, body) and hands each request's form to `seen`.
    async fn token_endpoint(
        answer: (u16, &'static str),
        seen: tokio::sync::mpsc::UnboundedSender<BTreeMap<String, String>>,
    ) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buffer = [0u8; 8192];
                // Headers, then as many body bytes as Content-Length says.
                let body = loop {
                    let read = socket.read(&mut buffer).await.unwrap();
                    request.extend_from_slice(&buffer[..read]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if body.len() >= length {
                            break body.to_string();
                        }
                    }
                };
                let form = body
                    .split('&')
                    .filter_map(|pair| pair.split_once('='))
                    .map(|(n, v)| {
                        (
                            n.to_string(),
                            percent_encoding::percent_decode_str(v)
                                .decode_utf8_lossy()
                                .into_owned(),
                        )
                    })
                    .collect();
                let _ = seen.send(form);
                let reply = format!(
                    "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                    answer.0,
                    answer.1.len(),
                    answer.1
                );
                socket.write_all(reply.as_bytes()).await.unwrap();
            }
        });
        url
    }

    fn http() -> crate::rest::watch::Http {
        crate::rest::watch::Http::new("test", Duration::from_secs(5), Some(Duration::from_secs(5)))
            .unwrap()
    }

    /// An RSA key pair in PEM (PKCS#8, as Google's key files hold it), made
    /// by openssl.
    fn rsa_pair(dir: &std::path::Path) -> (String, String) {
        let private = dir.join("key.pem");
        let public = dir.join("public.pem");
        let made = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
            ])
            .arg(&private)
            .output()
            .expect("openssl");
        assert!(made.status.success(), "{made:?}");
        let made = std::process::Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        (
            std::fs::read_to_string(private).unwrap(),
            std::fs::read_to_string(public).unwrap(),
        )
    }

    #[tokio::test]
    async fn a_service_account_trades_a_signed_jwt_for_a_token_it_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let (private, public) = rsa_pair(dir.path());
        let (seen, mut forms) = tokio::sync::mpsc::unbounded_channel();
        let uri = token_endpoint(
            (200, r#"{"access_token": "tok-1", "expires_in": 3600}"#),
            seen,
        )
        .await;
        let file = serde_json::json!({
            "type": "service_account",
            "client_email": "uploader@acme.iam.gserviceaccount.com",
            "private_key": private,
            "private_key_id": "k1",
            "token_uri": uri,
        });
        let tokens = Tokens::new(GcsCredential::from_json(&file.to_string()).unwrap());
        let http = http();
        for _ in 0..3 {
            assert_eq!(
                tokens.authorization(&http).await.unwrap().as_deref(),
                Some("Bearer tok-1")
            );
        }
        let form = forms.recv().await.unwrap();
        assert!(
            forms.try_recv().is_err(),
            "the token is kept, not fetched again"
        );
        assert_eq!(
            form["grant_type"],
            "urn:ietf:params:oauth:grant-type:jwt-bearer"
        );
        // The assertion verifies with the public key and says who and what for.
        let mut check = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        check.set_audience(&[uri.as_str()]);
        let claims = jsonwebtoken::decode::<serde_json::Value>(
            &form["assertion"],
            &jsonwebtoken::DecodingKey::from_rsa_pem(public.as_bytes()).unwrap(),
            &check,
        )
        .unwrap();
        assert_eq!(claims.header.kid.as_deref(), Some("k1"));
        assert_eq!(
            claims.claims["iss"],
            "uploader@acme.iam.gserviceaccount.com"
        );
        assert_eq!(claims.claims["scope"], SCOPE);
    }

    #[tokio::test]
    async fn a_refresh_token_is_traded_and_a_refusal_names_the_endpoint() {
        // (answer, what authorization gives)
        let cases = [
            (
                (200, r#"{"access_token": "tok-2"}"#),
                "Ok(Some(\"Bearer tok-2\"))",
            ),
            (
                (
                    400,
                    r#"{"error": "invalid_grant", "error_description": "Token has been expired or revoked."}"#,
                ),
                "Err(InvalidCredentials(\"the token endpoint http://",
            ),
            ((503, "busy"), "Err(Throttled"),
        ];
        for (answer, want) in cases {
            let (seen, mut forms) = tokio::sync::mpsc::unbounded_channel();
            let uri = token_endpoint(answer, seen).await;
            let file = serde_json::json!({
                "type": "authorized_user",
                "client_id": "id.apps.googleusercontent.com",
                "client_secret": "s3cret",
                "refresh_token": "1//refresh",
                "token_uri": uri,
            });
            let tokens = Tokens::new(GcsCredential::from_json(&file.to_string()).unwrap());
            let got = format!("{:?}", tokens.authorization(&http()).await);
            assert!(got.starts_with(want), "{answer:?}: {got}");
            let form = forms.recv().await.unwrap();
            assert_eq!(form["grant_type"], "refresh_token");
            assert_eq!(form["refresh_token"], "1//refresh");
            assert_eq!(form["client_secret"], "s3cret");
        }
    }

    #[test]
    fn forms_escape_their_values() {
        assert_eq!(
            form(&[("grant_type", "refresh_token"), ("refresh_token", "a/b+c=")]),
            "grant_type=refresh%5Ftoken&refresh_token=a%2Fb%2Bc%3D"
        );
    }
}
