//! Who is calling and what they may do. With `[auth]` configured, every API
//! request carries `Authorization: Bearer <JWT>`, verified against the configured
//! key with the configured algorithms only (a token naming another algorithm, or
//! `none`, is refused), and its claims become a [`Grant`]: the tenant (`sub`),
//! the key prefix it may touch, the operations it may do, the largest upload and
//! optionally the one key it is good for. With `[auth]` off, every caller gets an
//! anonymous grant for everything, its tenant named by `x-sluice-tenant`.
//!
//! A signed URL ([`signed_url`]) is the other way in: one request on one key
//! until a time, for backends without a JWT library.
//!
//! Handlers ask the grant before they touch the store; docs/AUTH.md is the
//! client's view of the same rules.

mod jwks;
pub mod signed_url;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::AppState;

/// `[auth]`: how callers prove who they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Authentication")]
pub struct AuthSettings {
    /// Require bearer JWTs signed with the shared secret in FILE (HS256; at least
    /// 32 bytes; a trailing newline dropped); see docs/AUTH.md [default: no auth].
    #[arg(
        id = "auth.jwt_secret_file",
        long = "jwt-secret-file",
        env = "SLUICE_JWT_SECRET_FILE",
        value_name = "FILE"
    )]
    pub jwt_secret_file: Option<PathBuf>,
    /// Require bearer JWTs signed by the private half of the PEM public key in FILE
    /// (RSA: RS256, EC: ES256, Ed25519: EdDSA) [default: no auth].
    #[arg(
        id = "auth.jwt_public_key_file",
        long = "jwt-public-key-file",
        env = "SLUICE_JWT_PUBLIC_KEY_FILE",
        value_name = "FILE"
    )]
    pub jwt_public_key_file: Option<PathBuf>,
    /// Require bearer JWTs verified by the key of the JWKS file FILE their `kid`
    /// names; the file is read again when it changes [default: no auth].
    #[arg(
        id = "auth.jwks_file",
        long = "jwks-file",
        env = "SLUICE_JWKS_FILE",
        value_name = "FILE"
    )]
    pub jwks_file: Option<PathBuf>,
    /// The secret in FILE that signed URLs (`sluice sign`) are made with (at least
    /// 32 bytes); `serve` then takes them too [default: none].
    #[arg(
        id = "auth.url_secret_file",
        long = "url-secret-file",
        env = "SLUICE_URL_SECRET_FILE",
        value_name = "FILE"
    )]
    pub url_secret_file: Option<PathBuf>,
    /// JWT algorithms accepted (pinned: tokens naming any other are refused);
    /// repeat or separate with commas [default: the one of the key's kind: HS256,
    /// RS256, ES256 or EdDSA].
    #[arg(
        id = "auth.algorithms",
        long = "jwt-algorithm",
        env = "SLUICE_JWT_ALGORITHM",
        value_name = "ALG",
        value_delimiter = ','
    )]
    pub algorithms: Vec<String>,
    /// Tokens must carry this `iss` claim.
    #[arg(
        id = "auth.issuer",
        long = "jwt-issuer",
        env = "SLUICE_JWT_ISSUER",
        value_name = "ISS"
    )]
    pub issuer: Option<String>,
    /// Tokens must carry this `aud` claim.
    #[arg(
        id = "auth.audience",
        long = "jwt-audience",
        env = "SLUICE_JWT_AUDIENCE",
        value_name = "AUD"
    )]
    pub audience: Option<String>,
    /// Clock skew allowed on the `exp` and `nbf` claims.
    #[arg(id = "auth.leeway", long = "jwt-leeway", env = "SLUICE_JWT_LEEWAY", value_name = "DURATION", default_value = "30s", value_parser = crate::values::duration_in(std::time::Duration::ZERO, crate::values::HOUR))]
    #[serde(with = "humantime_serde")]
    pub leeway: Duration,
    /// Serve without authentication on an address other than loopback (refused
    /// otherwise: anyone could write, read and delete every key).
    #[arg(id = "auth.allow_anonymous", long = "allow-anonymous", env = "SLUICE_ALLOW_ANONYMOUS", value_name = "BOOL", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::values::flag_bool())]
    pub allow_anonymous: bool,
    /// Require the token in FILE (at least 32 bytes; Authorization: Bearer) for
    /// /metrics and the dashboard's data [default: open, or on --admin-listen].
    #[arg(
        id = "auth.admin_token_file",
        long = "admin-token-file",
        env = "SLUICE_ADMIN_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub admin_token_file: Option<PathBuf>,
    /// Also take the bearer token from the cookie NAME when a request has no
    /// Authorization header (Uppy's cookiesRule), from the gateway's own pages
    /// and --cors-origin pages only (a browser sends cookies with any site's
    /// request) [default: no cookie].
    #[arg(
        id = "auth.token_cookie",
        long = "token-cookie",
        env = "SLUICE_TOKEN_COOKIE",
        value_name = "NAME"
    )]
    pub token_cookie: Option<String>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

