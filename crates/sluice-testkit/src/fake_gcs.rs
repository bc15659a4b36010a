//! The Google Cloud Storage service integration tests run against:
//! fake-gcs-server, which `scripts/test.sh` starts on a loopback port and
//! announces through `SLUICE_TEST_GCS_ENDPOINT` (its origin,
//! `http://127.0.0.1:PORT`, reached without credentials as every emulator
//! is).
//!
//! Outside the script the GCS tests skip with a message on stderr; with
//! `SLUICE_TEST_GCS_REQUIRED=1` a missing endpoint fails them instead.

use sluice_store::gcs::{GcsConfig, GcsCredential, GcsStore};

/// The bucket the tests use; each test works under a prefix of its own.
pub const TEST_BUCKET: &str = "sluice-test";

/// The test fake-gcs-server's origin, or `None` (after saying so) when there is none.
pub fn endpoint(test: &str) -> Option<String> {
    crate::announced(
        test,
        "SLUICE_TEST_GCS_ENDPOINT",
        "SLUICE_TEST_GCS_REQUIRED",
        "GCS endpoint",
    )
}

/// A `GcsStore` on the test bucket under `prefix` (which must be fresh).
pub async fn store_at(endpoint: &str, prefix: &str) -> GcsStore {
    let mut config = GcsConfig::new(TEST_BUCKET, GcsCredential::Anonymous);
    config.endpoint = endpoint.to_string();
    config.prefix = prefix.to_string();
    let store = GcsStore::open(config).expect("open the fake-gcs-server store");
    store.ensure_bucket().await.expect("create the test bucket");
    store
}

/// A `GcsStore` on the test bucket, confined to a fresh prefix; `None` when
/// no fake-gcs-server is available and the tests are allowed to skip.
pub async fn store(test: &str) -> Option<GcsStore> {
    let endpoint = endpoint(test)?;
    Some(store_at(&endpoint, &crate::minio::unique_prefix(test)).await)
}
