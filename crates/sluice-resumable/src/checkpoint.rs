//! Progress recorded while one long request is still sending. tus-js-client and
//! Uppy send a whole file as one PATCH by default, and a draft client as one
//! append: without this, the record moved only when the request ended, and a
//! gateway killed midway (a crash, an OOM kill, a lost machine) left every part
//! it had stored unrecorded, so the client sent the whole file again.
//!
//! While the engine stores the request's parts, [`Checkpoints::follow`] hears
//! of each one as the store takes it and writes the record naming the parts
//! stored without a gap (the carried bytes, consumed by the first part, are
//! dropped from it then). Writes are not queued: parts landing while one is
//! written go into the next, so a request costs at most one record write per
//! part and usually fewer. A crash then costs the parts whose record write it
//! cut, never what an earlier checkpoint named: those parts are in the bucket
//! under the numbers the record gives, and the next writer carries on after them.
//! A checkpoint never names the upload's last byte: the part holding it is left
//! to the request's commit, which completes the object before any record says
//! every byte is in.
//!
//! Only bytes the request would keep on a clean break are recorded this way: a
//! chunk with an Upload-Checksum (all or nothing) and an upload checked against a
//! digest (whose running hash is recorded with the offset) are left to the
//! request's own commit.

use bytes::Bytes;
use sluice_store::UploadedPart;
use tokio::sync::watch;

use crate::error::ResumableError;
use crate::record::{Loaded, Phase, Receiving, StoredPart};
use crate::Resumable;

/// The checkpoints of one request that stores parts.
pub(crate) struct Checkpoints<'a> {
    resumable: &'a Resumable,
    /// The record before the request, its multipart upload started.
    before: Loaded,
    /// Its receiving state (what the first part stored consumes).
    receiving: Receiving,
    /// The number of the request's first part.
    first_part: u32,
    /// The offset of the first byte the request's parts hold (the first carried one).
    start: u64,
    /// The upload's length, when known: a checkpoint never names the last
    /// byte (a record says "all bytes in" only once the object exists).
    length: Option<u64>,
    /// The record's ETag after the last checkpoint (the one before it until then).
    etag: String,
    /// Parts of the request the record names.
    recorded: usize,
}

impl<'a> Checkpoints<'a> {
    /// Checkpoints of a request about to store parts from `first_part` on,
    /// at `start`, into the upload `before` describes (`receiving`: its
    /// state, the multipart upload already started).
    pub(crate) fn new(
        resumable: &'a Resumable,
        before: &Loaded,
        receiving: &Receiving,
        first_part: u32,
        start: u64,
        length: Option<u64>,
    ) -> Checkpoints<'a> {
        Checkpoints {
            resumable,
            length,
            etag: before.etag.clone(),
            before: before.clone(),
            receiving: receiving.clone(),
            first_part,
            start,
            recorded: 0,
        }
    }

    /// The record's ETag now: the request's own commit writes over it.
    pub(crate) fn etag(&self) -> &str {
        &self.etag
    }

    /// Records the parts `stored` reports as they land, until its sender is
    /// gone (the engine's call ended). A write that fails ends the
    /// checkpoints: the request's own commit says what it comes to.
    pub(crate) async fn follow(&mut self, mut stored: watch::Receiver<Vec<UploadedPart>>) {
        while stored.changed().await.is_ok() {
            let mut run = gapless_from(&stored.borrow_and_update(), self.first_part);
            // The part holding the last byte is left to the request's commit,
            // which completes the object before any record says so.
            while self.length.is_some_and(|length| {
                self.start + run.iter().map(|p| p.size).sum::<u64>() >= length
            }) {
                run.pop();
            }
            if run.len() <= self.recorded {
                continue;
            }
            if let Err(error) = self.record(&run).await {
                tracing::warn!(upload_id = %self.before.record.id(), error = %sluice_store::error_chain(&error), "could not record progress midway; the request's end will");
                return;
            }
        }
    }

    /// Writes the record naming `run` (the request's parts without a gap).
    async fn record(&mut self, run: &[UploadedPart]) -> Result<(), ResumableError> {
        let (config, clock, records) = (
            &self.resumable.config,
            &self.resumable.clock,
            &self.resumable.records,
        );
        let mut receiving = self.receiving.clone();
        // The first part holds every carried byte.
        receiving.tail = Bytes::new();
        let retired = std::mem::take(&mut receiving.segments);
        receiving
            .parts
            .extend(run.iter().map(StoredPart::from_uploaded));
        let mut record = self.before.record.clone();
        record.upload.offset = self.start + run.iter().map(|p| p.size).sum::<u64>();
        record.upload.extend(clock.now(), config.expiry);
        record.phase = Phase::Receiving(receiving);
        let etag = match records.replace(&record, &self.etag).await {
            Ok(etag) => etag,
            // Refused by its own precondition: a retried write whose first
            // attempt landed (its answer lost) finds the record already this.
            Err(ResumableError::Conflict) => match records.load(record.id()).await? {
                found if found.record == record => found.etag,
                _ => return Err(ResumableError::Conflict),
            },
            Err(error) => return Err(error),
        };
        tracing::debug!(upload_id = %record.id(), offset = record.upload.offset, parts = run.len(), "progress recorded midway");
        if self.recorded == 0 {
            records.delete_segments(record.id(), &retired).await;
        }
        // Not remembered as this process's last write (see `Held`): the
        // request's end writes the record again on every path that keeps it,
        // and a path that does not (a completion, a restart) must not leave
        // the next request a stale one.
        self.etag = etag;
        self.recorded = run.len();
        Ok(())
    }
}

/// The parts of `stored` numbered on from `first` without a gap, in order.
fn gapless_from(stored: &[UploadedPart], first: u32) -> Vec<UploadedPart> {
    let mut sorted: Vec<&UploadedPart> = stored.iter().collect();
    sorted.sort_by_key(|p| p.part_number);
    let mut run = Vec::with_capacity(sorted.len());
    for part in sorted {
        if part.part_number != first + run.len() as u32 {
            break;
        }
        run.push(part.clone());
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(number: u32) -> UploadedPart {
        UploadedPart {
            part_number: number,
            etag: format!("e{number}"),
            size: 5 << 20,
            checksum: None,
        }
    }

    #[test]
    fn only_parts_without_a_gap_from_the_first_count() {
        let cases: [(&[u32], u32, &[u32]); 5] = [
            (&[], 1, &[]),
            (&[1, 2, 3], 1, &[1, 2, 3]),
            (&[3, 1, 2], 1, &[1, 2, 3]),
            (&[1, 3, 4], 1, &[1]),
            (&[5, 6], 4, &[]),
        ];
        for (stored, first, expected) in cases {
            let stored: Vec<UploadedPart> = stored.iter().copied().map(part).collect();
            let run: Vec<u32> = gapless_from(&stored, first)
                .iter()
                .map(|p| p.part_number)
                .collect();
            assert_eq!(run, expected, "{stored:?} from {first}");
        }
    }
}
