//! `sluice bench load`: turns the flags into a validated load plan, shows a live
//! progress line on a terminal, prints the summary and writes the JSON file.

use std::io::{IsTerminal, Write};

use anyhow::Context;
use sluice_bench::{Api, LoadPlan, Model, Stop, Target};

use crate::args::{BenchApi, BenchCommand, LoadArgs};
use crate::UsageError;

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Load(args) => load(args).await,
    }
}

fn plan(args: &LoadArgs) -> anyhow::Result<LoadPlan> {
    let api = match args.api {
        BenchApi::Put => Api::Put,
        BenchApi::Form => Api::Form,
        BenchApi::Tus => Api::Tus,
    };
    let target =
        Target::parse(&args.url, api, args.allow_remote).map_err(|e| UsageError(e.to_string()))?;
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
        object_size: args.size,
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
    Ok(())
}
