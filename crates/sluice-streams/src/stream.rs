//! One named record stream: its open batches (one per partition), their flush
//! rules, and group commit. Records are appended in runs; each run lands in the
//! open batch of its partition, and the caller gets a [`Ticket`] per batch it
//! touched. A batch is one object, written while it grows: its records are
//! compressed frame by frame on the CPU pool and streamed, in order, into an
//! engine upload (a multipart upload once it passes the engine's threshold). A
//! batch is flushed when it reaches its size or record count, when its first
//! record is `flush_age` old, when a new partition needs its place, or when the
//! stream closes; every ticket of the batch then resolves together (one flush
//! for every request that shared the batch).
//!
//! A frame is one buffer the records are copied into as they are appended (cut
//! at the frame's size), so that it compresses in one call and no caller's
//! buffer (a request body, a Kafka gathering) is held beyond the append.
//!
//! Memory: the bytes of records not yet compressed are held as reservations of
//! the engine's budget (the caller reserved them when it read them), passed
//! from the caller's reservation to the frame, then to the compressed frame,
//! and given back when the engine takes the frame (it reserves its part
//! buffers itself).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::StreamExt;
use sluice_store::{Metadata, WriteCondition};
use sluice_upload::{
    Engine, LateMetadata, MemoryBudget, MemoryShare, Origin, Reservation, TransferError,
    UploadKind, UploadOutcome, UploadRequest, UploadSource,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::compress::{CpuPool, FRAME_BYTES, FRAME_SLACK};
use crate::config::TableFormat;
use crate::config::{Compression, RecordFormat, StreamConfig};
use crate::error::{StreamConfigError, StreamError};
use crate::records::{Rejected, Run};
use crate::stats::StreamStats;
use crate::table::announce::FileOrigin;
use crate::table::delta::NewFile;
use crate::table::file::{FileSettings, ParquetFile};
use crate::table::opening::OpenedTable;
use crate::table::schema::{Required, Shape, StreamSchema, Version};
use crate::table::sink::TableSink;
use crate::template::{PartitionKey, StreamKeyTemplate};

/// A batch that was stored.
#[derive(Debug, Clone)]
pub struct StoredBatch {
    pub stream: String,
    pub key: String,
    pub records: u64,
    /// Bytes of records, before compression.
    pub record_bytes: u64,
    /// The object as stored.
    pub outcome: UploadOutcome,
    pub compression: Compression,
    /// Offsets of the first and last record (Kafka offsets; otherwise the
    /// records' positions in this stream since the process started).
    pub first_offset: u64,
    pub last_offset: u64,
    pub partition: PartitionKey,
    /// Invalid records kept as they came.
    pub dead_letter: bool,
    /// From the batch's flush to the object being stored.
    pub flush_time: Duration,
    /// The table version that added the file (a stream with a table whose
    /// own writer commits; None otherwise).
    pub table_version: Option<u64>,
    /// How its file is announced once a table's commit holds it (a table's
    /// file; None otherwise: the engine announced the object as it stored it).
    pub announced_as: Option<Arc<FileOrigin>>,
    /// A Parquet batch's footer (its table's statistics come from it).
    pub footer: Option<Arc<parquet::file::metadata::ParquetMetaData>>,
}

impl StoredBatch {
    /// The batch's file as its table's commit adds it.
    pub fn table_file(&self) -> NewFile {
        NewFile {
            key: self.key.clone(),
            size: self.outcome.size,
            records: self.records,
            announce_as: self
                .announced_as
                .clone()
                .map(|o| o as sluice_delta::listener::FileTag),
            footer: self.footer.clone(),
        }
    }
}

/// How a batch ended, for every ticket of it.
pub type BatchResult = Result<Arc<StoredBatch>, StreamError>;

/// Called once per stored batch, before its tickets resolve (the gateway's
/// completion point: metrics, events).
pub type OnStored = Arc<dyn Fn(Arc<StoredBatch>) -> BoxFuture<'static, ()> + Send + Sync>;

/// The acknowledgement of records appended to one batch.
#[derive(Debug, Clone)]
pub struct Ticket {
    batch: u64,
    done: watch::Receiver<Option<BatchResult>>,
}

impl Ticket {
    /// The batch this ticket waits for (tickets of one batch resolve together).
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// Waits until the batch is stored, or failed.
    pub async fn stored(mut self) -> BatchResult {
        match self.done.wait_for(Option::is_some).await {
            Ok(result) => result.clone().unwrap_or(Err(StreamError::Closed)),
            Err(_) => Err(StreamError::Closed),
        }
    }

    /// The result, if the batch has ended.
    pub fn peek(&self) -> Option<BatchResult> {
        self.done.borrow().clone()
    }

    /// A ticket of batch `batch` that has ended with `result`, or not yet.
    #[cfg(all(test, feature = "kafka"))]
    pub(crate) fn ended(batch: u64, result: Option<BatchResult>) -> Ticket {
        let (_, done) = watch::channel(result);
        Ticket { batch, done }
    }
}

/// A batch's place: its partition, or the dead letter of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Slot {
    partition: PartitionKey,
    dead_letter: bool,
}

