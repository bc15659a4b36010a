//! `sluice bench load` and `sluice bench strategies`: turn the flags into a validated
//! plan, show progress on a terminal, print the summary and write the JSON file.

use std::io::{IsTerminal, Write};

use anyhow::Context;
use sluice_bench::{Api, LoadPlan, Model, Stop, Target};

use crate::args::{BenchApi, BenchCommand, LoadArgs, StrategiesArgs};
use crate::UsageError;

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Load(args) => load(args).await,
        BenchCommand::Strategies(args) => strategies(args).await,
    }
}

fn plan(args: &LoadArgs) -> anyhow::Result<LoadPlan> {
    let api = match args.api {
        BenchApi::Put => Api::Put,
        BenchApi::Form => Api::Form,
        BenchApi::Tus => Api::Tus,
        BenchApi::Draft => Api::Draft,
        BenchApi::Records => Api::Records,
        BenchApi::S3Put => Api::S3Put,
        BenchApi::S3Multipart => Api::S3Multipart,
    };
    let target = if api.is_s3() || args.url.starts_with("s3://") {
        Target::s3(
            &args.url,
            api,
            args.endpoint.as_deref(),
            args.region.as_deref(),
            args.allow_remote,
        )
    } else {
        Target::parse(&args.url, api, args.allow_remote)
    }
    .map_err(|e| UsageError(e.to_string()))?;
    let model = match (args.users, args.rate) {
        (Some(users), None) => Model::Closed {
            users,
            ramp: args.ramp,
            stop: match (args.iterations, args.duration) {
                (_, Some(duration)) => Stop::Duration(duration),
                (iterations, None) => Stop::Iterations(iterations.unwrap_or(1)),
            },
        },
        (None, Some(rate)) => Model::Open {
            rate,
            max_in_flight: args.max_in_flight,
            duration: args
                .duration
                .ok_or_else(|| UsageError("--rate needs --duration".into()))?,
        },
        _ => {
            return Err(
                UsageError("give --users N (closed model) or --rate R (open model)".into()).into(),
            )
        }
    };
    let plan = LoadPlan {
        target,
        model,
        object_size: args.size.1,
        min_object_size: args.size.0,
        key_prefix: args.key_prefix.clone(),
        key_scheme: args.keys,
        retries_after_503: args.retries,
        request_timeout: args.timeout,
        chunk_size: args.chunk_size,
    };
    plan.validate().map_err(|e| UsageError(e.to_string()))?;
    Ok(plan)
}

async fn load(args: LoadArgs) -> anyhow::Result<()> {
    let plan = plan(&args)?;
    let live = !args.quiet && std::io::stderr().is_terminal();
    let on_tick: Option<Box<dyn Fn(sluice_bench::Tick) + Send + Sync>> = live.then(|| {
        Box::new(|tick: sluice_bench::Tick| {
            eprint!(
                "\r{:>5.0} s  {} succeeded  {} failed  {} in flight   ",
                tick.elapsed.as_secs_f64(),
                tick.succeeded,
                tick.failed,
                tick.in_flight
            );
            let _ = std::io::stderr().flush();
        }) as Box<dyn Fn(sluice_bench::Tick) + Send + Sync>
    });
    let summary = sluice_bench::run(plan, on_tick).await?;
    if live {
        eprintln!();
    }
    print!("{summary}");
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&summary).context("serialising the summary")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, sluice_bench::render_html(&summary))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn strategies(args: StrategiesArgs) -> anyhow::Result<()> {
    use sluice_bench::strategies::{render, run_strategies, StrategyPlan};
    use sluice_store::StoreLocation;
    let location = StoreLocation::parse(&args.store).map_err(|e| UsageError(e.to_string()))?;
    if matches!(location, StoreLocation::Bucket { .. }) && !args.allow_remote {
        let endpoint = args.endpoint.as_deref().ok_or_else(|| {
            UsageError(
                "without --endpoint the store is AWS S3; pass --allow-remote to measure it".into(),
            )
        })?;
        Target::parse(endpoint, Api::Put, false).map_err(|e| UsageError(e.to_string()))?;
    }
    let plan = StrategyPlan {
        sizes: args.sizes.clone(),
        part_size: args.part_size,
        concurrency: args.concurrency,
        repeat: args.repeat,
        key_prefix: "bench-strategies".into(),
    };
    plan.validate().map_err(|e| UsageError(e.to_string()))?;
    let store = crate::target::open_store(
        location,
        &crate::args::StoreArgs {
            endpoint: args.endpoint.clone(),
            region: args.region.clone(),
            ..Default::default()
        },
        Some(sluice_store::s3::S3Config::DEFAULT_STALL_TIMEOUT),
    )
    .await?;
    let live = std::io::stderr().is_terminal();
    let results = run_strategies(store, &plan, |r| {
        if live {
            eprintln!(
                "  {} {}: {}",
                sluice_upload::format_size(r.size),
                r.strategy.label(),
                r.seconds.map_or("n/a".to_owned(), |s| format!("{s:.3} s"))
            );
        }
    })
    .await?;
    print!("{}", render(&results));
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&results).context("serialising the results")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
