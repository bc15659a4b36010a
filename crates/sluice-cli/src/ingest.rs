//! `sluice ingest`: records from standard input into a stream's objects. Input
//! is read in blocks of about 1 MiB (cut at the last newline, each reserved from
//! the memory budget first), parsed on the CPU pool several blocks at a time,
//! and appended in input order, so that `{offset}` is a record's position in the
//! input. The summary comes once every batch is stored.

use std::collections::HashMap;
use std::io::Read;
use std::time::Instant;

use anyhow::{anyhow, Context};
use bytes::Bytes;
use futures::StreamExt;
use sluice_streams::ingest::{append_on_pool, parse_on_pool};
use sluice_streams::records::BodyFormat;
use sluice_streams::{
    CpuPool, RecordFormat, RecordSource, RecordStream, StreamConfig, StreamError, Ticket,
};
use sluice_upload::{Engine, MemoryShare, Reservation};

use crate::args::IngestArgs;
use crate::UsageError;

/// Bytes read from the input per block.
const BLOCK: usize = 1 << 20;

pub async fn run(args: IngestArgs, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let kafka = match args.from.as_str() {
        "-" => None,
        url => Some(
            sluice_streams::kafka::KafkaSource::parse(url, &args.group)
                .map(|source| sluice_streams::kafka::KafkaSource {
                    idle_exit: args.idle_exit,
                    ..source
                })
                .map_err(|e| UsageError(format!("--from: {e}")))?,
        ),
    };
    let mut config = stream_config(&args, matches)?;
    if kafka.is_some() && config.key_template == StreamConfig::default().key_template {
        // Into a table, the table says where partitions resume: keys need
        // only to stay apart. Otherwise replays list the offsets in keys.
        config.key_template = match config.table {
            sluice_streams::TableFormat::Delta | sluice_streams::TableFormat::Iceberg => {
                "{stream}/{partition}/{offset}-{uuid}"
            }
            sluice_streams::TableFormat::None => "{stream}/{partition}/{offset}",
        }
        .into();
    }
    let source = match kafka {
        Some(_) => RecordSource::Kafka,
        None => RecordSource::Requests,
    };
    config
        .check_source(source)
        .map_err(|e| UsageError(e.to_string()))?;
    let store = args.store.open(&args.transfer.store).await?;
    let description = store.describe();
    let engine = Engine::new(store, crate::engine_config(&args.transfer)?)?;
    // Every batch is announced as the gateway announces its objects.
    let announcing = crate::announcing::Announcing::through(&engine, &args.events)?;
    let _reconciling = announcing.reconcile_meanwhile();
    let stream = RecordStream::open(
        &args.stream,
        config,
        engine.clone(),
        sluice_streams::records_memory(engine.budget()),
        CpuPool::per_core(),
        None,
    )
    .await
    .map_err(|e| UsageError(e.to_string()))?;
    if let Some(address) = args.metrics_listen {
        serve_metrics(address, &stream, &engine, &announcing.metrics).await?;
    }
    let started = Instant::now();
    if kafka.is_some() && args.idempotency_key.is_some() {
        return Err(UsageError(
            "--idempotency-key is for standard input: a Kafka source is exactly once by its offsets".into(),
        )
        .into());
    }
    if let Some(source) = kafka {
        let layout = match stream.table() {
            Some(_) => stream.template().check_table_layout(),
            None => stream.template().check_offset_layout(),
        };
        layout.map_err(|e| UsageError(format!("--key-template: {e}")))?;
        let kafka = crate::interruptible_saying(
            &engine,
            sluice_streams::kafka::run(&stream, &source),
            "interrupted: offsets are committed up to the last stored batch; a restart continues from there",
        )
        .await?
        .with_context(|| format!("ingesting {} into {description}", args.from))?;
        let summary = Summary {
            records: kafka.records,
            dead_lettered: kafka.dead_lettered,
            objects: kafka.objects,
            kafka: Some(kafka),
            replayed: false,
        };
        report(&args, &stream, &summary, &description, started);
        return Ok(());
    }
    let key = match (&args.idempotency_key, stream.table()) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(UsageError(
                "--idempotency-key needs a table (--table delta or --table iceberg)".into(),
            )
            .into())
        }
        (Some(key), Some(sink)) => {
            let fine = (1..=128).contains(&key.len())
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
            if !fine {
                return Err(
                    UsageError("--idempotency-key: 1-128 of A-Z a-z 0-9 - _ . :".into()).into(),
                );
            }
            match sink
                .start_keyed(key)
                .await
                .with_context(|| format!("reading the table on {description}"))?
            {
                None => Some((sink.clone(), key.clone())),
                Some(_) => {
                    // Committed before: the input is in the table.
                    let summary = Summary {
                        replayed: true,
                        ..Summary::default()
                    };
                    report(&args, &stream, &summary, &description, started);
                    return Ok(());
                }
            }
        }
    };
    let outcome = crate::interruptible_saying(
        &engine,
        ingest(&stream, Box::new(std::io::stdin()), key.clone()),
        "interrupted: the batches stored before stay; the records after them were not stored",
    )
    .await?;
    if let Some((sink, key)) = &key {
        sink.end(key);
    }
    let summary = outcome.with_context(|| format!("ingesting into {description}"))?;
    report(&args, &stream, &summary, &description, started);
    Ok(())
}

