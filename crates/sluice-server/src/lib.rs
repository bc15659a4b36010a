//! sluice-server is the upload gateway: an axum router over the transfer engine
//! (`PUT`/`POST` uploads streamed into the store, `GET` with ranges, `HEAD`,
//! `DELETE`, listing, health and metrics), resumable tus 1.0 uploads under
//! `/v1/tus/` with their state in the store, admission control that answers
//! overload with 503 + Retry-After, and a listener with header and body
//! timeouts and graceful shutdown. It talks to storage only as `dyn ObjectStore`.

pub mod admission;
pub mod body;
pub mod config;
pub mod error;
pub mod janitor;
pub mod keys;
pub mod metrics;
pub mod routes;
mod server;
pub mod store;
pub mod tus;
mod upload;

use std::sync::Arc;

use sluice_store::ObjectStore;
use sluice_upload::Engine;

pub use config::{ConfigError, ServerConfig};
pub use server::{bind, serve};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// The store as the gateway uses it: capped in concurrency and metered.
    pub store: Arc<dyn ObjectStore>,
    pub admission: admission::Admission,
    pub metrics: metrics::Metrics,
    pub config: Arc<ServerConfig>,
    pub template: Arc<keys::KeyTemplate>,
    pub tus: tus::Tus,
}

impl AppState {
    /// Builds the state for `config` on top of `store`. The config must be valid.
    pub fn new(config: ServerConfig, store: Arc<dyn ObjectStore>) -> Result<AppState, ConfigError> {
        config.validate()?;
        let metrics = metrics::Metrics::new();
        let store: Arc<dyn ObjectStore> = Arc::new(store::MeteredStore::new(
            store,
            config.limits.store_concurrency,
            metrics.clone(),
        ));
        let engine =
            Engine::new(store.clone(), config.engine_config()).map_err(|e| ConfigError {
                key: "engine",
                reason: e.to_string(),
            })?;
        metrics.observe_engine(&engine);
        let template = keys::KeyTemplate::parse(&config.key_template)
            .map_err(|reason| ConfigError {
                key: "key_template",
                reason,
            })?
            .with_shard_prefix(config.shard_prefix);
        let limits = &config.limits;
        let admission = admission::Admission::new(
            limits.max_concurrent_uploads,
            limits.queue_length,
            limits.queue_timeout,
            limits.retry_after_seconds,
            metrics.clone(),
        );
        // Resumable-upload state is read and written straight from the store:
        // through the engine's retries, like the parts.
        let tus = tus::Tus::new(engine.clone(), Arc::new(engine.retrying_store()), &config);
        Ok(AppState {
            tus,
            engine,
            store,
            admission,
            metrics,
            template: Arc::new(template),
            config: Arc::new(config),
        })
    }

    /// The router, for tests (`oneshot`) and the listener.
    pub fn router(&self) -> axum::Router {
        routes::router(self.clone())
    }
}