impl AuthSettings {
    /// True when tokens are required.
    pub fn enabled(&self) -> bool {
        self.jwt_secret_file.is_some()
            || self.jwt_public_key_file.is_some()
            || self.jwks_file.is_some()
            || self.url_secret_file.is_some()
    }
}

/// Why `[auth]` cannot be used; names the setting.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct AuthConfigError {
    pub key: &'static str,
    pub reason: String,
}

pub(crate) fn config_error(key: &'static str, reason: impl Into<String>) -> AuthConfigError {
    AuthConfigError {
        key,
        reason: reason.into(),
    }
}

/// What a request may do: an operation on keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// PUT, form POST, tus creation.
    Put,
    /// GET and HEAD of objects.
    Get,
    /// Listing.
    List,
    /// DELETE of objects.
    Delete,
    /// tus HEAD, PATCH and DELETE of one's own resumable uploads.
    Resume,
}

impl Op {
    const ALL: [Op; 5] = [Op::Put, Op::Get, Op::List, Op::Delete, Op::Resume];

    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::List => "list",
            Op::Delete => "delete",
            Op::Resume => "resume",
        }
    }
}

/// The claims sluice reads; others are ignored.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    prefix: Option<String>,
    ops: Option<Vec<Op>>,
    max_size: Option<u64>,
    key: Option<String>,
    /// Checked by the decoder; kept so what is made from the token (a direct
    /// upload session) ends with it.
    #[serde(default)]
    exp: Option<u64>,
}

/// What one caller may do (serialised only into sealed direct-upload
/// sessions, [`crate::direct::session`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// The tenant: `{tenant}` in key templates, the owner of resumable uploads,
    /// the party of fair admission.
    pub tenant: String,
    /// Keys the caller may touch start with this ("" for all).
    prefix: String,
    ops: HashSet<Op>,
    /// Largest upload the caller may make.
    pub max_size: Option<u64>,
    /// The one key the caller may touch, when the token names one.
    key: Option<String>,
    /// False for the anonymous grant of a gateway without `[auth]`.
    authenticated: bool,
    /// When the token it came from expires (seconds since the epoch).
    #[serde(default)]
    pub expires_at: Option<u64>,
}

impl Grant {
    /// Everything, for a gateway without `[auth]`.
    pub fn anonymous(tenant: String) -> Grant {
        Grant {
            tenant,
            prefix: String::new(),
            ops: Op::ALL.into_iter().collect(),
            max_size: None,
            key: None,
            authenticated: false,
            expires_at: None,
        }
    }

    /// A token's grant for `tenant` with the default claims (for tests).
    #[cfg(test)]
    pub(crate) fn for_tenant(tenant: &str) -> Grant {
        Grant {
            prefix: format!("{tenant}/"),
            authenticated: true,
            ..Grant::anonymous(tenant.into())
        }
    }

    fn from_claims(claims: Claims) -> Result<Grant, ApiError> {
        let tenant = claims.sub;
        if tenant.is_empty()
            || tenant.len() > 128
            || tenant.contains('/')
            || tenant.chars().any(char::is_control)
        {
            return Err(ApiError::Unauthenticated(
                "the token's sub is not a tenant name (1 to 128 characters, no '/')",
            ));
        }
        Ok(Grant {
            prefix: claims.prefix.unwrap_or_else(|| format!("{tenant}/")),
            ops: claims.ops.map_or_else(
                || Op::ALL.into_iter().collect(),
                |ops| ops.into_iter().collect(),
            ),
            max_size: claims.max_size,
            key: claims.key,
            tenant,
            authenticated: true,
            expires_at: claims.exp,
        })
    }

