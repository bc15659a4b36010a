//! The pre-create hook: before an object is created (PUT, each file of a form,
//! a tus creation), the gateway POSTs what is about to happen to
//! `hooks.pre_create_url` and waits at most `hooks.timeout`. A 2xx answer lets
//! the upload go on, optionally with another key, metadata or content type (a
//! JSON body); a 4xx answer refuses it with that status and the hook's message;
//! a hook that cannot be reached, times out or answers 5xx refuses it with 503
//! (or lets it through, with `hooks.fail_open`). A redirect is not followed:
//! it refuses the upload with 403. The request is signed like
//! events when `hooks.secret_file` is set. docs/EVENTS.md is the hook's view.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// `[hooks]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Pre-create hook")]
pub struct HookSettings {
    /// Ask URL before every object is created (PUT, form file, tus creation,
    /// direct upload); it may refuse (4xx) or change the key, metadata and content
    /// type; see docs/EVENTS.md [default: no hook].
    #[arg(id = "hooks.pre_create_url", long = "hook-url", env = "SLUICE_HOOK_URL", value_name = "URL", value_parser = crate::values::http_url)]
    pub pre_create_url: Option<String>,
    /// Longest wait for the hook's answer.
    #[arg(id = "hooks.timeout", long = "hook-timeout", env = "SLUICE_HOOK_TIMEOUT", value_name = "DURATION", default_value = "5s", value_parser = crate::values::duration_in(std::time::Duration::from_millis(1), std::time::Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Let uploads through when the hook cannot answer (instead of 503).
    #[arg(id = "hooks.fail_open", long = "hook-fail-open", env = "SLUICE_HOOK_FAIL_OPEN", value_name = "BOOL", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::values::flag_bool())]
    pub fail_open: bool,
    /// Sign hook requests (Sluice-Signature, as events) with the secret in FILE.
    #[arg(
        id = "hooks.secret_file",
        long = "hook-secret-file",
        env = "SLUICE_HOOK_SECRET_FILE",
        value_name = "FILE"
    )]
    pub secret_file: Option<PathBuf>,
}

impl Default for HookSettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

/// What the hook is asked about.
#[derive(Debug, Clone, Serialize)]
pub struct PreCreate {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `put`, `form`, `tus_creation`, `tus_concatenation`, `resumable_creation`,
    /// `direct_post` or
    /// `direct_multipart` (`UploadKind::as_str`).
    pub upload_kind: &'static str,
    /// The key the object would get.
    pub key: String,
    /// The declared size, when known before the body.
    pub size: Option<u64>,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// The file name a form part or tus metadata gives.
    pub filename: Option<String>,
    pub tenant: Option<String>,
}

/// What the hook decided for an upload it let through.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Decision {
    pub key: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub content_type: Option<String>,
}

/// Why the hook's answer could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct HookConfigError {
    pub key: &'static str,
    pub reason: String,
}

pub struct Hooks {
    pre_create: Option<(String, reqwest::Client)>,
    fail_open: bool,
    secret: Option<Vec<u8>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("pre_create", &self.pre_create.as_ref().map(|(url, _)| url))
            .finish()
    }
}

/// Longest hook message passed on to the client.
const MAX_MESSAGE: usize = 1024;

impl Hooks {
    pub fn new(settings: &HookSettings) -> Result<Hooks, HookConfigError> {
        let fail = |key, reason: String| HookConfigError { key, reason };
        let secret = settings
            .secret_file
            .as_deref()
            .map(|path| crate::auth::read_secret("hooks.secret_file", path))
            .transpose()
            .map_err(|e| fail("hooks.secret_file", e.reason))?;
        let pre_create = match &settings.pre_create_url {
            None => None,
            Some(url) => {
                match url.parse::<http::Uri>() {
                    Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) => {}
                    _ => {
                        return Err(fail(
                            "hooks.pre_create_url",
                            format!("{url:?} is not an http(s) URL"),
                        ))
                    }
                }
                if settings.timeout.is_zero() {
                    return Err(fail("hooks.timeout", "must be above 0".into()));
                }
                // A redirect is not followed: it would send the upload's
                // description, signed, to wherever the answer points.
                let client = reqwest::Client::builder()
                    .timeout(settings.timeout)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| fail("hooks.pre_create_url", e.to_string()))?;
                Some((url.clone(), client))
            }
        };
        Ok(Hooks {
            pre_create,
            fail_open: settings.fail_open,
            secret,
        })
    }

    /// Asks the pre-create hook; no hook: go on unchanged.
    pub async fn pre_create(&self, request: &PreCreate) -> Result<Decision, ApiError> {
        let Some((url, client)) = &self.pre_create else {
            return Ok(Decision::default());
        };
        let body = serde_json::to_vec(request).expect("hook requests serialise");
        let mut post = client
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(secret) = &self.secret {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            post = post.header(
                crate::events::signature::HEADER,
                crate::events::signature::sign(secret, now, &body),
            );
        }
        let unavailable = |why: String| {
            tracing::warn!(url = %url, reason = %why, "pre-create hook unavailable");
            match self.fail_open {
                true => Ok(Decision::default()),
                false => Err(ApiError::HookUnavailable),
            }
        };
        let answer = match post.body(body).send().await {
            Ok(answer) => answer,
            Err(error) => return unavailable(error.to_string()),
        };
        let status = answer.status();
        let text = match answer.bytes().await {
            Ok(bytes) => bytes,
            Err(error) => return unavailable(error.to_string()),
        };
        if status.is_success() {
            if text.iter().all(u8::is_ascii_whitespace) {
                return Ok(Decision::default());
            }
            return serde_json::from_slice(&text).or_else(|e| {
                unavailable(format!(
                    "answered 2xx with a body that is not a decision: {e}"
                ))
            });
        }
        if status.is_redirection() {
            // The hook answered, and not with a yes: a refusal, whatever
            // `fail_open` says (it lets through only a hook that cannot answer).
            tracing::warn!(url = %url, %status, "pre-create hook answered a redirect, which is not followed");
            return Err(ApiError::HookRejected {
                status: http::StatusCode::FORBIDDEN,
                message: format!(
                    "the pre-create hook answered {status}; redirects are not followed"
                ),
            });
        }
        if status.is_client_error() {
            let message = serde_json::from_slice::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&text).into_owned());
            let mut message = message.trim().to_owned();
            if message.len() > MAX_MESSAGE {
                let mut end = MAX_MESSAGE;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
            }
            if message.is_empty() {
                message = "the upload was refused".into();
            }
            return Err(ApiError::HookRejected { status, message });
        }
        unavailable(format!("answered {status}"))
    }
}

impl Decision {
    /// The key the upload goes to: the hook's, checked as a client's key and
    /// against the caller's grant, or `proposed`.
    pub fn key(
        &mut self,
        proposed: String,
        grant: &crate::auth::Grant,
    ) -> Result<String, ApiError> {
        let Some(key) = self.key.take() else {
            return Ok(proposed);
        };
        if let Err(reason) = crate::keys::validate_client_key(&key) {
            tracing::warn!(key, reason, "the pre-create hook named an invalid key");
            return Err(ApiError::HookUnavailable);
        }
        grant.check(crate::auth::Op::Put, &key)?;
        Ok(key)
    }
}