/// Serves the stream's figures, the memory budget's and the objects announced
/// (the gateway's metrics, docs/METRICS.md) at `address`/metrics until the
/// process ends.
async fn serve_metrics(
    address: std::net::SocketAddr,
    stream: &RecordStream,
    engine: &Engine,
    metrics: &sluice_server::metrics::Metrics,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("--metrics-listen {address}"))?;
    metrics.watch_streams(vec![(stream.name().to_owned(), stream.stats().clone())]);
    let (metrics, engine) = (metrics.clone(), engine.clone());
    let render = move || metrics.render(&engine);
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = render();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    text,
                )
            }
        }),
    );
    tracing::info!(%address, "metrics at http://{address}/metrics");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

/// The summary line (or JSON line) once every batch is stored.
fn report(
    args: &IngestArgs,
    stream: &RecordStream,
    summary: &Summary,
    description: &str,
    started: Instant,
) {
    let seconds = started.elapsed().as_secs_f64();
    let stats = stream.stats().snapshot();
    if args.json {
        let mut line = serde_json::json!({
            "stream": args.stream,
            "records": summary.records,
            "dead_lettered": summary.dead_lettered,
            "objects": summary.objects,
            "record_bytes": stats.bytes_in,
            "stored_bytes": stats.batch_stored_bytes,
            "seconds": seconds,
        });
        if args.idempotency_key.is_some() {
            line["replayed"] = summary.replayed.into();
        }
        if let Some(kafka) = &summary.kafka {
            line["replayed_skipped"] = kafka.replayed_skipped.into();
            line["pauses"] = kafka.pauses.into();
            line["revoked"] = kafka.revoked.into();
            line["empty_skipped"] = kafka.empty_skipped.into();
            line["table_commits"] = kafka.table_commits.into();
        }
        println!("{line}");
    } else if !args.transfer.quiet {
        let mut notes = Vec::new();
        if summary.dead_lettered > 0 {
            notes.push(format!(
                "{} invalid records in the dead letter",
                summary.dead_lettered
            ));
        }
        if let Some(kafka) = &summary.kafka {
            if kafka.replayed_skipped > 0 {
                notes.push(format!(
                    "{} messages already stored, skipped",
                    kafka.replayed_skipped
                ));
            }
            if kafka.empty_skipped > 0 {
                notes.push(format!(
                    "{} empty messages (tombstones) skipped",
                    kafka.empty_skipped
                ));
            }
            if kafka.pauses > 0 {
                notes.push(format!(
                    "partitions paused {} times while the store caught up",
                    kafka.pauses
                ));
            }
            if kafka.revoked > 0 {
                notes.push(format!(
                    "{} partitions handed to other members",
                    kafka.revoked
                ));
            }
        }
        eprintln!(
            "sluice ingest: {} records ({}) from {} in {} objects ({}) on {description} in {seconds:.1} s{}",
            summary.records,
            sluice_upload::format_size(stats.bytes_in),
            if args.from == "-" { "standard input" } else { &args.from },
            summary.objects,
            sluice_upload::format_size(stats.batch_stored_bytes),
            notes.iter().map(|n| format!("; {n}")).collect::<String>(),
        );
    }
}