    /// The owner recorded with resumable uploads (none without `[auth]`).
    pub fn owner(&self) -> Option<String> {
        self.authenticated.then(|| self.tenant.clone())
    }

    /// Whether the caller may see a resumable upload recorded with `owner`.
    pub fn owns(&self, owner: Option<&str>) -> bool {
        !self.authenticated || owner == Some(self.tenant.as_str())
    }

    /// The caller's Iceberg catalog: its key prefix; none for a token good
    /// for one key only.
    pub fn catalog_scope(&self) -> Option<&str> {
        self.key.is_none().then_some(self.prefix.as_str())
    }

    /// May the caller do `op` at all (on some key)?
    pub fn allows(&self, op: Op) -> Result<(), ApiError> {
        match self.ops.contains(&op) {
            true => Ok(()),
            false => Err(ApiError::Forbidden(format!(
                "the token does not allow {}",
                op.name()
            ))),
        }
    }

    /// May the caller do `op` on `key`?
    pub fn check(&self, op: Op, key: &str) -> Result<(), ApiError> {
        self.allows(op)?;
        if let Some(only) = &self.key {
            if key != only {
                return Err(ApiError::Forbidden(
                    "the token is good for another key".into(),
                ));
            }
        }
        if !key.starts_with(&self.prefix) {
            return Err(ApiError::Forbidden(format!(
                "the token allows keys under {:?} only",
                self.prefix
            )));
        }
        Ok(())
    }

    /// Another tenant's resumable upload does not exist for the caller.
    pub fn check_owner(&self, owner: Option<&str>) -> Result<(), ApiError> {
        match self.owns(owner) {
            true => Ok(()),
            false => Err(ApiError::Tus(sluice_tus::TusError::NotFound)),
        }
    }

    /// May the caller resume (see, continue, cancel) an upload owned by `owner`
    /// that becomes `key` (none for a partial upload, which becomes no object)?
    /// Another tenant's upload is not found, never forbidden.
    pub fn check_resume(&self, owner: Option<&str>, key: Option<&str>) -> Result<(), ApiError> {
        self.check_owner(owner)?;
        match key {
            Some(key) => self.check(Op::Resume, key),
            None => self.allows(Op::Resume),
        }
    }

    /// The prefix to list for a requested `prefix`: the caller's own when the
    /// request names none; one outside the caller's is forbidden, one that is
    /// not a valid prefix is refused, and a token for one key lists nothing.
    pub fn list_prefix(&self, prefix: &str) -> Result<String, ApiError> {
        self.allows(Op::List)?;
        if self.key.is_some() {
            // A token for one key is good for exactly that key: a listing
            // would show the keys, sizes and ETags around it.
            return Err(ApiError::Forbidden(
                "the token is good for one key only; listing needs a token without `key`".into(),
            ));
        }
        sluice_input::keys::validate_list_prefix(prefix).map_err(ApiError::InvalidPrefix)?;
        if prefix.is_empty() {
            return Ok(self.prefix.clone());
        }
        match prefix.starts_with(&self.prefix) {
            true => Ok(prefix.to_owned()),
            false => Err(ApiError::Forbidden(format!(
                "the token allows listing under {:?} only",
                self.prefix
            ))),
        }
    }

    /// Refuses an upload of `length` bytes beyond the caller's `max_size`.
    pub fn check_size(&self, length: u64) -> Result<(), ApiError> {
        match self.max_size {
            Some(limit) if length > limit => Err(ApiError::TooLarge { limit }),
            _ => Ok(()),
        }
    }

    /// The smaller of the gateway's limit and the caller's.
    pub fn size_limit(&self, gateway: Option<u64>) -> Option<u64> {
        match (gateway, self.max_size) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Where an upload the caller did not name goes: the token's one key, or the
    /// key the template made, under the caller's prefix (prefixed when the
    /// template put it elsewhere).
    pub fn generated_key(&self, rendered: String) -> String {
        if let Some(key) = &self.key {
            return key.clone();
        }
        match rendered.starts_with(&self.prefix) {
            true => rendered,
            false => format!("{}{rendered}", self.prefix),
        }
    }
}

/// Verifies tokens and signed URLs (or lets everyone in, without `[auth]`).
pub struct Authenticator {
    verifier: Option<TokenKeys>,
    token_cookie: Option<String>,
    /// Pages whose requests may ride on the cookie and post forms: the CORS
    /// origins (`*`: any), besides the gateway's own.
    allowed_origins: Vec<String>,
    url_secret: Option<Vec<u8>>,
    /// SHA-256 of the admin token, compared in constant time.
    admin_token: Option<[u8; 32]>,
}

/// What verifies bearer tokens.
enum TokenKeys {
    /// One key (a secret or a PEM public key) with its algorithms.
    Fixed(DecodingKey, Validation),
    /// The keys of a JWKS file, chosen by `kid`.
    Jwks(jwks::KeyRing),
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("jwt", &self.verifier.is_some())
            .field("signed_urls", &self.url_secret.is_some())
            .field("admin_token", &self.admin_token.is_some())
            .finish()
    }
}

