//! The Kafka source: a consumer-group member that turns a topic's messages
//! (JSON values) into the stream's batches, one batch at a time per Kafka
//! partition, and commits a partition's offset only once the batches holding
//! its records are stored, in order.
//!
//! Exactly-once output: keys are `…{partition}…{offset}` (the batch's first
//! offset; checked at start), written with `If-None-Match: *`. When a partition
//! is taken up at an offset (start, restart, rebalance), the batches already
//! stored from that offset on (a run that died after storing them and before
//! committing) are found by listing the partition's keys; their records are
//! counted and that many messages are skipped, so a replay neither writes a
//! record twice nor loses one. Batch boundaries need not repeat: a replay reads
//! what was stored, whatever flushed it.
//!
//! Messages that are not records: an empty one (a tombstone) is skipped,
//! dead-lettered or stops the run, as the stream's `empty_messages` says; an
//! invalid one is dead-lettered when the stream has a dead letter and stops
//! the run otherwise. Which one a message is depends on the message alone, so
//! a replay decides the same: it counts only records against a stored batch,
//! and writes a dead letter again to its own key (one object per message, at
//! its partition and offset), where it finds it stored. A run that stops
//! stores and commits what came before the message that stopped it.
//!
//! Memory: librdkafka's prefetch queue and the gatherings on their way to the
//! ingest task (an eighth of the record memory each) are reserved from the
//! streams' record memory when the run starts; records in open batches are reserved
//! as they are appended. When the store falls behind, the budget fills, the
//! ingest task waits, and the poller pauses the partitions. The consumer's
//! polling, pausing and rebalance handling are in [`poller`]; recovery in
//! [`recovery`].

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_upload::Reservation;
use tracing::Instrument;

use crate::config::{EmptyMessages, RecordSource};
use crate::error::{BadRecord, StreamError};
use crate::records::{compact_json, line_copy, RecordChecker, RecordRules, Run, RunBuilder};
use crate::stream::{DeadMessage, RecordStream, Ticket};
use crate::template::PartitionKey;

mod poller;
mod recovery;
mod table;

use poller::{Gathered, Handover, Placed, Polled, SourceConsumer, SourceContext};
use recovery::stored_from;
use table::TableOffsets;

use crate::table::stream_table::CommitError;
use sluice_table::{Committed, NewFile, Transaction};

/// How often stored batches are committed and idleness checked.
const TICK: Duration = Duration::from_millis(100);
/// How often, at most, a stream into a table commits to it while running
/// (each commit is one log file: fewer, larger commits read faster).
const TABLE_COMMIT_EVERY: Duration = Duration::from_secs(1);
/// librdkafka's wait before fetching again for a partition whose prefetch
/// queue was full. Its default of one second left the consumer idle most of
/// the time once the queue had filled (1.6x slower end to end).
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// Where to read, and when to stop.
#[derive(Debug, Clone)]
pub struct KafkaSource {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    pub topic: String,
    pub group: String,
    /// Stop once no message came for this long and everything read is stored
    /// and committed (for batch jobs and tests); `None`: run until stopped.
    pub idle_exit: Option<Duration>,
}

