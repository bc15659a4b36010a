//! sluice-server is the upload gateway: thin axum adapters over the transfer
//! engine (`PUT`/`POST` uploads streamed into the store, `GET` with ranges,
//! `HEAD`, `DELETE`, listing, health and metrics) and over resumable uploads
//! (`/v1/tus/`, protocol from `sluice-tus`, state from `sluice-resumable`);
//! admission control that answers overload with 503 + Retry-After; the one
//! completion point every upload ends in ([`completion`]); and a listener with
//! header and body timeouts and graceful shutdown. It talks to storage only as
//! `dyn ObjectStore`, through one handle: the engine's retrying store over the
//! metered backend.

pub mod admission;
pub mod auth;
pub mod background;
pub mod begin;
pub mod body;
pub mod client_metadata;
pub mod completion;
pub mod config;
mod connection_cut;
mod conversions;
pub mod direct;
pub mod error;
pub mod events;
pub mod hooks;
pub mod imports;
pub mod janitor;
pub use sluice_input::keys;
pub mod metrics;
pub mod offenders;
pub mod readiness;
pub mod request_span;
pub mod resumable_endpoint;
pub mod routes;
mod server;
pub mod settings;
pub mod small_patches;
pub mod store;
pub mod streams;
pub mod tls;
pub mod ui;
pub mod unread;
mod upload;
pub mod values;

use std::sync::Arc;

use sluice_resumable::Resumable;
use sluice_store::ObjectStore;
use sluice_upload::Engine;

pub use config::{ConfigError, ServerConfig};
pub use server::{bind, serve, serve_admin, Stop};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// The one store handle: the engine's retries, pacing and cap over the
    /// metered backend. Handlers, resumable state and the engine all use it.
    pub store: Arc<dyn ObjectStore>,
    pub resumable: Resumable,
    pub admission: admission::Admission,
    pub metrics: metrics::Metrics,
    /// The settings, for building the routers and the listener; handlers
    /// use the services above, built with theirs.
    pub(crate) config: Arc<ServerConfig>,
    /// Verifies callers' tokens (lets everyone in without `[auth]`).
    pub auth: Arc<auth::Authenticator>,
    /// Where every upload ends: metrics, log, events (and their delivery).
    pub completion: completion::CompletionPoint,
    /// Where every upload begins: key, authorization, pre-create hook, origin.
    pub begin: begin::Begin,
    /// How bodies flow: upload size limits, pace, form limits, download deadline.
    pub bodies: body::Bodies,
    /// Signing of direct-to-bucket uploads (`/s3/`), when on.
    pub direct: Option<direct::Direct>,
    /// Imports from a URL (`/v1/imports`), when on.
    pub imports: Option<imports::Imports>,
    /// Record streams (`/v1/streams/`).
    pub streams: streams::Streams,
    /// Waits before answering small tus PATCHes.
    pub small_patches: Arc<small_patches::SmallPatchPace>,
    /// Offenses and penalties by client address (the listener's).
    pub offenders: Arc<offenders::Offenders>,
    /// Whether to be sent uploads now (`/readyz`).
    pub readiness: readiness::Readiness,
    /// HTTPS on the listener, when `[tls]` names a certificate.
    pub tls: Option<tls::Tls>,
}

impl AppState {
    /// Builds the state for `config` on top of `backend`. The config must be valid.
    /// Opens the streams that have a table (reading each table takes the
    /// store); before serving.
    pub async fn open_tables(&mut self) -> Result<(), ConfigError> {
        self.streams.open_tables(&self.engine).await?;
        self.metrics.watch_streams(self.streams.stats());
        Ok(())
    }

    pub fn new(
        config: ServerConfig,
        backend: Arc<dyn ObjectStore>,
    ) -> Result<AppState, ConfigError> {
        config.validate()?;
        let metrics = metrics::Metrics::new();
        let metered: Arc<dyn ObjectStore> =
            Arc::new(store::MeteredStore::new(backend, metrics.clone()));
        let engine = Engine::new(metered, config.engine_config())
            .map_err(|e| ConfigError::new("engine", e.to_string()))?;
        let template = keys::KeyTemplate::parse(&config.key_template)
            .map_err(|reason| ConfigError::new("key_template", reason))?
            .with_shard_prefix(config.shard_prefix);
        let limits = &config.limits;
        let admission = admission::Admission::new(limits.admission(), metrics.clone())
            .with_breaker(engine.breaker().cloned());
        let resumable = Resumable::new(engine.clone(), config.resumable_config());
        let auth = auth::Authenticator::new(&config.auth, &config.cors_origins)
            .map_err(|e| ConfigError::new(e.key, e.reason))?;
        let store: Arc<dyn ObjectStore> = Arc::new(engine.retrying_store());
        let hooks =
            hooks::Hooks::new(&config.hooks).map_err(|e| ConfigError::new(e.key, e.reason))?;
        // Every object the engine makes for an upload is announced here.
        let completion =
            completion::CompletionPoint::announcing_for(&engine, &config.events, metrics.clone())
                .map_err(|e| ConfigError::new(e.key, e.reason))?;
        let streams = streams::Streams::new(&config.streams, &engine)?;
        metrics.watch_streams(streams.stats());
        let small_patches = small_patches::SmallPatchPace::new(
            config.tus.small_patches_per_second,
            config.tus.small_patch_bytes,
        );
        let imports = imports::Imports::from_settings(&config.imports)
            .map_err(|reason| ConfigError::new("imports.allow", reason))?;
        let tls = tls::Tls::from_settings(&config.tls)
            .map_err(|e| ConfigError::new("tls.cert_file", e.to_string()))?;
        Ok(AppState {
            tls,
            readiness: readiness::Readiness::new(engine.breaker().cloned()),
            small_patches: Arc::new(small_patches),
            offenders: Arc::new(offenders::Offenders::new(config.penalty.clone())),
            streams,
            begin: begin::Begin::new(template, hooks),
            bodies: body::Bodies::new(&config, metrics.clone()),
            direct: None,
            imports,
            auth: Arc::new(auth),
            completion,
            store,
            resumable,
            engine,
            admission,
            metrics,
            config: Arc::new(config),
        })
    }

    /// Turns on direct-to-bucket uploads, signed by `signer` (the store's:
    /// [`sluice_store::s3::S3Store::direct_signer`]).
    pub fn with_direct_signer(mut self, signer: Arc<dyn sluice_store::DirectSigner>) -> AppState {
        self.direct = Some(direct::Direct {
            signer,
            settings: self.config.direct.clone(),
            confirm_cursor: Default::default(),
            session_key: Default::default(),
        });
        self
    }

    /// The router, for tests (`oneshot`) and the listener.
    pub fn router(&self) -> axum::Router {
        routes::router(self.clone())
    }
}