impl Authenticator {
    /// Reads the key files of `settings` and pins the algorithms; every mistake
    /// is found here, at start-up.
    /// The authenticator `settings` describe; `allowed_origins` are the CORS
    /// origins (see [`Authenticator::origin_allowed`]).
    pub fn new(
        settings: &AuthSettings,
        allowed_origins: &[String],
    ) -> Result<Authenticator, AuthConfigError> {
        let url_secret = settings
            .url_secret_file
            .as_deref()
            .map(|path| read_secret("auth.url_secret_file", path))
            .transpose()?;
        let verifier = Self::jwt_verifier(settings)?;
        let admin_token = settings
            .admin_token_file
            .as_deref()
            .map(|path| read_secret("auth.admin_token_file", path).map(|t| digest(&t)))
            .transpose()?;
        if let Some(name) = &settings.token_cookie {
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !valid {
                return Err(config_error(
                    "auth.token_cookie",
                    "a cookie name of letters, digits, '-', '_' and '.'",
                ));
            }
        }
        Ok(Authenticator {
            verifier,
            token_cookie: settings.token_cookie.clone(),
            allowed_origins: allowed_origins.to_vec(),
            url_secret,
            admin_token,
        })
    }

    /// Whether `/metrics` and the dashboard's data need the admin token.
    pub fn admin_token_required(&self) -> bool {
        self.admin_token.is_some()
    }

    /// Lets a request for the gateway's own figures through: anyone without an
    /// admin token configured, else a caller sending it as a bearer token.
    pub fn check_admin(&self, headers: &http::HeaderMap) -> Result<(), ApiError> {
        let Some(expected) = &self.admin_token else {
            return Ok(());
        };
        let sent = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| digest(t.trim().as_bytes()));
        let matches = sent.is_some_and(|sent| {
            sent.iter()
                .zip(expected.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
        });
        match matches {
            true => Ok(()),
            false => Err(ApiError::Unauthenticated(
                "send the admin token: Authorization: Bearer <token>",
            )),
        }
    }

