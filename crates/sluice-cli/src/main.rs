//! The `sluice` binary (`serve`, `put`, `get`, `ls`, `rm`, `cp`, `sync`, `bench`,
//! `janitor`, `chaos-proxy`, ...): parses and validates the command line (usage errors exit
//! with 2), builds the store and the engine, runs the transfer with a progress bar,
//! and turns the outcome into a summary line and an exit code (0 success, 1 failure).
//! Ctrl-C aborts a transfer cleanly: a multipart upload in progress is aborted.

mod announcing;
mod args;
mod azure;
mod batch;
mod bench;
mod buckets;
mod chaos;
mod environment;
mod events;
mod gcs;
mod ingest;
mod inspect;
mod janitor;
mod ls;
mod many;
mod object;
mod output;
mod packaging;
mod rm;
mod serve;
mod sign;
mod tables;
mod target;
mod ui;
mod wildcard;

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use clap::{CommandFactory, FromArgMatches};
use sluice_upload::{validate_key, ConfigError, Engine, EngineConfig, UploadRequest, UploadSource};

use args::{Cli, Command, CopyArgs, GetArgs, PutArgs, TransferArgs};

/// The allocator: jemalloc, which reuses the pages of the 128 KiB read
/// buffers a store connection frees and asks for thousands of times a second,
/// where glibc's malloc mapped or trimmed them time and again (a page fault
/// per page touched; docs/STORES.md). mimalloc faulted as little but held
/// 300-400 MiB for a download jemalloc does in 52-69.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A mistake on the command line: reported with exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Stopped by Ctrl-C (after cleaning up): reported with exit code 130, 128 +
/// SIGINT, as shells report a program the signal stopped.
#[derive(Debug)]
pub struct Interrupted(pub &'static str);

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Interrupted {}

fn main() -> ExitCode {
    // The matches are kept: `serve` layers its settings by where each value
    // came from (flag, variable or default).
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            let error = error.format(&mut Cli::command());
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { 2 } else { 0 });
        }
    };
    init_tracing(cli.log_format);
    for warning in
        environment::stale_warnings(&cli.command, |name| std::env::var_os(name).is_some())
    {
        eprintln!("sluice: warning: {warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sluice: error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(dispatch(cli.command, &matches));
    // A blocked read of standard input must not hold the process open.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of standard output went away (`| head`): not a failure.
        Err(error) if output::closed(Some(&error)) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sluice: error: {error:#}");
            let usage = error.is::<UsageError>() || error.is::<ConfigError>();
            let interrupted = error.chain().any(|e| e.is::<Interrupted>());
            ExitCode::from(match (usage, interrupted) {
                (_, true) => 130,
                (true, false) => 2,
                (false, false) => 1,
            })
        }
    }
}

/// Runs one command (of the command line, or a line of `sluice run`).
async fn dispatch(command: Command, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => {
            let serve = matches
                .subcommand_matches("serve")
                .cloned()
                .unwrap_or_default();
            serve::run(*args, &serve).await
        }
        Command::Put(args) => put(args).await,
        Command::Get(args) => get(args).await,
        Command::Ls(args) => ls::run(args).await,
        Command::Cat(args) => inspect::cat(args).await,
        Command::Stat(args) => inspect::stat(args).await,
        Command::Du(args) => inspect::du(args).await,
        Command::Presign(args) => inspect::presign(args).await,
        Command::Mv(args) => mv(args).await,
        Command::Run(args) => batch::run(args).await,
        Command::Mb(args) => buckets::make(args).await,
        Command::Rb(args) => buckets::remove(args).await,
        Command::Rm(args) => rm::run(args).await,
        Command::Cp(args) => cp(args).await,
        Command::Sync(args) => many::sync::run(args).await,
        Command::Bench(command) => bench::run(command).await,
        Command::Janitor(args) => janitor::run(args).await,
        Command::ChaosProxy(args) => chaos::run(args).await,
        Command::Sign(args) => sign::run(args),
        Command::Events(args) => events::run(args).await,
        Command::Ingest(args) => {
            let ingest = matches
                .subcommand_matches("ingest")
                .cloned()
                .unwrap_or_default();
            ingest::run(*args, &ingest).await
        }
        Command::Tables(command) => tables::run(command).await,
        Command::Completions { shell } => packaging::completions(shell),
        Command::Man => packaging::man(),
    }
}