impl KafkaSource {
    /// Parses `kafka://BROKERS/TOPIC`.
    pub fn parse(url: &str, group: &str) -> Result<KafkaSource, String> {
        let rest = url
            .strip_prefix("kafka://")
            .ok_or_else(|| format!("{url:?} is not kafka://BROKERS/TOPIC"))?;
        let (brokers, topic) = rest
            .split_once('/')
            .filter(|(b, t)| !b.is_empty() && !t.is_empty() && !t.contains('/'))
            .ok_or_else(|| format!("{url:?} is not kafka://BROKERS/TOPIC"))?;
        if group.is_empty() {
            return Err("the consumer group must not be empty".into());
        }
        Ok(KafkaSource {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            group: group.to_string(),
            idle_exit: None,
        })
    }
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KafkaSummary {
    pub records: u64,
    /// Messages skipped because a stored batch already held them.
    pub replayed_skipped: u64,
    pub objects: u64,
    /// Times the partitions were paused because the store fell behind.
    pub pauses: u64,
    /// Partitions revoked by a rebalance (their batches stored and committed first).
    pub revoked: u64,
    /// Invalid or empty messages stored in the dead letter.
    pub dead_lettered: u64,
    /// Empty messages (tombstones) left out.
    pub empty_skipped: u64,
    /// Commits to the stream's table.
    pub table_commits: u64,
}

/// Why the source stopped.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("the stream's key template does not suit Kafka: {0}")]
    Template(String),
    #[error(transparent)]
    Config(#[from] crate::error::StreamConfigError),
    /// rdkafka's own error (its text already holds its source's).
    #[error("Kafka: {0}")]
    Client(rdkafka::error::KafkaError),
    #[error("topic {topic} does not exist on the brokers (waited {waited:?} for it)")]
    TopicMissing { topic: String, waited: Duration },
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("reading stored batch {key}: {reason}")]
    Recovery { key: String, reason: String },
    #[error(transparent)]
    Table(#[from] CommitError),
}

impl From<rdkafka::error::KafkaError> for KafkaError {
    fn from(error: rdkafka::error::KafkaError) -> KafkaError {
        KafkaError::Client(error)
    }
}

/// One partition's progress.
#[derive(Default)]
struct PartitionState {
    /// The offset the next message should have; `None` until one came.
    next: Option<i64>,
    /// Batches stored by earlier runs from where this run took the partition
    /// up: (first offset, records), in offset order.
    stored: VecDeque<(u64, u64)>,
    /// Messages of the stored batch being passed still to skip.
    skip: u64,
    /// Batches in append order with the last offset each holds so far; `None`
    /// for messages skipped because an earlier run stored them.
    batches: VecDeque<(Option<Ticket>, i64)>,
    /// A stream into a table: the partition's version in the table that
    /// this member's next commit follows (its next offset; None: none yet).
    table_at: Option<i64>,
    /// A table commit failed (it may have landed or not): nothing more of
    /// this run is committed; the next owner resumes where the table says.
    table_unsure: bool,
}

/// A partition's batches stored in order, ready to be committed.
struct Ready {
    partition: i32,
    /// The offset after the last message they cover.
    next: i64,
    /// The files among them (not dead letters).
    files: Vec<NewFile>,
}

/// Consumes `source` into `stream` until idle (when asked) or an error.
pub async fn run(stream: &RecordStream, source: &KafkaSource) -> Result<KafkaSummary, KafkaError> {
    stream.config().check_source(RecordSource::Kafka)?;
    let table_offsets = match stream.table() {
        Some(sink) => {
            stream
                .template()
                .check_table_layout()
                .map_err(KafkaError::Template)?;
            sink.table().keeps_positions().await?.map_err(|reason| {
                crate::error::StreamConfigError {
                    key: "table",
                    reason,
                }
            })?;
            sink.commit_by_source();
            Some(Arc::new(TableOffsets::new(
                sink.table().clone(),
                &source.group,
                &source.topic,
                tokio::runtime::Handle::current(),
            )))
        }
        None => {
            stream
                .template()
                .check_offset_layout()
                .map_err(KafkaError::Template)?;
            None
        }
    };
    let mut last_table_commit = tokio::time::Instant::now();
    // What waits before the ingest task takes it: librdkafka's prefetch queue
    // and the gatherings on their way, each an eighth of the record memory
    // at most (16 MiB each with the default budget).
    let memory = stream.memory();
    let prefetch = (memory.capacity() / 8).clamp(1 << 20, 64 << 20);
    let gather_bytes = (memory.capacity() / 8 / poller::GATHERINGS_HELD as u64)
        .clamp(64 << 10, poller::GATHER_BYTES_MAX as u64);
    let gathering_buffer = gather_bytes + poller::GATHER_SLACK as u64;
    let _waiting = memory
        .reserve(prefetch + gathering_buffer * poller::GATHERINGS_HELD as u64)
        .await;
    let (handover, mut polled) = Handover::new(
        &source.topic,
        gather_bytes as usize,
        stream.stats().clone(),
        table_offsets.clone(),
    );
    let consumer: Arc<SourceConsumer> = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &source.brokers)
            .set("group.id", &source.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("session.timeout.ms", "6000")
            .set("max.poll.interval.ms", "600000")
            .set("queued.max.messages.kbytes", (prefetch / 1024).to_string())
            .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
            .set("statistics.interval.ms", "1000")
            .create_with_context(SourceContext {
                handover: handover.clone(),
            })?,
    );
    consumer.subscribe(&[&source.topic])?;
    let poller = {
        let consumer = consumer.clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || poller::poll_messages(&consumer, &runtime))
    };
    let mut partitions: HashMap<i32, PartitionState> = HashMap::new();
    let mut summary = KafkaSummary::default();
    let mut last_message = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(TICK);
    let result = loop {
        tokio::select! {
            next = polled.recv() => {
                let outcome = match next {
                    Some(Ok(Polled::Messages(gathered))) => {
                        last_message = tokio::time::Instant::now();
                        take(stream, table_offsets.as_deref(), &mut partitions, gathered, &mut summary).await
                    }
                    Some(Ok(Polled::Revoked(revoked, done))) => {
                        last_message = tokio::time::Instant::now();
                        let outcome = give_up(stream, &consumer, table_offsets.as_deref(), &source.topic, &mut partitions, &revoked, &mut summary).await;
                        drop(done);
                        outcome
                    }
                    Some(Err(e)) => Err(e),
                    None => break Ok(()),
                };
                if let Err(e) = outcome {
                    break Err(e);
                }
            }
            _ = tick.tick() => {
                // A table is committed to once a second at most; the group
                // at every tick.
                let due = table_offsets.is_none() || last_table_commit.elapsed() >= TABLE_COMMIT_EVERY;
                if due {
                    last_table_commit = tokio::time::Instant::now();
                    let (ready, failed) = stored_offsets(&mut partitions, &mut summary);
                    if let Err(e) = commit_ready(stream, &consumer, table_offsets.as_deref(), &source.topic, &mut partitions, ready, CommitMode::Async, &mut summary).await {
                        break Err(e);
                    }
                    if let Some(e) = failed {
                        break Err(e.into());
                    }
                }
                // Idle counts from the assignment on (a group still waiting for a
                // dead member's session to lapse has given us nothing to read
                // yet), and never while paused (behind is not idle).
                if handover.paused() || consumer.assignment().map_or(true, |a| a.count() == 0) {
                    last_message = tokio::time::Instant::now();
                }
                if let Some(idle) = source.idle_exit {
                    let waiting = partitions
                        .values()
                        .any(|p| p.batches.iter().any(|(ticket, _)| ticket.is_some()));
                    if last_message.elapsed() >= idle {
                        if waiting {
                            stream.flush();
                        } else {
                            break Ok(());
                        }
                    }
                }
            }
        }
    };
    handover.stop();
    drop(polled);
    let _ = poller.await;
    summary.pauses = handover.pauses();
    // However the run ended, what it stored in order is committed (a run
    // stopped by an invalid message stores what came before it).
    stream.close().await;
    let finished = async {
        let (ready, failed) = stored_offsets(&mut partitions, &mut summary);
        let committed = commit_ready(
            stream,
            &consumer,
            table_offsets.as_deref(),
            &source.topic,
            &mut partitions,
            ready,
            CommitMode::Sync,
            &mut summary,
        )
        .await;
        // What stopped the run is its error; a final commit failing after
        // it (the topic deleted, the brokers gone) is logged.
        match (result, committed) {
            (Err(stopped), Err(commit)) => {
                tracing::warn!(error = %commit, "the final commit failed too");
                Err(stopped)
            }
            (result, committed) => {
                committed?;
                result?;
                failed.map_or(Ok(()), |e| Err(e.into()))
            }
        }
    }
    .await;
    // Closing the consumer leaves the group (a round trip to the broker): off
    // the I/O tasks, however the run ended.
    let _ = tokio::task::spawn_blocking(move || drop(consumer)).await;
    finished.map(|()| summary)
}