    fn jwt_verifier(settings: &AuthSettings) -> Result<Option<TokenKeys>, AuthConfigError> {
        let configured = settings
            .algorithms
            .iter()
            .map(|name| {
                name.parse::<Algorithm>().map_err(|_| {
                    config_error(
                        "auth.algorithms",
                        format!("{name:?} is not a JWT algorithm"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut base = Validation::new(Algorithm::HS256);
        base.algorithms.clear();
        base.leeway = settings.leeway.as_secs();
        base.validate_nbf = true;
        // A configured issuer or audience is a claim every token must carry:
        // jsonwebtoken checks a claim's value only when it is present.
        let mut required = vec!["exp", "sub"];
        required.extend(settings.issuer.as_ref().map(|_| "iss"));
        required.extend(settings.audience.as_ref().map(|_| "aud"));
        base.set_required_spec_claims(&required);
        match &settings.issuer {
            Some(issuer) => base.set_issuer(&[issuer]),
            None => base.iss = None,
        }
        match &settings.audience {
            Some(audience) => base.set_audience(&[audience]),
            None => base.validate_aud = false,
        }
        let given = [
            settings.jwt_secret_file.as_deref(),
            settings.jwt_public_key_file.as_deref(),
            settings.jwks_file.as_deref(),
        ];
        let (key, family) = match given {
            [None, None, None] => return Ok(None),
            [Some(path), None, None] => (
                DecodingKey::from_secret(&read_secret("auth.jwt_secret_file", path)?),
                KeyFamily::Secret,
            ),
            [None, Some(path), None] => public_key(path)?,
            [None, None, Some(path)] => {
                return Ok(Some(TokenKeys::Jwks(jwks::KeyRing::load(
                    path, configured, base,
                )?)))
            }
            _ => {
                return Err(config_error(
                    "auth",
                    "give one of jwt_secret_file, jwt_public_key_file and jwks_file",
                ))
            }
        };
        if let Some(odd) = configured.iter().find(|a| !family.accepts(**a)) {
            return Err(config_error(
                "auth.algorithms",
                format!(
                    "{odd:?} does not go with the configured {} key",
                    family.name()
                ),
            ));
        }
        let mut validation = base;
        validation.algorithms = match configured.is_empty() {
            true => vec![family.default_algorithm()],
            false => configured,
        };
        Ok(Some(TokenKeys::Fixed(key, validation)))
    }

    /// Reads a JWKS file again whenever it changes, while the gateway serves.
    pub fn spawn_key_reloader(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let Some(TokenKeys::Jwks(_)) = &self.verifier else {
            return None;
        };
        let auth = self.clone();
        Some(tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(2));
            loop {
                every.tick().await;
                if let Some(TokenKeys::Jwks(ring)) = &auth.verifier {
                    ring.refresh().await;
                }
            }
        }))
    }

    pub fn enabled(&self) -> bool {
        self.verifier.is_some() || self.url_secret.is_some()
    }

    /// The grant of a request: from its signed URL, its bearer token (the
    /// `Authorization` header, or the token cookie on a request from the
    /// gateway's own pages or one of `allowed_origins`), or (with `[auth]` off)
    /// anonymous.
    pub fn grant(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
    ) -> Result<Grant, ApiError> {
        if !self.enabled() {
            return Ok(Grant::anonymous(crate::keys::tenant(headers)));
        }
        if signed_url::is_signed(uri.query()) {
            return self.signed_url_grant(method, uri);
        }
        let Some(keys) = &self.verifier else {
            return Err(ApiError::Unauthenticated(
                "this gateway takes signed URLs only",
            ));
        };
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let token = match (bearer, self.cookie_token(headers)) {
            (Some(token), _) => token,
            (None, Some(token)) => {
                if !self.origin_allowed(headers) {
                    return Err(ApiError::Forbidden(
                        "a token cookie is not taken from another site's page".into(),
                    ));
                }
                token
            }
            (None, None) => {
                return Err(ApiError::Unauthenticated(
                    "send Authorization: Bearer <token>",
                ))
            }
        };
        let decoded = match keys {
            TokenKeys::Fixed(key, validation) => {
                jsonwebtoken::decode::<Claims>(token, key, validation).map(|data| data.claims)
            }
            TokenKeys::Jwks(ring) => {
                let header = jsonwebtoken::decode_header(token)
                    .map_err(|_| ApiError::Unauthenticated("the token is not a valid JWT"))?;
                ring.decode::<Claims>(token, header.kid.as_deref()).ok_or(
                    ApiError::Unauthenticated("the token's key id (kid) is not known"),
                )?
            }
        };
        let claims = decoded.map_err(|error| {
            use jsonwebtoken::errors::ErrorKind;
            ApiError::Unauthenticated(match error.kind() {
                ErrorKind::ExpiredSignature => "the token has expired",
                ErrorKind::ImmatureSignature => "the token is not valid yet",
                ErrorKind::InvalidAlgorithm => "the token's algorithm is not accepted",
                ErrorKind::InvalidIssuer => "the token's issuer is not accepted",
                ErrorKind::InvalidAudience => "the token's audience is not accepted",
                ErrorKind::MissingRequiredClaim(_) => "the token lacks exp or sub",
                ErrorKind::InvalidSignature => "the token's signature does not verify",
                ErrorKind::Json(_) => "the token's claims are not ones sluice reads",
                _ => "the token is not a valid JWT",
            })
        })?;
        Grant::from_claims(claims)
    }

    /// The token in the configured cookie, if any.
    fn cookie_token<'a>(&self, headers: &'a http::HeaderMap) -> Option<&'a str> {
        let name = self.token_cookie.as_deref()?;
        headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, token)| token.trim_matches('"'))
            .filter(|token| !token.is_empty())
    }

    /// What a signed URL allows: its method on its one key.
    fn signed_url_grant(&self, method: &http::Method, uri: &http::Uri) -> Result<Grant, ApiError> {
        let Some(secret) = &self.url_secret else {
            return Err(ApiError::Unauthenticated(
                "this gateway does not take signed URLs",
            ));
        };
        let signed = signed_url::verify(
            secret,
            method.as_str(),
            uri.path(),
            uri.query().unwrap_or(""),
        )
        .map_err(|e| ApiError::Unauthenticated(e.reason()))?;
        let op = match method.as_str() {
            "PUT" => Op::Put,
            "GET" | "HEAD" => Op::Get,
            "DELETE" => Op::Delete,
            _ => {
                return Err(ApiError::Unauthenticated(
                    "signed URLs are for PUT, GET, HEAD and DELETE",
                ))
            }
        };
        let key = uri
            .path()
            .strip_prefix("/v1/objects/")
            .and_then(|key| percent_encoding::percent_decode_str(key).decode_utf8().ok())
            .ok_or(ApiError::Unauthenticated(
                "signed URLs are for /v1/objects/KEY",
            ))?
            .into_owned();
        let mut grant = Grant::from_claims(Claims {
            sub: signed.tenant.unwrap_or_else(|| "default".into()),
            prefix: Some(String::new()),
            ops: Some(vec![op]),
            max_size: signed.max_size,
            key: Some(key),
            exp: Some(signed.expires),
        })?;
        grant.authenticated = true;
        Ok(grant)
    }
}

