//! `sluice chaos-proxy`: runs the fault-injecting S3 proxy (crate sluice-chaos)
//! until Ctrl-C or SIGTERM, then prints what it injected.

use sluice_chaos::{ChaosConfig, ChaosProxy, FaultRates, Operation};

use crate::args::ChaosProxyArgs;
use crate::UsageError;

/// The proxy configuration the flags describe.
pub fn config(args: &ChaosProxyArgs) -> Result<ChaosConfig, UsageError> {
    let rates = FaultRates {
        slowdown: args.slowdown,
        internal_error: args.internal_error,
        reset_request: args.reset_request,
        reset_response: args.reset_response,
        stall: args.stall,
    };
    let mut config = ChaosConfig {
        latency: args.latency,
        stall_for: args.stall_for,
        write_rate_per_prefix: (args.write_rate > 0.0).then_some(args.write_rate),
        prefix_depth: args.prefix_depth,
        retry_after: args.retry_after,
        ..ChaosConfig::default()
    };
    if args.only.is_empty() {
        config.faults = rates;
    } else {
        for name in &args.only {
            let operation = Operation::parse(name.trim()).ok_or_else(|| {
                let known: Vec<&str> = Operation::ALL.iter().map(|op| op.name()).collect();
                UsageError(format!(
                    "--only: unknown operation {name:?}; known: {}",
                    known.join(", ")
                ))
            })?;
            config.per_operation.insert(operation, rates);
        }
    }
    if args.write_rate < 0.0 || !args.write_rate.is_finite() {
        return Err(UsageError(format!(
            "--write-rate {} must be 0 (no cap) or a positive number",
            args.write_rate
        )));
    }
    config
        .validate()
        .map_err(|e| UsageError(format!("chaos-proxy: {e}")))?;
    Ok(config)
}

pub async fn run(args: ChaosProxyArgs) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        return Err(UsageError(format!(
            "--listen {} is not a loopback address; the proxy is a test tool (pass --allow-remote to insist)",
            args.listen
        ))
        .into());
    }
    let config = config(&args)?;
    let proxy = ChaosProxy::start(args.listen, &args.upstream, config)
        .await
        .map_err(|e| match e {
            sluice_chaos::ProxyError::UpstreamUrl(_) => {
                anyhow::Error::new(UsageError(e.to_string()))
            }
            other => anyhow::Error::new(other),
        })?;
    println!(
        "sluice chaos-proxy: {} -> {} (stats: {}/_chaos/stats, config: {}/_chaos/config)",
        proxy.url(),
        args.upstream,
        proxy.url(),
        proxy.url()
    );
    crate::serve::shutdown_signal().await;
    let totals = proxy.stats().totals;
    println!(
        "sluice chaos-proxy: stopped after {} requests: {} forwarded fine, {} store errors, {} unreachable, \
         {} rate-limited, {} SlowDown, {} InternalError, {} request resets, {} response resets, {} stalls",
        totals.requests,
        totals.store_ok,
        totals.store_error,
        totals.unreachable,
        totals.rate_limited,
        totals.slowdown,
        totals.internal_error,
        totals.reset_request,
        totals.reset_response,
        totals.stall
    );
    Ok(())
}