fn init_tracing(format: args::LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,aws_config=error,aws_smithy_runtime=error")
    });
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        args::LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).init(),
        args::LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

/// The engine configuration the flags describe, validated.
fn engine_config(transfer: &TransferArgs) -> Result<EngineConfig, ConfigError> {
    let config = EngineConfig {
        // The engine-wide limit governs; one upload may use all of it.
        concurrency: transfer.concurrency.tuning().max,
        tuning: Some(transfer.concurrency.tuning()),
        flush_downloads: transfer.fsync,
        ..EngineConfig::default()
    }
    .with_settings(&transfer.engine);
    config.validate()?;
    Ok(config)
}

/// Runs `transfer` until it ends or Ctrl-C; on Ctrl-C the transfer is dropped
/// (which aborts a multipart upload) and the aborts are awaited.
async fn interruptible<T>(engine: &Engine, transfer: impl Future<Output = T>) -> anyhow::Result<T> {
    interruptible_saying(engine, transfer, "interrupted: nothing was stored").await
}

/// [`interruptible`], failing with `message` on Ctrl-C.
async fn interruptible_saying<T>(
    engine: &Engine,
    transfer: impl Future<Output = T>,
    message: &'static str,
) -> anyhow::Result<T> {
    let mut transfer = Box::pin(transfer);
    tokio::select! {
        result = &mut transfer => Ok(result),
        _ = tokio::signal::ctrl_c() => {
            drop(transfer);
            eprintln!("sluice: interrupted, cleaning up");
            let _ = tokio::time::timeout(Duration::from_secs(30), engine.finish_background()).await;
            Err(Interrupted(message).into())
        }
    }
}

/// --include and --exclude select files of a directory or prefix: refused with one file.
fn no_filters(many: &args::ManyArgs) -> Result<(), UsageError> {
    match many.include.is_empty() && many.exclude.is_empty() {
        true => Ok(()),
        false => Err(UsageError(
            "--include and --exclude select files of a directory or prefix, not of one file".into(),
        )),
    }
}

