//! `sluice serve`: resolves the gateway's configuration (flags > `SLUICE_…`
//! variables > TOML file > defaults), opens the store, and runs the gateway until
//! SIGTERM or Ctrl-C.

use std::sync::Arc;

use anyhow::Context;
use sluice_server::{AppState, ServerConfig};
use sluice_store::StoreLocation;

use crate::args::ServeArgs;
use crate::UsageError;

/// The configuration: defaults, the file (if any), then the variables and
/// flags `matches` got (`sluice_server::settings::resolve`), validated, with
/// the key files read.
pub fn resolve(args: &ServeArgs, matches: &clap::ArgMatches) -> anyhow::Result<ServerConfig> {
    let file = match &args.config {
        Some(path) => Some((
            path.display().to_string(),
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the config file {}", path.display()))?,
        )),
        None => None,
    };
    let file = file
        .as_ref()
        .map(|(path, text)| (path.as_str(), text.as_str()));
    let config =
        sluice_server::settings::resolve(file, matches).map_err(|e| UsageError(e.to_string()))?;
    // The key files are read now too, so a bad one stops the start before the
    // store is opened (or, for a directory, created).
    sluice_server::auth::Authenticator::new(&config.auth, &config.cors_origins)
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

pub async fn run(args: ServeArgs, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let config = resolve(&args, matches)?;
    let location = StoreLocation::parse(&config.store).map_err(|e| UsageError(e.to_string()))?;
    let stall_timeout =
        (!config.limits.store_stall_timeout.is_zero()).then_some(config.limits.store_stall_timeout);
    // Direct uploads sign for the bucket itself (validate() made sure it is one).
    let mut direct_signer: Option<Arc<dyn sluice_store::DirectSigner>> = None;
    // (the store, where it is as the start-up check names it)
    let (store, place): (Arc<dyn sluice_store::ObjectStore>, String) = match location {
        StoreLocation::Bucket {
            service: sluice_store::Service::S3,
            bucket,
            rest,
        } => {
            let bucket_store = crate::target::connect_s3(
                bucket,
                rest,
                &crate::args::StoreArgs {
                    endpoint: config.endpoint.clone(),
                    region: config.region.clone(),
                    ..Default::default()
                },
                stall_timeout,
            )
            .await;
            if config.direct.enabled {
                direct_signer = Some(Arc::new(
                    bucket_store.direct_signer(config.direct.public_endpoint.as_deref()),
                ));
            }
            let place = format!(
                "{} at {}",
                sluice_store::ObjectStore::describe(&bucket_store),
                bucket_store.endpoint()
            );
            (crate::target::with_faults(Arc::new(bucket_store)), place)
        }
        StoreLocation::Bucket {
            service: service @ (sluice_store::Service::Azure | sluice_store::Service::Gcs),
            bucket,
            rest,
        } => {
            let reach = crate::args::StoreArgs {
                endpoint: config.endpoint.clone(),
                ..Default::default()
            };
            let (opened, endpoint): (Arc<dyn sluice_store::ObjectStore>, String) = match service {
                sluice_store::Service::Azure => {
                    let container = crate::azure::connect(bucket, rest, &reach, stall_timeout)?;
                    let endpoint = container.endpoint().to_string();
                    (Arc::new(container), endpoint)
                }
                _ => {
                    let bucket = crate::gcs::connect(bucket, rest, &reach, stall_timeout)?;
                    let endpoint = bucket.endpoint().to_string();
                    (Arc::new(bucket), endpoint)
                }
            };
            let place = format!("{} at {endpoint}", opened.describe());
            (crate::target::with_faults(opened), place)
        }
        local => {
            let store = crate::target::open_store(local, &Default::default(), None).await?;
            let place = store.describe();
            (store, place)
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
    state
        .open_tables()
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    if let Some(signer) = direct_signer {
        state = state.with_direct_signer(signer);
    }
    check_store(&state, &place).await;
    let access = match state.auth.enabled() {
        true => "bearer JWT required",
        false => "open: no authentication",
    };
    let scheme = match state.tls {
        Some(_) => "https",
        None => "http",
    };
    say(&format!(
        "sluice serve: listening on {scheme}://{address} (store: {description}; {access})\n  \
         upload:   curl -T FILE {scheme}://{address}/v1/objects/KEY\n  \
         download: curl {scheme}://{address}/v1/objects/KEY"
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

/// Asks the store once, before the first request, and says in one line what is
/// wrong (naming the store and its endpoint). The gateway serves either way:
/// `/readyz` reports the reason until the store is there, and the breaker's
/// probes notice when it is.
async fn check_store(state: &AppState, place: &str) {
    let Some(breaker) = state.engine.breaker() else {
        return;
    };
    match breaker.check_now().await {
        None => tracing::info!(store = place, "the store answers"),
        Some(down) => tracing::error!(
            store = place,
            reason = down.reason.code(),
            error = %down.detail,
            "the store is not usable: /readyz answers 503 until it is"
        ),
    }
}

/// Prints a line to standard output; a closed stdout must not stop the server.
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Resolves on SIGTERM (drain: a process manager or load balancer is moving
/// traffic away) or Ctrl-C (stop now, in-flight uploads still get their grace).
pub async fn shutdown_signal() -> sluice_server::Stop {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => sluice_server::Stop::Now,
        () = terminate => sluice_server::Stop::Drain,
    }
}

#[cfg(test)]
mod tests {

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
        let matches = sluice_server::settings::parse_flags::<_, &str>([]).unwrap();
        let config =
            sluice_server::settings::resolve(Some(("README.md", example)), &matches).unwrap();
        assert!(config.auth.enabled());
    }
}
