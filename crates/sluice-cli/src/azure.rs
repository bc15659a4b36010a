//! How `az://` locations find their account: the `AZURE_STORAGE_*`
//! variables that the Azure CLI and SDKs read, and `--endpoint` for a blob
//! endpoint of one's own (Azurite, a sovereign cloud, a proxy).
//!
//! - `AZURE_STORAGE_CONNECTION_STRING`: a connection string (account key or
//!   SAS; `UseDevelopmentStorage=true` is Azurite on 127.0.0.1:10000);
//! - else `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_KEY` (Shared Key) or
//!   `AZURE_STORAGE_SAS_TOKEN`; with neither, requests go unsigned (a public
//!   container), as they do with `--no-sign-request`.

use std::time::Duration;

use anyhow::Context as _;
use sluice_store::az::{AzureAccount, AzureConfig, AzureCredential, AzureStore};

use crate::args::StoreArgs;
use crate::UsageError;

/// The variables read for `az://` locations, with what each is (rendered
/// into docs/ENVIRONMENT.md).
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "AZURE_STORAGE_CONNECTION_STRING",
        "The account, its key or SAS and its blob endpoint in one string; \
         `UseDevelopmentStorage=true` is Azurite on 127.0.0.1:10000. Wins over the three below",
    ),
    ("AZURE_STORAGE_ACCOUNT", "The storage account's name"),
    (
        "AZURE_STORAGE_KEY",
        "The account's key (base64): requests are signed with Shared Key",
    ),
    (
        "AZURE_STORAGE_SAS_TOKEN",
        "A shared access signature (the query string, `?` optional) when there is no key; \
         with neither, requests go unsigned (a public container)",
    ),
];

/// The account the environment names, with `reach`'s endpoint and signing.
pub fn account(reach: &StoreArgs) -> anyhow::Result<AzureAccount> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let mut account = match var("AZURE_STORAGE_CONNECTION_STRING") {
        Some(text) => AzureAccount::from_connection_string(&text)
            .context("AZURE_STORAGE_CONNECTION_STRING")?,
        None => {
            let name = var("AZURE_STORAGE_ACCOUNT").ok_or_else(|| {
                UsageError(
                    "az:// needs an account: set AZURE_STORAGE_CONNECTION_STRING, or \
                     AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN"
                        .into(),
                )
            })?;
            let credential = match (var("AZURE_STORAGE_KEY"), var("AZURE_STORAGE_SAS_TOKEN")) {
                (Some(key), _) => AzureAccount::key(&key).context("AZURE_STORAGE_KEY")?,
                (None, Some(sas)) => AzureCredential::Sas(sas.trim_start_matches('?').to_string()),
                (None, None) => AzureCredential::Anonymous,
            };
            AzureAccount::new(&name, None, credential).context("AZURE_STORAGE_ACCOUNT")?
        }
    };
    if let Some(endpoint) = &reach.endpoint {
        account = AzureAccount::new(&account.name, Some(endpoint), account.credential)
            .context("--endpoint")?;
    }
    if reach.no_sign_request {
        account.credential = AzureCredential::Anonymous;
    }
    Ok(account)
}

/// A container (with `prefix` before every key).
pub fn connect(
    container: String,
    prefix: String,
    reach: &StoreArgs,
    stall_timeout: Option<Duration>,
) -> anyhow::Result<AzureStore> {
    let mut config = AzureConfig::new(account(reach)?, container);
    config.prefix = prefix;
    config.stall_timeout = stall_timeout;
    Ok(AzureStore::open(config)?)
}