/// Partitions taken away by a rebalance: their open batches are flushed,
/// stored and committed before the rebalance goes on, and their state goes
/// (taken up again later, they are recovered like any other).
async fn give_up(
    stream: &RecordStream,
    consumer: &Arc<SourceConsumer>,
    table_offsets: Option<&TableOffsets>,
    topic: &str,
    partitions: &mut HashMap<i32, PartitionState>,
    revoked: &[i32],
    summary: &mut KafkaSummary,
) -> Result<(), KafkaError> {
    for &partition in revoked {
        stream.flush_partition(&PartitionKey {
            source_partition: Some(partition),
            ..PartitionKey::default()
        });
    }
    for partition in revoked {
        let tickets: Vec<Ticket> = partitions
            .get(partition)
            .map(|state| {
                state
                    .batches
                    .iter()
                    .filter_map(|(t, _)| t.clone())
                    .collect()
            })
            .unwrap_or_default();
        for ticket in tickets {
            ticket.stored().await?;
        }
    }
    let (ready, failed) = stored_offsets(partitions, summary);
    commit_ready(
        stream,
        consumer,
        table_offsets,
        topic,
        partitions,
        ready,
        CommitMode::Sync,
        summary,
    )
    .await?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    for partition in revoked {
        partitions.remove(partition);
    }
    summary.revoked += revoked.len() as u64;
    Ok(())
}

