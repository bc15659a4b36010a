//! Taking one body of records into a stream: decoding its Content-Encoding
//! (gzip, zstd) under the memory budget, parsing and checking it on the CPU
//! pool, refusing it whole or dead-lettering its invalid records, appending
//! it, and waiting for the acknowledgement of every batch it went into.

use std::io::Read;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use sluice_upload::Reservation;

use crate::error::StreamError;
use crate::records::{parse_records, BodyFormat, ParsedRecords, RecordRules};
use crate::stream::{RecordStream, RequestKey, StoredBatch, Ticket};

/// Bytes decoded per step (each step reserves its output first).
const DECODE_STEP: usize = 1 << 20;

/// A body's Content-Encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoding {
    Identity,
    Gzip,
    Zstd,
}

impl BodyEncoding {
    /// From a Content-Encoding header's value.
    pub fn from_header(value: Option<&str>) -> Result<BodyEncoding, StreamError> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("identity") => Ok(BodyEncoding::Identity),
            Some("gzip") | Some("x-gzip") => Ok(BodyEncoding::Gzip),
            Some("zstd") => Ok(BodyEncoding::Zstd),
            Some(other) => Err(StreamError::BadInput(format!(
                "Content-Encoding {other:?} is not supported (gzip, zstd or none)"
            ))),
        }
    }
}

/// Records taken from one body.
#[derive(Debug)]
pub struct Submitted {
    pub tickets: Vec<Ticket>,
    pub records: u64,
    /// Invalid records sent to the dead letter.
    pub dead_lettered: u64,
}

/// Decodes, checks and appends `body` (held in `memory`); nothing is appended
/// when the body is refused.
pub async fn submit_body(
    stream: &RecordStream,
    body: Bytes,
    encoding: BodyEncoding,
    format: BodyFormat,
    memory: Reservation,
) -> Result<Submitted, StreamError> {
    submit_keyed_body(stream, body, encoding, format, memory, None).await
}

/// [`submit_body`] for a request with an idempotency key that the stream's
/// table sink started (see [`crate::table::sink::TableSink::start_keyed`]).
pub async fn submit_keyed_body(
    stream: &RecordStream,
    body: Bytes,
    encoding: BodyEncoding,
    format: BodyFormat,
    memory: Reservation,
    key: Option<String>,
) -> Result<Submitted, StreamError> {
    let limit = stream.config().max_request_bytes;
    let (body, memory) = match encoding {
        BodyEncoding::Identity => (body, memory),
        encoding => decode(stream, body, encoding, limit).await?,
    };
    if body.len() as u64 > limit {
        return Err(StreamError::BadInput(format!(
            "the body is larger than {limit} bytes"
        )));
    }
    let arrival = time::OffsetDateTime::now_utc();
    let parsed = parse_on_pool(stream, body, format, arrival, 0).await?;
    let key = key.map(|key| RequestKey { key, last: true });
    append_on_pool(stream, parsed, arrival, memory, key).await
}

/// Parses a block of records on the stream's CPU pool; `first_line` numbers
/// its lines after the blocks before it.
pub async fn parse_on_pool(
    stream: &RecordStream,
    body: Bytes,
    format: BodyFormat,
    arrival: time::OffsetDateTime,
    first_line: u64,
) -> Result<ParsedRecords, StreamError> {
    let job_stream = stream.clone();
    let (parsed, took) = stream
        .pool()
        .run(move || {
            let started = std::time::Instant::now();
            let config = job_stream.config();
            let rules = RecordRules {
                template: job_stream.template(),
                time_field: config.time_field.as_deref(),
                time_is_column: config.partitions_by_record_time(),
                max_record_bytes: config.max_record_bytes,
                arrival,
                source_partition: None,
                first_line,
                schema: job_stream.schema(),
            };
            (parse_records(body, format, &rules), started.elapsed())
        })
        .await;
    stream.stats().parsed(took);
    parsed
}

