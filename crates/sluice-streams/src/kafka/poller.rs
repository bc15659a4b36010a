//! The Kafka consumer's own thread: it polls messages into gatherings and hands
//! them to the ingest task in consumption order, together with the group's
//! revocations, and it pauses the partitions when the ingest task falls behind.
//!
//! - A gathering is up to [`GATHER_MESSAGES`] messages or a set number of bytes,
//!   as many as are ready after the first. Handing over waits on a bounded
//!   channel; polling one message at a time through an async stream capped a
//!   run at about 100,000 messages/s.
//! - Backpressure: when the ingest task has not taken a gathering for
//!   [`PAUSE_AFTER`] (the store is slow or down, and the memory budget is
//!   full), every assigned partition is paused and the consumer goes on polling
//!   (so that it stays in the group and serves rebalances, however long the
//!   outage) without fetching. Resuming fetches from the position after the
//!   last message polled, so nothing is skipped.
//! - Revocation (a rebalance takes partitions away): the rebalance callback,
//!   which runs inside `poll` on this thread, hands over what was gathered, then
//!   the revoked partitions, and waits until the ingest task has stored and
//!   committed their batches. The next owner starts where this one stopped, so
//!   two owners never write batches with different boundaries.
//! - Consumer lag (high watermark less committed offset, per partition) comes
//!   from librdkafka's statistics, every second.
//! - A topic the broker does not know (yet): its creation takes a moment to
//!   reach the broker, and a producer may make it after the run started, so
//!   the poller asks the brokers about it every second and goes on once it
//!   exists; once they have said for [`TOPIC_APPEARS_WITHIN`] that they do
//!   not know it, the run ends with an error naming the topic. (librdkafka
//!   reports the missing topic once, as a consumer error, and would keep the
//!   group waiting for it silently.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaResult, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::Statistics;
use tokio::sync::mpsc;

use super::KafkaError;

use crate::stats::StreamStats;
use crate::stream::move_to_capacity;

/// Most messages in one gathering.
const GATHER_MESSAGES: usize = 2000;
/// Most bytes in one gathering (smaller with a small memory budget; one
/// message may go past it).
pub(super) const GATHER_BYTES_MAX: usize = 2 << 20;
/// Room past the gathering's bytes its buffer starts with (for the message
/// that fills it; a larger one makes the buffer grow).
pub(super) const GATHER_SLACK: usize = 64 << 10;
/// Gatherings waiting for the ingest task.
const GATHERINGS_QUEUED: usize = 4;
/// Gatherings held at once: those queued, the one being filled and the one
/// the ingest task is checking.
pub(super) const GATHERINGS_HELD: usize = GATHERINGS_QUEUED + 2;
/// How long the poller waits for a gathering's first message, and between
/// polls while paused.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// How long a gathering may wait for the ingest task before the partitions
/// are paused.
const PAUSE_AFTER: Duration = Duration::from_secs(1);
/// How long the subscribed topic may be unknown to the broker before the
/// run ends (past its creation's way to the broker, it is most likely
/// misspelt, or deleted).
pub(super) const TOPIC_APPEARS_WITHIN: Duration = Duration::from_secs(30);
/// How often the broker is asked whether a missing topic exists yet.
const TOPIC_ASKED_EVERY: Duration = Duration::from_secs(1);
/// How long one such question may take (the poller serves nothing else
/// meanwhile: no revocation, no stop).
const TOPIC_ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Messages taken out of the consumer's buffer: their values copied one
/// after another into one buffer, each followed by `\n` (so that a run of
/// clean records is a slice of it, as in a request body).
pub(super) struct Gathered {
    pub data: Bytes,
    pub messages: Vec<Placed>,
}

/// One message of a gathering: its value is `data[start..end]`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placed {
    pub partition: i32,
    pub offset: i64,
    pub start: usize,
    pub end: usize,
}