/// Skips what earlier runs stored, checks the rest and appends it.
async fn take(
    stream: &RecordStream,
    table_offsets: Option<&TableOffsets>,
    partitions: &mut HashMap<i32, PartitionState>,
    gathered: Gathered,
    summary: &mut KafkaSummary,
) -> Result<(), KafkaError> {
    let Gathered { data, messages } = gathered;
    let mut fresh = Vec::with_capacity(messages.len());
    let rules = kafka_rules(stream);
    let judge = Judge::new(stream, &rules);
    for message in messages {
        let state = partitions.entry(message.partition).or_default();
        if state.next == Some(message.offset) && state.skip == 0 && state.stored.is_empty() {
            // The common case: the next message of a partition with nothing
            // stored ahead of it.
            state.next = Some(message.offset + 1);
            fresh.push(message);
            continue;
        }
        let pending = partitions
            .get(&message.partition)
            .is_some_and(|state| state.batches.iter().any(|(ticket, _)| ticket.is_some()));
        // Taken up: the first message, or one before the last (a seek back).
        // A gap forward is not (compaction, transaction markers): a replay
        // part-way through a stored batch goes on counting it.
        let taken_up = partitions
            .get(&message.partition)
            .is_none_or(|state| state.next.is_none_or(|next| message.offset < next));
        if taken_up && !pending && !fresh.is_empty() {
            // What came before is appended (and queued) before recovery looks.
            append_fresh(
                stream,
                partitions,
                &data,
                std::mem::take(&mut fresh),
                summary,
            )
            .await?;
        }
        let state = partitions.entry(message.partition).or_default();
        if taken_up && !pending {
            // Taken up here (start, restart, rebalance): where the table says
            // this member's commits follow, or what earlier runs stored.
            match table_offsets {
                Some(offsets) => state.table_at = offsets.taken_up(message.partition).await?,
                None => {
                    state.stored = stored_from(stream, message.partition, message.offset).await?
                }
            }
            state.skip = 0;
        }
        state.next = Some(message.offset + 1);
        let offset = message.offset as u64;
        loop {
            let state = partitions.entry(message.partition).or_default();
            if state.skip > 0 {
                break;
            }
            match state.stored.front() {
                Some(&(first, records)) if first == offset => {
                    // A stored batch starts here: the fresh messages before it
                    // are appended and their open batch ends, so that every
                    // batch holds consecutive messages and commits stay in order.
                    let before = std::mem::take(&mut fresh);
                    if !before.is_empty() {
                        append_fresh(stream, partitions, &data, before, summary).await?;
                    }
                    let state = partitions.entry(message.partition).or_default();
                    state.stored.pop_front();
                    state.skip = records;
                    stream.flush_partition(&PartitionKey {
                        source_partition: Some(message.partition),
                        ..PartitionKey::default()
                    });
                }
                Some(&(first, _)) if first < offset => {
                    state.stored.pop_front();
                }
                _ => break,
            }
        }
        let state = partitions.entry(message.partition).or_default();
        if state.skip > 0 {
            // Inside a batch an earlier run stored: only records count against
            // it; a dead letter is written again (to its own key, where it is
            // found stored), and what stops a run stops it again.
            match judge.verdict(&data[message.start..message.end], &message) {
                Verdict::Record(..) => {
                    state.skip -= 1;
                    summary.replayed_skipped += 1;
                }
                Verdict::Skipped => summary.empty_skipped += 1,
                Verdict::DeadLetter(_) | Verdict::Stop(_) => {
                    // Queued now, before the records after it are done with.
                    fresh.push(message);
                    append_fresh(
                        stream,
                        partitions,
                        &data,
                        std::mem::take(&mut fresh),
                        summary,
                    )
                    .await?;
                    continue;
                }
            }
            // Stored already: committed once the batches before it are.
            match state.batches.back_mut() {
                Some((None, at)) => *at = message.offset,
                _ => state.batches.push_back((None, message.offset)),
            }
            continue;
        }
        fresh.push(message);
    }
    append_fresh(stream, partitions, &data, fresh, summary).await
}