/// Which kind of key verifies the tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyFamily {
    Secret,
    Rsa,
    Ec,
    Ed,
}

impl KeyFamily {
    fn name(self) -> &'static str {
        match self {
            KeyFamily::Secret => "secret",
            KeyFamily::Rsa => "RSA",
            KeyFamily::Ec => "EC",
            KeyFamily::Ed => "Ed25519",
        }
    }

    fn default_algorithm(self) -> Algorithm {
        match self {
            KeyFamily::Secret => Algorithm::HS256,
            KeyFamily::Rsa => Algorithm::RS256,
            KeyFamily::Ec => Algorithm::ES256,
            KeyFamily::Ed => Algorithm::EdDSA,
        }
    }

    fn accepts(self, algorithm: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            KeyFamily::Secret => matches!(algorithm, HS256 | HS384 | HS512),
            KeyFamily::Rsa => matches!(algorithm, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            KeyFamily::Ec => matches!(algorithm, ES256 | ES384),
            KeyFamily::Ed => matches!(algorithm, EdDSA),
        }
    }
}

impl Authenticator {
    /// Whether a browser request comes from the gateway's own origin, from one
    /// of the allowed origins, or from no browser page at all (no `Origin`):
    /// what a request riding on cookies, or a form, must show (cross-site
    /// request forgery).
    pub fn origin_allowed(&self, headers: &http::HeaderMap) -> bool {
        origin_allowed(headers, &self.allowed_origins)
    }
}

/// [`Authenticator::origin_allowed`] for `allowed` (`*`: any).
pub fn origin_allowed(headers: &http::HeaderMap, allowed: &[String]) -> bool {
    let Some(origin) = headers.get(http::header::ORIGIN) else {
        return true;
    };
    let origin = origin.to_str().unwrap_or("");
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let same_origin = origin
        .split_once("://")
        .is_some_and(|(_, authority)| !host.is_empty() && authority.eq_ignore_ascii_case(host));
    same_origin
        || allowed
            .iter()
            .any(|a| a == "*" || a.eq_ignore_ascii_case(origin))
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// A shared secret from a file: its bytes, a trailing newline dropped, at least 32.
pub fn read_secret(key: &'static str, path: &Path) -> Result<Vec<u8>, AuthConfigError> {
    let mut secret = read_key_file(key, path)?;
    while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        secret.pop();
    }
    if secret.len() < 32 {
        return Err(config_error(
            key,
            format!("{}: a secret needs at least 32 bytes", path.display()),
        ));
    }
    Ok(secret)
}

fn read_key_file(key: &'static str, path: &Path) -> Result<Vec<u8>, AuthConfigError> {
    std::fs::read(path)
        .map_err(|e| config_error(key, format!("cannot read {}: {e}", path.display())))
}

