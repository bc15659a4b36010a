//! `sluice serve`: resolves the gateway's configuration (flags > `SLUICE_…`
//! variables > TOML file > defaults), opens the store, and runs the gateway until
//! SIGTERM or Ctrl-C.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use sluice_server::config::ChecksumSetting;
use sluice_server::{AppState, ServerConfig};
use sluice_store::StoreLocation;

use crate::args::{ChecksumChoice, ServeArgs};
use crate::UsageError;

/// The configuration: file (if any) overlaid by the flags and variables given.
pub fn resolve(args: &ServeArgs) -> anyhow::Result<ServerConfig> {
    let mut config = match &args.config {
        Some(path) => read_file(path)?,
        None => ServerConfig::default(),
    };
    macro_rules! overlay {
        ($($arg:ident => $($field:ident).+),* $(,)?) => {
            $( if let Some(value) = args.$arg.clone() { config.$($field).+ = value.into(); } )*
        };
    }
    overlay!(
        listen => listen,
        store => store,
        key_template => key_template,
        shard_prefix => shard_prefix,
        max_concurrent_uploads => limits.max_concurrent_uploads,
        queue_length => limits.queue_length,
        queue_timeout => limits.queue_timeout,
        store_concurrency => limits.store_concurrency,
        body_idle_timeout => limits.body_idle_timeout,
        shutdown_grace => limits.shutdown_grace,
        part_size => engine.part_size,
        concurrency => engine.concurrency,
        memory_limit => engine.memory_limit,
        threshold => engine.threshold,
        tus_expiry => tus.expiry,
        tus_lock_timeout => tus.lock_timeout,
        tus_max_partials => tus.max_partials,
        tus_small_patches_per_second => tus.small_patches_per_second,
        penalty_after_offenses => penalty.after_offenses,
        janitor_interval => janitor.interval,
        janitor_older_than => janitor.older_than,
        store_stall_timeout => limits.store_stall_timeout,
        jwt_secret_file => auth.jwt_secret_file,
        jwt_public_key_file => auth.jwt_public_key_file,
        jwt_issuer => auth.issuer,
        jwt_audience => auth.audience,
        jwt_leeway => auth.leeway,
        url_secret_file => auth.url_secret_file,
        jwks_file => auth.jwks_file,
        admin_token_file => auth.admin_token_file,
        token_cookie => auth.token_cookie,
        event_secret_file => events.secret_file,
        event_retry_for => events.retry_for,
        hook_url => hooks.pre_create_url,
        hook_timeout => hooks.timeout,
        hook_secret_file => hooks.secret_file,
        direct_expires => direct.expires,
        direct_endpoint => direct.public_endpoint,
    );
    if args.direct {
        config.direct.enabled = true;
    }
    if args.no_upload_page {
        config.ui.upload_page = false;
    }
    if !args.jwt_algorithm.is_empty() {
        config.auth.algorithms = args.jwt_algorithm.clone();
    }
    if !args.event_url.is_empty() {
        config.events.urls = args.event_url.clone();
    }
    if args.hook_fail_open {
        config.hooks.fail_open = true;
    }
    if args.admin_listen.is_some() {
        config.admin_listen = args.admin_listen;
    }
    if args.allow_anonymous {
        config.auth.allow_anonymous = true;
    }
    if !args.penalty_exempt.is_empty() {
        config.penalty.exempt = args.penalty_exempt.clone();
    }
    if !args.cors_origin.is_empty() {
        config.cors_origins = args.cors_origin.clone();
    }
    if args.endpoint.is_some() {
        config.endpoint = args.endpoint.clone();
    }
    if args.region.is_some() {
        config.region = args.region.clone();
    }
    if args.max_upload_size.is_some() {
        config.max_upload_size = args.max_upload_size;
    }
    if let Some(choice) = args.checksum {
        config.engine.checksum = match choice {
            ChecksumChoice::Crc32c => ChecksumSetting::Crc32c,
            ChecksumChoice::Crc64nvme => ChecksumSetting::Crc64nvme,
            ChecksumChoice::None => ChecksumSetting::None,
        };
    }
    config.validate().map_err(|e| UsageError(e.to_string()))?;
    // The key files are read now too, so a bad one stops the start before the
    // store is opened (or, for a directory, created).
    sluice_server::auth::Authenticator::new(&config.auth)
        .map_err(|e| UsageError(format!("invalid configuration: {e}")))?;
    sluice_server::hooks::Hooks::new(&config.hooks)
        .map_err(|e| UsageError(format!("invalid configuration: {e}")))?;
    if !config.events.urls.is_empty() {
        config
            .events
            .check()
            .map_err(|e| UsageError(format!("invalid configuration: {e}")))?;
    }
    Ok(config)
}

