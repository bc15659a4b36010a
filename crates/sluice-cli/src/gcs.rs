//! How `gs://` locations find their credential and endpoint: the variables
//! Google's client libraries and `gcloud` read, and `--endpoint` for an
//! endpoint of one's own (an emulator, a proxy).
//!
//! - `STORAGE_EMULATOR_HOST`: an emulator, reached without credentials (as
//!   Google's libraries reach it: a real token never goes to an emulator);
//! - else `GOOGLE_APPLICATION_CREDENTIALS`: a service account's key file, or
//!   an `authorized_user` file;
//! - else gcloud's application-default file
//!   (`~/.config/gcloud/application_default_credentials.json`);
//! - `--no-sign-request` sends no credential (a public bucket).
//!
//! Credentials from a VM's metadata server or workload identity federation
//! are not read: sluice says so rather than guessing.

use std::time::Duration;

use anyhow::Context as _;
use sluice_store::gcs::{GcsConfig, GcsCredential, GcsStore, DEFAULT_ENDPOINT};

use crate::args::StoreArgs;
use crate::UsageError;

/// The variables read for `gs://` locations, with what each is (rendered
/// into docs/ENVIRONMENT.md).
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "A service account's JSON key file, or an `authorized_user` file, for gs:// locations; \
         without it, gcloud's application-default file is read",
    ),
    (
        "STORAGE_EMULATOR_HOST",
        "A GCS emulator's address (`127.0.0.1:4443` or a URL): gs:// requests go there, \
         unsigned (a credential is never sent to an emulator)",
    ),
    (
        "GOOGLE_CLOUD_PROJECT",
        "The project `sluice mb gs://…` creates buckets in (else the key file's project)",
    ),
];

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The emulator's URL, if `STORAGE_EMULATOR_HOST` names one.
fn emulator() -> Option<String> {
    var("STORAGE_EMULATOR_HOST").map(|host| match host.contains("://") {
        true => host,
        false => format!("http://{host}"),
    })
}

fn read_file(path: &std::path::Path, what: &str) -> anyhow::Result<GcsCredential> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{what}: cannot read {}", path.display()))?;
    GcsCredential::from_json(&text).with_context(|| format!("{what}: {}", path.display()))
}

/// The credential the environment names, with `reach`'s signing.
pub fn credential(reach: &StoreArgs) -> anyhow::Result<GcsCredential> {
    if reach.no_sign_request {
        return Ok(GcsCredential::Anonymous);
    }
    if emulator().is_some() {
        return Ok(GcsCredential::Anonymous);
    }
    if let Some(path) = var("GOOGLE_APPLICATION_CREDENTIALS") {
        return read_file(path.as_ref(), "GOOGLE_APPLICATION_CREDENTIALS");
    }
    let gcloud = var("CLOUDSDK_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| var("HOME").map(|home| std::path::Path::new(&home).join(".config/gcloud")))
        .map(|dir| dir.join("application_default_credentials.json"));
    match gcloud.filter(|path| path.exists()) {
        Some(path) => read_file(&path, "gcloud's application-default credentials"),
        None => Err(UsageError(
            "gs:// needs a credential: set GOOGLE_APPLICATION_CREDENTIALS to a service account's \
             key file, run `gcloud auth application-default login`, set STORAGE_EMULATOR_HOST for \
             an emulator, or pass --no-sign-request for a public bucket (a VM's metadata server \
             is not read)"
                .into(),
        )
        .into()),
    }
}

/// The JSON API's origin: `--endpoint`, the emulator, or Google's.
pub fn endpoint(reach: &StoreArgs) -> String {
    reach
        .endpoint
        .clone()
        .or_else(emulator)
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
}

/// The project new buckets go into.
pub fn project(credential: &GcsCredential) -> Option<String> {
    var("GOOGLE_CLOUD_PROJECT").or_else(|| credential.project().map(str::to_string))
}

/// A bucket (with `prefix` before every key).
pub fn connect(
    bucket: String,
    prefix: String,
    reach: &StoreArgs,
    stall_timeout: Option<Duration>,
) -> anyhow::Result<GcsStore> {
    let mut config = GcsConfig::new(bucket, credential(reach)?);
    config.endpoint = endpoint(reach);
    config.prefix = prefix;
    config.stall_timeout = stall_timeout;
    Ok(GcsStore::open(config)?)
}
