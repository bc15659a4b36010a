//! One batch as one Parquet file, encoded while the batch grows: each frame of
//! checked NDJSON records is decoded under the file's schema in one pass
//! ([`super::json_rows`]) and written with the `parquet` crate's `ArrowWriter`; what the writer has
//! flushed (whole row groups) goes on to the upload, and the footer comes
//! with the last frame. Frames of one file are encoded in order, one at a time
//! (jobs of the CPU pool take them from the file's queue in the order they
//! were sent); files of different batches encode in parallel.
//!
//! The writer opens with the file's first batch of rows, which chooses the
//! columns written without a dictionary ([`super::dictionary`]).
//!
//! Memory: the row group being built is the unit held. It keeps the
//! reservation of the records it came from, shrunk to the writer's own count
//! of its buffered bytes, and what a frame sends on carries its share.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::ArrowSchemaConverter;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as ParquetCompression, GzipLevel, ZstdLevel};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::{EnabledStatistics, WriterPropertiesBuilder};
use parquet::schema::types::SchemaDescriptor;
use sluice_upload::Reservation;
use tokio::sync::oneshot;

use crate::compress::{Compression, CpuPool};
use crate::stats::StreamStats;
use crate::table::dictionary;
use crate::table::json_rows::RowDecoder;

/// Rows per batch handed to the Parquet writer.
const BATCH_ROWS: usize = 8192;

/// What a frame became: the file's bytes to send on, and their memory.
pub(crate) type Encoded = io::Result<(Bytes, Reservation)>;

/// How files are written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileSettings {
    pub compression: Compression,
    pub level: i32,
    pub row_group_records: usize,
}

/// A frame waiting for its turn: records, or the end of the file.
struct Queued {
    records: Option<Bytes>,
    memory: Reservation,
    done: oneshot::Sender<Encoded>,
}

/// The file's writer through its life.
enum Writer {
    /// No row yet: the properties it will open with, and the stored columns
    /// as Parquet sees them.
    Unopened {
        properties: WriterPropertiesBuilder,
        parquet: SchemaDescriptor,
    },
    Open(ArrowWriter<Vec<u8>>),
    Closed,
}

struct State {
    writer: Writer,
    /// The records' columns, as they are decoded.
    schema: SchemaRef,
    /// The columns as stored: `schema` itself, or the same columns under a
    /// table's physical names (column mapping).
    stored: SchemaRef,
    /// The footer, once the file is closed (a table's statistics come from it).
    footer: Option<Arc<ParquetMetaData>>,
    /// The row group being built.
    held: Option<Reservation>,
    failed: Option<String>,
}

/// One Parquet file being written.
pub(crate) struct ParquetFile {
    /// Frames waiting, in the order they were sent. Its own lock: sending
    /// (under the stream's lock) never waits for an encoding.
    queue: Mutex<VecDeque<Queued>>,
    /// The writer; whoever holds it encodes the queue.
    state: Mutex<State>,
    pool: CpuPool,
    stats: Arc<StreamStats>,
}