/// Checks `fresh` messages on the CPU pool, appends the records and stores
/// the dead letters; a message that stops the run does so once what came
/// before it is appended.
async fn append_fresh(
    stream: &RecordStream,
    partitions: &mut HashMap<i32, PartitionState>,
    data: &Bytes,
    fresh: Vec<Placed>,
    summary: &mut KafkaSummary,
) -> Result<(), KafkaError> {
    if fresh.is_empty() {
        return Ok(());
    }
    let bytes: u64 = fresh.iter().map(|m| (m.end - m.start) as u64 + 1).sum();
    let memory = stream.memory().reserve(bytes).await;
    let (job_stream, data) = (stream.clone(), data.clone());
    let appended = stream
        .pool()
        .run(move || check_and_append(&job_stream, &data, &fresh, memory))
        .await?;
    summary.records += appended.records;
    summary.dead_lettered += appended.dead.len() as u64;
    summary.empty_skipped += appended.skipped.len() as u64;
    for (partition, touched) in appended.batches {
        let state = partitions.entry(partition).or_default();
        for (ticket, last) in touched {
            match state.batches.back_mut() {
                Some((Some(back), at)) if back.batch() == ticket.batch() => *at = last as i64,
                _ => state.batches.push_back((Some(ticket), last as i64)),
            }
        }
    }
    // Offsets that are not records are done once everything queued before
    // them is: a skipped one stretches the last entry (or is one), a dead
    // letter's object is waited for after it.
    let mut others: Vec<(i32, i64, Option<Ticket>)> = appended
        .skipped
        .into_iter()
        .map(|(partition, offset)| (partition, offset, None))
        .chain(
            appended
                .dead
                .into_iter()
                .map(|(m, ticket)| (m.partition, m.offset as i64, Some(ticket))),
        )
        .collect();
    others.sort_by_key(|(partition, offset, _)| (*partition, *offset));
    for (partition, offset, ticket) in others {
        let state = partitions.entry(partition).or_default();
        match (ticket, state.batches.back_mut()) {
            (None, Some((_, at))) => *at = (*at).max(offset),
            (None, None) => state.batches.push_back((None, offset)),
            (Some(ticket), back) => {
                let at = back.map_or(offset, |(_, at)| (*at).max(offset));
                state.batches.push_back((Some(ticket), at));
            }
        }
    }
    match appended.stop {
        Some(first) => Err(StreamError::BadRecords { first, count: 1 }.into()),
        None => Ok(()),
    }
}

/// What fresh messages became: per Kafka partition, the batches they went
/// into, in order, with the last offset each holds so far; the dead letters
/// and the skipped messages; and the message that stops the run, if any.
struct Appended {
    records: u64,
    batches: Vec<(i32, Vec<(Ticket, u64)>)>,
    dead: Vec<(DeadMessage, Ticket)>,
    /// (partition, offset) of empty messages left out.
    skipped: Vec<(i32, i64)>,
    stop: Option<BadRecord>,
}

/// Checks fresh messages and appends them (a CPU pool job: appending copies
/// the records into their batches' frames), up to a message that stops the
/// run.
fn check_and_append(
    stream: &RecordStream,
    data: &Bytes,
    messages: &[Placed],
    mut memory: Reservation,
) -> Result<Appended, KafkaError> {
    let Checked {
        runs,
        dead,
        skipped,
        stop,
        took,
    } = check(stream, data, messages);
    stream.stats().parsed(took);
    stream
        .stats()
        .rejected(dead.len() as u64 + u64::from(stop.is_some()));
    let records = runs.iter().map(|run| run.records).sum();
    // Per partition, in offset order: one append each, whose batches come
    // back in order with their last offsets.
    let mut by_partition: HashMap<i32, Vec<Run>> = HashMap::new();
    for run in runs {
        let partition = run.partition.source_partition.expect("set by check");
        by_partition.entry(partition).or_default().push(run);
    }
    let mut batches = Vec::with_capacity(by_partition.len());
    for (partition, runs) in by_partition {
        let group: u64 = runs.iter().map(|run| run.data.len() as u64).sum();
        let share = memory.split(group);
        batches.push((partition, stream.append_tracked(runs, share)?));
    }
    let dead = stream.append_dead_messages(dead, memory)?;
    Ok(Appended {
        records,
        batches,
        dead,
        skipped,
        stop,
    })
}