async fn put(mut args: PutArgs) -> anyhow::Result<()> {
    if let Some(base) = args.many.take_wildcard(&args.src.to_string_lossy())? {
        args.src = PathBuf::from(base);
    }
    let config = engine_config(&args.transfer)?;
    let object = object::ObjectSpec::from_args(&args.object)?;
    if args.resume && args.many.no_clobber {
        return Err(UsageError(
            "--resume continues an upload of the key, --no-clobber refuses a key that is taken: give one".into(),
        )
        .into());
    }
    let from_stdin = args.src.as_os_str() == "-";
    let length = if from_stdin {
        None
    } else {
        let meta = std::fs::metadata(&args.src)
            .with_context(|| format!("cannot read {}", args.src.display()))?;
        if meta.is_dir() {
            if args.resume {
                return Err(UsageError("--resume takes one file, not a directory".into()).into());
            }
            return many::put_directory(&args.src, &args.dest, object, &args.many, &args.transfer)
                .await;
        }
        // Pipes, FIFOs and devices are read as streams of unknown length.
        meta.is_file().then_some(meta.len())
    };
    // What mv checks the file against before it removes it.
    let uploaded_mtime = std::fs::metadata(&args.src).and_then(|m| m.modified()).ok();
    no_filters(&args.many)?;
    if let Ok(sluice_store::StoreLocation::Local(_)) =
        sluice_store::StoreLocation::parse(&args.dest)
    {
        object.check_for_directory_store()?;
    }
    if args.many.dry_run && !is_bucket(&args.dest) {
        // Opening a directory store would make its directory.
        return dry_run(
            &format!("upload {}", args.src.display()),
            &args.dest,
            &args.many,
        );
    }
    let target = target::for_put(&args.dest, &args.src, &args.transfer).await?;
    validate_key(&target.key).map_err(|e| UsageError(format!("key {:?}: {e}", target.key)))?;
    if args.many.dry_run {
        return dry_run(
            &format!("upload {}", args.src.display()),
            &target.display,
            &args.many,
        );
    }
    let engine = crate::batch::engine(target.store.clone(), config)?;
    let source = if from_stdin {
        UploadSource::Blocking {
            reader: Box::new(std::io::stdin()),
            length: None,
        }
    } else if length.is_none() {
        let file = std::fs::File::open(&args.src)
            .with_context(|| format!("cannot read {}", args.src.display()))?;
        UploadSource::Blocking {
            reader: Box::new(file),
            length: None,
        }
    } else {
        UploadSource::File(args.src.clone())
    };
    let bar = ui::Bar::new(args.transfer.quiet, length);
    let request = UploadRequest {
        key: target.key.clone(),
        // Standard input has no name: the key's extension tells.
        content_type: object.content_type_for(match from_stdin {
            true => &target.key,
            false => args.src.to_str().unwrap_or(&target.key),
        }),
        metadata: object.metadata_with(Default::default()),
        settings: object.settings().clone(),
        progress: bar.callback(),
        // Refused by the store, atomically, when the key is taken.
        condition: args
            .many
            .no_clobber
            .then_some(sluice_store::WriteCondition::IfNoneMatch),
        ..UploadRequest::default()
    };
    let started = Instant::now();
    let (outcome, kept) = if args.resume {
        let UploadSource::File(path) = source else {
            return Err(UsageError(
                "--resume needs a regular file (not standard input or a pipe)".into(),
            )
            .into());
        };
        let result = interruptible_saying(
            &engine,
            engine.upload_file_resuming(request, path),
            "interrupted: the parts sent so far are kept; run the same command again to continue",
        )
        .await;
        bar.finish();
        let resumed = result?
            .with_context(|| {
                format!(
                    "upload to {} failed; the parts sent so far are kept: run the same command again to continue",
                    target.display
                )
            })?;
        let kept = (resumed.parts_kept > 0).then(|| {
            format!(
                ", {} of them ({}) kept from an earlier run",
                resumed.parts_kept,
                sluice_upload::format_size(resumed.bytes_kept)
            )
        });
        (resumed.outcome, kept)
    } else {
        let result = interruptible(&engine, engine.upload(request, source)).await;
        bar.finish();
        let outcome = match result? {
            Err(sluice_upload::TransferError::Store {
                source: sluice_store::StoreError::PreconditionFailed,
                ..
            }) if args.many.no_clobber => return kept(&target.display),
            result => result.with_context(|| format!("upload to {} failed", target.display))?,
        };
        (outcome, None)
    };
    if args.many.move_sources {
        many::run::remove_uploaded_file(&args.src, outcome.size, uploaded_mtime)
            .map_err(|reason| anyhow!("uploaded, but {} stays: {reason}", args.src.display()))?;
    }
    if args.many.json {
        let source = args.src.display().to_string();
        let lines = ui::json_lines(
            "upload",
            &source,
            &target.display,
            outcome.size,
            started.elapsed(),
            outcome.checksum,
        );
        for line in lines {
            crate::output::out!("{line}");
        }
        return Ok(());
    }
    let detail = match outcome.parts {
        0 => "1 request".to_string(),
        1 => format!("1 part{}", kept.unwrap_or_default()),
        n => format!("{n} parts{}", kept.unwrap_or_default()),
    };
    crate::output::out!(
        "{}",
        ui::summary(
            "uploaded",
            outcome.size,
            &format!("to {}", target.display),
            started.elapsed(),
            &detail,
            outcome.checksum
        )
    );
    Ok(())
}

