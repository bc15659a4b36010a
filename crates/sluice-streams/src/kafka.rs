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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use sluice_upload::Reservation;

use crate::error::{BadRecord, StreamError};
use crate::records::{compact_json, RecordChecker, RecordRules, Rejected, Run};
use crate::stream::{RecordStream, Ticket};
use crate::template::PartitionKey;

/// Messages gathered before they are checked together on the CPU pool.
const GATHER_MESSAGES: usize = 2000;
/// How long the poller waits for a gathering's first message (then it looks
/// whether it should stop).
const POLL_WAIT: Duration = Duration::from_millis(100);
/// How often stored batches are committed and idleness checked.
const TICK: Duration = Duration::from_millis(100);

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
}

/// Why the source stopped.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("the stream's key template does not suit Kafka: {0}")]
    Template(String),
    #[error("Kafka: {0}")]
    Client(#[from] rdkafka::error::KafkaError),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("reading stored batch {key}: {reason}")]
    Recovery { key: String, reason: String },
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
}

/// Consumes `source` into `stream` until idle (when asked) or an error.
pub async fn run(stream: &RecordStream, source: &KafkaSource) -> Result<KafkaSummary, KafkaError> {
    stream
        .template()
        .check_offset_layout()
        .map_err(KafkaError::Template)?;
    let consumer: Arc<BaseConsumer> = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &source.brokers)
            .set("group.id", &source.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("session.timeout.ms", "6000")
            .set("max.poll.interval.ms", "600000")
            .create()?,
    );
    consumer.subscribe(&[&source.topic])?;
    // Messages are polled on a thread of their own, a gathering at a time
    // (polling one by one through an async stream capped a run at about
    // 100,000 messages/s); the channel's bound is the backpressure.
    let (gatherings, mut gathered_rx) = tokio::sync::mpsc::channel::<KafkaResult<Vec<Owned>>>(4);
    let polling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let poller = {
        let (consumer, polling) = (consumer.clone(), polling.clone());
        tokio::task::spawn_blocking(move || poll_messages(&consumer, &polling, &gatherings))
    };
    let mut partitions: HashMap<i32, PartitionState> = HashMap::new();
    let mut summary = KafkaSummary::default();
    let mut last_message = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(TICK);
    let result = loop {
        tokio::select! {
            gathered = gathered_rx.recv() => {
                let gathered = match gathered {
                    Some(Ok(gathered)) => gathered,
                    Some(Err(e)) => break Err(e.into()),
                    None => break Ok(()),
                };
                last_message = tokio::time::Instant::now();
                if let Err(e) = take(stream, &mut partitions, gathered, &mut summary).await {
                    break Err(e);
                }
            }
            _ = tick.tick() => {
                if let Err(e) = commit_stored(&consumer, &source.topic, &mut partitions, &mut summary, CommitMode::Async) {
                    break Err(e);
                }
                // Idle counts from the assignment on: a group still waiting for a
                // dead member's session to lapse has given us nothing to read yet.
                if consumer.assignment().map_or(true, |a| a.count() == 0) {
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
    polling.store(false, std::sync::atomic::Ordering::Relaxed);
    drop(gathered_rx);
    let _ = poller.await;
    stream.close().await;
    result?;
    commit_stored(
        &consumer,
        &source.topic,
        &mut partitions,
        &mut summary,
        CommitMode::Sync,
    )?;
    Ok(summary)
}

/// Polls gatherings of messages (up to [`GATHER_MESSAGES`], as many as are
/// ready after the first) until `polling` goes false or the receiver is gone.
fn poll_messages(
    consumer: &BaseConsumer,
    polling: &std::sync::atomic::AtomicBool,
    gatherings: &tokio::sync::mpsc::Sender<KafkaResult<Vec<Owned>>>,
) {
    while polling.load(std::sync::atomic::Ordering::Relaxed) {
        let mut gathered = Vec::new();
        let mut wait = POLL_WAIT;
        while gathered.len() < GATHER_MESSAGES {
            match consumer.poll(wait) {
                Some(Ok(message)) => gathered.push(owned(&message)),
                Some(Err(e)) => {
                    let _ = gatherings.blocking_send(Err(e));
                    return;
                }
                None => break,
            }
            wait = Duration::ZERO;
        }
        if !gathered.is_empty() && gatherings.blocking_send(Ok(gathered)).is_err() {
            return;
        }
    }
}

/// A message taken out of the consumer's buffer.
struct Owned {
    partition: i32,
    offset: i64,
    value: Bytes,
}

fn owned(message: &impl Message) -> Owned {
    Owned {
        partition: message.partition(),
        offset: message.offset(),
        value: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
    }
}

/// Skips what earlier runs stored, checks the rest and appends it.
async fn take(
    stream: &RecordStream,
    partitions: &mut HashMap<i32, PartitionState>,
    messages: Vec<Owned>,
    summary: &mut KafkaSummary,
) -> Result<(), KafkaError> {
    let mut fresh = Vec::with_capacity(messages.len());
    for message in messages {
        let pending = partitions
            .get(&message.partition)
            .is_some_and(|state| state.batches.iter().any(|(ticket, _)| ticket.is_some()));
        let taken_up = partitions
            .get(&message.partition)
            .is_none_or(|state| state.next != Some(message.offset));
        if taken_up && !pending && !fresh.is_empty() {
            // What came before is appended (and queued) before recovery looks.
            append_fresh(stream, partitions, std::mem::take(&mut fresh), summary).await?;
        }
        let state = partitions.entry(message.partition).or_default();
        if taken_up && !pending {
            // Taken up here (start, restart, rebalance): find what is stored.
            state.stored = stored_from(stream, message.partition, message.offset).await?;
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
                        append_fresh(stream, partitions, before, summary).await?;
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
            state.skip -= 1;
            summary.replayed_skipped += 1;
            // Stored already: committed once the batches before it are.
            match state.batches.back_mut() {
                Some((None, at)) => *at = message.offset,
                _ => state.batches.push_back((None, message.offset)),
            }
            continue;
        }
        fresh.push(message);
    }
    append_fresh(stream, partitions, fresh, summary).await
}

/// Checks `fresh` messages on the CPU pool and appends them.
async fn append_fresh(
    stream: &RecordStream,
    partitions: &mut HashMap<i32, PartitionState>,
    fresh: Vec<Owned>,
    summary: &mut KafkaSummary,
) -> Result<(), KafkaError> {
    if fresh.is_empty() {
        return Ok(());
    }
    let bytes: u64 = fresh.iter().map(|m| m.value.len() as u64 + 1).sum();
    let memory = stream.engine().budget().reserve(bytes).await;
    let checker_stream = stream.clone();
    let (runs, rejected, took) = stream
        .pool()
        .run(move || check(&checker_stream, fresh))
        .await;
    stream.stats().parsed(took);
    if let Some(first) = rejected.first() {
        // No dead letter for Kafka: a batch must hold consecutive messages for
        // recovery to count them, so an invalid one stops the run.
        stream.stats().rejected(rejected.len() as u64);
        return Err(StreamError::BadRecords {
            first: first.why.clone(),
            count: rejected.len() as u64,
        }
        .into());
    }
    append(stream, partitions, runs, memory, summary)
}

/// One-record runs (offsets kept) and the invalid messages, off the I/O tasks.
fn check(
    stream: &RecordStream,
    messages: Vec<Owned>,
) -> (Vec<(i32, i64, Run)>, Vec<Rejected>, Duration) {
    let started = std::time::Instant::now();
    let config = stream.config();
    let mut runs = Vec::with_capacity(messages.len());
    let mut rejected = Vec::new();
    let mut buffer = BytesMut::new();
    let mut places = Vec::with_capacity(messages.len());
    // Kafka templates have no time or field placeholders (checked at start):
    // one checker serves every message, and the partition is the message's.
    let rules = RecordRules {
        template: stream.template(),
        time_field: config.time_field.as_deref(),
        max_record_bytes: config.max_record_bytes,
        arrival: time::OffsetDateTime::now_utc(),
        source_partition: None,
        first_line: 0,
    };
    let checker = RecordChecker::new(&rules);
    for message in &messages {
        let checked = compact_json(message.value.trim_ascii())
            .ok_or_else(|| "not JSON".to_string())
            .and_then(|line| checker.check(&line).map(|partition| (line, partition)));
        match checked {
            Ok((line, mut partition)) => {
                partition.source_partition = Some(message.partition);
                let start = buffer.len();
                buffer.extend_from_slice(&line);
                buffer.extend_from_slice(b"\n");
                places.push((
                    message.partition,
                    message.offset,
                    start,
                    buffer.len(),
                    partition,
                ));
            }
            Err(reason) => rejected.push(Rejected {
                why: BadRecord {
                    place: "offset",
                    number: message.offset as u64,
                    reason: format!("partition {}: {reason}", message.partition),
                },
                raw: message.value.clone(),
            }),
        }
    }
    let data = buffer.freeze();
    for (partition_id, offset, start, end, partition) in places {
        runs.push((
            partition_id,
            offset,
            Run {
                partition,
                data: data.slice(start..end),
                records: 1,
                offset: Some(offset as u64),
            },
        ));
    }
    (runs, rejected, started.elapsed())
}

fn append(
    stream: &RecordStream,
    partitions: &mut HashMap<i32, PartitionState>,
    runs: Vec<(i32, i64, Run)>,
    mut memory: Reservation,
    summary: &mut KafkaSummary,
) -> Result<(), KafkaError> {
    summary.records += runs.len() as u64;
    // Per partition, in offset order: one append each, whose batches come
    // back in order with their last offsets.
    let mut by_partition: HashMap<i32, Vec<Run>> = HashMap::new();
    for (partition, _, run) in runs {
        by_partition.entry(partition).or_default().push(run);
    }
    for (partition, runs) in by_partition {
        let group: u64 = runs.iter().map(|run| run.data.len() as u64).sum();
        let share = memory.split(group);
        let state = partitions.entry(partition).or_default();
        for (ticket, last) in stream.append_tracked(runs, share)? {
            match state.batches.back_mut() {
                Some((Some(back), at)) if back.batch() == ticket.batch() => *at = last as i64,
                _ => state.batches.push_back((Some(ticket), last as i64)),
            }
        }
    }
    Ok(())
}

/// Commits, per partition, the offset after the last batch stored in order;
/// a failed batch ends the run (nothing after it is committed).
fn commit_stored(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &mut HashMap<i32, PartitionState>,
    summary: &mut KafkaSummary,
    mode: CommitMode,
) -> Result<(), KafkaError> {
    let mut commits = TopicPartitionList::new();
    let mut seen = std::collections::HashSet::new();
    for (partition, state) in partitions.iter_mut() {
        let mut done = None;
        while let Some((ticket, last)) = state.batches.front() {
            let Some(ticket) = ticket else {
                done = Some(*last);
                state.batches.pop_front();
                continue;
            };
            match ticket.peek() {
                None => break,
                Some(Ok(stored)) => {
                    if seen.insert(stored.key.clone()) {
                        summary.objects += 1;
                    }
                    done = Some(*last);
                    state.batches.pop_front();
                }
                Some(Err(e)) => return Err(e.into()),
            }
        }
        if let Some(last) = done {
            commits.add_partition_offset(topic, *partition, Offset::Offset(last + 1))?;
        }
    }
    if commits.count() > 0 {
        consumer.commit(&commits, mode)?;
    }
    Ok(())
}

/// Batches stored for `partition` from `offset` on by earlier runs: their
/// first offsets and record counts, in offset order.
async fn stored_from(
    stream: &RecordStream,
    partition: i32,
    offset: i64,
) -> Result<VecDeque<(u64, u64)>, KafkaError> {
    let key = PartitionKey {
        source_partition: Some(partition),
        ..PartitionKey::default()
    };
    let template = stream.template();
    let prefix = template.offset_prefix(stream.name(), &key);
    let store = stream.engine().store().clone();
    let recovery = |key: &str, reason: String| KafkaError::Recovery {
        key: key.to_string(),
        reason,
    };
    let mut batches: Vec<(u64, String)> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_objects(&prefix, cursor.as_deref(), 1000)
            .await
            .map_err(|e| recovery(&prefix, e.to_string()))?;
        for object in &page.objects {
            if let Some(first) = template.offset_of(&object.key[prefix.len()..]) {
                if first >= offset as u64 {
                    batches.push((first, object.key.clone()));
                }
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    batches.sort();
    let mut stored = VecDeque::new();
    for (first, key) in batches {
        let mut body = store
            .get_object(&key, None)
            .await
            .map_err(|e| recovery(&key, e.to_string()))?
            .body;
        let mut data = Vec::new();
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| recovery(&key, e.to_string()))?
        {
            data.extend_from_slice(&chunk);
        }
        let compression = stream.config().compression;
        let plain = stream
            .pool()
            .run(move || crate::compress::decompress(compression, &data))
            .await
            .map_err(|e| recovery(&key, e.to_string()))?;
        let lines = plain.iter().filter(|&&b| b == b'\n').count() as u64;
        tracing::info!(key = %key, records = lines, "a stored batch of an earlier run: its records are skipped");
        stored.push_back((first, lines));
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

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