fn read_file(path: &Path) -> anyhow::Result<ServerConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    toml::from_str(&text)
        .map_err(|e| UsageError(format!("config file {}: {e}", path.display())).into())
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = resolve(&args)?;
    let location = StoreLocation::parse(&config.store).map_err(|e| UsageError(e.to_string()))?;
    let stall_timeout =
        (!config.limits.store_stall_timeout.is_zero()).then_some(config.limits.store_stall_timeout);
    // Direct uploads sign for the bucket itself (validate() made sure it is one).
    let mut direct_signer: Option<Arc<dyn sluice_store::DirectSigner>> = None;
    let store: Arc<dyn sluice_store::ObjectStore> = match (&location, config.direct.enabled) {
        (StoreLocation::S3 { bucket, rest }, true) => {
            let bucket_store = crate::target::connect_s3(
                bucket.clone(),
                rest.clone(),
                config.endpoint.clone(),
                config.region.clone(),
                stall_timeout,
            )
            .await;
            direct_signer = Some(Arc::new(
                bucket_store.direct_signer(config.direct.public_endpoint.as_deref()),
            ));
            Arc::new(bucket_store)
        }
        _ => {
            crate::target::open_store(
                location,
                config.endpoint.clone(),
                config.region.clone(),
                stall_timeout,
            )
            .await?
        }
    };
    let description = store.describe();
    let listener = sluice_server::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let address = listener
        .local_addr()
        .context("the listener has no address")?;
    let admin = match config.admin_listen {
        Some(address) => Some(
            sluice_server::bind(address)
                .await
                .with_context(|| format!("cannot listen on {address} (admin)"))?,
        ),
        None => None,
    };
    let mut state = AppState::new(config, store).map_err(|e| UsageError(e.to_string()))?;
    if let Some(signer) = direct_signer {
        state = state.with_direct_signer(signer);
    }
    let access = match state.auth.enabled() {
        true => "bearer JWT required",
        false => "open: no authentication",
    };
    say(&format!(
        "sluice serve: listening on http://{address} (store: {description}; {access})\n  \
         upload:   curl -T FILE http://{address}/v1/objects/KEY\n  \
         download: curl http://{address}/v1/objects/KEY"
    ));
    let admin = match admin {
        Some(listener) => {
            let address = listener
                .local_addr()
                .context("the admin listener has no address")?;
            say(&format!(
                "sluice serve: metrics and health on http://{address}/metrics"
            ));
            Some(tokio::spawn(sluice_server::serve_admin(
                state.clone(),
                listener,
                std::future::pending(),
            )))
        }
        None => None,
    };
    sluice_server::serve(state, listener, shutdown_signal()).await;
    if let Some(admin) = admin {
        admin.abort();
    }
    say("sluice serve: stopped");
    Ok(())
}

/// Prints a line to standard output; a closed stdout must not stop the server.
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's example config file is one the gateway accepts.
    #[test]
    fn the_readme_config_example_is_valid() {
        let readme = include_str!("../../../README.md");
        let example = readme
            .split("A config file holds the same settings")
            .nth(1)
            .and_then(|rest| rest.split("```toml\n").nth(1))
            .and_then(|block| block.split("```").next())
            .expect("the README has its config example");
        let config: ServerConfig = toml::from_str(example).unwrap();
        config.validate().unwrap();
        assert!(config.auth.enabled());
    }
}