/// Fresh messages sorted out, off the I/O tasks.
struct Checked {
    /// Runs of consecutive records of a partition (slices of the gathering
    /// when their values are clean one-line JSON, offsets kept).
    runs: Vec<Run>,
    dead: Vec<DeadMessage>,
    skipped: Vec<(i32, i64)>,
    /// The message that stops the run; those after it are not looked at.
    stop: Option<BadRecord>,
    took: Duration,
}

fn check(stream: &RecordStream, data: &Bytes, messages: &[Placed]) -> Checked {
    let started = std::time::Instant::now();
    let rules = kafka_rules(stream);
    let judge = Judge::new(stream, &rules);
    let mut runs = RunBuilder::default();
    let mut checked = Checked {
        runs: Vec::new(),
        dead: Vec::new(),
        skipped: Vec::new(),
        stop: None,
        took: Duration::ZERO,
    };
    for message in messages {
        let value = &data[message.start..message.end];
        match judge.verdict(value, message) {
            Verdict::Record(line, mut partition) => {
                partition.source_partition = Some(message.partition);
                let offset = Some(message.offset as u64);
                if matches!(line, Cow::Borrowed(_)) && line.len() == value.len() {
                    // The value and the `\n` the poller put after it.
                    runs.push_slice(data, message.start, message.end + 1, partition, offset);
                } else {
                    runs.push_owned(data, line_copy(&line), partition, offset);
                }
            }
            Verdict::Skipped => checked.skipped.push((message.partition, message.offset)),
            Verdict::DeadLetter(why) => {
                tracing::info!(%why, "a message for the dead letter");
                checked.dead.push(DeadMessage {
                    partition: message.partition,
                    offset: message.offset as u64,
                    raw: data.slice(message.start..message.end),
                });
            }
            Verdict::Stop(why) => {
                checked.stop = Some(why);
                break;
            }
        }
    }
    checked.runs = runs.finish(data);
    checked.took = started.elapsed();
    checked
}

/// The rules every message is checked under: Kafka templates have no time or
/// field placeholders (checked at start), so one set serves every message,
/// and the partition is the message's.
fn kafka_rules(stream: &RecordStream) -> RecordRules<'_> {
    let config = stream.config();
    RecordRules {
        template: stream.template(),
        time_field: config.time_field.as_deref(),
        time_is_column: config.partitions_by_record_time(),
        max_record_bytes: config.max_record_bytes,
        arrival: time::OffsetDateTime::now_utc(),
        source_partition: None,
        first_line: 0,
        schema: stream.schema(),
    }
}

/// What one message is.
enum Verdict<'v> {
    /// A record, on one line (borrowed: the value itself, trimmed).
    Record(Cow<'v, [u8]>, PartitionKey),
    /// An empty message the stream leaves out.
    Skipped,
    /// Kept in the dead letter, as it came.
    DeadLetter(BadRecord),
    /// Stops the run.
    Stop(BadRecord),
}

/// Sorts messages out; the verdict depends on the message alone (and the
/// stream's settings), so that a replay reaches the same one.
struct Judge<'a> {
    checker: RecordChecker<'a>,
    empty: EmptyMessages,
    dead_letter: bool,
}

impl<'a> Judge<'a> {
    fn new(stream: &RecordStream, rules: &'a RecordRules<'a>) -> Judge<'a> {
        Judge {
            checker: RecordChecker::new(rules),
            empty: stream.config().empty_messages,
            dead_letter: stream.has_dead_letter(),
        }
    }

    fn verdict<'v>(&self, value: &'v [u8], message: &Placed) -> Verdict<'v> {
        let why = |reason: &str| BadRecord {
            place: "offset",
            number: message.offset as u64,
            reason: format!("partition {}: {reason}", message.partition),
        };
        let trimmed = value.trim_ascii();
        if trimmed.is_empty() {
            return match self.empty {
                EmptyMessages::Skip => Verdict::Skipped,
                EmptyMessages::DeadLetter => Verdict::DeadLetter(why("an empty message")),
                EmptyMessages::Stop => Verdict::Stop(why(
                    "an empty message (a tombstone, or no value); --empty-messages skip leaves them out",
                )),
            };
        }
        let checked = compact_json(trimmed)
            .ok_or_else(|| "not JSON".to_string())
            .and_then(|line| self.checker.check(&line).map(|partition| (line, partition)));
        match checked {
            Ok((line, partition)) => Verdict::Record(line, partition),
            Err(reason) if self.dead_letter => Verdict::DeadLetter(why(&reason)),
            Err(reason) => Verdict::Stop(why(&reason)),
        }
    }
}