/// What the poller hands the ingest task, in consumption order.
pub(super) enum Polled {
    Messages(Gathered),
    /// These partitions are being revoked; answer on the sender once their
    /// batches are stored and committed (dropping it lets the rebalance go on
    /// regardless).
    Revoked(Vec<i32>, std::sync::mpsc::SyncSender<()>),
}

/// The poller's side of the hand-over, shared with the rebalance callback.
pub(super) struct Handover {
    topic: String,
    /// Messages polled and not handed over yet.
    gathering: Mutex<Gathering>,
    gather_bytes: usize,
    sender: mpsc::Sender<Result<Polled, KafkaError>>,
    /// False once the run ends: a revocation while the consumer closes has
    /// nothing left to store and must not block.
    live: AtomicBool,
    /// Times the partitions were paused for backpressure.
    pauses: AtomicU64,
    /// Whether they are paused now.
    paused: AtomicBool,
    /// Set by the rebalance callback once partitions are assigned: librdkafka
    /// keeps an application's pause on a partition across assignments, so the
    /// poller resumes what it is given unless it is paused itself.
    assigned: AtomicBool,
    stats: Arc<StreamStats>,
    /// A stream into a table: where assigned partitions resume.
    table_offsets: Option<Arc<super::table::TableOffsets>>,
}

#[derive(Default)]
struct Gathering {
    data: BytesMut,
    messages: Vec<Placed>,
}

impl Gathering {
    fn full(&self, most_bytes: usize) -> bool {
        self.messages.len() >= GATHER_MESSAGES || self.data.len() >= most_bytes
    }

    fn push(&mut self, message: &impl Message, most_bytes: usize) {
        let value = message.payload().unwrap_or_default();
        let needed = self.data.len() + value.len() + 1;
        if needed > self.data.capacity() {
            // Room for the gathering and the message that fills it; a larger
            // message gets exactly its room (no doubling).
            move_to_capacity(&mut self.data, needed.max(most_bytes + GATHER_SLACK));
        }
        let start = self.data.len();
        self.data.extend_from_slice(value);
        self.data.extend_from_slice(b"\n");
        self.messages.push(Placed {
            partition: message.partition(),
            offset: message.offset(),
            start,
            end: start + value.len(),
        });
    }

    fn take(&mut self) -> Gathered {
        Gathered {
            data: std::mem::take(&mut self.data).freeze(),
            messages: std::mem::take(&mut self.messages),
        }
    }
}

impl Handover {
    pub(super) fn new(
        topic: &str,
        gather_bytes: usize,
        stats: Arc<StreamStats>,
        table_offsets: Option<Arc<super::table::TableOffsets>>,
    ) -> (Arc<Handover>, mpsc::Receiver<Result<Polled, KafkaError>>) {
        let (sender, receiver) = mpsc::channel(GATHERINGS_QUEUED);
        let handover = Handover {
            topic: topic.to_string(),
            gathering: Mutex::default(),
            gather_bytes,
            sender,
            live: AtomicBool::new(true),
            pauses: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            assigned: AtomicBool::new(false),
            stats,
            table_offsets,
        };
        (Arc::new(handover), receiver)
    }

    /// Stops polling and turns the rebalance callback off.
    pub(super) fn stop(&self) {
        self.live.store(false, Ordering::Relaxed);
    }

    pub(super) fn pauses(&self) -> u64 {
        self.pauses.load(Ordering::Relaxed)
    }

    /// Whether the partitions are paused now (the source is behind, not idle).
    pub(super) fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    fn gathering(&self) -> std::sync::MutexGuard<'_, Gathering> {
        self.gathering.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The consumer's context: rebalance and statistics callbacks.
pub(super) struct SourceContext {
    pub handover: Arc<Handover>,
}

impl ClientContext for SourceContext {
    /// librdkafka's own reports; a missing topic is the poller's to report.
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if topic_missing(&error) {
            tracing::debug!(target: "librdkafka", %error, reason);
        } else {
            tracing::error!(target: "librdkafka", %error, reason);
        }
    }