async fn get(mut args: GetArgs) -> anyhow::Result<()> {
    if let Some(base) = args.many.take_wildcard(&args.src)? {
        args.src = base;
    }
    if names_prefix(&args.src) {
        if args.dest.as_os_str() == "-" {
            return Err(UsageError(format!(
                "{} is a prefix: give a directory to download it into, not -",
                args.src
            ))
            .into());
        }
        return many::get_prefix(&args.src, &args.dest, &args.many, &args.transfer).await;
    }
    no_filters(&args.many)?;
    let config = engine_config(&args.transfer)?;
    let target = target::for_get(&args.src, &args.transfer.reach()).await?;
    validate_key(&target.key).map_err(|e| UsageError(format!("key {:?}: {e}", target.key)))?;
    let engine = crate::batch::engine(target.store.clone(), config)?;
    let to_stdout = args.dest.as_os_str() == "-";
    if args.many.dry_run {
        // Before the destination's directories are made.
        return dry_run(
            &format!("download {}", target.display),
            &args.dest.display().to_string(),
            &args.many,
        );
    }
    let dest = match to_stdout {
        true => PathBuf::from("-"),
        false => destination_path(&args.dest, &target.key)?,
    };
    if args.many.no_clobber && !to_stdout && std::fs::symlink_metadata(&dest).is_ok() {
        return kept(&dest.display().to_string());
    }
    let bar = ui::Bar::new(args.transfer.quiet, None);
    let started = Instant::now();
    let transfer = async {
        if to_stdout {
            engine
                .download_to_writer(&target.key, tokio::io::stdout(), bar.callback())
                .await
        } else {
            engine
                .download_to_path(&target.key, &dest, bar.callback())
                .await
        }
    };
    let result = interruptible(&engine, transfer).await;
    bar.finish();
    let outcome = match result? {
        Ok(outcome) => outcome,
        Err(error) => {
            let hint = match &error {
                sluice_upload::TransferError::Store {
                    source: sluice_store::StoreError::NoSuchKey { .. },
                    ..
                } => prefix_hint(target.store.as_ref(), &target.key, &args.src, "get").await,
                _ => None,
            };
            let failed = match to_stdout {
                true => format!("download of {} failed", target.display),
                false => format!(
                    "download of {} to {} failed",
                    target.display,
                    dest.display()
                ),
            };
            return Err(match hint {
                Some(hint) => anyhow::Error::new(error).context(failed).context(hint),
                None => anyhow::Error::new(error).context(failed),
            });
        }
    };
    if args.many.move_sources {
        target.store.delete_object(&target.key).await.map_err(|e| {
            anyhow!(
                "downloaded, but {} stays: it could not be removed: {}",
                target.display,
                sluice_store::error_chain(&e)
            )
        })?;
    }
    if args.many.json {
        let dest_shown = dest.display().to_string();
        let lines = ui::json_lines(
            "download",
            &target.display,
            &dest_shown,
            outcome.size,
            started.elapsed(),
            outcome.checksum,
        );
        for line in lines {
            // The object itself is on standard output when the target is `-`.
            match to_stdout {
                true => eprintln!("{line}"),
                false => {
                    crate::output::out!("{line}");
                }
            }
        }
        return Ok(());
    }
    let place = if to_stdout {
        "to standard output".to_string()
    } else {
        format!("to {}", dest.display())
    };
    let detail = match outcome.ranges {
        1 => "1 request".to_string(),
        n => format!("{n} ranges"),
    };
    let verified = if outcome.verified { " (verified)" } else { "" };
    let line = ui::summary(
        &format!("downloaded {} ->", target.display),
        outcome.size,
        &place,
        started.elapsed(),
        &detail,
        outcome.checksum,
    ) + verified;
    if to_stdout {
        eprintln!("{line}");
    } else {
        crate::output::out!("{line}");
    }
    Ok(())
}

/// Whether a location is in a bucket or container (`s3://`, `az://`), not local.
fn is_bucket(location: &str) -> bool {
    matches!(
        sluice_store::StoreLocation::parse(location),
        Ok(sluice_store::StoreLocation::Bucket { .. })
    )
}

/// Whether a location names a prefix rather than one object: it ends in `/`,
/// or is a bucket alone.
fn names_prefix(location: &str) -> bool {
    location.ends_with('/')
        || matches!(
            sluice_store::StoreLocation::parse(location),
            Ok(sluice_store::StoreLocation::Bucket { ref rest, .. }) if rest.is_empty()
        )
}

