//! The Azure Blob service integration tests run against: Azurite, which
//! `scripts/test.sh` starts on a loopback port and announces through
//! `SLUICE_TEST_AZURE_BLOB_ENDPOINT` (its path-style account URL,
//! `http://127.0.0.1:PORT/devstoreaccount1`, with the well-known key).
//!
//! Outside the script the Azure tests skip with a message on stderr; with
//! `SLUICE_TEST_AZURE_REQUIRED=1` a missing endpoint fails them instead.

use sluice_store::az::{AzureAccount, AzureConfig, AzureStore, EMULATOR_ACCOUNT, EMULATOR_KEY};

/// The container the tests use; each test works under a prefix of its own.
pub const TEST_CONTAINER: &str = "sluice-test";

/// The test Azurite's account URL, or `None` (after saying so) when there is none.
pub fn endpoint(test: &str) -> Option<String> {
    crate::announced(
        test,
        "SLUICE_TEST_AZURE_BLOB_ENDPOINT",
        "SLUICE_TEST_AZURE_REQUIRED",
        "Azure endpoint",
    )
}

/// The Azurite account with its well-known key.
pub fn account(endpoint: &str) -> AzureAccount {
    AzureAccount::new(
        EMULATOR_ACCOUNT,
        Some(endpoint),
        AzureAccount::key(EMULATOR_KEY).expect("the emulator key is base64"),
    )
    .expect("the emulator account is valid")
}

/// An `AzureStore` on the test container, confined to a fresh prefix; `None`
/// when no Azurite is available and the tests are allowed to skip.
pub async fn store(test: &str) -> Option<AzureStore> {
    let endpoint = endpoint(test)?;
    let mut config = AzureConfig::new(account(&endpoint), TEST_CONTAINER);
    config.prefix = crate::minio::unique_prefix(test);
    let store = AzureStore::open(config).expect("open the Azurite store");
    store
        .ensure_container()
        .await
        .expect("create the test container");
    Some(store)
}