impl ParquetFile {
    /// A file of records decoded under `schema` and stored under `stored`
    /// (the same columns, renamed by a table's column mapping; or `schema`).
    pub(crate) fn new(
        schema: SchemaRef,
        stored: SchemaRef,
        settings: FileSettings,
        pool: CpuPool,
        stats: Arc<StreamStats>,
    ) -> Result<Arc<ParquetFile>, String> {
        let compression = match settings.compression {
            Compression::Zstd => ParquetCompression::ZSTD(
                ZstdLevel::try_new(settings.level).map_err(|e| e.to_string())?,
            ),
            Compression::Gzip => ParquetCompression::GZIP(
                GzipLevel::try_new(settings.level as u32).map_err(|e| e.to_string())?,
            ),
            Compression::None => ParquetCompression::UNCOMPRESSED,
        };
        let properties = WriterPropertiesBuilder::default()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(settings.row_group_records))
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_created_by(format!("sluice {}", env!("CARGO_PKG_VERSION")));
        // What the writer would refuse, refused now; its columns' paths as
        // the writer will name them.
        let parquet = ArrowSchemaConverter::new()
            .with_coerce_types(properties.clone().build().coerce_types())
            .convert(&stored)
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(ParquetFile {
            queue: Mutex::default(),
            state: Mutex::new(State {
                writer: Writer::Unopened {
                    properties,
                    parquet,
                },
                schema,
                stored,
                footer: None,
                held: None,
                failed: None,
            }),
            pool,
            stats,
        }))
    }

    /// Queues a frame of records (None: the end of the file, its footer) and
    /// starts a job; the receiver resolves with the bytes to send on.
    pub(crate) fn send(
        self: &Arc<Self>,
        records: Option<Bytes>,
        memory: Reservation,
    ) -> oneshot::Receiver<Encoded> {
        let (done, encoded) = oneshot::channel();
        self.queued().push_back(Queued {
            records,
            memory,
            done,
        });
        let file = self.clone();
        tokio::spawn(async move {
            let pool = file.pool.clone();
            pool.run(move || file.encode_queued()).await;
        });
        encoded
    }

    /// The file's footer, once its last frame is encoded.
    pub(crate) fn footer(&self) -> Option<Arc<ParquetMetaData>> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .footer
            .clone()
    }

    fn queued(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encodes what is queued, in order. A job that finds the writer taken
    /// leaves at once (its pool slot goes to other work): the holder encodes
    /// its frame, and looks at the queue again once it lets go, so that a
    /// frame sent while it was letting go is not left behind.
    fn encode_queued(&self) {
        loop {
            let mut state = match self.state.try_lock() {
                Ok(state) => state,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            let started = std::time::Instant::now();
            loop {
                let Some(item) = self.queued().pop_front() else {
                    break;
                };
                let result = state.encode(item.records, item.memory);
                let _ = item.done.send(result);
            }
            drop(state);
            self.stats.compressed(started.elapsed());
            if self.queued().is_empty() {
                return;
            }
        }
    }
}

impl State {
    fn encode(&mut self, records: Option<Bytes>, memory: Reservation) -> Encoded {
        if let Some(failed) = &self.failed {
            return Err(io::Error::other(failed.clone()));
        }
        let result = match records {
            Some(records) => self.write(&records, memory),
            None => self.close(memory),
        };
        if let Err(e) = &result {
            self.failed = Some(e.to_string());
        }
        result
    }

    fn write(&mut self, records: &[u8], memory: Reservation) -> Encoded {
        if matches!(self.writer, Writer::Closed) {
            return Err(io::Error::other("the file is closed"));
        }
        // Checked once for the frame: the decoder slices its strings out.
        let mut rest = std::str::from_utf8(records).map_err(io::Error::other)?;
        let mut rows =
            RowDecoder::new(self.schema.clone(), BATCH_ROWS).map_err(io::Error::other)?;
        while !rest.is_empty() {
            let (read, batch) = rows.batch(rest).map_err(io::Error::other)?;
            rest = &rest[read..];
            if let Some(batch) = batch {
                self.write_batch(batch)?;
            }
        }
        let held = match self.held.take() {
            Some(mut held) => {
                held.absorb(memory);
                held
            }
            None => memory,
        };
        Ok(self.take_flushed(held, false))
    }

    /// Writes a batch of the records' columns (renamed to the stored ones).
    fn write_batch(&mut self, mut batch: RecordBatch) -> io::Result<()> {
        if !Arc::ptr_eq(&self.schema, &self.stored) {
            batch = crate::table::delta::mapping::to_physical(batch, &self.stored)
                .map_err(io::Error::other)?;
        }
        self.open(Some(&batch))?
            .write(&batch)
            .map_err(io::Error::other)
    }

    /// The open writer; an unopened one opens with the columns `first` (the
    /// file's first batch, None for a file of no rows) shows to be mostly
    /// distinct written plain.
    fn open(&mut self, first: Option<&RecordBatch>) -> io::Result<&mut ArrowWriter<Vec<u8>>> {
        if let Writer::Unopened {
            properties,
            parquet,
        } = &self.writer
        {
            let plain = first
                .map(|batch| dictionary::plain_columns(batch, parquet))
                .unwrap_or_default();
            let properties = plain
                .into_iter()
                .fold(properties.clone(), |properties, column| {
                    properties.set_column_dictionary_enabled(column, false)
                })
                .build();
            // The same columns the choice named: the writer does not derive
            // them a second time.
            let options = ArrowWriterOptions::new()
                .with_properties(properties)
                .with_parquet_schema(parquet.clone());
            let writer =
                ArrowWriter::try_new_with_options(Vec::new(), self.stored.clone(), options)
                    .map_err(io::Error::other)?;
            self.writer = Writer::Open(writer);
        }
        match &mut self.writer {
            Writer::Open(writer) => Ok(writer),
            _ => Err(io::Error::other("the file is closed")),
        }
    }

    fn close(&mut self, memory: Reservation) -> Encoded {
        let writer = self.open(None)?;
        self.footer = Some(Arc::new(writer.finish().map_err(io::Error::other)?));
        let held = match self.held.take() {
            Some(mut held) => {
                held.absorb(memory);
                held
            }
            None => memory,
        };
        let out = self.take_flushed(held, true);
        self.writer = Writer::Closed;
        Ok(out)
    }

    /// The bytes the writer has flushed, with their share of `held`; the rest
    /// of `held` stays with the row group in progress. While the file goes
    /// on, the writer's next buffer starts with room for a row group as large
    /// as the last (sparing the doublings of a growing buffer, each a copy);
    /// the bytes sent on count all the room their buffer has.
    fn take_flushed(&mut self, mut held: Reservation, closing: bool) -> (Bytes, Reservation) {
        let Writer::Open(writer) = &mut self.writer else {
            // No row written yet: nothing flushed, nothing held.
            let sent = held.split(0);
            held.shrink_to(0);
            self.held = Some(held);
            return (Bytes::new(), sent);
        };
        let written = writer.inner_mut();
        let (flushed, room) = if written.is_empty() {
            (Bytes::new(), 0)
        } else {
            let next = if closing { 0 } else { written.len() };
            let room = written.capacity();
            (
                Bytes::from(std::mem::replace(written, Vec::with_capacity(next))),
                room,
            )
        };
        let sent = held.split(room as u64);
        held.shrink_to(writer.memory_size() as u64);
        self.held = Some(held);
        (flushed, sent)
    }
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, Schema};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use sluice_upload::MemoryBudget;

    use super::*;

    fn file_of(schema: &SchemaRef) -> Arc<ParquetFile> {
        let settings = FileSettings {
            compression: Compression::Zstd,
            level: 3,
            row_group_records: 1 << 20,
        };
        ParquetFile::new(
            schema.clone(),
            schema.clone(),
            settings,
            CpuPool::new(1),
            Arc::default(),
        )
        .unwrap()
    }

    /// Sends `frames` (None: the end) and joins what the file sent on.
    async fn written(file: &Arc<ParquetFile>, frames: Vec<Option<String>>) -> Bytes {
        let budget = MemoryBudget::new(64 << 20);
        let mut out = Vec::new();
        for frame in frames {
            let memory = budget.try_reserve(1).unwrap();
            let (bytes, _) = file
                .send(frame.map(Bytes::from), memory)
                .await
                .unwrap()
                .unwrap();
            out.extend_from_slice(&bytes);
        }
        Bytes::from(out)
    }

    #[tokio::test]
    async fn unique_columns_are_written_plain_and_repeating_ones_with_a_dictionary() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int64, true),
            Field::new("event", DataType::Utf8, true),
        ]));
        let records: String = (0..5000)
            .map(|i| format!("{{\"seq\":{i},\"event\":\"e{}\"}}\n", i % 7))
            .collect();
        let file = file_of(&schema);
        let bytes = written(&file, vec![Some(records), None]).await;
        let reader = SerializedFileReader::new(bytes).unwrap();
        let row_group = reader.metadata().row_group(0);
        assert_eq!(row_group.num_rows(), 5000);
        let dictionary = |name: &str| {
            row_group
                .columns()
                .iter()
                .find(|column| column.column_path().string() == name)
                .unwrap()
                .dictionary_page_offset()
                .is_some()
        };
        assert!(!dictionary("seq"), "seq has a dictionary");
        assert!(dictionary("event"), "event has no dictionary");
        assert_eq!(file.footer().unwrap().file_metadata().num_rows(), 5000);
    }

    #[tokio::test]
    async fn a_file_closed_before_any_row_is_an_empty_parquet_file() {
        let schema = Arc::new(Schema::new(vec![Field::new("seq", DataType::Int64, true)]));
        let file = file_of(&schema);
        let bytes = written(&file, vec![Some(String::new()), None]).await;
        let reader = SerializedFileReader::new(bytes).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
        assert_eq!(
            reader
                .metadata()
                .file_metadata()
                .schema_descr()
                .num_columns(),
            1
        );
    }
}