/// Per partition, the batches stored in order (taken off the partition's
/// queue: the caller commits them), and the first batch that failed, if one
/// did (nothing after it is committed; the run ends).
fn stored_offsets(
    partitions: &mut HashMap<i32, PartitionState>,
    summary: &mut KafkaSummary,
) -> (Vec<Ready>, Option<StreamError>) {
    let mut ready = Vec::new();
    let mut failed = None;
    let mut seen = std::collections::HashSet::new();
    for (partition, state) in partitions.iter_mut() {
        if state.skip > 0 {
            // Part-way through a batch an earlier run stored: a commit here
            // would make the next owner miss that batch (it lists batches from
            // the committed offset on) and write the rest of its records again.
            continue;
        }
        // The entries stored in order from the front.
        let mut whole = 0;
        for (ticket, _) in &state.batches {
            if let Some(ticket) = ticket {
                match ticket.peek() {
                    None => break,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        failed.get_or_insert(e);
                        break;
                    }
                }
            }
            whole += 1;
        }
        // A batch with an entry after those (records after a dead letter
        // still queued) is not done with: the commit stops before its first
        // entry, so that a committed offset never passes a record of a file
        // left out, nor a file's records pass the committed offset.
        let later: std::collections::HashSet<u64> = state
            .batches
            .iter()
            .skip(whole)
            .filter_map(|(ticket, _)| ticket.as_ref().map(Ticket::batch))
            .collect();
        if let Some(cut) = state
            .batches
            .iter()
            .take(whole)
            .position(|(ticket, _)| ticket.as_ref().is_some_and(|t| later.contains(&t.batch())))
        {
            whole = cut;
        }
        let mut done: Option<i64> = None;
        let mut files = Vec::new();
        for (ticket, last) in state.batches.drain(..whole) {
            if let Some(Ok(stored)) = ticket.as_ref().and_then(Ticket::peek) {
                if seen.insert(stored.key.clone()) {
                    summary.objects += 1;
                    if !stored.dead_letter {
                        files.push(stored.table_file());
                    }
                }
            }
            done = Some(done.map_or(last, |d| d.max(last)));
        }
        if let Some(last) = done {
            ready.push(Ready {
                partition: *partition,
                next: last + 1,
                files,
            });
        }
    }
    (ready, failed)
}

/// Commits what is `ready`: to the stream's table first (one commit, with
/// each partition's transaction moving to its next offset), then the
/// group's offsets (for a table, a hint for lag monitors).
#[allow(clippy::too_many_arguments)]
async fn commit_ready(
    stream: &RecordStream,
    consumer: &Arc<SourceConsumer>,
    table_offsets: Option<&TableOffsets>,
    topic: &str,
    partitions: &mut HashMap<i32, PartitionState>,
    ready: Vec<Ready>,
    mode: CommitMode,
    summary: &mut KafkaSummary,
) -> Result<(), KafkaError> {
    if ready.is_empty() {
        return Ok(());
    }
    if let Some(offsets) = table_offsets {
        if partitions.values().any(|state| state.table_unsure) {
            return Ok(());
        }
        let transactions: Vec<Transaction> = ready
            .iter()
            .map(|r| Transaction {
                app_id: offsets.app_id(r.partition),
                after: partitions.get(&r.partition).and_then(|s| s.table_at),
                version: r.next,
            })
            .collect();
        let files: Vec<NewFile> = ready.iter().flat_map(|r| r.files.clone()).collect();
        let span = tracing::info_span!(
            "table_commit",
            format = offsets.table().format(),
            files = files.len(),
            partitions = ready.len()
        );
        let committed = match offsets
            .table()
            .commit(&files, &transactions, stream.table_columns().as_deref())
            .instrument(span)
            .await
        {
            Ok(committed) => committed,
            Err(e) => {
                // What was taken off the queues is neither in nor out for
                // sure: commit nothing after it.
                for state in partitions.values_mut() {
                    state.table_unsure = true;
                }
                return Err(e.into());
            }
        };
        if let Committed::Version(version) = committed {
            offsets.table().after_commit(version);
        }
        summary.table_commits += 1;
        for r in &ready {
            if let Some(state) = partitions.get_mut(&r.partition) {
                state.table_at = Some(r.next);
            }
        }
    }
    let mut commits = TopicPartitionList::new();
    for r in &ready {
        commits.add_partition_offset(topic, r.partition, Offset::Offset(r.next))?;
    }
    match mode {
        CommitMode::Sync => commit_sync(consumer, commits).await,
        CommitMode::Async => commit(consumer, commits, CommitMode::Async),
    }
}