/// The file's settings, then the flags.
/// The stream's settings: the `--config` file's over the definitions'
/// defaults, and the flags given on the command line over both (clap says
/// where each value came from, so no setting is overlaid by hand); validated.
/// `--table delta` or `--table iceberg` with no format anywhere means Parquet.
fn stream_config(args: &IngestArgs, matches: &clap::ArgMatches) -> anyhow::Result<StreamConfig> {
    use clap::parser::ValueSource;
    use clap::Args as _;
    let (mut table, path) = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let name = path.display().to_string();
            // The file alone first: its mistakes are reported with their line.
            toml::from_str::<StreamConfig>(&text)
                .map_err(|e| UsageError(format!("{name}: {e}")))?;
            let table: toml::Table =
                toml::from_str(&text).map_err(|e| UsageError(format!("{name}: {e}")))?;
            (table, name)
        }
        None => (toml::Table::new(), "(flags)".to_owned()),
    };
    let format_in_file = table.contains_key("format");
    let flags = toml::Table::try_from(&args.settings)
        .map_err(|e| UsageError(format!("stream settings: {e}")))?;
    let definitions = sluice_streams::StreamConfig::augment_args(clap::Command::new("stream"));
    for arg in definitions.get_arguments() {
        let id = arg.get_id().as_str();
        if matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        if let Some(value) = flags.get(id) {
            table.insert(id.to_owned(), value.clone());
        }
    }
    let mut config: StreamConfig = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| UsageError(format!("{path}: {e}")))?;
    let format_given =
        format_in_file || matches.value_source("format") == Some(ValueSource::CommandLine);
    if config.table != sluice_streams::TableFormat::None && !format_given {
        config.format = RecordFormat::Parquet;
    }
    config.validate().map_err(|e| UsageError(e.to_string()))?;
    Ok(config)
}

/// What a whole input became.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub dead_lettered: u64,
    pub objects: u64,
    /// What only a Kafka source counts.
    pub kafka: Option<sluice_streams::kafka::KafkaSummary>,
    /// The table held the input's idempotency key: nothing was appended.
    pub replayed: bool,
}

/// Ingests every line of `input`, then closes the stream and waits for its
/// batches. An input with an idempotency key (started at the stream's table
/// sink) has its files committed together once it has ended, or withdrawn
/// when it fails part-way.
async fn ingest(
    stream: &RecordStream,
    input: Box<dyn Read + Send>,
    key: Option<(
        std::sync::Arc<sluice_streams::table::sink::TableSink>,
        String,
    )>,
) -> anyhow::Result<Summary> {
    let request = key.as_ref().map(|(_, key)| sluice_streams::RequestKey {
        key: key.clone(),
        last: false,
    });
    let width = std::thread::available_parallelism().map_or(2, |n| n.get()) + 1;
    let blocks = blocks(
        stream.memory().clone(),
        input,
        stream.config().max_record_bytes,
    );
    // Each block is parsed in a task of its own: a parse waiting in the
    // buffer for its turn must not hold a slot of the CPU pool that the append
    // of the block before it needs (the pool hands slots out in order).
    let mut parsed = blocks
        .map(|block| {
            let stream = stream.clone();
            async move {
                let (data, memory, first_line) = block?;
                let arrival = time::OffsetDateTime::now_utc();
                let parsed = tokio::spawn(async move {
                    parse_on_pool(&stream, data, BodyFormat::Ndjson, arrival, first_line).await
                })
                .await?;
                Ok::<_, anyhow::Error>((parsed, arrival, memory, first_line))
            }
        })
        .buffered(width);
    let mut summary = Summary::default();
    let mut waiting: HashMap<u64, Ticket> = HashMap::new();
    let result = async {
        while let Some(block) = parsed.next().await {
            let (parsed, arrival, memory, first_line) = block?;
            let submitted =
                match append_on_pool(stream, parsed?, arrival, memory, request.clone()).await {
                    Err(StreamError::BadRecords { first, count }) => {
                        let kept = match first_line {
                            0 => "nothing was stored".to_string(),
                            n => format!("the {n} lines before its block are stored"),
                        };
                        return Err(anyhow!(
                            "{first} ({count} invalid in its block); {kept} \
                         (--dead-letter-template keeps invalid lines aside instead)"
                        ));
                    }
                    other => other?,
                };
            summary.records += submitted.records;
            summary.dead_lettered += submitted.dead_lettered;
            for ticket in submitted.tickets {
                waiting.entry(ticket.batch()).or_insert(ticket);
            }
            // Batches already stored need no waiting; a failed one ends the run.
            let mut failed = None;
            waiting.retain(|_, ticket| match ticket.peek() {
                None => true,
                Some(Ok(_)) => {
                    summary.objects += 1;
                    false
                }
                Some(Err(e)) => {
                    failed = Some(e);
                    false
                }
            });
            if let Some(e) = failed {
                return Err(anyhow::Error::new(e));
            }
        }
        Ok(())
    }
    .await;
    drop(parsed);
    // The input is over: a keyed one's files may be committed now, or, had
    // it failed, none of them may (before closing: the batches wait for it).
    if let Some((sink, key)) = &key {
        match &result {
            Ok(()) => sink.appended(key),
            Err(_) => sink.abandon(key),
        }
    }
    stream.close().await;
    result?;
    for ticket in waiting.into_values() {
        ticket.stored().await?;
        summary.objects += 1;
    }
    Ok(summary)
}