/// What flows to a batch's writer.
enum Frame {
    /// A frame being compressed; it resolves with the bytes and their memory.
    Bytes(oneshot::Receiver<io::Result<(Bytes, Reservation)>>),
    /// The batch is flushed: no more frames, and these were its totals.
    End(BatchTotals),
}

#[derive(Clone)]
struct BatchTotals {
    records: u64,
    record_bytes: u64,
    last_offset: u64,
    flushed: Instant,
    /// A Parquet batch's file (its footer, for the table's statistics).
    parquet: Option<Arc<ParquetFile>>,
}

struct OpenBatch {
    id: u64,
    opened: Instant,
    records: u64,
    record_bytes: u64,
    last_offset: u64,
    /// Records since the last frame was sent, each followed by `\n`.
    frame: BytesMut,
    frame_memory: Reservation,
    frames: mpsc::UnboundedSender<Frame>,
    /// The totals again, for a writer that stops reading frames early (a
    /// dead letter found stored).
    totals: oneshot::Sender<BatchTotals>,
    /// A Parquet batch's file, and the schema version it was opened under.
    parquet: Option<(Arc<ParquetFile>, u64)>,
    done: watch::Receiver<Option<BatchResult>>,
}

struct Open {
    batches: HashMap<Slot, OpenBatch>,
    next_id: u64,
    /// Offset of the next record appended without one of its own.
    next_offset: u64,
    closed: bool,
}

struct Inner {
    name: String,
    config: StreamConfig,
    template: StreamKeyTemplate,
    dead_letter: Option<StreamKeyTemplate>,
    engine: Engine,
    /// What the stream's records draw on, from request to upload (see
    /// [`RecordStream::memory`]).
    memory: MemoryShare,
    pool: CpuPool,
    on_stored: Option<OnStored>,
    /// A Parquet stream's schema.
    schema: Option<Arc<StreamSchema>>,
    /// The table its files join, if any.
    table: Option<Arc<TableSink>>,
    open: Mutex<Open>,
    writers: TaskTracker,
    stats: Arc<StreamStats>,
    myself: Weak<Inner>,
}

/// One named stream. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct RecordStream {
    inner: Arc<Inner>,
}

impl RecordStream {
    /// A stream named `name` storing through `engine`, compressing on `pool`,
    /// its records drawing on `memory` (the process's [`records_memory`],
    /// shared by all its streams).
    ///
    /// A stream with a table needs it read first: see [`RecordStream::open`].
    pub fn new(
        name: &str,
        config: StreamConfig,
        engine: Engine,
        memory: MemoryShare,
        pool: CpuPool,
        on_stored: Option<OnStored>,
    ) -> Result<RecordStream, StreamConfigError> {
        if config.table != TableFormat::None {
            return Err(StreamConfigError {
                key: "table",
                reason: "a stream with a table is opened with RecordStream::open".into(),
            });
        }
        Self::build(name, config, engine, memory, pool, on_stored, None)
    }

    /// [`RecordStream::new`], for any stream: one with a table (Delta or
    /// Iceberg) reads the table first (creating nothing yet), takes its
    /// schema as where the stream's starts, and checks that it may append to
    /// it (see [`crate::table::opening`]).
    pub async fn open(
        name: &str,
        config: StreamConfig,
        engine: Engine,
        memory: MemoryShare,
        pool: CpuPool,
        on_stored: Option<OnStored>,
    ) -> Result<RecordStream, StreamConfigError> {
        if config.table == TableFormat::None {
            return Self::new(name, config, engine, memory, pool, on_stored);
        }
        config.validate()?;
        validate_stream_name(name)?;
        let table = crate::table::opening::open(name, &config, &engine).await?;
        Self::build(name, config, engine, memory, pool, on_stored, Some(table))
    }