/// [`append_parsed`] as a job of the stream's CPU pool: appending copies the
/// records into their batches' frames, which is not for an I/O task.
pub async fn append_on_pool(
    stream: &RecordStream,
    parsed: ParsedRecords,
    arrival: time::OffsetDateTime,
    memory: Reservation,
    key: Option<RequestKey>,
) -> Result<Submitted, StreamError> {
    let job_stream = stream.clone();
    stream
        .pool()
        .run(move || append_parsed(&job_stream, parsed, arrival, memory, key.as_ref()))
        .await
}

/// Appends parsed records: refused whole when some are invalid and the stream
/// has no dead letter; otherwise the valid ones, and the invalid ones to it.
pub fn append_parsed(
    stream: &RecordStream,
    parsed: ParsedRecords,
    arrival: time::OffsetDateTime,
    mut memory: Reservation,
    key: Option<&RequestKey>,
) -> Result<Submitted, StreamError> {
    let rejected = parsed.rejected.len() as u64;
    stream.stats().rejected(rejected);
    if rejected > 0 && !stream.has_dead_letter() {
        let first = parsed.rejected[0].why.clone();
        return Err(StreamError::BadRecords {
            first,
            count: rejected,
        });
    }
    let dead_memory = memory.split(parsed.rejected.iter().map(|r| r.raw.len() as u64 + 1).sum());
    let mut tickets = stream.append_keyed(parsed.runs, memory, key)?;
    tickets.extend(stream.append_rejected(parsed.rejected, arrival, dead_memory)?);
    Ok(Submitted {
        tickets,
        records: parsed.records,
        dead_lettered: rejected,
    })
}

/// Waits for every ticket; the stored batches, or the first failure.
pub async fn acknowledge(tickets: Vec<Ticket>) -> Result<Vec<Arc<StoredBatch>>, StreamError> {
    let results = futures::future::join_all(tickets.into_iter().map(Ticket::stored)).await;
    results.into_iter().collect()
}

/// Decodes `body` step by step, reserving each step's output before making it.
async fn decode(
    stream: &RecordStream,
    body: Bytes,
    encoding: BodyEncoding,
    limit: u64,
) -> Result<(Bytes, Reservation), StreamError> {
    let bad = |e: std::io::Error| StreamError::BadInput(format!("the body does not decode: {e}"));
    let reader: Box<dyn Read + Send> = match encoding {
        BodyEncoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(std::io::Cursor::new(
            body,
        ))),
        BodyEncoding::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(std::io::BufReader::new(
                std::io::Cursor::new(body),
            ))
            .map_err(bad)?,
        ),
        BodyEncoding::Identity => unreachable!("identity bodies are not decoded"),
    };
    let budget = stream.memory().clone();
    let mut memory = budget.nothing();
    let mut out = BytesMut::new();
    let mut reader = Some(reader);
    loop {
        // Never wait for memory while holding the compressed body: a full
        // budget refuses the decoding (503) rather than deadlock.
        let step = budget
            .try_reserve(DECODE_STEP as u64)
            .ok_or(StreamError::Busy)?;
        memory.absorb(step);
        let mut job_reader = reader.take().expect("returned by every step");
        let (back, chunk) = stream
            .pool()
            .run(move || {
                let mut chunk = vec![0; DECODE_STEP];
                let mut filled = 0;
                let result = loop {
                    match job_reader.read(&mut chunk[filled..]) {
                        Ok(0) => break Ok(filled),
                        Ok(n) => {
                            filled += n;
                            if filled == chunk.len() {
                                break Ok(filled);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                chunk.truncate(filled);
                (job_reader, result.map(|_| chunk))
            })
            .await;
        reader = Some(back);
        let chunk = chunk.map_err(bad)?;
        let last = chunk.len() < DECODE_STEP;
        out.extend_from_slice(&chunk);
        if out.len() as u64 > limit {
            return Err(StreamError::BadInput(format!(
                "the body is larger than {limit} bytes once decoded"
            )));
        }
        if last {
            memory.shrink_to(out.len() as u64);
            return Ok((out.freeze(), memory));
        }
    }
}
