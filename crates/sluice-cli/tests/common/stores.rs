//! The stores the end-to-end tests of a guarantee run on, one table of
//! them: MinIO (S3), Azurite (Azure Blob) and fake-gcs-server (GCS), each
//! with a prefix of the
//! test's own, a gateway or a CLI run pointed at it, and a handle to look
//! at what it holds.

use std::process::Command;
use std::sync::Arc;

use sluice_store::ObjectStore;
use sluice_testkit::{azurite, fake_gcs, minio};

use super::Gateway;

/// A store service the tests start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Minio,
    Azurite,
    FakeGcs,
}

/// Every backend, for tests that are tables of them.
pub const BACKENDS: [Backend; 3] = [Backend::Minio, Backend::Azurite, Backend::FakeGcs];

/// A prefix of a test's own on one backend.
pub struct TestStore {
    pub backend: Backend,
    endpoint: String,
    pub prefix: String,
    /// The prefix's objects, keys relative to it.
    pub store: Arc<dyn ObjectStore>,
}

impl TestStore {
    /// A fresh prefix on `backend`; `None` when its tests may skip (not
    /// under scripts/test.sh).
    pub async fn open(backend: Backend, test: &str) -> Option<TestStore> {
        let prefix = minio::unique_prefix(test);
        match backend {
            Backend::Minio => {
                let (endpoint, prefix, store) = super::minio_prefix(test).await?;
                Some(TestStore {
                    backend,
                    endpoint,
                    prefix,
                    store: Arc::new(store),
                })
            }
            Backend::Azurite => {
                let endpoint = azurite::endpoint(test)?;
                let mut config = sluice_store::az::AzureConfig::new(
                    azurite::account(&endpoint),
                    azurite::TEST_CONTAINER,
                );
                config.prefix = prefix.clone();
                let store = sluice_store::az::AzureStore::open(config).unwrap();
                store.ensure_container().await.unwrap();
                Some(TestStore {
                    backend,
                    endpoint,
                    prefix,
                    store: Arc::new(store),
                })
            }
            Backend::FakeGcs => {
                let endpoint = fake_gcs::endpoint(test)?;
                let store = fake_gcs::store_at(&endpoint, &prefix).await;
                Some(TestStore {
                    backend,
                    endpoint,
                    prefix,
                    store: Arc::new(store),
                })
            }
        }
    }

    /// The location of the prefix (or `rest` under it) as sluice writes it.
    pub fn location(&self, rest: &str) -> String {
        match self.backend {
            Backend::Minio => format!("s3://{}/{}{rest}", minio::TEST_BUCKET, self.prefix),
            Backend::Azurite => format!("az://{}/{}{rest}", azurite::TEST_CONTAINER, self.prefix),
            Backend::FakeGcs => format!("gs://{}/{}{rest}", fake_gcs::TEST_BUCKET, self.prefix),
        }
    }

    /// The service's address (MinIO's URL, Azurite's account URL).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The service's origin (`http://HOST:PORT`) and the path before the
    /// container (Azurite's `/devstoreaccount1`), for a proxy in between.
    pub fn origin_and_path(&self) -> (String, String) {
        let after_scheme = self.endpoint.split("://").nth(1).unwrap_or("");
        let path = after_scheme.find('/').map_or("", |at| &after_scheme[at..]);
        let origin = &self.endpoint[..self.endpoint.len() - path.len()];
        (origin.to_string(), path.to_string())
    }

    /// The same prefix reached through another origin (a fault proxy).
    pub fn through(&self, origin: &str) -> TestStore {
        let (_, path) = self.origin_and_path();
        TestStore {
            backend: self.backend,
            endpoint: format!("{}{path}", origin.trim_end_matches('/')),
            prefix: self.prefix.clone(),
            store: self.store.clone(),
        }
    }

    /// What a sluice process needs to reach the store besides its location:
    /// flags and variables.
    pub fn reach(&self) -> (Vec<String>, Vec<(String, String)>) {
        let flags = vec!["--endpoint".to_string(), self.endpoint.clone()];
        let env = match self.backend {
            Backend::Minio => Vec::new(),
            // An emulator is reached unsigned, as Google's libraries reach it.
            Backend::FakeGcs => vec![("STORAGE_EMULATOR_HOST".to_string(), self.endpoint.clone())],
            Backend::Azurite => vec![(
                "AZURE_STORAGE_CONNECTION_STRING".to_string(),
                format!(
                    "AccountName={};AccountKey={};BlobEndpoint={}",
                    sluice_store::az::EMULATOR_ACCOUNT,
                    sluice_store::az::EMULATOR_KEY,
                    self.endpoint
                ),
            )],
        };
        (flags, env)
    }

    /// `sluice serve` on the prefix, listening on `listen`, with `extra` flags.
    pub fn serve(&self, listen: &str, extra: &[&str]) -> Gateway {
        self.serve_with_env(listen, extra, &[])
    }

    /// [`TestStore::serve`] with more variables (a fault, ...).
    pub fn serve_with_env(&self, listen: &str, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
        let store = self.location("");
        let (flags, reach_env) = self.reach();
        let mut args = vec!["--listen", listen, "--store", &store];
        args.extend(flags.iter().map(String::as_str));
        args.extend_from_slice(extra);
        let mut all_env: Vec<(&str, &str)> = reach_env
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        all_env.extend_from_slice(env);
        super::serve_with_env(&args, &all_env)
    }

    /// A `sluice` command with the store's reach (flags go after the
    /// subcommand's own arguments).
    pub fn sluice(&self, args: &[&str]) -> Command {
        let (flags, env) = self.reach();
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command.args(args).args(&flags).envs(env);
        command
    }
}
