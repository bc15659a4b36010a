//! The S3 server integration tests run against: a real MinIO that
//! `scripts/test.sh` starts on a loopback port and announces through
//! `SLUICE_TEST_S3_ENDPOINT` (with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`).
//!
//! Outside the script the S3 tests skip with a message on stderr; when the script
//! sets `SLUICE_TEST_S3_REQUIRED=1` a missing endpoint fails them instead, so they
//! never skip silently in CI.

use sluice_store::s3::{S3Config, S3Store};

/// Bucket the tests use; each test works under a prefix of its own.
pub const TEST_BUCKET: &str = "sluice-test";

/// The endpoint of the test MinIO, or `None` (after saying so) when there is none.
pub fn endpoint(test: &str) -> Option<String> {
    crate::announced(
        test,
        "SLUICE_TEST_S3_ENDPOINT",
        "SLUICE_TEST_S3_REQUIRED",
        "S3 endpoint",
    )
}

/// A unique key prefix for one test run of one test.
pub fn unique_prefix(test: &str) -> String {
    format!("{test}-{}/", uuid::Uuid::new_v4().simple())
}

/// An `S3Store` on the test bucket, confined to a fresh prefix; `None` when no
/// MinIO is available and the tests are allowed to skip.
pub async fn store(test: &str) -> Option<S3Store> {
    let endpoint = endpoint(test)?;
    let mut config = S3Config::new(TEST_BUCKET);
    config.endpoint = Some(endpoint);
    config.region = Some("us-east-1".into());
    config.prefix = unique_prefix(test);
    let store = S3Store::connect(config).await;
    store.ensure_bucket().await.expect("create the test bucket");
    Some(store)
}