/// Commits `offsets` (nothing when empty); `Async` does not block.
fn commit(
    consumer: &SourceConsumer,
    offsets: TopicPartitionList,
    mode: CommitMode,
) -> Result<(), KafkaError> {
    if offsets.count() > 0 {
        consumer.commit(&offsets, mode)?;
    }
    Ok(())
}

/// Commits `offsets` and waits for the broker's answer, off the I/O tasks.
async fn commit_sync(
    consumer: &Arc<SourceConsumer>,
    offsets: TopicPartitionList,
) -> Result<(), KafkaError> {
    let consumer = consumer.clone();
    match tokio::task::spawn_blocking(move || commit(&consumer, offsets, CommitMode::Sync)).await {
        Ok(committed) => committed,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("a commit was cancelled: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored batch (or a dead letter) at `key`.
    fn stored(key: &str, dead_letter: bool) -> Option<crate::stream::BatchResult> {
        Some(Ok(Arc::new(crate::stream::StoredBatch {
            stream: "s".into(),
            key: key.into(),
            records: 1,
            record_bytes: 1,
            outcome: sluice_upload::UploadOutcome {
                key: key.into(),
                size: 10,
                etag: String::new(),
                checksum: None,
                parts: 0,
            },
            compression: crate::config::Compression::Zstd,
            first_offset: 0,
            last_offset: 0,
            partition: PartitionKey::default(),
            dead_letter,
            flush_time: Duration::ZERO,
            table_version: None,
            announced_as: None,
            footer: None,
        })))
    }

    #[test]
    fn a_commit_never_passes_a_batch_whose_records_continue_after_a_queued_entry() {
        // (entries: batch id, stored?, dead letter?, last offset) → (next, files)
        type Entry = (u64, bool, bool, i64);
        type Case<'a> = (&'a str, Vec<Entry>, Option<(i64, Vec<&'a str>)>);
        let cases: Vec<Case> = vec![
            (
                "records after a dead letter still being stored: nothing yet",
                vec![
                    (1, true, false, 10),
                    (2, false, true, 11),
                    (1, true, false, 20),
                ],
                None,
            ),
            (
                "the dead letter stored: the batch and its records after it",
                vec![
                    (1, true, false, 10),
                    (2, true, true, 11),
                    (1, true, false, 20),
                ],
                Some((21, vec!["b1"])),
            ),
            (
                "a stored batch before one still open: up to its end",
                vec![(1, true, false, 10), (3, false, false, 20)],
                Some((11, vec!["b1"])),
            ),
            (
                "a skipped message stretches what is done",
                vec![(1, true, false, 10)],
                Some((11, vec!["b1"])),
            ),
        ];
        for (name, entries, want) in cases {
            let mut state = PartitionState::default();
            for (batch, done, dead_letter, last) in entries {
                let result = done
                    .then(|| stored(&format!("b{batch}"), dead_letter))
                    .flatten();
                state
                    .batches
                    .push_back((Some(Ticket::ended(batch, result)), last));
            }
            let mut partitions = HashMap::from([(0, state)]);
            let (ready, failed) = stored_offsets(&mut partitions, &mut KafkaSummary::default());
            assert!(failed.is_none(), "{name}");
            let got = ready.first().map(|r| {
                (
                    r.next,
                    r.files.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(),
                )
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn source_urls() {
        let cases = [
            (
                "kafka://127.0.0.1:9092/clicks",
                Ok(("127.0.0.1:9092", "clicks")),
            ),
            ("kafka://a:1,b:2/t", Ok(("a:1,b:2", "t"))),
            ("kafka:///t", Err(())),
            ("kafka://a:1/", Err(())),
            ("kafka://a:1/t/u", Err(())),
            ("http://a:1/t", Err(())),
        ];
        for (url, want) in cases {
            let got = KafkaSource::parse(url, "g")
                .map(|s| (s.brokers, s.topic))
                .map_err(|_| ());
            let want = want.map(|(b, t)| (b.to_string(), t.to_string()));
            assert_eq!(got, want, "{url}");
        }
    }
}