/// The public key in a PEM file, whichever kind it is.
fn public_key(path: &Path) -> Result<(DecodingKey, KeyFamily), AuthConfigError> {
    let pem = read_key_file("auth.jwt_public_key_file", path)?;
    type Parse = fn(&[u8]) -> jsonwebtoken::errors::Result<DecodingKey>;
    let attempts: [(KeyFamily, Parse); 3] = [
        (KeyFamily::Rsa, DecodingKey::from_rsa_pem),
        (KeyFamily::Ec, DecodingKey::from_ec_pem),
        (KeyFamily::Ed, DecodingKey::from_ed_pem),
    ];
    attempts
        .into_iter()
        .find_map(|(family, parse)| parse(&pem).ok().map(|key| (key, family)))
        .ok_or_else(|| {
            config_error(
                "auth.jwt_public_key_file",
                format!(
                    "{}: not a PEM RSA, EC or Ed25519 public key",
                    path.display()
                ),
            )
        })
}

impl FromRequestParts<AppState> for Grant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Grant, ApiError> {
        let grant = state
            .auth
            .grant(&parts.method, &parts.uri, &parts.headers)?;
        if let Some(tenant) = grant.owner() {
            crate::request_span::record_tenant(&tenant);
        }
        Ok(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(prefix: &str, ops: &[Op], key: Option<&str>) -> Grant {
        Grant {
            tenant: "acme".into(),
            prefix: prefix.into(),
            ops: ops.iter().copied().collect(),
            max_size: Some(100),
            key: key.map(str::to_owned),
            authenticated: true,
            expires_at: None,
        }
    }

    #[test]
    fn checks_read_like_the_docs() {
        let acme = grant("acme/", &[Op::Put, Op::Get], None);
        let one = grant("acme/", &Op::ALL, Some("acme/a"));
        // (grant, op, key, allowed)
        let cases: [(&Grant, Op, &str, bool); 8] = [
            (&acme, Op::Put, "acme/x", true),
            (&acme, Op::Get, "acme/x/y", true),
            (&acme, Op::Put, "acmex", false),
            (&acme, Op::Put, "other/x", false),
            (&acme, Op::Delete, "acme/x", false),
            (&one, Op::Delete, "acme/a", true),
            (&one, Op::Get, "acme/b", false),
            (&Grant::anonymous("t".into()), Op::Delete, "anything", true),
        ];
        for (grant, op, key, allowed) in cases {
            assert_eq!(grant.check(op, key).is_ok(), allowed, "{op:?} {key}");
        }
    }

    #[test]
    fn sizes_listing_and_generated_keys() {
        let acme = grant("acme/", &Op::ALL, None);
        assert!(acme.check_size(100).is_ok());
        assert!(matches!(
            acme.check_size(101),
            Err(ApiError::TooLarge { limit: 100 })
        ));
        assert_eq!(acme.size_limit(Some(50)), Some(50));
        assert_eq!(acme.size_limit(None), Some(100));
        assert_eq!(acme.list_prefix("").unwrap(), "acme/");
        assert_eq!(acme.list_prefix("acme/2026/").unwrap(), "acme/2026/");
        assert!(acme.list_prefix("other/").is_err());
        assert_eq!(acme.generated_key("acme/f".into()), "acme/f");
        assert_eq!(acme.generated_key("2026/f".into()), "acme/2026/f");
        let one = grant("acme/", &Op::ALL, Some("acme/only"));
        assert_eq!(one.generated_key("2026/f".into()), "acme/only");
    }

    #[test]
    fn resumable_uploads_of_others_are_not_found() {
        let acme = grant("acme/", &Op::ALL, None);
        assert!(acme.check_resume(Some("acme"), Some("acme/k")).is_ok());
        assert!(matches!(
            acme.check_resume(Some("globex"), Some("acme/k")),
            Err(ApiError::Tus(sluice_tus::TusError::NotFound))
        ));
        assert!(acme.check_resume(None, Some("acme/k")).is_err());
        assert!(Grant::anonymous("x".into())
            .check_resume(Some("acme"), Some("k"))
            .is_ok());
        let no_resume = grant("acme/", &[Op::Put], None);
        assert!(matches!(
            no_resume.check_resume(Some("acme"), Some("acme/k")),
            Err(ApiError::Forbidden(_))
        ));
        let one = grant("acme/", &Op::ALL, Some("acme/one"));
        assert!(matches!(
            one.check_resume(Some("acme"), Some("acme/two")),
            Err(ApiError::Forbidden(_))
        ));
    }
}