/// `sluice cp`: uploads and downloads as `put` and `get` do; bucket to bucket
/// by server-side copy.
async fn cp(mut args: CopyArgs) -> anyhow::Result<()> {
    if let Some(base) = args.many.take_wildcard(&args.src)? {
        args.src = base;
    }
    // A mistyped URL (`s3:/b/k`) is refused before either side is taken for a path.
    for location in [&args.src, &args.dest] {
        sluice_store::StoreLocation::parse(location).map_err(|e| UsageError(e.to_string()))?;
    }
    if is_bucket(&args.src) {
        object::ObjectSpec::from_args(&args.object)?.check_for_copy(is_bucket(&args.dest))?;
    }
    match (is_bucket(&args.src), is_bucket(&args.dest)) {
        (false, true) => {
            put(PutArgs {
                src: PathBuf::from(&args.src),
                dest: args.dest,
                object: args.object,
                resume: false,
                many: args.many,
                transfer: args.transfer,
            })
            .await
        }
        (true, false) => {
            get(GetArgs {
                src: args.src,
                dest: PathBuf::from(&args.dest),
                many: args.many,
                transfer: args.transfer,
            })
            .await
        }
        (true, true) if names_prefix(&args.src) => {
            let object = object::ObjectSpec::from_args(&args.object)?;
            many::copy_prefix(&args.src, &args.dest, object, &args.many, &args.transfer).await
        }
        (true, true) => {
            no_filters(&args.many)?;
            copy_object(args).await
        }
        (false, false) => Err(UsageError(format!(
            "{} and {} are both local: one side of cp must be a bucket (s3://, az://, gs://; use cp(1) between local paths)",
            args.src, args.dest
        ))
        .into()),
    }
}

/// `--dry-run` of one file: what would be done, and nothing done.
fn dry_run(doing: &str, target: &str, many: &args::ManyArgs) -> anyhow::Result<()> {
    let then = match many.move_sources {
        true => ", then remove the source",
        false => "",
    };
    crate::output::out!("dry run: would {doing} to {target}{then}; nothing changed");
    Ok(())
}

/// `--no-clobber` found `target` there: said, and not a failure.
fn kept(target: &str) -> anyhow::Result<()> {
    crate::output::out!("kept {target}: it exists (--no-clobber); nothing was sent");
    Ok(())
}

/// `sluice mv`: `cp` that removes each source once its copy is complete
/// (after a failure, the source stays).
async fn mv(mut args: CopyArgs) -> anyhow::Result<()> {
    if args.src == "-" || args.dest == "-" {
        return Err(UsageError(
            "mv moves files and objects: not standard input or output (use put or cat, then rm)"
                .into(),
        )
        .into());
    }
    args.many.move_sources = true;
    cp(args).await
}