/// How many lines end in `block`.
fn line_ends(block: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', block).count() as u64
}

/// The input as blocks of whole lines, each with its memory and the number
/// of lines before it.
fn blocks(
    memory: MemoryShare,
    input: Box<dyn Read + Send>,
    max_line: u64,
) -> futures::stream::BoxStream<'static, anyhow::Result<(Bytes, Reservation, u64)>> {
    struct State {
        memory: MemoryShare,
        input: Option<Box<dyn Read + Send>>,
        carry: Vec<u8>,
        lines: u64,
        done: bool,
    }
    let state = State {
        memory,
        input: Some(input),
        carry: Vec::new(),
        lines: 0,
        done: false,
    };
    futures::stream::unfold(state, move |mut state| async move {
        if state.done {
            return None;
        }
        let mut memory = state
            .memory
            .reserve((state.carry.len() + BLOCK) as u64)
            .await;
        let mut input = state.input.take()?;
        let mut buffer = std::mem::take(&mut state.carry);
        let read = tokio::task::spawn_blocking(move || {
            let start = buffer.len();
            buffer.resize(start + BLOCK, 0);
            let mut filled = start;
            let result = loop {
                match input.read(&mut buffer[filled..]) {
                    Ok(0) => break Ok(true),
                    Ok(n) => {
                        filled += n;
                        if filled == buffer.len() {
                            break Ok(false);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            buffer.truncate(filled);
            (input, buffer, result)
        })
        .await;
        let (input, mut buffer, ended) = match read {
            Ok(read) => read,
            Err(e) => return Some((Err(anyhow!("reading standard input: {e}")), state)),
        };
        let ended = match ended {
            Ok(ended) => ended,
            Err(e) => {
                state.done = true;
                return Some((Err(anyhow!("reading standard input: {e}")), state));
            }
        };
        state.input = Some(input);
        if ended {
            state.done = true;
        } else {
            // Whole lines only: the tail goes with the next block.
            let cut = memchr::memrchr(b'\n', &buffer).map_or(0, |i| i + 1);
            state.carry = buffer.split_off(cut);
            if state.carry.len() as u64 > max_line + 2 {
                state.done = true;
                return Some((
                    Err(anyhow!(
                        "line {} is longer than the largest record ({max_line} bytes)",
                        state.lines + line_ends(&buffer) + 1
                    )),
                    state,
                ));
            }
        }
        let first_line = state.lines;
        state.lines += line_ends(&buffer);
        memory.shrink_to(buffer.len() as u64);
        Some((Ok((Bytes::from(buffer), memory, first_line)), state))
    })
    .boxed()
}