    fn stats(&self, statistics: Statistics) {
        let lag: i64 = statistics
            .topics
            .get(&self.handover.topic)
            .map(|topic| {
                topic
                    .partitions
                    .values()
                    .filter(|p| p.partition >= 0 && p.desired && p.hi_offset >= 0)
                    .map(|p| {
                        // Before the first commit, librdkafka says -1: the
                        // whole partition is still to be stored.
                        let done = if p.committed_offset >= 0 {
                            p.committed_offset
                        } else {
                            p.lo_offset.max(0)
                        };
                        (p.hi_offset - done).max(0)
                    })
                    .sum()
            })
            .unwrap_or(0);
        self.handover.stats.set_consumer_lag(lag as u64);
    }
}

impl ConsumerContext for SourceContext {
    fn post_rebalance(&self, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(_) = rebalance {
            self.handover.assigned.store(true, Ordering::Relaxed);
        }
    }

    fn pre_rebalance(&self, rebalance: &Rebalance<'_>) {
        if let (Rebalance::Assign(list), Some(offsets)) = (rebalance, &self.handover.table_offsets)
        {
            // Before librdkafka assigns: the offsets set here are where
            // the partitions start.
            offsets.on_assign(&self.handover.topic, list);
            return;
        }
        let Rebalance::Revoke(list) = rebalance else {
            return;
        };
        let handover = &self.handover;
        if !handover.live.load(Ordering::Relaxed) {
            return;
        }
        let revoked: Vec<i32> = list
            .elements_for_topic(&handover.topic)
            .iter()
            .map(|element| element.partition())
            .collect();
        if revoked.is_empty() {
            return;
        }
        tracing::info!(partitions = ?revoked, "partitions revoked: storing and committing their batches first");
        let gathered = handover.gathering().take();
        if !gathered.messages.is_empty()
            && handover
                .sender
                .blocking_send(Ok(Polled::Messages(gathered)))
                .is_err()
        {
            return;
        }
        let (done, stored) = std::sync::mpsc::sync_channel(1);
        if handover
            .sender
            .blocking_send(Ok(Polled::Revoked(revoked, done)))
            .is_ok()
        {
            let _ = stored.recv();
        }
    }
}

pub(super) type SourceConsumer = BaseConsumer<SourceContext>;

/// Polls until the handover is stopped or its receiver is gone. Runs on a
/// blocking thread of the runtime behind `runtime`; an error goes to the
/// ingest task.
pub(super) fn poll_messages(consumer: &SourceConsumer, runtime: &tokio::runtime::Handle) {
    let handover = consumer.context().handover.clone();
    if let Err(e) = poll_until_stopped(consumer, &handover, runtime) {
        let _ = handover.sender.blocking_send(Err(e));
    }
}

fn poll_until_stopped(
    consumer: &SourceConsumer,
    handover: &Handover,
    runtime: &tokio::runtime::Handle,
) -> Result<(), KafkaError> {
    let mut missing: Option<MissingTopic> = None;
    while handover.live.load(Ordering::Relaxed) {
        if let Some(topic) = &mut missing {
            if topic.found(consumer, &handover.topic)? {
                missing = None;
            }
        }
        let paused = handover.paused();
        // Gather: wait for a first message, then take what is ready.
        let mut wait = POLL_WAIT;
        loop {
            match consumer.poll(if paused { POLL_WAIT } else { wait }) {
                Some(Ok(message)) => handover.gathering().push(&message, handover.gather_bytes),
                Some(Err(e)) if topic_missing(&e) => {
                    missing.get_or_insert_with(|| MissingTopic::new(&handover.topic));
                    break;
                }
                Some(Err(e)) => return Err(e.into()),
                None => break,
            }
            if handover.gathering().full(handover.gather_bytes) {
                break;
            }
            wait = Duration::ZERO;
        }
        let waiting = !handover.gathering().messages.is_empty();
        // librdkafka keeps an application's pause across assignments, and a
        // revocation may have taken the gathering a pause was holding back:
        // either way, what is assigned now runs unless something waits.
        let assigned = handover.assigned.swap(false, Ordering::Relaxed);
        if (assigned && !paused) || (paused && !waiting) {
            set_paused(consumer, handover, false)?;
        }
        if !waiting {
            continue;
        }
        // Hand over, pausing the partitions while the ingest task is behind.
        let wait = if paused { POLL_WAIT } else { PAUSE_AFTER };
        let permit =
            runtime.block_on(async { tokio::time::timeout(wait, handover.sender.reserve()).await });
        match permit {
            Ok(Ok(permit)) => {
                permit.send(Ok(Polled::Messages(handover.gathering().take())));
                if paused {
                    set_paused(consumer, handover, false)?;
                    tracing::info!("the ingest task caught up: partitions resumed");
                }
            }
            Ok(Err(_)) => return Ok(()),
            // Paused again each time: a rebalance may have assigned more.
            Err(_) => set_paused(consumer, handover, true)?,
        }
    }
    Ok(())
}