/// One object copied bucket to bucket; a destination ending in `/` takes the
/// source's last key segment.
async fn copy_object(args: CopyArgs) -> anyhow::Result<()> {
    use sluice_store::StoreLocation;
    let parse = |location: &str| match StoreLocation::parse(location) {
        Ok(StoreLocation::Bucket {
            service,
            bucket,
            rest,
        }) => Ok((service, bucket, rest)),
        _ => Err(UsageError(format!(
            "{location} is not a bucket's location (s3://, az:// or gs://)"
        ))),
    };
    let ((service, source_bucket, source_key), (dest_service, bucket, rest)) =
        (parse(&args.src)?, parse(&args.dest)?);
    if service != dest_service {
        // A server-side copy stays inside one service.
        return Err(UsageError(format!(
            "{} and {} are on different services: copy with get, then put",
            args.src, args.dest
        ))
        .into());
    }
    let scheme = service.scheme();
    let key = if rest.is_empty() || rest.ends_with('/') {
        format!(
            "{rest}{}",
            source_key.rsplit('/').next().unwrap_or(&source_key)
        )
    } else {
        rest
    };
    validate_key(&key).map_err(|e| UsageError(format!("key {key:?}: {e}")))?;
    if source_bucket == bucket && source_key == key {
        // A multipart copy onto itself would succeed, and mv then remove it.
        return Err(UsageError(format!(
            "{scheme}://{bucket}/{key} is both the source and the destination"
        ))
        .into());
    }
    let open = |bucket: &str| {
        target::open_store(
            StoreLocation::Bucket {
                service,
                bucket: bucket.to_string(),
                rest: String::new(),
            },
            &args.transfer.store,
            Some(sluice_store::s3::S3Config::DEFAULT_STALL_TIMEOUT),
        )
    };
    let (target, source) = (open(&bucket).await?, open(&source_bucket).await?);
    let engine = crate::batch::engine(target, engine_config(&args.transfer)?)?;
    let source_engine = crate::batch::engine(source, engine_config(&args.transfer)?)?;
    if args.many.dry_run {
        return dry_run(
            &format!("copy {scheme}://{source_bucket}/{source_key}"),
            &format!("{scheme}://{bucket}/{key}"),
            &args.many,
        );
    }
    if args.many.no_clobber {
        match sluice_store::ObjectStore::head_object(&engine.retrying_store(), &key).await {
            Ok(_) => return kept(&format!("{scheme}://{bucket}/{key}")),
            Err(sluice_store::StoreError::NoSuchKey { .. }) => {}
            Err(e) => {
                return Err(anyhow!(
                    "{scheme}://{bucket}/{key}: {}",
                    sluice_store::error_chain(&e)
                ))
            }
        }
    }
    let source_store = source_engine.retrying_store();
    let head = match sluice_store::ObjectStore::head_object(&source_store, &source_key).await {
        Ok(head) => head,
        Err(e) => {
            let hint = match e {
                sluice_store::StoreError::NoSuchKey { .. } => {
                    prefix_hint(&source_store, &source_key, &args.src, "copy").await
                }
                _ => None,
            };
            let error = anyhow!(
                "{scheme}://{source_bucket}/{source_key}: {}",
                sluice_store::error_chain(&e)
            );
            return Err(match hint {
                Some(hint) => error.context(hint),
                None => error,
            });
        }
    };
    let started = Instant::now();
    let placement = object::ObjectSpec::from_args(&args.object)?.placement();
    let request = sluice_upload::CopyRequest {
        placement,
        source_bucket: (source_bucket != bucket).then(|| sluice_upload::SourceBucket {
            name: source_bucket.clone(),
            store: source_engine.store().clone(),
        }),
        source_key: source_key.clone(),
        size: head.size,
        source_etag: Some(head.etag),
        key: key.clone(),
    };
    let outcome = interruptible(&engine, engine.copy(request))
        .await?
        .with_context(|| format!("copy of {scheme}://{source_bucket}/{source_key} failed"))?;
    engine.finish_background().await;
    if args.many.move_sources {
        sluice_store::ObjectStore::delete_object(&source_engine.retrying_store(), &source_key)
            .await
            .map_err(|e| {
                anyhow!(
                    "copied, but {scheme}://{source_bucket}/{source_key} stays: it could not be removed: {}",
                    sluice_store::error_chain(&e)
                )
            })?;
    }
    let detail = match outcome.parts {
        0 => "server-side copy".to_string(),
        1 => "server-side copy in 1 part".to_string(),
        n => format!("server-side copy in {n} parts"),
    };
    crate::output::out!(
        "{}",
        ui::summary(
            &format!("copied {scheme}://{source_bucket}/{source_key} ->"),
            outcome.size,
            &format!("{scheme}://{bucket}/{key}"),
            started.elapsed(),
            &detail,
            outcome.checksum
        )
    );
    Ok(())
}

/// `DEST`, or `DEST/<last segment of key>` when DEST is a directory.
/// Where a downloaded object goes: into `dest` when it is a directory or is
/// written as one (`newdir/`), else `dest` itself; the directory it lands in
/// is made when missing, as for a prefix's files.
fn destination_path(dest: &Path, key: &str) -> anyhow::Result<PathBuf> {
    let name = key.rsplit('/').next().unwrap_or(key);
    if name == sluice_store::fs::INTERNAL_DIR {
        return Err(UsageError(format!(
            "{key:?} would be written as {name}, a directory store's bookkeeping: give a file name"
        ))
        .into());
    }
    let written_as_dir = dest.as_os_str().to_string_lossy().ends_with('/');
    let path = match dest.is_dir() || written_as_dir {
        true => dest.join(name),
        false => dest.to_path_buf(),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot make the directory {}", dir.display()))?;
    }
    Ok(path)
}

/// When `key` is missing but objects lie under `key/`: a hint that the
/// caller named a prefix without its `/`.
async fn prefix_hint(
    store: &dyn sluice_store::ObjectStore,
    key: &str,
    given: &str,
    verb: &str,
) -> Option<String> {
    let under = store.list_objects(&format!("{key}/"), None, 1).await.ok()?;
    (!under.objects.is_empty()).then(|| {
        format!("{given} is a prefix, not an object: add a trailing / to {verb} what is under it ({given}/)")
    })
}