    fn build(
        name: &str,
        config: StreamConfig,
        engine: Engine,
        memory: MemoryShare,
        pool: CpuPool,
        on_stored: Option<OnStored>,
        table: Option<OpenedTable>,
    ) -> Result<RecordStream, StreamConfigError> {
        config.validate()?;
        validate_stream_name(name)?;
        let parse = |text: &str, key| {
            StreamKeyTemplate::parse(text, config.compression)
                .map(|t| t.with_shard_prefix(config.shard_prefix))
                .map_err(|reason| StreamConfigError { key, reason })
        };
        let template =
            parse(&config.key_template, "key_template")?.with_extension(config.extension());
        let (table, known, required) = match table {
            Some(OpenedTable {
                sink,
                known,
                required,
            }) => (Some(sink), Some(known), required),
            None => (None, None, Required::default()),
        };
        let schema = (config.format == RecordFormat::Parquet).then(|| {
            let declared = known.unwrap_or_else(|| {
                config
                    .schema
                    .iter()
                    .filter_map(|(name, kind)| Some((name.clone(), Shape::declared(kind)?)))
                    .collect()
            });
            Arc::new(StreamSchema::with_required(declared, required))
        });
        let dead_letter = match &config.dead_letter_template {
            Some(text) => Some(parse(text, "dead_letter_template")?),
            None => None,
        };
        Ok(RecordStream {
            inner: Arc::new_cyclic(|myself| Inner {
                name: name.to_string(),
                stats: Arc::new(StreamStats::default()),
                template,
                dead_letter,
                memory,
                engine,
                pool,
                on_stored,
                schema,
                table,
                open: Mutex::new(Open {
                    batches: HashMap::new(),
                    next_id: 0,
                    next_offset: 0,
                    closed: false,
                }),
                writers: TaskTracker::new(),
                config,
                myself: myself.clone(),
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn config(&self) -> &StreamConfig {
        &self.inner.config
    }

    pub fn template(&self) -> &StreamKeyTemplate {
        &self.inner.template
    }

    pub fn pool(&self) -> &CpuPool {
        &self.inner.pool
    }

    /// The share of the engine's memory budget that this stream's records
    /// draw on (see [`records_memory`]).
    pub fn memory(&self) -> &MemoryShare {
        &self.inner.memory
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub fn stats(&self) -> &Arc<StreamStats> {
        &self.inner.stats
    }

    /// A Parquet stream's schema (None for NDJSON).
    pub fn schema(&self) -> Option<&StreamSchema> {
        self.inner.schema.as_deref()
    }

    /// The table the stream's files join, if any.
    pub fn table(&self) -> Option<&Arc<TableSink>> {
        self.inner.table.as_ref()
    }

    /// The stream's columns now, for a source that commits to the table
    /// itself (None: no schema).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn table_columns(&self) -> Option<Arc<Version>> {
        self.inner.schema.as_ref().map(|schema| schema.current())
    }

    /// Whether invalid records go to a dead letter instead of refusing input.
    pub fn has_dead_letter(&self) -> bool {
        self.inner.dead_letter.is_some()
    }

    /// Batches open now.
    pub fn open_partitions(&self) -> usize {
        self.inner.lock().batches.len()
    }

    /// Appends `runs` to their partitions' batches, taking their bytes' share
    /// of `memory`; one ticket per batch touched, in no particular order.
    pub fn append(&self, runs: Vec<Run>, memory: Reservation) -> Result<Vec<Ticket>, StreamError> {
        self.append_keyed(runs, memory, None)
    }

    /// [`Self::append`] for a request with an idempotency key, started with
    /// [`TableSink::start_keyed`]: the batches it touches are told to the
    /// table's sink as they are, so that its records are committed whole.
    pub fn append_keyed(
        &self,
        runs: Vec<Run>,
        memory: Reservation,
        key: Option<&RequestKey>,
    ) -> Result<Vec<Ticket>, StreamError> {
        let touched = self.inner.append_request(runs, memory, false, key)?;
        Ok(touched.into_iter().map(|(ticket, _)| ticket).collect())
    }

    /// [`Self::append`], with each batch's last offset among these runs, in
    /// the order the batches were first touched (a source committing offsets
    /// per batch needs both).
    pub fn append_tracked(
        &self,
        runs: Vec<Run>,
        memory: Reservation,
    ) -> Result<Vec<(Ticket, u64)>, StreamError> {
        self.inner.append(runs, memory, false)
    }

    /// Appends invalid records to the dead letter, as they came.
    pub fn append_rejected(
        &self,
        rejected: Vec<Rejected>,
        arrival: time::OffsetDateTime,
        memory: Reservation,
    ) -> Result<Vec<Ticket>, StreamError> {
        if rejected.is_empty() {
            return Ok(Vec::new());
        }
        let template = self.inner.dead_letter.as_ref().ok_or(StreamError::Closed)?;
        let partition = template.partition_of(arrival, Vec::new(), None);
        let runs = rejected
            .into_iter()
            .map(|r| Run {
                partition: partition.clone(),
                data: dead_letter_line(&r.raw),
                records: 1,
                offset: None,
            })
            .collect();
        let touched = self.inner.append(runs, memory, true)?;
        Ok(touched.into_iter().map(|(ticket, _)| ticket).collect())
    }

    /// Stores each invalid message of a source with offsets (Kafka) in a dead
    /// letter object of its own, keyed by its partition and offset, so that a
    /// replay writes it to the same key (and finds it there). Each comes back
    /// with its ticket.
    pub fn append_dead_messages(
        &self,
        dead: Vec<DeadMessage>,
        mut memory: Reservation,
    ) -> Result<Vec<(DeadMessage, Ticket)>, StreamError> {
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        self.inner.dead_letter.as_ref().ok_or(StreamError::Closed)?;
        let mut tickets = Vec::with_capacity(dead.len());
        for message in dead {
            let partition = PartitionKey {
                source_partition: Some(message.partition),
                ..PartitionKey::default()
            };
            let run = Run {
                partition: partition.clone(),
                data: dead_letter_line(&message.raw),
                records: 1,
                offset: Some(message.offset),
            };
            let share = memory.split(run.data.len() as u64);
            let (ticket, _) = self
                .inner
                .append(vec![run], share, true)?
                .pop()
                .expect("one record, one batch");
            self.inner.flush_slot(&Slot {
                partition,
                dead_letter: true,
            });
            tickets.push((message, ticket));
        }
        Ok(tickets)
    }

    /// Flushes the open batch of `partition`, if any.
    pub fn flush_partition(&self, partition: &PartitionKey) {
        self.inner.flush_slot(&Slot {
            partition: partition.clone(),
            dead_letter: false,
        });
    }

    /// Flushes every open batch now (their tickets resolve once stored).
    pub fn flush(&self) {
        let mut open = self.inner.lock();
        let slots: Vec<Slot> = open.batches.keys().cloned().collect();
        for slot in slots {
            if let Some(batch) = open.batches.remove(&slot) {
                self.inner.finish(batch);
            }
        }
    }

    /// Flushes everything, takes no more records, and waits until every batch
    /// is stored or failed.
    pub async fn close(&self) {
        self.inner.lock().closed = true;
        self.flush();
        self.inner.writers.close();
        self.inner.writers.wait().await;
    }
}

/// A keyed request's append: its idempotency key, and whether it is the
/// request's last (an HTTP request's one; the end of `sluice ingest`'s input
/// is told with [`TableSink::appended`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey {
    pub key: String,
    pub last: bool,
}

/// Tells a table's sink that a keyed request's append is over, however it
/// ended.
struct AppendedOnDrop(Arc<TableSink>, String);

impl Drop for AppendedOnDrop {
    fn drop(&mut self) {
        self.0.appended(&self.1);
    }
}

/// An invalid message of a source with offsets, on its way to the dead letter.
#[derive(Debug, Clone)]
pub struct DeadMessage {
    pub partition: i32,
    pub offset: u64,
    /// The value as it came.
    pub raw: Bytes,
}

/// One dead letter line: line breaks inside a record (a pretty-printed array
/// element, a Kafka value) become spaces, JSON whitespace.
fn dead_letter_line(raw: &[u8]) -> Bytes {
    let mut line: Vec<u8> = raw
        .iter()
        .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
        .collect();
    line.push(b'\n');
    line.into()
}

/// A stream's name is one key segment: it appears in keys and URLs.
/// The share of `budget` that the records of all of a process's streams draw
/// on together: requests being read, records waiting in open batches, frames
/// waiting for their upload. It is half the budget, so that the uploads that
/// drain those records always find the other half: were records to take the
/// whole budget, the uploads would wait for memory only they can free.
pub fn records_memory(budget: &MemoryBudget) -> MemoryShare {
    budget.share(budget.capacity() / 2)
}

pub fn validate_stream_name(name: &str) -> Result<(), StreamConfigError> {
    let fine = name.len() <= 128
        && !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
        && !sluice_store::is_reserved_key(name);
    match fine {
        true => Ok(()),
        false => Err(StreamConfigError {
            key: "name",
            reason: format!(
                "{name:?} is not a stream name (1-128 of A-Z a-z 0-9 - _ ., not starting with '.')"
            ),
        }),
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn append(
        &self,
        runs: Vec<Run>,
        memory: Reservation,
        dead_letter: bool,
    ) -> Result<Vec<(Ticket, u64)>, StreamError> {
        self.append_request(runs, memory, dead_letter, None)
    }

    /// Appends `runs`; the batches a keyed request touches are told to the
    /// table's sink before any of them can be stored.
    fn append_request(
        &self,
        runs: Vec<Run>,
        mut memory: Reservation,
        dead_letter: bool,
        request: Option<&RequestKey>,
    ) -> Result<Vec<(Ticket, u64)>, StreamError> {
        let keyed = match (request, &self.table) {
            (Some(request), Some(sink)) if !dead_letter => Some((request.key.as_str(), sink)),
            _ => None,
        };
        if let Some((key, sink)) = keyed {
            if !sink.append_started(key) {
                // Its handler is gone and its key forgotten: appended now,
                // the records would be kept without it.
                return Err(StreamError::Closed);
            }
        }
        // Whatever ends the request's last append, the sink learns its
        // batches are all known.
        let _appended = keyed
            .filter(|_| request.is_some_and(|r| r.last))
            .map(|(key, sink)| AppendedOnDrop(sink.clone(), key.to_string()));
        // Batches touched, in first-touch order, with the last offset put in each.
        let mut touched: Vec<(Ticket, u64)> = Vec::new();
        let mut open = self.lock();
        if open.closed {
            return Err(StreamError::Closed);
        }
        let (records, bytes) = runs.iter().fold((0, 0), |(r, b), run| {
            (r + run.records, b + run.data.len() as u64)
        });
        for mut run in runs {
            while run.records > 0 {
                let slot = Slot {
                    partition: run.partition.clone(),
                    dead_letter,
                };
                // A Parquet file has one schema: records checked under a newer
                // version go to a new file.
                let version = self.schema.as_ref().map(|schema| schema.current().number);
                let usable = open.batches.get(&slot).is_some_and(|b| {
                    b.done.borrow().is_none()
                        && match (&b.parquet, version) {
                            (Some((_, opened)), Some(now)) => *opened >= now,
                            _ => true,
                        }
                });
                let next_offset = run.offset.unwrap_or(open.next_offset);
                if !usable {
                    if let Some(failed) = open.batches.remove(&slot) {
                        self.finish(failed);
                    }
                    self.make_room(&mut open);
                    let batch = self.open_batch(&mut open, &slot, next_offset);
                    open.batches.insert(slot.clone(), batch);
                }
                let batch = open.batches.get_mut(&slot).expect("opened above");
                let head = cut_run(
                    &mut run,
                    self.config.flush_records - batch.records,
                    self.config
                        .flush_bytes
                        .saturating_sub(batch.record_bytes)
                        .min((FRAME_BYTES - batch.frame.len()) as u64),
                );
                let head_memory = memory.split(head.data.len() as u64);
                let first_offset = match head.offset {
                    Some(offset) => offset,
                    None => {
                        let offset = open.next_offset;
                        open.next_offset += head.records;
                        offset
                    }
                };
                let batch = open.batches.get_mut(&slot).expect("opened above");
                // A batch that has filled a frame is busy: its frames start whole.
                let busy = batch.record_bytes >= FRAME_BYTES as u64;
                let whole = (FRAME_BYTES as u64)
                    .min(self.config.flush_bytes.saturating_sub(batch.record_bytes))
                    as usize;
                grow_frame(&mut batch.frame, head.data.len(), whole, busy);
                batch.frame.extend_from_slice(&head.data);
                batch.last_offset = first_offset + head.records - 1;
                batch.records += head.records;
                batch.record_bytes += head.data.len() as u64;
                batch.frame_memory.absorb(head_memory);
                if batch.frame.len() >= FRAME_BYTES {
                    self.send_frame(batch);
                }
                match touched.iter_mut().rev().find(|(t, _)| t.batch == batch.id) {
                    Some((_, last)) => *last = batch.last_offset,
                    None => touched.push((
                        Ticket {
                            batch: batch.id,
                            done: batch.done.clone(),
                        },
                        batch.last_offset,
                    )),
                }
                if let Some((key, sink)) = keyed {
                    // Before the batch can be flushed (below, or by its age).
                    sink.touched(key, batch.id);
                }
                if batch.records >= self.config.flush_records
                    || batch.record_bytes >= self.config.flush_bytes
                {
                    let full = open.batches.remove(&slot).expect("present");
                    self.finish(full);
                }
            }
        }
        self.stats.accepted(records, bytes, dead_letter);
        self.stats.set_open_partitions(open.batches.len());
        Ok(touched)
    }

    /// The columns of a file written under `version`, as the records are
    /// decoded and as they are stored: a Delta table's partition columns are
    /// in its directories, not in the file, and a table that maps its columns
    /// has them stored under their physical names.
    fn file_schema(&self, version: &Version) -> (arrow_schema::SchemaRef, arrow_schema::SchemaRef) {
        let schema = version.arrow_schema();
        let Some(sink) = &self.table else {
            return (schema.clone(), schema);
        };
        let apart = sink.table().columns_apart();
        let fields: Vec<_> = schema
            .fields()
            .iter()
            .filter(|f| !apart.contains(f.name()))
            .cloned()
            .collect();
        let columns = Arc::new(arrow_schema::Schema::new(fields));
        let stored = match sink.column_mapping() {
            // The schema takes no column the table does not map (see
            // `Required::closed`), so every one has its physical name.
            Some(mapping) => mapping.physical_schema(&columns).unwrap_or_else(|field| {
                panic!("column `{field}` passed the closed schema unmapped")
            }),
            None => columns.clone(),
        };
        (columns, stored)
    }

    /// Flushes the open batch of `slot`, if any.
    fn flush_slot(&self, slot: &Slot) {
        let mut open = self.lock();
        if let Some(batch) = open.batches.remove(slot) {
            self.finish(batch);
        }
        self.stats.set_open_partitions(open.batches.len());
    }

    /// Flushes the batch opened longest ago while the stream is at its cap.
    fn make_room(&self, open: &mut Open) {
        while open.batches.len() >= self.config.max_open_partitions {
            let oldest = open
                .batches
                .iter()
                .min_by_key(|(_, b)| (b.opened, b.id))
                .map(|(slot, _)| slot.clone());
            let Some(slot) = oldest else { return };
            let batch = open.batches.remove(&slot).expect("present");
            self.stats.evicted();
            self.finish(batch);
        }
    }

    /// Opens the batch of `slot` whose first record is at `first_offset`.
    fn open_batch(&self, open: &mut Open, slot: &Slot, first_offset: u64) -> OpenBatch {
        let id = open.next_id;
        open.next_id += 1;
        let template = if slot.dead_letter {
            self.dead_letter.as_ref().expect("dead letter template")
        } else {
            &self.template
        };
        let key = template.render(
            &self.name,
            &slot.partition,
            first_offset,
            uuid::Uuid::new_v4(),
        );
        let (frames, frames_rx) = mpsc::unbounded_channel();
        let (totals, totals_rx) = oneshot::channel();
        let parquet = match &self.schema {
            Some(schema) if !slot.dead_letter => {
                let version = schema.current();
                let settings = FileSettings {
                    compression: self.config.compression,
                    level: self.config.level(),
                    row_group_records: self.config.row_group_records as usize,
                };
                let (columns, stored) = self.file_schema(&version);
                let file = ParquetFile::new(
                    columns,
                    stored,
                    settings,
                    self.pool.clone(),
                    self.stats.clone(),
                )
                .expect("settings validated at start");
                Some((file, version.number))
            }
            _ => None,
        };
        let (done_tx, done) = watch::channel(None);
        let opened = Instant::now();
        let writer = BatchWriter {
            id,
            stream: self
                .myself
                .upgrade()
                .expect("the stream is alive while appending"),
            key: key.clone(),
            partition: slot.partition.clone(),
            dead_letter: slot.dead_letter,
            first_offset,
            deterministic: !template.uses_uuid(),
        };
        let span = tracing::info_span!("batch", stream = %self.name, key = %key, batch = id);
        self.writers
            .spawn(writer.run(frames_rx, totals_rx, done_tx).instrument(span));
        // The age flush.
        let stream = self.myself.clone();
        let deadline = opened + self.config.flush_age;
        let slot = slot.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            if let Some(inner) = stream.upgrade() {
                let mut open = inner.lock();
                if open.batches.get(&slot).is_some_and(|b| b.id == id) {
                    let batch = open.batches.remove(&slot).expect("present");
                    inner.finish(batch);
                    inner.stats.set_open_partitions(open.batches.len());
                }
            }
        });
        OpenBatch {
            id,
            opened,
            records: 0,
            record_bytes: 0,
            last_offset: first_offset,
            frame: BytesMut::new(),
            frame_memory: self.memory.nothing(),
            frames,
            totals,
            parquet,
            done,
        }
    }

    /// Sends the batch's gathered records off to be compressed.
    fn send_frame(&self, batch: &mut OpenBatch) {
        if batch.frame.is_empty() {
            return;
        }
        let frame = std::mem::take(&mut batch.frame).freeze();
        let memory = std::mem::replace(&mut batch.frame_memory, self.memory.nothing());
        if let Some((file, _)) = &batch.parquet {
            let _ = batch
                .frames
                .send(Frame::Bytes(file.send(Some(frame), memory)));
            return;
        }
        let (tx, rx) = oneshot::channel();
        let (compression, level) = (self.config.compression, self.config.level());
        if compression == Compression::None {
            let _ = tx.send(Ok((frame, memory)));
        } else {
            let pool = self.pool.clone();
            let stats = self.stats.clone();
            tokio::spawn(async move {
                let (compressed, took) = pool.compress(compression, level, frame).await;
                stats.compressed(took);
                let _ = tx.send(compressed.map(|bytes| (bytes, memory)));
            });
        }
        // A writer that failed has dropped its receiver: the batch's tickets
        // already say so.
        let _ = batch.frames.send(Frame::Bytes(rx));
    }

    /// Flushes `batch`: its last frame, then the end of its object.
    fn finish(&self, mut batch: OpenBatch) {
        self.send_frame(&mut batch);
        if let Some((file, _)) = &batch.parquet {
            // The footer.
            let footer = file.send(None, self.memory.nothing());
            let _ = batch.frames.send(Frame::Bytes(footer));
        }
        let totals = BatchTotals {
            records: batch.records,
            record_bytes: batch.record_bytes,
            last_offset: batch.last_offset,
            flushed: Instant::now(),
            parquet: batch.parquet.as_ref().map(|(file, _)| file.clone()),
        };
        let _ = batch.frames.send(Frame::End(totals.clone()));
        let _ = batch.totals.send(totals);
    }
}

/// Makes room in `frame` for `more` bytes. A busy batch's frame starts whole
/// (`whole` bytes and the slack for the record that ends it); any other starts
/// at [`FRAME_START`] and doubles up to whole, so that a quiet partition's
/// frame stays small. A piece larger than that gets exactly its room (no
/// doubling past what the budget reserved).
fn grow_frame(frame: &mut BytesMut, more: usize, whole: usize, busy: bool) {
    let needed = frame.len() + more;
    if needed <= frame.capacity() {
        return;
    }
    let whole = whole + FRAME_SLACK;
    let target = if busy {
        whole
    } else {
        (frame.capacity() * 2).max(FRAME_START).min(whole)
    };
    move_to_capacity(frame, target.max(needed));
}

/// Moves `buffer` into a new one of exactly `capacity` bytes (BytesMut's own
/// growth doubles, past what the budget reserved).
pub(crate) fn move_to_capacity(buffer: &mut BytesMut, capacity: usize) {
    let mut grown = BytesMut::with_capacity(capacity);
    grown.extend_from_slice(buffer);
    *buffer = grown;
}

/// Where a quiet batch's frame buffer starts.
const FRAME_START: usize = 64 << 10;

/// Cuts from `run` the records that fit a batch (or frame) with room for
/// `records` more records and `bytes` more bytes (at least one record, and
/// the one that crosses `bytes`), leaving the rest.
fn cut_run(run: &mut Run, records: u64, bytes: u64) -> Run {
    if run.records <= records && run.data.len() as u64 <= bytes {
        return std::mem::replace(
            run,
            Run {
                partition: run.partition.clone(),
                data: Bytes::new(),
                records: 0,
                offset: None,
            },
        );
    }
    let mut taken = 0;
    let mut end = 0;
    for i in memchr::memchr_iter(b'\n', &run.data) {
        taken += 1;
        end = i + 1;
        if taken >= records || end as u64 >= bytes {
            break;
        }
    }
    let taken = taken.min(run.records);
    let head = Run {
        partition: run.partition.clone(),
        data: run.data.split_to(end),
        records: taken,
        offset: run.offset,
    };
    run.records -= taken;
    run.offset = run.offset.map(|o| o + taken);
    head
}

/// The task that streams one batch's frames into its object.
struct BatchWriter {
    id: u64,
    stream: Arc<Inner>,
    key: String,
    partition: PartitionKey,
    dead_letter: bool,
    first_offset: u64,
    /// Keys without a uuid are written only if absent: a replay finds its
    /// batch stored and does not write it twice.
    deterministic: bool,
}

impl BatchWriter {
    async fn run(
        self,
        frames: mpsc::UnboundedReceiver<Frame>,
        flushed: oneshot::Receiver<BatchTotals>,
        done: watch::Sender<Option<BatchResult>>,
    ) {
        let inner = self.stream.clone();
        let totals: Arc<Mutex<Option<BatchTotals>>> = Arc::default();
        let seen_totals = totals.clone();
        // The batch's totals, known at its end, for the announcement of its object.
        let late: LateMetadata = Arc::default();
        let seen_late = late.clone();
        let body = futures::stream::unfold(frames, move |mut frames| {
            let seen_totals = seen_totals.clone();
            let seen_late = seen_late.clone();
            async move {
                loop {
                    match frames.recv().await? {
                        Frame::End(end) => {
                            let mut late = seen_late.lock().unwrap_or_else(|e| e.into_inner());
                            late.insert("records".into(), end.records.to_string());
                            late.insert("record_bytes".into(), end.record_bytes.to_string());
                            late.insert("last_offset".into(), end.last_offset.to_string());
                            *seen_totals.lock().unwrap_or_else(|e| e.into_inner()) = Some(end);
                            return None;
                        }
                        Frame::Bytes(compressing) => {
                            let item = match compressing.await {
                                // A Parquet frame that filled no row group yet.
                                Ok(Ok((bytes, _memory))) if bytes.is_empty() => continue,
                                Ok(Ok((bytes, _memory))) => Ok(bytes),
                                Ok(Err(e)) => Err(e),
                                Err(_) => Err(io::Error::other("a frame's compression was lost")),
                            };
                            return Some((item, frames));
                        }
                    }
                }
            }
        });
        let mut metadata = Metadata::new();
        metadata.insert("sluice-stream".into(), inner.name.clone());
        metadata.insert("sluice-first-offset".into(), self.first_offset.to_string());
        let content_type = match inner.config.format {
            RecordFormat::Parquet if !self.dead_letter => {
                crate::table::PARQUET_CONTENT_TYPE.to_owned()
            }
            _ => inner
                .config
                .compression
                .content_type(self.dead_letter)
                .to_owned(),
        };
        let mut announced = Metadata::new();
        announced.insert("stream".into(), inner.name.clone());
        announced.insert("first_offset".into(), self.first_offset.to_string());
        if self.dead_letter {
            announced.insert("dead_letter".into(), "true".into());
        }
        // A table's file is announced by the commit that adds it, not here.
        let table = inner.table.as_ref().filter(|_| !self.dead_letter);
        if let Some(sink) = table {
            announced.insert("table".into(), sink.table().layout().location.clone());
        }
        let origin = Origin {
            kind: UploadKind::StreamBatch,
            content_type: Some(content_type.clone()),
            metadata: announced,
            late_metadata: Some(late),
            ..Origin::default()
        };
        let request = UploadRequest {
            key: self.key.clone(),
            content_type: Some(content_type),
            metadata,
            settings: Default::default(),
            progress: None,
            condition: self.deterministic.then_some(WriteCondition::IfNoneMatch),
            origin: table.is_none().then(|| Arc::new(origin.clone())),
        };
        let source = UploadSource::Stream {
            stream: body.boxed(),
            length: None,
        };
        let mut uploaded = inner.engine.upload(request, source).await;
        let mut totals = totals.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if self.deterministic && self.dead_letter && is_precondition_failure(&uploaded) {
            // A replay's dead letter, stored by the run before: it is there
            // (the engine may have refused before reading every frame).
            uploaded = self.found_stored(&inner).await;
            totals = flushed.await.ok();
        }
        let result = match (uploaded, totals) {
            (Ok(outcome), Some(totals)) => 'stored: {
                let announced_as = table.map(|_| {
                    Arc::new(FileOrigin {
                        origin: origin.clone(),
                        outcome: outcome.clone(),
                    })
                });
                let footer = totals.parquet.as_ref().and_then(|file| file.footer());
                let file = NewFile {
                    key: outcome.key.clone(),
                    size: outcome.size,
                    records: totals.records,
                    announce_as: announced_as
                        .clone()
                        .map(|o| o as sluice_delta::listener::FileTag),
                    footer: footer.clone(),
                };
                let table_version = match self.commit_to_table(&inner, file).await {
                    Ok(version) => version,
                    Err(e) => {
                        tracing::warn!(error = %e, "batch stored, not committed to its table");
                        inner.stats.failed();
                        break 'stored Err(StreamError::NotCommitted(Arc::new(e)));
                    }
                };
                let stored = Arc::new(StoredBatch {
                    stream: inner.name.clone(),
                    key: self.key,
                    records: totals.records,
                    record_bytes: totals.record_bytes,
                    outcome,
                    compression: inner.config.compression,
                    first_offset: self.first_offset,
                    last_offset: totals.last_offset,
                    partition: self.partition,
                    dead_letter: self.dead_letter,
                    flush_time: totals.flushed.elapsed(),
                    table_version,
                    announced_as,
                    footer,
                });
                inner.stats.stored(
                    stored.records,
                    stored.record_bytes,
                    stored.outcome.size,
                    stored.flush_time,
                );
                if let Some(on_stored) = &inner.on_stored {
                    on_stored(stored.clone()).await;
                }
                Ok(stored)
            }
            (Ok(_), None) => {
                // The stream ended without its totals: the stream itself went
                // away mid-batch.
                if let Some(sink) = inner.table.as_ref().filter(|_| !self.dead_letter) {
                    sink.failed(self.id);
                }
                inner.stats.failed();
                Err(StreamError::Closed)
            }
            (Err(e), _) => {
                tracing::warn!(error = %sluice_store::error_chain(&e), "batch not stored");
                if let Some(sink) = inner.table.as_ref().filter(|_| !self.dead_letter) {
                    sink.failed(self.id);
                }
                inner.stats.failed();
                Err(StreamError::NotStored(Arc::new(e)))
            }
        };
        let _ = done.send(Some(result));
    }

    /// Adds the stored file to the stream's table, when the stream's writer
    /// commits (not a source's, not a dead letter); the version that holds it.
    async fn commit_to_table(
        &self,
        inner: &Inner,
        file: NewFile,
    ) -> Result<Option<u64>, crate::table::stream_table::CommitError> {
        let Some(sink) = &inner.table else {
            return Ok(None);
        };
        if self.dead_letter || sink.commits_by_source() {
            return Ok(None);
        }
        let columns = inner.schema.as_ref().map(|schema| schema.current());
        match sink.add(file, self.id, columns).await? {
            sluice_table::Committed::Version(version) => Ok(Some(version)),
            sluice_table::Committed::Already => Ok(None),
        }
    }

    /// The object already stored at this batch's key, as an outcome.
    async fn found_stored(&self, inner: &Inner) -> Result<UploadOutcome, TransferError> {
        use sluice_store::ObjectStore;
        let meta = inner
            .engine
            .retrying_store()
            .head_object(&self.key)
            .await
            .map_err(|source| TransferError::Store {
                operation: "HeadObject",
                source,
            })?;
        tracing::info!(key = %self.key, "the dead letter is stored already (a replay)");
        Ok(UploadOutcome {
            key: self.key.clone(),
            size: meta.size,
            etag: meta.etag,
            checksum: None,
            parts: 0,
        })
    }
}

/// Whether the store refused an upload because its key is taken.
fn is_precondition_failure(uploaded: &Result<UploadOutcome, TransferError>) -> bool {
    matches!(
        uploaded,
        Err(TransferError::Store {
            source: sluice_store::StoreError::PreconditionFailed,
            ..
        })
    )
}
