//! Token keys from a JWKS file (`auth.jwks_file`): each key verifies the tokens
//! whose `kid` names it, with the configured algorithms of its kind only. The
//! file is read again when it changes (checked every two seconds while the
//! gateway serves), so keys rotate without a restart; a file that no longer
//! parses leaves the keys in use as they were.

use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::SystemTime;

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::{config_error, AuthConfigError, KeyFamily};

/// One key of the set, ready to verify.
struct RingKey {
    kid: Option<String>,
    key: DecodingKey,
    validation: Validation,
}

/// The keys of the JWKS file and when it was last changed.
struct Ring {
    modified: Option<SystemTime>,
    keys: Vec<RingKey>,
}

pub(super) struct KeyRing {
    path: PathBuf,
    /// `auth.algorithms`; empty: each key's kind's default.
    configured: Vec<Algorithm>,
    /// iss, aud, leeway and required claims; algorithms set per key.
    base: Validation,
    ring: RwLock<Ring>,
}

impl KeyRing {
    /// Reads the file at start-up; a file with no usable key is an error.
    pub(super) fn load(
        path: &Path,
        configured: Vec<Algorithm>,
        base: Validation,
    ) -> Result<KeyRing, AuthConfigError> {
        let text = std::fs::read(path).map_err(|e| {
            config_error(
                "auth.jwks_file",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let keys = parse(&text, &configured, &base).map_err(|reason| {
            config_error("auth.jwks_file", format!("{}: {reason}", path.display()))
        })?;
        Ok(KeyRing {
            path: path.to_owned(),
            configured,
            base,
            ring: RwLock::new(Ring { modified, keys }),
        })
    }

    /// Verifies with the key `kid` names (or the only key, for a token naming
    /// none); `None` when no key of the set is named.
    pub(super) fn decode<T: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        kid: Option<&str>,
    ) -> Option<jsonwebtoken::errors::Result<T>> {
        let ring = self.ring.read().unwrap_or_else(|e| e.into_inner());
        let key = match kid {
            Some(kid) => ring.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if ring.keys.len() == 1 => ring.keys.first(),
            None => None,
        }?;
        Some(jsonwebtoken::decode::<T>(token, &key.key, &key.validation).map(|data| data.claims))
    }

    /// Reads the file again if it changed since the last read.
    pub(super) async fn refresh(&self) {
        let Ok(modified) = tokio::fs::metadata(&self.path)
            .await
            .and_then(|m| m.modified())
        else {
            return;
        };
        if self.ring.read().unwrap_or_else(|e| e.into_inner()).modified == Some(modified) {
            return;
        }
        let parsed = match tokio::fs::read(&self.path).await {
            Ok(text) => parse(&text, &self.configured, &self.base),
            Err(e) => Err(e.to_string()),
        };
        let mut ring = self.ring.write().unwrap_or_else(|e| e.into_inner());
        ring.modified = Some(modified);
        match parsed {
            Ok(keys) => {
                tracing::info!(path = %self.path.display(), keys = keys.len(), "JWKS reloaded");
                ring.keys = keys;
            }
            Err(reason) => {
                tracing::warn!(path = %self.path.display(), %reason, "JWKS not reloaded; the keys in use stay");
            }
        }
    }
}

/// The usable keys of a JWKS document: each with the configured algorithms of
/// its kind; keys of a kind no configured algorithm fits are left out.
fn parse(text: &[u8], configured: &[Algorithm], base: &Validation) -> Result<Vec<RingKey>, String> {
    let set: JwkSet = serde_json::from_slice(text).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let family = match jwk.algorithm {
            AlgorithmParameters::RSA(_) => KeyFamily::Rsa,
            AlgorithmParameters::EllipticCurve(_) => KeyFamily::Ec,
            AlgorithmParameters::OctetKeyPair(_) => KeyFamily::Ed,
            AlgorithmParameters::OctetKey(_) => KeyFamily::Secret,
        };
        let algorithms: Vec<Algorithm> = match configured.is_empty() {
            true => vec![family.default_algorithm()],
            false => configured
                .iter()
                .copied()
                .filter(|a| family.accepts(*a))
                .collect(),
        };
        if algorithms.is_empty() {
            continue;
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| {
            format!(
                "key {:?}: {e}",
                jwk.common.key_id.as_deref().unwrap_or("(no kid)")
            )
        })?;
        let mut validation = base.clone();
        validation.algorithms = algorithms;
        keys.push(RingKey {
            kid: jwk.common.key_id.clone(),
            key,
            validation,
        });
    }
    if keys.is_empty() {
        return Err("no key of the set goes with auth.algorithms".into());
    }
    Ok(keys)
}