/// Whether `error` says the broker does not know the topic.
fn topic_missing(error: &rdkafka::error::KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    )
}

/// The subscribed topic, while the broker does not know it.
struct MissingTopic {
    since: Instant,
    asked: Instant,
}

impl MissingTopic {
    fn new(topic: &str) -> MissingTopic {
        tracing::warn!(
            topic,
            within = ?TOPIC_APPEARS_WITHIN,
            "the broker does not know the topic (yet): waiting for it"
        );
        let now = Instant::now();
        MissingTopic {
            since: now,
            asked: now,
        }
    }

    /// Whether the topic is there now: partitions of it are assigned, or the
    /// brokers, asked once a [`TOPIC_ASKED_EVERY`], know it (librdkafka's
    /// group finds it by itself, rejoining every second). An error once the
    /// brokers have said for [`TOPIC_APPEARS_WITHIN`] that they do not know
    /// it; brokers that do not answer say nothing of the topic, and the wait
    /// goes on (librdkafka keeps trying them as long as the run lasts).
    fn found(&mut self, consumer: &SourceConsumer, topic: &str) -> Result<bool, KafkaError> {
        if self.asked.elapsed() < TOPIC_ASKED_EVERY {
            return Ok(false);
        }
        self.asked = Instant::now();
        let exists = consumer.assignment().is_ok_and(|a| a.count() > 0)
            || match consumer.fetch_metadata(Some(topic), TOPIC_ASK_TIMEOUT) {
                Ok(metadata) => metadata.topics().iter().any(|known| {
                    known.name() == topic
                        && known.error().is_none()
                        && !known.partitions().is_empty()
                }),
                Err(error) => {
                    tracing::debug!(topic, %error, "the brokers did not say whether the topic exists");
                    return Ok(false);
                }
            };
        if exists {
            tracing::info!(topic, waited = ?self.since.elapsed(), "the topic exists now");
            return Ok(true);
        }
        if self.since.elapsed() >= TOPIC_APPEARS_WITHIN {
            return Err(KafkaError::TopicMissing {
                topic: topic.to_string(),
                waited: TOPIC_APPEARS_WITHIN,
            });
        }
        Ok(false)
    }
}

/// Pauses or resumes every assigned partition; [`Handover::paused`] says which.
fn set_paused(consumer: &SourceConsumer, handover: &Handover, paused: bool) -> KafkaResult<()> {
    let assignment = consumer.assignment()?;
    if paused {
        consumer.pause(&assignment)?;
        if !handover.paused.swap(true, Ordering::Relaxed) {
            handover.pauses.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                after = ?PAUSE_AFTER,
                "the store is not keeping up: partitions paused (the consumer keeps polling to stay in the group)"
            );
        }
    } else {
        consumer.resume(&assignment)?;
        handover.paused.store(false, Ordering::Relaxed);
    }
    Ok(())
}
